"""Tests for ctxwin_dagster.core.evaluation.qa and the sample QA sets in data/qa/."""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from ctxwin_dagster.core.evaluation.qa.corpora import cuad_to_qa, squad_to_qa
from ctxwin_dagster.core.evaluation.qa.items import (
    QAFormatError,
    QAItem,
    load_qa_folder,
    load_qa_jsonl,
    validate_spans,
    write_qa_jsonl,
)
from ctxwin_dagster.core.text.documents import read_text_document
from ctxwin_dagster.core.text.folder import scan_documents

REPO_ROOT = Path(__file__).resolve().parents[3]
DOCS_DIR = REPO_ROOT / "data" / "documents"
QA_DIR = REPO_ROOT / "data" / "qa"


def _unpack_corpus() -> Path:
    """The corpus layout the importers and evaluations/make_sample_data.py read, built from the
    repository alone: tests/fixtures/corpus_qa.tgz (SQuAD dev half, CUAD dev), the AI Act fixtures
    and the sample document. Never skipped."""
    import atexit
    import shutil
    import tarfile
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="ctxwin-corpus-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    fixtures = REPO_ROOT / "tests" / "fixtures"
    with tarfile.open(fixtures / "corpus_qa.tgz") as tar:
        tar.extractall(root, filter="data")
    shutil.copy(fixtures / "README.md", root / "README.md")
    (root / "eu_ai_act").mkdir()
    shutil.copy(REPO_ROOT / "data" / "documents" / "eu_ai_act_2024_1689_EN.txt", root / "eu_ai_act")
    shutil.copy(fixtures / "eu_ai_act" / "eu_ai_act_sections_EN.jsonl", root / "eu_ai_act")
    return root


CORPUS = _unpack_corpus()

SQUAD_QUESTIONS = CORPUS / "squad_v2_dev_half" / "squad_v2_dev_half_questions.jsonl"
SQUAD_DOCS = CORPUS / "squad_v2_dev_half" / "squad_v2_dev_half_docs.jsonl"
CUAD_QUESTIONS = CORPUS / "cuad_dev" / "questions.jsonl"
CUAD_CONTRACTS = CORPUS / "cuad_dev" / "contracts"

SAMPLE_FILES = {
    # file: (questions, answerable)
    "squad_sample.jsonl": (881, 399),
    "cuad_sample.jsonl": (100, 70),
    "eu_ai_act_sample.jsonl": (8, 8),
}


@pytest.fixture(scope="module")
def doc_texts() -> dict[str, str]:
    return {f.doc_id: read_text_document(f.path).text for f in scan_documents(DOCS_DIR).files}


@pytest.fixture(scope="module")
def sample_items() -> dict[str, list[QAItem]]:
    return {name: load_qa_jsonl(QA_DIR / name) for name in SAMPLE_FILES}


# ---------------------------------------------------------------------- sample QA sets


def test_sample_qa_folder_loads_with_unique_ids():
    assert set(SAMPLE_FILES) <= {p.name for p in QA_DIR.glob("*.jsonl")}
    items = load_qa_folder(QA_DIR)  # rejects ids used twice across the files
    assert len(items) >= sum(n for n, _ in SAMPLE_FILES.values())


@pytest.mark.parametrize("name", sorted(SAMPLE_FILES))
def test_sample_qa_file_loads(sample_items, name):
    items = sample_items[name]
    n_questions, n_answerable = SAMPLE_FILES[name]
    assert len(items) == n_questions
    assert sum(not q.is_impossible for q in items) == n_answerable
    for q in items:
        if q.is_impossible:
            assert q.reference_answer == "" and q.reference_spans == ()
        else:
            assert q.reference_answer.strip() and q.reference_spans


@pytest.mark.parametrize("name", sorted(SAMPLE_FILES))
def test_every_sample_span_lies_inside_its_document(sample_items, doc_texts, name):
    items = sample_items[name]
    validate_spans(items, doc_texts)  # raises on unknown doc_ids or out-of-range spans
    n_spans = 0
    for q in items:
        text = doc_texts[q.doc_id]
        for start, end in q.reference_spans:
            assert 0 <= start < end <= len(text), (q.question_id, start, end)
            assert text[start:end].strip(), (q.question_id, start, end)
            n_spans += 1
    assert n_spans >= SAMPLE_FILES[name][1]


