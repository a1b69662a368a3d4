"""Files that share a text or a name, through the real machinery (the ``ctxwin`` command as a
subprocess, the daemon it starts, the experiment's own home and index):

* two files with the same text are two documents, each with its own index rows, run after run;
* a renamed file is a new document, and the old id keeps its rows until ``ctxwin prune``;
* ``x.md`` added beside ``x.txt`` is evaluated under its own id, and so is ``x.txt``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.testing.projects import index_rows_per_document as rows_per_document
from ctxwin_dagster.testing.projects import make_project, run_ctxwin

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# About 2,500 characters of a sample article: three or four chunks, a run of a few seconds of work.
TEXT = (ROOT / "data" / "documents" / "squad_Normans.txt").read_text(encoding="utf-8")[:2500]


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A project folder (the repository's workspace.yaml, no sample documents needed)."""
    root = make_project(tmp_path_factory.mktemp("project"), [], questions_per_doc=0)
    (root / "data" / "qa" / "questions.jsonl").unlink()  # no questions: `ctxwin run` only indexes
    return root


def test_two_files_with_the_same_text_keep_their_own_rows_and_a_rename_is_a_new_document(root, tmp_path):
    docs = tmp_path / "notes"
    docs.mkdir()
    (docs / "note.txt").write_text(TEXT, encoding="utf-8")
    index = root / "data" / "experiments" / "notes" / "lancedb"

    def run() -> str:
        return ok(run_ctxwin(["run", "--documents", str(docs), "--name", "notes", "--workers", "1"], root))

    run()
    alone = rows_per_document(index)
    n = alone["t_rag"]["note"]
    assert n >= 2 and all(per_doc == {"note": n} for per_doc in alone.values()), alone

    shutil.copy(docs / "note.txt", docs / "x.txt")  # the same contract filed twice
    first = run()
    assert "1 of 2 documents to run" in first, first
    for attempt in range(2):  # after the run that added x, and after a run with nothing to do
        assert rows_per_document(index) == {v: {"note": n, "x": n} for v in VARIANTS}, attempt
        if attempt == 0:
            assert "0 of 2 documents to run (2 up to date, skipped)" in run()

    (docs / "x.txt").rename(docs / "y.txt")
    renamed = run()
    assert "1 of 2 documents to run" in renamed and "y:" in renamed, renamed
    assert "1 document(s) have no file any more (x)" in renamed, renamed
    # The new name is a new document; the old id keeps its rows until `ctxwin prune`.
    assert rows_per_document(index) == {v: {"note": n, "x": n, "y": n} for v in VARIANTS}
    pruned = ok(run_ctxwin(["prune", "notes", "--yes"], root))
    assert "pruned 1 document(s)" in pruned, pruned
    assert rows_per_document(index) == {v: {"note": n, "y": n} for v in VARIANTS}


def test_a_markdown_file_beside_a_text_file_of_the_same_stem_evaluates_both(root, tmp_path):
    docs, qa = tmp_path / "pair", tmp_path / "pair_qa"
    docs.mkdir()
    qa.mkdir()
    (docs / "x.txt").write_text(TEXT, encoding="utf-8")
    other = (ROOT / "data" / "documents" / "squad_1973_oil_crisis.txt").read_text(encoding="utf-8")[:2500]

    def question(name: str, text: str, needle: str, qid: str) -> dict:
        start = text.index(needle)
        return {
            "question_id": qid,
            "doc_id": name,
            "question": f"What does the text say about {needle}?",
            "reference_answer": needle,
            "reference_spans": [[start, start + len(needle)]],
        }

    items = [question("x.txt", TEXT, "Normandy", "q_txt")]
    (qa / "qa.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    args = ["evaluate", "--name", "pair", "--documents", str(docs), "--qa", str(qa), "--workers", "1"]
    ok(run_ctxwin(args, root))

    (docs / "x.md").write_text(other, encoding="utf-8")
    items.append(question("x.md", other, "OPEC", "q_md"))
    (qa / "qa.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    out = ok(run_ctxwin(args, root))
    assert "0 failed" in out and "StaleIndexError" not in out, out
    # x.txt keeps its id; x.md gets its own, and each is evaluated on its own questions.
    ids = json.loads((root / "data" / "experiments" / "pair" / "dagster_home" / "ctxwin_doc_ids.json").read_text())
    assert "x_md" in json.dumps(ids) and '"x"' in json.dumps(ids), ids
    report = json.loads((root / "evaluations" / "reports" / "pair" / "comparison.json").read_text(encoding="utf-8"))
    assert report["n_questions"] == {v: 2 for v in VARIANTS}, report["n_questions"]
