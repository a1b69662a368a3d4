"""A project folder for tests that run ``ctxwin`` as users do: a copy of the repository's
``workspace.yaml`` and a small sample in ``data/`` (documents of the repository's sample, and
the first questions of each), and the command itself as a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = [
    "REPOSITORY",
    "ctxwin_env",
    "index_rows_per_document",
    "make_project",
    "run_ctxwin",
    "share_embedding_server",
]

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


_shared_embedding_server: Callable[[], str] | None = None


def share_embedding_server(address: Callable[[], str] | None) -> None:
    """Make the ``ctxwin`` commands of :func:`ctxwin_env` embed through one embedding server:
    ``address()`` gives its URL (and may start it on the first call); None: each command starts
    its own again, as for a user. A command's own server costs a Python start, torch and the
    model (about 11 s of CPU); the server and the vectors are the same either way."""
    global _shared_embedding_server
    _shared_embedding_server = address


def ctxwin_env(home: Path | None = None, *, own_servers: bool = False) -> dict[str, str]:
    """The environment of a ``ctxwin`` subprocess: offline, with ``home`` as ``DAGSTER_HOME``
    (none: the command picks the experiment's own), and the shared embedding server's address
    (:func:`share_embedding_server`) unless ``own_servers`` (the command starts its own)."""
    from ctxwin_dagster.backends.embeddings.server import ENV_VAR

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("DAGSTER_HOME", None)
    if home is not None:
        env["DAGSTER_HOME"] = str(home)
    if own_servers:
        env.pop(ENV_VAR, None)
    elif _shared_embedding_server is not None and ENV_VAR not in env:
        env[ENV_VAR] = _shared_embedding_server()
    return env


def run_ctxwin(
    args: Sequence[str],
    cwd: Path,
    home: Path | None = None,
    *,
    timeout: float = 1200,
    own_servers: bool = False,
) -> subprocess.CompletedProcess:
    """``ctxwin ARGS`` in ``cwd`` as a subprocess, its output captured (``own_servers``: see
    :func:`ctxwin_env`)."""
    return subprocess.run(
        [sys.executable, "-m", "ctxwin_dagster.cli", *args],
        cwd=cwd,
        env=ctxwin_env(home, own_servers=own_servers),
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