def test_every_sample_document_has_questions(sample_items, doc_texts):
    used = Counter(q.doc_id for items in sample_items.values() for q in items)
    assert len(used) == 7 and set(used) <= set(doc_texts)


def test_squad_sample_spans_equal_the_answer_texts(sample_items, doc_texts):
    items = sample_items["squad_sample.jsonl"]
    assert Counter(q.doc_id for q in items) == {
        "squad_Normans": 208,
        "squad_Computational_complexity_theory": 418,
        "squad_1973_oil_crisis": 255,
    }
    checked = 0
    for q in items:
        if q.is_impossible:
            continue
        texts = q.meta["answer_texts"]
        assert len(texts) == len(q.reference_spans)
        assert len(set(q.reference_spans)) == len(q.reference_spans)  # deduped
        assert doc_texts[q.doc_id][slice(*q.reference_spans[0])] == q.reference_answer
        for (start, end), answer in zip(q.reference_spans, texts, strict=True):
            assert doc_texts[q.doc_id][start:end] == answer
            checked += 1
        p_start, p_end = q.meta["paragraph"]
        assert all(p_start <= s < e <= p_end for s, e in q.reference_spans)
    assert checked >= 399


def test_cuad_sample_composition(sample_items):
    items = sample_items["cuad_sample.jsonl"]
    per_doc = Counter((q.doc_id, q.is_impossible) for q in items)
    assert per_doc == {
        ("cuad_todos_medical_reseller", False): 23,
        ("cuad_todos_medical_reseller", True): 10,
        ("cuad_legacy_education_development", False): 24,
        ("cuad_legacy_education_development", True): 10,
        ("cuad_paperexchange_cobranding", False): 23,
        ("cuad_paperexchange_cobranding", True): 10,
    }
    for q in items:
        assert q.question_id == f"{q.doc_id}__{q.meta['category']}"
        assert q.meta["source"] == "cuad_v1" and q.meta["source_doc"].endswith(".txt")
    # several answers annotated in more than one piece are kept as several spans
    assert sum(len(q.reference_spans) for q in items) > 70


def test_ai_act_sample_spans_are_in_the_named_article(sample_items, doc_texts):
    text = doc_texts["eu_ai_act_2024_1689_EN"]
    headings = [(m.start(), m.group(1)) for m in re.finditer(r"(?m)^Article (\d+)$", text)]
    items = sample_items["eu_ai_act_sample.jsonl"]
    for q in items:
        article = q.meta["article"]
        assert re.fullmatch(r"article_\d+", article)
        for start, end in q.reference_spans:
            last_heading = [num for pos, num in headings if pos < start][-1]
            assert f"article_{last_heading}" == article, (q.question_id, start)
            assert "\n\n" not in text[start:end]  # one sentence / point, not a whole page
    by_article = {q.meta["article"]: q for q in items}
    assert {"article_5", "article_113"} <= set(by_article)
    when = by_article["article_113"]
    assert "It shall apply from 2 August 2026." in [text[s:e] for s, e in when.reference_spans]
    prohibited = by_article["article_5"]
    assert [text[s : s + 3] for s, _ in prohibited.reference_spans] == [f"({c})" for c in "abcdefgh"]


def test_sample_qa_files_round_trip_byte_for_byte(sample_items, tmp_path):
    for name, items in sample_items.items():
        out = write_qa_jsonl(items, tmp_path / name)
        assert out.read_bytes() == (QA_DIR / name).read_bytes()
        assert load_qa_jsonl(out) == items


