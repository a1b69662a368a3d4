"""`ctxwin qa import` on real question sets: SQuAD 2.0 JSON and CUAD JSON in their published
layout, and a CSV table, all built from the vendored SQuAD and CUAD data (tests/fixtures/
corpus_qa.tgz; CC BY-SA 4.0 and CC BY 4.0, attribution in tests/fixtures/README.md)."""

from __future__ import annotations

import csv
import json
import re
import tarfile
from pathlib import Path

import pytest

from ctxwin_dagster.cli import main
from ctxwin_dagster.core.evaluation.qa.importers import import_squad_json, import_table
from ctxwin_dagster.core.evaluation.qa.items import load_qa_jsonl
from ctxwin_dagster.core.text.folder import scan_documents

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "corpus_qa.tgz"
CONTRACTS = [
    "GWG HOLDINGS, INC. - ORDERLY MARKETING AGREEMENT.txt",
    "Loop Industries, Inc. - Marketing Agreement.txt",
    "BEYONDCOMCORP_08_03_2000-EX-10.2-CO-HOSTING AGREEMENT.txt",
]


def _jsonl(tar: tarfile.TarFile, name: str) -> list[dict]:
    data = tar.extractfile(name)
    assert data is not None
    return [json.loads(line) for line in data.read().decode("utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def corpus() -> dict:
    with tarfile.open(FIXTURE) as tar:
        docs = {d["doc_id"]: d for d in _jsonl(tar, "squad_v2_dev_half/squad_v2_dev_half_docs.jsonl")}
        squad_q = _jsonl(tar, "squad_v2_dev_half/squad_v2_dev_half_questions.jsonl")
        cuad_q = _jsonl(tar, "cuad_dev/questions.jsonl")
        contracts = {}
        for name in CONTRACTS:
            member = tar.extractfile(f"cuad_dev/contracts/{name}")
            assert member is not None
            contracts[name] = member.read().decode("utf-8")
    return {"docs": docs, "squad_q": squad_q, "cuad_q": cuad_q, "contracts": contracts}


def _squad_json(corpus: dict, articles: list[str]) -> dict:
    """The SQuAD 2.0 dev layout: article -> paragraphs (context) -> qas, offsets per paragraph."""
    data = []
    for art in articles:
        doc = corpus["docs"][art]
        paras: dict[tuple[int, int], list[dict]] = {}
        for q in corpus["squad_q"]:
            if q["doc_id"] != art:
                continue
            ps = q["paragraph_start"]
            qa = {
                "question": q["question"],
                "id": q["id"],
                "answers": [{"text": a["text"], "answer_start": a["answer_start"] - ps} for a in q["answers"]],
                "is_impossible": q["is_impossible"],
            }
            paras.setdefault((ps, q["paragraph_end"]), []).append(qa)
        bounds = sorted(paras)
        data.append(
            {
                "title": doc["title"],
                "paragraphs": [{"context": doc["text"][s:e], "qas": paras[(s, e)]} for s, e in bounds],
            }
        )
    return {"version": "v2.0", "data": data}


def test_squad_json_import_rebuilds_the_articles_and_every_answer_span(tmp_path, corpus):
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps(_squad_json(corpus, ["Normans", "1973_oil_crisis"])), encoding="utf-8")
    result = import_squad_json(path, kind="squad")
    # Paragraphs joined by a blank line give back the article text the corpus holds.
    for art in ("Normans", "1973_oil_crisis"):
        doc = corpus["docs"][art]
        assert result.documents[f"{doc['title']}.txt"] == doc["text"]
    expected = [q for q in corpus["squad_q"] if q["doc_id"] in ("Normans", "1973_oil_crisis")]
    assert len(result.items) == result.report.questions == len(expected)
    by_id = {q["id"]: q for q in expected}
    for item in result.items:
        q = by_id[item.question_id]
        assert item.is_impossible == q["is_impossible"]
        assert set(item.reference_spans) == {(a["answer_start"], a["answer_end"]) for a in q["answers"]}
        assert item.doc_id.endswith(".txt")
    assert result.report.answerable == sum(1 for q in expected if not q["is_impossible"])
    assert result.report.not_found == [] and result.report.spans_moved == 0


def _cuad_json(corpus: dict) -> dict:
    """The CUAD_v1.json layout: one paragraph (the whole contract) per title, ids '<title>__<category>'."""
    data = []
    for name in CONTRACTS:
        title = name.removesuffix(".txt")
        qas = [
            {
                "id": f"{title}__{q['category']}",
                "question": q["question"],
                "answers": [{"text": a["text"], "answer_start": a["answer_start"]} for a in q["answers"]],
                "is_impossible": q["is_impossible"],
            }
            for q in corpus["cuad_q"]
            if q["doc"] == name
        ]
        data.append({"title": title, "paragraphs": [{"context": corpus["contracts"][name], "qas": qas}]})
    return {"version": "aok_v1.0", "data": data}


def test_cuad_json_import_keeps_categories_and_reports_answers_it_cannot_place(tmp_path, corpus):
    path = tmp_path / "CUAD_v1.json"
    path.write_text(json.dumps(_cuad_json(corpus)), encoding="utf-8")
    result = import_squad_json(path, kind="cuad")
    assert sorted(result.documents) == sorted(CONTRACTS)
    rows = [q for q in corpus["cuad_q"] if q["doc"] in CONTRACTS]
    assert len(result.items) == len(rows) == 3 * 41
    assert {i.meta["category"] for i in result.items} == {q["category"] for q in rows}
    n_answers = sum(len(q["answers"]) for q in rows)
    report = result.report
    assert report.spans_exact + report.spans_whitespace + len(report.not_found) == n_answers
    # Every span holds its answer (exactly, or but for white space).
    for item in result.items:
        text = result.documents[item.doc_id]
        for s, e in item.reference_spans:
            assert any(
                " ".join(text[s:e].split()) == " ".join(line.split()) for line in item.reference_answer.split("\n")
            )
    # CUAD marks cut-out parts of a clause with '<omitted>': such answers are not in the text
    # and must be reported, not silently dropped.
    omitted = sum(1 for q in rows for a in q["answers"] if "<omitted>" in a["text"])
    assert len(report.not_found) >= omitted
    # The import can be loaded back as QA JSONL and named by file name.
    lines = "\n".join(report.lines())
    assert "CUAD_v1.json (cuad JSON): 123 questions" in lines


def _overlapping_count(text: str, answer: str) -> int:
    return len(re.findall(f"(?={re.escape(answer)})", text))


def test_csv_import_locates_answers_and_lists_those_not_found_or_found_twice(tmp_path, corpus):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in corpus["contracts"].items():
        (docs / name).write_text(text, encoding="utf-8", newline="")
    rows = []
    for q in corpus["cuad_q"]:
        if q["doc"] in CONTRACTS and q["answers"]:
            rows.append(
                {
                    "file": q["doc"],
                    "question": q["question"],
                    "answer": q["answers"][0]["text"],
                    "category": q["category"],
                }
            )
            # CUAD's normalized answers (dates as 12/27/2018, "Yes"…) are what a spreadsheet
            # export often holds instead of the words of the contract.
            if q["normalized_answer"] and q["normalized_answer"] != q["answers"][0]["text"]:
                rows.append(
                    {
                        "file": q["doc"],
                        "question": q["question"],
                        "answer": q["normalized_answer"],
                        "category": q["category"],
                    }
                )
    rows.append({"file": "Missing Contract.txt", "question": "Who?", "answer": "Nobody", "category": "Parties"})
    table = tmp_path / "questions.csv"
    with table.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["file", "question", "answer", "category"])
        writer.writeheader()
        writer.writerows(rows)
    folder = scan_documents(docs)
    texts = {f.doc_id: f.path.read_text(encoding="utf-8") for f in folder.files}
    result = import_table(table, folder.resolve, texts.__getitem__)
    report = result.report
    real = rows[:-1]
    assert report.questions == len(result.items) == len(real)
    assert report.unknown_documents == {"Missing Contract.txt": 1}
    # Independent count of the cases: found more than once, found nowhere (even with white space normalized).
    twice = [r for r in real if _overlapping_count(corpus["contracts"][r["file"]], r["answer"].strip()) > 1]
    flat = {name: " ".join(text.split()) for name, text in corpus["contracts"].items()}
    nowhere = [r for r in real if " ".join(r["answer"].split()) not in flat[r["file"]]]
    assert twice and nowhere, "the real data has both cases"
    assert len(report.ambiguous) == len(twice)
    assert len(report.not_found) == len(nowhere)
    for item in result.items:
        text = texts[folder.resolve(item.doc_id)]
        assert all(
            " ".join(text[s:e].split()) == " ".join(item.reference_answer.split()) for s, e in item.reference_spans
        )
        assert item.meta["category"]


