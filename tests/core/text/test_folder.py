"""Documents folders as users have them: file names with spaces, commas, brackets and accents,
collisions, files that are not documents, questions that name documents by file name, and
Word files (plain Python, no Dagster)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

from ctxwin_dagster.core.evaluation.qa.items import QAExtraFieldsWarning, QAItem, load_qa_jsonl
from ctxwin_dagster.core.evaluation.qa.resolve import resolve_questions
from ctxwin_dagster.core.text.documents import DocumentError, read_document
from ctxwin_dagster.core.text.folder import scan_documents

DOCS = Path(__file__).resolve().parents[3] / "data" / "documents"


def test_real_contract_names_become_readable_ids_and_every_file_is_accounted_for(tmp_path):
    names = {
        "cuad_legacy_education_development.txt": "LEGACY EDUCATION ALLIANCE, INC. - Development Agreement [2019].txt",
        "cuad_paperexchange_cobranding.txt": "PaperExchange, Co-Branding Agreement_ Agency Agreement (Säo Paulo).txt",
        "cuad_todos_medical_reseller.txt": "Todos Medical – Reseller Agreement, Überarbeitet.txt",
    }
    for src, dst in names.items():
        shutil.copy(DOCS / src, tmp_path / dst)
    (tmp_path / "notes.xlsx").write_bytes(b"PK\x03\x04")
    (tmp_path / "empty.txt").write_bytes(b"")
    folder = scan_documents(tmp_path)
    # The empty file keeps an id (and a partition, which fails naming the fix).
    assert folder.ids() == [
        "LEGACY_EDUCATION_ALLIANCE_INC._-_Development_Agreement_2019",
        "PaperExchange_Co-Branding_Agreement_Agency_Agreement_Sao_Paulo",
        "Todos_Medical_Reseller_Agreement_Uberarbeitet",
        "empty",
    ]
    # Each id is the one the file gets on its own (stable), and leads back to the file.
    for f in folder.usable():
        assert read_document(f.path).doc_id == f.doc_id
        assert folder.path_of(f.doc_id) == f.path
    assert [f.path.name for f in folder.problems()] == ["empty.txt"]
    assert {s.path.name for s in folder.skipped} == {"notes.xlsx"}
    report = "\n".join(folder.report_lines())
    assert "3 file name(s) are not usable ids as they are" in report
    assert (
        "Todos Medical – Reseller Agreement, Überarbeitet.txt -> Todos_Medical_Reseller_Agreement_Uberarbeitet"
        in report
    )
    assert "notes.xlsx: unsupported type '.xlsx'" in report and "empty.txt: empty (0 bytes)" in report


def test_collisions_are_resolved_the_same_way_every_time_and_reported(tmp_path):
    for name in ("a b.txt", "a_b.txt", "a,b.md", "x.txt", "x.pdf", "y z.txt", "y z.md"):
        (tmp_path / name).write_bytes(b"%PDF-1.4" if name.endswith(".pdf") else b"text")
    folder = scan_documents(tmp_path)
    ids = {f.path.name: f.doc_id for f in folder.files}
    # A file whose stem is the id keeps it; the others get the file type, then a hash.
    assert ids["a_b.txt"] == "a_b"
    assert ids["a b.txt"] == "a_b_txt"
    assert ids["a,b.md"] == "a_b_md"
    assert ids["x.pdf"] == "x" and ids["x.txt"] == "x_txt"
    assert ids["y z.md"] == "y_z" and ids["y z.txt"] == "y_z_txt"
    assert len(set(ids.values())) == 7
    assert scan_documents(tmp_path).ids() == folder.ids()
    report = "\n".join(folder.report_lines())
    assert "x.txt -> x_txt ('x' is taken by 'x.pdf')" in report
    # Names resolve to ids; a stem two files share is ambiguous, the file name is not.
    assert folder.lookup("a b.txt") == ("a_b_txt", False)
    assert folder.lookup("x.txt") == ("x_txt", False)
    assert folder.lookup("x") == ("x", False)  # an id always means itself
    assert folder.lookup("a b") == ("a_b_txt", False)
    assert folder.lookup("y z") == (None, True)  # the stem of two files
    assert folder.lookup("nothing.txt") == (None, False)


def test_a_folder_without_a_usable_document_is_an_error_naming_each_file(tmp_path):
    (tmp_path / "contract.docx").write_bytes(b"")
    (tmp_path / "scan.tiff").write_bytes(b"II*\x00")
    with pytest.raises(
        DocumentError,
        match=r"holds no usable document: contract\.docx: empty \(0 bytes\).*scan\.tiff: unsupported type",
    ):
        scan_documents(tmp_path).require_documents()
    empty = tmp_path / "empty_folder"
    empty.mkdir()
    with pytest.raises(DocumentError, match="is empty; put the documents"):
        scan_documents(empty).require_documents()


def test_questions_name_documents_by_file_name_stem_or_id(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(DOCS / "squad_Normans.txt", docs / "Normans (Wikipedia).txt")
    shutil.copy(DOCS / "squad_1973_oil_crisis.txt", docs / "oil_crisis.txt")
    folder = scan_documents(docs)
    qa = tmp_path / "qa.jsonl"
    lines = [
        '{"question_id": "q1", "doc_id": "Normans (Wikipedia).txt", "question": "Where?", "reference_answer": "France", "category": "geo"}',
        '{"question_id": "q2", "doc_id": "Normans (Wikipedia)", "question": "When?", "reference_answer": "10th century", "category": "time"}',
        '{"question_id": "q3", "doc_id": "Normans_Wikipedia", "question": "Who?", "reference_answer": "Rollo"}',
        '{"question_id": "q4", "doc_id": "oil_crisis", "question": "Which year?", "reference_answer": "1973"}',
        '{"question_id": "q5", "doc_id": "missing.txt", "question": "?", "reference_answer": "x"}',
    ]
    qa.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        items = load_qa_jsonl(qa)
    assert [w.category for w in caught] == [QAExtraFieldsWarning]
    resolved = resolve_questions(items, folder)
    assert [q.question_id for q in resolved.by_doc["Normans_Wikipedia"]] == ["q1", "q2", "q3"]
    assert {q.doc_id for q in resolved.by_doc["Normans_Wikipedia"]} == {"Normans_Wikipedia"}
    assert resolved.by_doc["Normans_Wikipedia"][0].meta == {"category": "geo", "doc_ref": "Normans (Wikipedia).txt"}
    assert resolved.by_doc["oil_crisis"][0].meta == {}
    assert dict(resolved.unknown) == {"missing.txt": 1}
    assert "1 question(s) name no document in the folder: 'missing.txt' (1)" in resolved.report_lines()[0]


def test_word_documents_give_paragraphs_and_tables_in_order(tmp_path):
    import docx

    d = docx.Document()
    d.add_heading("Supply Agreement", level=1)
    d.add_paragraph("1. The Supplier shall deliver the Goods.")
    table = d.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Fee", "EUR 500"
    table.cell(1, 0).text, table.cell(1, 1).text = "Term", "2 years"
    d.add_paragraph("2. Termination requires   written notice.")
    path = tmp_path / "Supply Agreement (final).docx"
    d.save(str(path))
    doc = read_document(path)
    assert doc.doc_id == "Supply_Agreement_final"
    assert doc.text == (
        "Supply Agreement\n\n1. The Supplier shall deliver the Goods.\n\nFee | EUR 500\n\nTerm | 2 years\n\n"
        "2. Termination requires   written notice.\n"
    )
    assert doc.encoding == "docx" and doc.title == "Supply Agreement"
    old = tmp_path / "old.docx"
    old.write_bytes(b"\xd0\xcf\x11\xe0 an old binary Word file")
    with pytest.raises(DocumentError, match=r"old\.docx.*not a \.docx file.*save it from Word"):
        read_document(old)


def test_qa_item_keeps_any_single_line_document_name():
    assert QAItem("q", "Acme, Inc. [2019].txt", "?", "x").doc_id == "Acme, Inc. [2019].txt"