def test_sample_data_script_is_deterministic(tmp_path):
    sys.path.insert(0, str(REPO_ROOT / "evaluations"))
    try:
        import make_sample_data
    finally:
        sys.path.remove(str(REPO_ROOT / "evaluations"))
    assert make_sample_data.main(["--corpus", str(CORPUS), "--out", str(tmp_path)]) == 0
    for sub in ("documents", "qa"):
        produced = sorted(p.name for p in (tmp_path / sub).iterdir())
        committed_dir = REPO_ROOT / "data" / sub
        committed = {p.name for p in committed_dir.iterdir()}
        assert set(produced) <= committed
        for name in produced:
            new, old = (tmp_path / sub / name), (committed_dir / name)
            assert new.read_bytes() == old.read_bytes(), name


# ---------------------------------------------------------------------------- QAItem


def test_qaitem_normalizes_and_infers():
    item = QAItem("q1", "doc", "Who?", "Rollo", [[10, 15], (20, 25)])
    assert item.reference_spans == ((10, 15), (20, 25))
    assert item.is_impossible is False and item.meta == {}
    assert QAItem("q2", "doc", "Why?", "").is_impossible is True
    assert hash(item) == hash(QAItem("q1", "doc", "Who?", "Rollo", ((10, 15), (20, 25))))
    assert QAItem.from_dict(item.to_dict()) == item
    assert item.to_dict()["reference_spans"] == [[10, 15], [20, 25]]
    assert "meta" not in item.to_dict()


def test_qaitem_answer_without_spans_is_answerable():
    item = QAItem.from_dict({"question_id": "q", "doc_id": "d", "question": "?", "reference_answer": "yes"})
    assert item.is_impossible is False and item.reference_spans == ()


# -------------------------------------------------------------------- malformed files

GOOD = {
    "question_id": "q1",
    "doc_id": "doc_a",
    "question": "Who?",
    "reference_answer": "Rollo",
    "reference_spans": [[0, 5]],
}


def _with(**changes):
    data = dict(GOOD, question_id="q2")
    for key, value in changes.items():
        if value is ...:
            data.pop(key)
        else:
            data[key] = value
    return json.dumps(data)


MALFORMED = [
    ("invalid_json", '{"question_id": "q2", "doc_id": ', "not valid JSON"),
    ("not_an_object", "[1, 2]", "must be a JSON object"),
    ("missing_question", _with(question=...), "'question'"),
    ("missing_answer", _with(reference_answer=...), "'reference_answer'"),
    ("near_miss_field", _with(reference_span=[[0, 5]]), "'reference_span' (did you mean 'reference_spans'?)"),
    ("near_miss_id", _with(questionid="x"), "'questionid' (did you mean 'question_id'?)"),
    ("empty_question_id", _with(question_id=" "), "'question_id'"),
    ("bad_doc_id", _with(doc_id="two\nlines"), "'doc_id'"),
    ("doc_id_not_string", _with(doc_id=7), "'doc_id'"),
    ("answer_not_string", _with(reference_answer=None), "'reference_answer'"),
    ("spans_not_list", _with(reference_spans="0-5"), "'reference_spans'"),
    ("span_not_pair", _with(reference_spans=[[0, 5, 6]]), "'reference_spans[0]'"),
    ("span_floats", _with(reference_spans=[[0.0, 5.0]]), "'reference_spans[0]'"),
    ("span_bools", _with(reference_spans=[[False, True]]), "'reference_spans[0]'"),
    ("span_empty", _with(reference_spans=[[0, 5], [5, 5]]), "'reference_spans[1]'"),
    ("span_negative", _with(reference_spans=[[-1, 5]]), "0 <= start < end"),
    ("impossible_with_answer", _with(is_impossible=True), "'is_impossible'"),
    ("impossible_not_bool", _with(is_impossible="no"), "'is_impossible'"),
    ("answerable_no_answer", _with(reference_answer="", is_impossible=False), "'reference_answer'"),
    ("spans_without_answer", _with(reference_answer=""), "'reference_answer'"),
    ("meta_not_object", _with(meta=["x"]), "'meta'"),
    ("duplicate_id", json.dumps(GOOD), "already used on line 1"),
]


