"""A project folder for tests that run ``ctxwin`` as users do: a copy of the repository's
``workspace.yaml`` and a small sample in ``data/`` (documents of the repository's sample, and
the first questions of each), and the command itself as a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["REPOSITORY", "ctxwin_env", "index_rows_per_document", "make_project", "run_ctxwin"]

#: The repository this package is checked out in (its workspace.yaml and data/).
REPOSITORY = Path(__file__).resolve().parents[2]


def make_project(root: Path, docs: Sequence[str], *, questions_per_doc: int) -> Path:
    """``root`` with ``workspace.yaml``, ``data/documents/<doc>.txt`` for each of ``docs`` and
    ``data/qa/questions.jsonl`` with the first ``questions_per_doc`` sample questions of each."""
    shutil.copy(REPOSITORY / "workspace.yaml", root / "workspace.yaml")
    (root / "data" / "documents").mkdir(parents=True)
    (root / "data" / "qa").mkdir(parents=True)
    for doc in docs:
        shutil.copy(REPOSITORY / "data" / "documents" / f"{doc}.txt", root / "data" / "documents")
    lines: list[str] = []
    count = dict.fromkeys(docs, 0)
    for source in sorted((REPOSITORY / "data" / "qa").glob("*.jsonl")):
        for line in source.read_text(encoding="utf-8").splitlines():
            doc = str(json.loads(line)["doc_id"]) if line.strip() else ""
            if doc in count and count[doc] < questions_per_doc:
                count[doc] += 1
                lines.append(line)
    (root / "data" / "qa" / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def ctxwin_env(home: Path | None = None) -> dict[str, str]:
    """The environment of a ``ctxwin`` subprocess: offline, with ``home`` as ``DAGSTER_HOME``
    (none: the command picks the experiment's own)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("DAGSTER_HOME", None)
    if home is not None:
        env["DAGSTER_HOME"] = str(home)
    return env


def run_ctxwin(
    args: Sequence[str], cwd: Path, home: Path | None = None, *, timeout: float = 1200
) -> subprocess.CompletedProcess:
    """``ctxwin ARGS`` in ``cwd`` as a subprocess, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "ctxwin_dagster.cli", *args],
        cwd=cwd,
        env=ctxwin_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def index_rows_per_document(uri: Path) -> dict[str, dict[str, int]]:
    """``{variant: {doc_id: rows}}`` of the LanceDB index at ``uri``, read with LanceDB itself."""
    import lancedb

    from ctxwin_dagster.core.defaults import VARIANTS

    db = lancedb.connect(str(uri))
    out: dict[str, dict[str, int]] = {}
    for variant in VARIANTS:
        column = db.open_table(f"{variant}_chunks").to_arrow().column("doc_id").to_pylist()
        out[variant] = {d: column.count(d) for d in sorted(set(column))}
    return out
