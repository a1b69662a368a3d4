"""`ctxwin qa generate` as a user runs it: a QA folder with one file per document, the report,
documents that already have questions left alone, and files `ctxwin evaluate` takes as they are."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ctxwin_dagster.cli.pipeline import question_listing
from ctxwin_dagster.core.evaluation.qa.items import load_qa_folder
from ctxwin_dagster.core.evaluation.qa.resolve import check_reference_spans, resolve_questions
from ctxwin_dagster.core.text.documents import read_document
from ctxwin_dagster.core.text.folder import scan_documents
from ctxwin_dagster.testing import FakeOpenAIServer
from ctxwin_dagster.testing.projects import run_ctxwin
from ctxwin_dagster.testing.question_writer import question_writer_responder

ROOT = Path(__file__).resolve().parents[2]


def test_generate_writes_a_qa_folder_that_evaluate_accepts(tmp_path):
    docs = tmp_path / "My Documents"
    docs.mkdir()
    for name in ("squad_Normans.txt", "squad_1973_oil_crisis.txt"):
        shutil.copy(ROOT / "data" / "documents" / name, docs / name.replace("squad_", "Article "))
    (docs / "Price table.txt").write_text("\n".join(f"| {i} | {i * 3} |" for i in range(40)), encoding="utf-8")
    out = tmp_path / "questions"
    with FakeOpenAIServer(responder=question_writer_responder(), models=["writer"]) as srv:
        args = ["qa", "generate", "--documents", str(docs), "--model", "writer", "--base-url", srv.base_url]
        args += ["--out", str(out), "--count", "4", "--cache-dir", str(tmp_path / "cache")]
        first = run_ctxwin(args, tmp_path)
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
        files = sorted(p.name for p in out.glob("*.jsonl"))
        assert len(files) == 2, first.stdout  # not the table: an empty QA file would stop `ctxwin evaluate`
        assert "no question kept; no file written" in first.stdout
        report = json.loads((out / "generation_report.json").read_text())
        assert report["total"]["span_found_rate"] == 1.0
        assert sum(report["total"]["kept"].values()) == sum(
            len(p.read_text().splitlines()) for p in out.glob("*.jsonl")
        )
        assert (
            report["calls"]["calls"] > 0
            and "drafting" in first.stdout
            and "ctxwin evaluate --documents" in first.stdout
        )

        # what `ctxwin evaluate --qa` checks before it runs anything (it stops on a bad line or a
        # span outside its document); the whole evaluation runs in tests/cli/test_cli_evaluate.py
        folder = scan_documents(docs)
        question_listing(str(out), folder)
        resolved = resolve_questions(load_qa_folder(out), folder)
        assert not resolved.unknown and not resolved.ambiguous
        assert check_reference_spans(resolved, lambda d: read_document(folder.path_of(d), doc_id=d).text) == []
        kinds = {i.meta["kind"] for items in resolved.by_doc.values() for i in items}
        assert kinds == {"single", "two_passages", "unanswerable"}

        # a second run leaves the questions there; --overwrite keeps the old file beside the new one
        again = run_ctxwin(args, tmp_path)
        assert again.returncode == 0 and again.stdout.count("exists; kept") == 2, again.stdout
        assert len(json.loads((out / "generation_report.json").read_text())["documents"]) == 3
        one = files[0].removesuffix(".jsonl")
        redo = run_ctxwin([*args, "--doc", one, "--overwrite"], tmp_path)
        assert redo.returncode == 0, redo.stderr[-2000:]
        assert (out / f"{files[0]}.previous").is_file() and (out / files[1]).is_file()
        assert len(list(out.glob("*.jsonl"))) == 2  # the kept copy is not read as a QA file

        # nothing kept: said so, with the reasons by kind, and no evaluation of an empty folder suggested
        empty = [
            *args[:-6],
            "--out",
            str(tmp_path / "none"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--doc",
            "Price table",
        ]
        none = run_ctxwin(empty, tmp_path)
        assert none.returncode == 1 and "no question in" in none.stdout and "to evaluate" in none.stdout, none.stdout
        assert "ctxwin evaluate --documents" not in none.stdout

    bad = run_ctxwin(["qa", "generate", "--documents", str(docs), "--kinds", "essay", "--out", str(out)], tmp_path)
    assert bad.returncode != 0 and "unknown question kind" in bad.stderr
    missing = run_ctxwin(["qa", "generate", "--documents", str(tmp_path / "nowhere")], tmp_path)
    assert missing.returncode != 0 and "does not exist" in missing.stderr


@pytest.mark.slow
def test_evaluate_runs_on_generated_questions(tmp_path):
    """The whole round: questions generated from a folder, then `ctxwin evaluate` on that folder
    and those questions, through Dagster, to the comparison report."""
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(ROOT / "data" / "documents" / "squad_1973_oil_crisis.txt", docs)
    out = tmp_path / "generated"
    with FakeOpenAIServer(responder=question_writer_responder(), models=["writer"]) as srv:
        made = run_ctxwin(
            ["qa", "generate", "--documents", str(docs), "--model", "writer", "--base-url", srv.base_url]
            + ["--out", str(out), "--count", "5", "--cache-dir", str(tmp_path / "cache")],
            tmp_path,
        )
    assert made.returncode == 0, made.stderr[-2000:]
    items = load_qa_folder(out)
    answerable = [i for i in items if not i.is_impossible]
    assert len(items) >= 3 and answerable

    ran = run_ctxwin(["evaluate", "--name", "generated", "--documents", str(docs), "--qa", str(out)], tmp_path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    payload = json.loads((tmp_path / "evaluations" / "reports" / "generated" / "comparison.json").read_text())
    assert payload["n_questions"] == {"t_rag": len(items), "cc_rag": len(items), "swb_rag": len(items)}
