"""A damaged index, through the real machinery (the ``ctxwin`` command as a subprocess, the
daemon it starts, the experiment's own home and index): ``ctxwin run`` never calls it up to date
and ``ctxwin ask`` never answers from it; both name the table, the damage and the fix, and the
fix, ``ctxwin run --rebuild-index VARIANT``, works.

One project serves the module, in order: two short documents indexed by ``ctxwin run``; a
garbled data file of the T-RAG table; the newest manifest of the SWB-RAG table deleted; then the
two fixes, after which every table holds each document's rows again and ``ctxwin ask`` answers.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.testing.projects import index_rows_per_document as rows_per_document
from ctxwin_dagster.testing.projects import make_project, run_ctxwin

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOCS = {  # about 2,500 characters of two sample articles: three or four chunks each
    "normans": (ROOT / "data" / "documents" / "squad_Normans.txt").read_text(encoding="utf-8")[:2500],
    "oil_crisis": (ROOT / "data" / "documents" / "squad_1973_oil_crisis.txt").read_text(encoding="utf-8")[:2500],
}
QUESTION = "Who was the duke of Normandy?"


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


def refused(result: subprocess.CompletedProcess) -> str:
    """The command failed with its own message: no traceback, no panic of LanceDB's Rust code."""
    assert result.returncode != 0, result.stdout[-4000:]
    assert "Traceback" not in result.stderr and "panicked" not in result.stderr, result.stderr[-4000:]
    return result.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """(project folder, Dagster home, rows per document) after a first `ctxwin run`."""
    root = make_project(tmp_path_factory.mktemp("project"), [], questions_per_doc=0)
    (root / "data" / "qa" / "questions.jsonl").unlink()  # no questions: `ctxwin run` only indexes
    for name, text in DOCS.items():
        (root / "data" / "documents" / f"{name}.txt").write_text(text, encoding="utf-8")
    home = root / ".dagster_home"
    ok(run_ctxwin(["run", "--workers", "2"], root, home))
    rows = rows_per_document(root / "data" / "lancedb")
    assert all(rows[v] == rows["t_rag"] and set(rows[v]) == set(DOCS) for v in VARIANTS), rows
    return root, home, rows


def ask(root: Path, home: Path, variant: str) -> subprocess.CompletedProcess:
    return run_ctxwin(["ask", QUESTION, "--variant", variant], root, home)


def table(root: Path, variant: str) -> Path:
    return root / "data" / "lancedb" / f"{variant}_chunks.lance"


def test_a_garbled_data_file_stops_run_and_ask_with_the_table_and_the_fix(project):
    root, home, _ = project
    data = sorted((table(root, "t_rag") / "data").glob("*.lance"))[0]
    data.write_bytes(os.urandom(data.stat().st_size))
    named = f"the t_rag index is damaged: {table(root, 't_rag')}: a data file cannot be read (garbled or cut short)"
    fix = "Fix: `ctxwin run --rebuild-index t_rag` moves the damaged table into the Dagster home's ctxwin_trash/"

    run = run_ctxwin(["run"], root, home)
    said = refused(run)
    assert named in said and fix in said and "; nothing was run" in said, said
    assert "documents to run" not in run.stdout  # never "0 of 2 documents to run (2 up to date)"

    said = refused(ask(root, home, "t"))
    assert f"ctxwin ask: {named}" in said and fix in said, said
    assert "Answer (swb_rag" in ok(ask(root, home, "swb"))  # the other tables answer as before


def test_a_deleted_newest_manifest_stops_ask_and_run_with_the_versions_and_the_fix(project):
    root, home, _ = project
    # Lance names version v's manifest u64::MAX - v: the newest sorts first.
    newest = sorted((table(root, "swb_rag") / "_versions").glob("*.manifest"))[0]
    version = 2**64 - 1 - int(newest.stem)
    newest.unlink()
    named = (
        f"the swb_rag index is damaged: {table(root, 'swb_rag')}: the table is at version {version - 1}, but the last "
        f"write of this project made version {version}"
    )
    said = refused(ask(root, home, "swb"))
    assert f"ctxwin ask: {named}" in said and "Fix: `ctxwin run --rebuild-index swb_rag`" in said, said

    # The fix of the first damage sets the T-RAG table aside, then the run names the second one.
    run = run_ctxwin(["run", "--rebuild-index", "t"], root, home)
    said = refused(run)
    assert named in said and "; nothing was run" in said, said
    assert "--rebuild-index t_rag: the table was moved to" in run.stdout, run.stdout


def test_rebuilding_the_damaged_indexes_brings_every_documents_rows_back(project):
    root, home, before = project
    out = ok(run_ctxwin(["run", "--rebuild-index", "swb", "--workers", "2"], root, home))
    assert "--rebuild-index swb_rag: the table was moved to" in out and "2 of 2 documents to run" in out, out
    assert rows_per_document(root / "data" / "lancedb") == before
    # Nothing was deleted: both damaged tables are in the home's trash, with a note of why.
    aside = sorted((home / "ctxwin_trash").glob("*/lancedb/*.lance"))
    assert {p.name for p in aside} == {"t_rag_chunks.lance", "swb_rag_chunks.lance"}, aside
    notes = [json.loads(p.read_text()) for p in sorted((home / "ctxwin_trash").glob("*/set_aside.json"))]
    assert [n["variants"] for n in notes] == [["t_rag"], ["swb_rag"]]
    for variant in ("t", "swb"):
        assert f"Answer ({variant}_rag" in ok(ask(root, home, variant))
    assert "0 of 2 documents to run (2 up to date, skipped)" in ok(run_ctxwin(["run"], root, home))
