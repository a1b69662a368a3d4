"""`ctxwin evaluate` on a user's own folder and QA file, and `ctxwin compare` of two experiments."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ctxwin_dagster.testing.projects import run_ctxwin

# Runs Dagster (in process or as a webserver) and the embedding model: the slow tier.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _ctxwin(args, cwd):
    return run_ctxwin(args, cwd)


def test_evaluate_own_corpus_and_compare_experiments(tmp_path):
    docs = tmp_path / "my_docs"
    qa = tmp_path / "my_qa"
    docs.mkdir()
    qa.mkdir()
    shutil.copy(ROOT / "data" / "documents" / "squad_Normans.txt", docs)
    lines = [
        line
        for line in (ROOT / "data" / "qa" / "squad_sample.jsonl").read_text(encoding="utf-8").splitlines()
        if '"squad_Normans"' in line
    ]
    # 24 questions: the offline answers are short, so most pairs of variants answer alike, and the
    # review round trip below needs some that differ
    n = 24
    (qa / "questions.jsonl").write_text("\n".join(lines[:n]) + "\n", encoding="utf-8")

    plain = _ctxwin(["evaluate", "--name", "plain", "--documents", str(docs), "--qa", str(qa)], tmp_path)
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
    report = tmp_path / "evaluations" / "reports" / "plain"
    assert (report / "report.html").is_file() and (report / "report.md").is_file()
    payload = json.loads((report / "comparison.json").read_text())
    assert payload["n_questions"] == {"t_rag": n, "cc_rag": n, "swb_rag": n}

    exp = {
        "name": "neighbors",
        "documents_dir": str(docs),
        "qa_dir": str(qa),
        "evaluation": {"enhance_mode": "neighbors", "num_neighbors": 1},
    }
    (tmp_path / "neighbors.json").write_text(json.dumps(exp), encoding="utf-8")
    wide = _ctxwin(["evaluate", "neighbors.json"], tmp_path)
    assert wide.returncode == 0, wide.stdout[-3000:] + wide.stderr[-3000:]

    compared = _ctxwin(["compare", "plain", "neighbors"], tmp_path)
    assert compared.returncode == 0, compared.stderr
    text = (tmp_path / "evaluations" / "reports" / "plain_vs_neighbors.md").read_text()
    assert "| swb_rag | span_hit |" in text
    # wider windows give more context characters per question
    eff = {
        n: {
            e["variant"]: e
            for e in json.loads((tmp_path / "evaluations" / "reports" / n / "comparison.json").read_text())[
                "efficiency"
            ]
        }
        for n in ("plain", "neighbors")
    }
    assert eff["neighbors"]["t_rag"]["context_chars_per_question"] > eff["plain"]["t_rag"]["context_chars_per_question"]

    # human review round trip through the command line: identical answers are ties nobody is asked
    # (the neighbors experiment: with sentence focus, the offline engine answers these 24 alike in
    # T-RAG and SWB-RAG; with chunk windows their retrievals differ, and so do 8 of the answers)
    exported = _ctxwin(["review", "export", "neighbors", "--a", "t_rag", "--b", "swb_rag", "--out", "review"], tmp_path)
    assert exported.returncode == 0, exported.stderr
    import csv

    key = json.loads((tmp_path / "review" / "key.json").read_text(encoding="utf-8"))
    path = tmp_path / "review" / "review.csv"
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    asked, ties = len(rows), len(key["identical"])
    assert asked + ties == n and set(key["sides"]) == {r["question_id"] for r in rows}
    assert asked >= 1, "every pair answered alike: nothing to review"
    assert f"{asked} blinded pairs" in exported.stdout
    refs = {q["question_id"]: q.get("reference_answer") or "" for q in map(json.loads, lines[:n])}
    assert all(r["doc_id"] == "squad_Normans" and r["reference_answer"] == refs[r["question_id"]] for r in rows)
    assert any(r["reference_answer"] for r in rows)  # the answerable ones show theirs
    wrong = min(3, asked)
    for name, first in (("ann", "both wrong"), ("bob", "A better")):
        for i, row in enumerate(rows):
            row["label"] = first if i < wrong else "both good"
            row["complexity"] = "simple"
        with (tmp_path / "review" / f"{name}.csv").open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    counted = _ctxwin(["review", "table4", "review/ann.csv", "review/key.json"], tmp_path)
    assert counted.returncode == 0, counted.stderr
    simple = next(line for line in counted.stdout.splitlines() if line.startswith("| simple"))
    cells = [c.strip() for c in simple.strip("|").split("|")]
    assert cells[1:6] == ["0", "0", str(asked - wrong), str(wrong), str(asked)]
    total = next(line for line in counted.stdout.splitlines() if line.startswith("| total"))
    assert [c.strip() for c in total.strip("|").split("|")][5:7] == [str(n), str(ties)]
    both = _ctxwin(["review", "import", "review/key.json", "review/ann.csv", "review/bob.csv"], tmp_path)
    assert both.returncode == 0, both.stderr
    assert "## Agreement" in both.stdout and "| review/ann.csv | review/bob.csv |" in both.stdout


def test_bad_experiment_file_names_the_fix(tmp_path):
    (tmp_path / "bad.json").write_text('{"name": "x", "documents": "oops"}', encoding="utf-8")
    out = _ctxwin(["evaluate", "bad.json"], tmp_path)
    assert out.returncode != 0 and "unknown keys ['documents']" in out.stderr


def test_evaluate_contracts_with_real_file_names_and_questions_naming_them(tmp_path):
    """Two sample contracts renamed as users name files (spaces, commas, brackets, dashes,
    accents), an empty file beside them, and questions that name the documents by file name and carry an
    extra field: every contract is indexed, answered and scored and compared; the empty file keeps
    a partition whose run fails with one line naming it and the fix."""
    docs, qa = tmp_path / "Verträge 2024", tmp_path / "qa"
    docs.mkdir()
    qa.mkdir()
    renamed = {
        "cuad_legacy_education_development": "Legacy Education Alliance, Inc. [2019] – Development Agreement.txt",
        "cuad_todos_medical_reseller": "Todos Medical – Reseller Agreement, Überarbeitet.txt",
    }
    for doc_id, name in renamed.items():
        shutil.copy(ROOT / "data" / "documents" / f"{doc_id}.txt", docs / name)
    (docs / "Notizen (leer).txt").write_text("", encoding="utf-8")
    lines = []
    for line in (ROOT / "data" / "qa" / "cuad_sample.jsonl").read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item["doc_id"] in renamed and sum(1 for x in lines if x["doc_id"] == renamed[item["doc_id"]]) < 3:
            item["doc_id"] = renamed[item["doc_id"]]
            item["category"] = item.pop("meta", {}).get("category", "")
            lines.append(item)
    (qa / "contracts.jsonl").write_text(
        "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8"
    )

    out = _ctxwin(["evaluate", "--name", "renamed", "--documents", str(docs), "--qa", str(qa)], tmp_path)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert (
        "Todos Medical – Reseller Agreement, Überarbeitet.txt -> Todos_Medical_Reseller_Agreement_Uberarbeitet"
        in out.stdout
    )
    assert "Notizen (leer).txt: empty (0 bytes); put the document's text in it, or remove it" in out.stdout
    assert "questions: 6 for 2 of 3 documents" in out.stdout
    assert "2 ran, 0 up to date, 1 failed" in out.stdout
    failed = [line for line in out.stdout.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and "Notizen_leer" in failed[0] and "empty" in failed[0], failed
    assert "[1/1] experiment_comparison: ok" in out.stdout
    payload = json.loads((tmp_path / "evaluations" / "reports" / "renamed" / "comparison.json").read_text())
    assert payload["n_questions"] == {"t_rag": 6, "cc_rag": 6, "swb_rag": 6}


def test_a_folder_without_usable_documents_is_an_error(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "contract.docx").write_bytes(b"")
    (docs / "scan.tiff").write_bytes(b"II*\x00")
    out = _ctxwin(["run", "--documents", str(docs), "--dagster-home", str(tmp_path / "home")], tmp_path)
    assert out.returncode != 0
    assert "holds no usable document: contract.docx: empty (0 bytes)" in out.stderr
    assert "scan.tiff: unsupported type '.tiff'" in out.stderr
