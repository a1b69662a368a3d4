"""Index rows without a model: documents of synthetic chunks whose vectors cluster like a real
document's, for tests and benchmarks of the index (upkeep, concurrent writers, object storage)."""

from __future__ import annotations

import numpy as np

__all__ = ["synthetic_document"]


def synthetic_document(
    i: int, n: int = 100, *, dim: int = 16, seed: int | None = None
) -> tuple[str, list[dict], np.ndarray]:
    """``(doc_id, rows, vectors)`` of document ``d{i:03d}``: ``n`` chunk rows in the index's
    schema and unit vectors around a per-document centre (seeded by ``i``, or ``seed``)."""
    name = f"d{i:03d}"
    rng = np.random.default_rng(i if seed is None else seed)
    v = rng.normal(size=dim) + 0.8 * rng.normal(size=(n, dim))
    rows = [
        {
            "chunk_id": f"{name}-{j}",
            "doc_id": name,
            "chunk_index": j,
            "start": j * 10,
            "end": j * 10 + 10,
            "text": f"chunk {j} of {name}",
            "section": None,
            "context": "",
            "embedded_text": f"chunk {j} of {name} word{j % 13}",
        }
        for j in range(n)
    ]
    return name, rows, (v / np.linalg.norm(v, axis=1, keepdims=True)).astype("float32")