def test_qa_import_command_writes_documents_and_questions(tmp_path, corpus, capsys):
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps(_squad_json(corpus, ["Normans"])), encoding="utf-8")
    docs, out = tmp_path / "docs", tmp_path / "qa" / "squad.jsonl"
    assert main(["qa", "import", str(path), "--documents", str(docs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "dev-v2.0.json (squad JSON)" in printed and "wrote 1 documents" in printed
    assert (docs / "Normans.txt").read_text(encoding="utf-8") == corpus["docs"]["Normans"]["text"]
    items = load_qa_jsonl(out)
    assert {i.doc_id for i in items} == {"Normans.txt"}
    # A second import does not overwrite the QA file without being asked.
    with pytest.raises(SystemExit, match="exists; pass --overwrite"):
        main(["qa", "import", str(path), "--documents", str(docs), "--out", str(out)])
    # A table naming documents that are not there says so and writes nothing.
    table = tmp_path / "t.csv"
    table.write_text("document,question,answer\nnope.txt,Who?,Rollo\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="no question of .*t.csv could be imported"):
        main(["qa", "import", str(table), "--documents", str(docs), "--out", str(tmp_path / "t.jsonl")])
    assert "questions about documents not in the folder (left out): 'nope.txt' (1)" in capsys.readouterr().out