@pytest.mark.parametrize(("case", "line", "phrase"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_line_names_file_line_and_field(tmp_path, case, line, phrase):
    path = tmp_path / f"{case}.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + line + "\n", encoding="utf-8")
    with pytest.raises(QAFormatError) as info:
        load_qa_jsonl(path)
    message = str(info.value)
    assert str(path) in message
    assert "line 3" in message  # physical line numbers, blank lines counted
    assert phrase in message
    assert isinstance(info.value, ValueError)


def test_empty_qa_file_is_rejected(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(QAFormatError, match="empty.jsonl: holds no questions"):
        load_qa_jsonl(path)


def test_non_utf8_qa_file_is_rejected(tmp_path):
    path = tmp_path / "latin.jsonl"
    line = json.dumps(dict(GOOD, question="Qui a écrit ?"), ensure_ascii=False)
    path.write_bytes(line.encode("latin-1"))
    with pytest.raises(QAFormatError, match=r"latin\.jsonl: not valid UTF-8 at byte \d+; re-save"):
        load_qa_jsonl(path)


def test_load_accepts_bom_and_crlf(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\r\n")
    assert load_qa_jsonl(path) == [QAItem.from_dict(GOOD)]


def test_duplicate_ids_across_files_are_rejected(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps(GOOD) + "\n", encoding="utf-8")
    (tmp_path / "b.jsonl").write_text(json.dumps(GOOD) + "\n", encoding="utf-8")
    (tmp_path / ".hidden.jsonl").write_text("not json\n", encoding="utf-8")
    expected = r"b\.jsonl: question_id 'q1' is also used in .*a\.jsonl"
    with pytest.raises(QAFormatError, match=expected):
        load_qa_folder(tmp_path)


def test_write_rejects_duplicate_ids(tmp_path):
    item = QAItem.from_dict(GOOD)
    with pytest.raises(QAFormatError, match="appears twice"):
        write_qa_jsonl([item, item], tmp_path / "dup.jsonl")
    assert not list(tmp_path.iterdir())


def test_round_trip_write_load(tmp_path):
    items = [
        QAItem(
            "a",
            "doc_a",
            "Ünïcödé question?",
            "Antwort – “quoted”",
            [[0, 3], [7, 9]],
            meta={"category": "x", "n": [1, 2]},
        ),
        QAItem("b", "doc_a", "Unanswerable?", "", (), True),
        QAItem("c", "doc-b.v2", "Free text?", "an answer without spans"),
    ]
    path = write_qa_jsonl(items, tmp_path / "sub" / "set.jsonl")
    assert path.read_text(encoding="utf-8").count("\n") == 3
    assert "Ünïcödé" in path.read_text(encoding="utf-8")  # written as UTF-8, not escaped
    assert load_qa_jsonl(path) == items


# ---------------------------------------------------------------------- validate_spans


def test_validate_spans_reports_every_problem():
    items = [
        QAItem("ok", "d", "?", "bc", [[1, 3]]),
        QAItem("past_end", "d", "?", "x", [[2, 99]]),
        QAItem("blank", "d", "?", "x", [[3, 5]]),
        QAItem("lost", "unknown_doc", "?", "x", [[0, 1]]),
    ]
    with pytest.raises(QAFormatError) as info:
        validate_spans(items, {"d": "abc  def"})
    message = str(info.value)
    assert "3 reference-span problem(s)" in message
    assert "'past_end'" in message and "ends past the end of document 'd' (8 chars)" in message
    assert "'blank'" in message and "white space" in message
    assert "doc_id 'unknown_doc' (1 question(s)) is not a known document" in message
    assert "'ok'" not in message
    validate_spans(items[:1], {"d": "abc  def"})


# ---------------------------------------------------------- converters on the real corpus


@pytest.fixture(scope="module")
def squad_all() -> list[QAItem]:
    return squad_to_qa(SQUAD_QUESTIONS)


def test_squad_to_qa_counts(squad_all):
    assert len(squad_all) == 6078
    assert sum(not q.is_impossible for q in squad_all) == 2910
    assert len({q.doc_id for q in squad_all}) == 16
    assert len({q.question_id for q in squad_all}) == 6078
    assert all(q.doc_id.startswith("squad_") for q in squad_all)


def test_squad_to_qa_spans_match_the_corpus_texts(squad_all):
    texts = {}
    for line in SQUAD_DOCS.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        texts["squad_" + d["doc_id"]] = d["text"]
    validate_spans(squad_all, texts)
    for q in squad_all:
        for (s, e), answer in zip(q.reference_spans, q.meta.get("answer_texts", []), strict=True):
            assert texts[q.doc_id][s:e] == answer


def test_squad_to_qa_filters_and_maps_doc_ids():
    items = squad_to_qa(SQUAD_QUESTIONS, doc_ids=["Normans"], doc_id_for=lambda d: d.lower())
    assert len(items) == 208 and sum(not q.is_impossible for q in items) == 96
    assert {q.doc_id for q in items} == {"normans"}
    first = items[0]
    assert (first.question, first.reference_answer, first.reference_spans) == (
        "In what country is Normandy located?",
        "France",
        ((159, 165),),
    )
    with pytest.raises(ValueError, match="Atlantis"):
        squad_to_qa(SQUAD_QUESTIONS, doc_ids=["Normans", "Atlantis"])


def test_cuad_to_qa_counts_and_spans():
    items = cuad_to_qa(CUAD_QUESTIONS)
    assert len(items) == 6191
    assert sum(not q.is_impossible for q in items) == 2054
    assert len({q.doc_id for q in items}) == 151
    assert len({q.question_id for q in items}) == 6191
    assert Counter(q.meta["category"] for q in items).most_common(1)[0][1] == 151
    texts = {
        "cuad_" + re.sub(r"[^A-Za-z0-9_.\-]+", "_", p.stem).strip("_"): p.read_text(encoding="utf-8")
        for p in CUAD_CONTRACTS.glob("*.txt")
    }
    assert len(texts) == 151
    validate_spans(items, texts)
    assert sum(len(q.reference_spans) for q in items) > 2054


def test_cuad_to_qa_uses_pieces_and_filters_contracts():
    name = "IdeanomicsInc_20160330_10-K_EX-10.26_9512211_EX-10.26_Content License Agreement"
    items = cuad_to_qa(CUAD_QUESTIONS, contracts=[name], doc_id_for=lambda d: "ideanomics")
    assert len(items) == 41 and {q.doc_id for q in items} == {"ideanomics"}
    by_cat = {q.meta["category"]: q for q in items}
    doc_name = by_cat["Document Name"]
    assert doc_name.question_id == "ideanomics__Document Name"
    assert (doc_name.reference_answer, doc_name.reference_spans) == ("CONTENT LICENSE AGREEMENT", ((0, 25),))
    text = (CUAD_CONTRACTS / f"{name}.txt").read_text(encoding="utf-8")
    multi = [q for q in items if "[...]" in q.reference_answer]
    assert multi, "this contract has answers annotated in several pieces"
    for q in items:
        assert list(q.reference_spans) == sorted(set(q.reference_spans))
        for s, e in q.reference_spans:
            assert text[s:e].strip()
    with pytest.raises(ValueError, match="no_such_contract"):
        cuad_to_qa(CUAD_QUESTIONS, contracts=["no_such_contract.txt"])


def test_extra_fields_are_kept_under_meta_with_one_warning_per_file(tmp_path):
    """CUAD and FinanceBench exports carry fields such as ``category``: kept, not refused."""
    from ctxwin_dagster.core.evaluation.qa.items import QAExtraFieldsWarning

    path = tmp_path / "export.jsonl"
    lines = [dict(GOOD, question_id=f"q{i}", category="Governing Law", source_page=i) for i in range(3)]
    lines[0]["meta"] = {"category": "from meta wins"}
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    with pytest.warns(QAExtraFieldsWarning) as caught:
        items = load_qa_jsonl(path)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert str(path) in message and "'category' (3 lines)" in message and "'source_page' (3 lines)" in message
    assert items[1].meta == {"category": "Governing Law", "source_page": 1}
    assert items[0].meta["category"] == "from meta wins"  # an explicit meta value is not overwritten
    assert items[0].to_dict()["meta"]["source_page"] == 0
