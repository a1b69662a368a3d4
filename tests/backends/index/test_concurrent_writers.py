"""Two worker processes (documents run in parallel) write the same LanceDB tables at once, the
way the index assets do (upsert on chunk_id, then the indexes brought up to date): no row is lost
or duplicated."""

from __future__ import annotations

import multiprocessing as mp

import lancedb
import numpy as np
import pyarrow as pa
import pytest

from ctxwin_dagster.backends.index.schema import table_schema
from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
from ctxwin_dagster.core.defaults import VARIANTS

DIM = 8


def _rows(doc_id: str, n: int, version: int) -> tuple[list[dict], np.ndarray]:
    rows = [
        {
            "chunk_id": f"{doc_id}-{i}",
            "doc_id": doc_id,
            "chunk_index": i,
            "start": i * 10,
            "end": i * 10 + 9,
            "text": f"{doc_id} chunk {i} v{version}",
            "section": None,
            "context": "",
            "embedded_text": f"{doc_id} chunk {i} v{version}",
        }
        for i in range(n)
    ]
    rng = np.random.default_rng(hash((doc_id, version)) % 2**32)
    return rows, rng.random((n, DIM), dtype=np.float32)


def _worker(uri: str, docs: list[str], rounds: int, start, errors) -> None:
    try:
        index = ChunkIndex(uri)
        start.wait(30)
        for version in range(rounds):
            for doc in docs:
                for variant in VARIANTS:
                    rows, vectors = _rows(doc, 7 + version, version)
                    index.replace_document(variant, doc, rows, vectors)
                    index.maintain(variant)
    except Exception as exc:  # reported to the parent, which fails the test
        errors.put(f"{type(exc).__name__}: {exc}")


def _make_tables_as_older_versions_did(uri: str) -> None:
    """Tables as written before ``chunk_id`` was marked the primary key: nullable, no marker."""
    schema = table_schema(DIM)
    old = schema.set(0, pa.field("chunk_id", pa.string()))
    db = lancedb.connect(uri)
    for variant in VARIANTS:
        db.create_table(f"{variant}_chunks", schema=old)


@pytest.mark.parametrize("tables", ["new", "made by an older version"])
def test_two_workers_write_the_same_tables_nothing_lost_or_duplicated(tmp_path, tables):
    uri = str(tmp_path / "lancedb")
    if tables != "new":
        _make_tables_as_older_versions_did(uri)
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(2)
    errors = ctx.Queue()
    # Each worker owns some documents and both rewrite a shared one (a document run twice at once).
    plans = [["a1", "a2", "shared"], ["b1", "b2", "shared"]]
    rounds = 3
    procs = [ctx.Process(target=_worker, args=(uri, docs, rounds, start, errors)) for docs in plans]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert all(p.exitcode == 0 for p in procs) and not problems, problems

    index = ChunkIndex(uri)
    final = 7 + rounds - 1  # rows of a document's last version
    for variant in VARIANTS:
        assert index.duplicate_ids(variant) == 0
        for doc in ("a1", "a2", "b1", "b2", "shared"):
            rows = index.rows(variant, doc_id=doc, columns=["chunk_id", "text"])
            assert sorted(r["chunk_id"] for r in rows) == sorted(f"{doc}-{i}" for i in range(final)), (variant, doc)
            assert all(r["text"].endswith(f"v{rounds - 1}") for r in rows), (variant, doc)
        assert index.count(variant) == 5 * final
        field = lancedb.connect(uri).open_table(index.table_name(variant)).schema.field("chunk_id")
        assert not field.nullable and any(b"primary-key" in k for k in (field.metadata or {})), field
