"""Blinded human review round trip (ctxwin_dagster.core.evaluation.review)."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ctxwin_dagster.core.evaluation.review import (
    CSV_COLUMNS,
    LABELS,
    agreement,
    export_review,
    import_review,
    table4,
)
from ctxwin_dagster.core.evaluation.review_reading import ReviewFormatError

N = 12


def answers(variant: str) -> list[dict]:
    return [
        {
            "question_id": f"q{i:02d}",
            "question": f'Question {i}, with a comma and "quotes"?',
            "answer": f"{variant} answer {i}\nsecond line <b>not bold</b>",
            "variant": variant,
            "complexity": "complex" if i % 3 == 0 else None,
        }
        for i in range(N)
    ]


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_rows(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


@pytest.fixture()
def exported(tmp_path):
    return export_review(
        answers("t_rag"), answers("swb_rag"), variant_a="t_rag", variant_b="swb_rag", out_dir=tmp_path, seed=42
    )


def test_export_is_blinded_randomized_and_keyed(exported):
    rows = read_rows(exported["csv"])
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert len(rows) == N and exported["n_questions"] == N and exported["unpaired"] == []
    assert [r["question_id"] for r in rows] != sorted(r["question_id"] for r in rows)  # shuffled
    key = json.loads(exported["key"].read_text(encoding="utf-8"))
    assert key["variant_a"] == "t_rag" and key["variant_b"] == "swb_rag" and key["seed"] == 42
    sides = key["sides"]
    assert {s["A"] for s in sides.values()} == {"t_rag", "swb_rag"}  # both sides drawn
    for r in rows:
        side = sides[r["question_id"]]
        assert r["answer_A"].startswith(side["A"]) and r["answer_B"].startswith(side["B"])
        assert r["label"] == ""
        assert "t_rag" not in r["question"]
    html = exported["html"].read_text(encoding="utf-8")
    assert "<form" in html and "Download CSV" in html
    # pre-filled complexity where known
    assert {r["complexity"] for r in rows if int(r["question_id"][1:]) % 3 == 0} == {"complex"}


def test_export_is_deterministic_with_the_seed(tmp_path):
    a = export_review(answers("x"), answers("y"), variant_a="x", variant_b="y", out_dir=tmp_path / "1", seed=3)
    b = export_review(answers("x"), answers("y"), variant_a="x", variant_b="y", out_dir=tmp_path / "2", seed=3)
    c = export_review(answers("x"), answers("y"), variant_a="x", variant_b="y", out_dir=tmp_path / "3", seed=4)
    assert a["csv"].read_bytes() == b["csv"].read_bytes()
    assert a["key"].read_bytes() == b["key"].read_bytes()
    assert a["csv"].read_bytes() != c["csv"].read_bytes()


def test_round_trip_table4_counts_exactly_as_filled(exported):
    rows = read_rows(exported["csv"])
    key = json.loads(exported["key"].read_text(encoding="utf-8"))["sides"]
    # Decide per question, in un-blinded terms, what the reviewer thinks; then write the blinded label.
    truth = {}
    plan = ["swb_rag", "t_rag", "equal", "wrong"]
    for i, r in enumerate(rows):
        outcome = plan[i % 4] if i < 8 else "swb_rag"
        complexity = "simple" if i % 2 == 0 else "complex"
        side = key[r["question_id"]]
        if outcome in ("swb_rag", "t_rag"):
            r["label"] = "A better" if side["A"] == outcome else "B better"
        else:
            r["label"] = "both good" if outcome == "equal" else "both wrong"
        r["complexity"] = complexity
        truth[r["question_id"]] = (outcome, complexity)
    write_rows(exported["csv"], rows)

    df = import_review(exported["csv"], exported["key"])
    assert len(df) == N and df.attrs["variant_a"] == "t_rag"
    for _, r in df.iterrows():
        outcome, complexity = truth[r["question_id"]]
        expected = {
            "swb_rag": "swb_rag preferred",
            "t_rag": "t_rag preferred",
            "equal": "both equal",
            "wrong": "both wrong",
        }[outcome]
        assert r["outcome"] == expected and r["complexity"] == complexity

    t4 = table4(df)
    assert list(t4.columns) == [
        "t_rag preferred",
        "swb_rag preferred",
        "both equal",
        "both wrong",
        "n",
        "identical (not asked)",
    ]
    assert list(t4.index) == ["simple", "complex", "total"] and t4.loc["total", "identical (not asked)"] == 0
    expected = {c: {k: 0 for k in ("t_rag", "swb_rag", "equal", "wrong")} for c in ("simple", "complex")}
    for outcome, complexity in truth.values():
        expected[complexity][outcome] += 1
    for c in ("simple", "complex"):
        assert t4.loc[c, "t_rag preferred"] == expected[c]["t_rag"]
        assert t4.loc[c, "swb_rag preferred"] == expected[c]["swb_rag"]
        assert t4.loc[c, "both equal"] == expected[c]["equal"]
        assert t4.loc[c, "both wrong"] == expected[c]["wrong"]
    assert t4.loc["total", "n"] == N
    assert t4.loc["total", "swb_rag preferred"] == expected["simple"]["swb_rag"] + expected["complex"]["swb_rag"]


def test_labels_tolerate_case_and_spaces(exported):
    rows = read_rows(exported["csv"])
    for r in rows:
        r["label"], r["complexity"] = "  a BETTER ", "Simple"
    write_rows(exported["csv"], rows)
    df = import_review(exported["csv"], exported["key"])
    assert set(df["label"]) == {"A better"} and set(df["complexity"]) == {"simple"}


def test_bad_labels_error_names_file_row_and_fix(exported):
    rows = read_rows(exported["csv"])
    for r in rows:
        r["label"], r["complexity"] = "both good", "simple"
    rows[2]["label"] = "A is better"
    rows[5]["complexity"] = "hard"
    rows[7]["label"] = ""
    write_rows(exported["csv"], rows)
    with pytest.raises(ReviewFormatError) as err:
        import_review(exported["csv"], exported["key"])
    msg = str(err.value)
    assert "3 problem(s)" in msg
    assert f"{exported['csv']}: row 4" in msg and "'A is better' is not a label" in msg
    assert all(repr(label) in msg for label in LABELS)
    assert "row 7" in msg and "'hard' is not a complexity" in msg and "'simple' or 'complex'" in msg
    assert "row 9" in msg and "fill it in" in msg


def test_missing_unknown_and_duplicate_rows(exported):
    rows = read_rows(exported["csv"])
    for r in rows:
        r["label"], r["complexity"] = "both wrong", "complex"
    write_rows(exported["csv"], rows[:-1])
    with pytest.raises(ReviewFormatError, match="1 question\\(s\\) of the key have no row"):
        import_review(exported["csv"], exported["key"])
    df = import_review(exported["csv"], exported["key"], allow_missing=True)
    assert len(df) == N - 1 and df.attrs["n_missing"] == 1
    write_rows(exported["csv"], rows + [dict(rows[0]), dict(rows[0], question_id="zz")])
    with pytest.raises(ReviewFormatError) as err:
        import_review(exported["csv"], exported["key"])
    assert "already on row 2" in str(err.value) and "'zz' is not in key.json" in str(err.value)


def test_wrong_header_or_key(exported, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,verdict\nq1,A better\n", encoding="utf-8")
    with pytest.raises(ReviewFormatError, match="missing column"):
        import_review(bad, exported["key"])
    with pytest.raises(ReviewFormatError, match="no such key file"):
        import_review(exported["csv"], tmp_path / "nope.json")


def test_export_rejects_disjoint_sets_and_reports_unpaired(tmp_path):
    with pytest.raises(ValueError, match="share no question_id"):
        export_review(
            [{"question_id": "a", "answer": "x"}],
            [{"question_id": "b", "answer": "y"}],
            variant_a="x",
            variant_b="y",
            out_dir=tmp_path,
            seed=0,
        )
    out = export_review(answers("x"), answers("y")[:-2], variant_a="x", variant_b="y", out_dir=tmp_path, seed=0)
    assert out["unpaired"] == ["q10", "q11"] and out["n_questions"] == N - 2


class _FormParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.radios: dict[str, set[str]] = {}
        self.selects: list[str] = []
        self.forms = 0
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.forms += 1
        if tag == "script":
            self.scripts += 1
            assert "src" not in a  # inline only, nothing fetched
        if tag == "input" and a.get("type") == "radio":
            self.radios.setdefault(a["name"], set()).add(a["value"])
        if tag == "select":
            self.selects.append(a["id"])


def test_html_form_structure_and_escaping(exported):
    html = exported["html"].read_text(encoding="utf-8")
    p = _FormParser()
    p.feed(html)
    assert p.forms == 1 and p.scripts == 1
    assert len(p.radios) == N and all(v == set(LABELS) for v in p.radios.values())
    assert len(p.selects) == N
    assert "<b>not bold</b>" not in html.split("<script>")[0]  # answers are escaped in the page
    assert "&lt;b&gt;not bold&lt;/b&gt;" in html


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_html_form_javascript_builds_an_importable_csv(exported, tmp_path):
    """Run the page's inline script in node with a tiny DOM stand-in; import its CSV."""
    html = exported["html"].read_text(encoding="utf-8")
    script = html.split("<script>", 1)[1].split("</script>", 1)[0]
    harness = tmp_path / "run.js"
    harness.write_text(
        "var checked={}, selects={}, window={addEventListener:function(){}};\n"
        'var document={querySelector:function(sel){var m=/name="label_(\\d+)"/.exec(sel);'
        "var v=checked[m[1]]; return v?{value:v}:null;},"
        "getElementById:function(id){return {value: selects[id]||''};}};\n"
        + script
        + "\nITEMS.forEach(function(it,i){checked[i]=['A better','B better','both good','both wrong'][i%4];"
        "selects['complexity_'+i]=i%2?'complex':'simple';});\n"
        "var r=buildCsv(); process.stdout.write(JSON.stringify(r));\n",
        encoding="utf-8",
    )
    out = subprocess.run(["node", str(harness)], capture_output=True, text=True, timeout=60, check=True)
    result = json.loads(out.stdout)
    assert result["missing"] == 0
    filled = tmp_path / "filled.csv"
    filled.write_text(result["csv"], encoding="utf-8", newline="")
    df = import_review(filled, exported["key"])
    rows = read_rows(exported["csv"])
    assert list(df["question_id"]) == [r["question_id"] for r in rows]
    assert list(df["label"]) == [LABELS[i % 4] for i in range(N)]
    assert list(df["answer_A"]) == [r["answer_A"] for r in rows]  # commas, quotes and newlines survive
    assert table4(df).loc["total", "n"] == N


def _cited_record(variant: str, qid: str, answer: str, text: str, cid: str = "a1b2c3d4e5f6a7b8") -> dict:
    return {
        "question_id": qid,
        "doc_id": "Contract (2024).txt",
        "question": "Which law governs?",
        "reference_answer": "the laws of Israel",
        "answer": answer,
        "variant": variant,
        "retrieved": [{"chunk_id": cid, "doc_id": "Contract_2024", "start": 100, "end": 100 + len(text), "text": text}],
    }


def test_the_form_shows_the_document_the_reference_and_the_cited_passages_highlighted(tmp_path):
    chunk = (
        "11.1 Notices are in writing. This Agreement is governed by the laws of Israel. 11.2 Either party may end it."
    )
    said = "This Agreement is governed by the laws of Israel."
    a = [_cited_record("t_rag", "q1", f"{said} [a1b2c3d4e5f6a7b8]", chunk)]
    b = [_cited_record("swb_rag", "q1", "11.2 Either party may end it. [a1b2c3d4e5f6a7b8]", chunk)]
    out = export_review(a, b, variant_a="t_rag", variant_b="swb_rag", out_dir=tmp_path, seed=0)
    row = read_rows(out["csv"])[0]
    assert row["doc_id"] == "Contract (2024).txt" and row["reference_answer"] == "the laws of Israel"
    answers_shown = {row["answer_A"], row["answer_B"]}
    assert f"{said} [1]" in answers_shown  # one marker style: numbered, no hashes
    assert all("a1b2c3d4" not in x for x in answers_shown)
    assert row["cited_A"].startswith("[1] Contract_2024 100–") and "laws of Israel" in row["cited_A"]
    html = out["html"].read_text(encoding="utf-8")
    assert "Document: <b>Contract (2024).txt</b>" in html and "Reference answer: the laws of Israel" in html
    assert f"<mark>{said}</mark>" in html and "<mark>11.2 Either party may end it.</mark>" in html
    assert "Contract_2024, characters 100–" in html


def test_identical_answers_are_ties_without_asking_and_are_counted(tmp_path):
    a = answers("t_rag")
    b = [dict(r, answer=r["answer"].replace("swb_rag", "t_rag")) for r in answers("swb_rag")]
    for r in b[:8]:  # the first 8 differ
        r["answer"] = "another " + r["answer"]
    b[9]["answer"] = "  " + a[9]["answer"].replace("\n", "  \n ") + " [0123456789abcdef]"  # same words, a marker
    out = export_review(a, b, variant_a="t_rag", variant_b="swb_rag", out_dir=tmp_path, seed=1)
    assert out["n_questions"] == 8 and out["identical"] == 4
    rows = read_rows(out["csv"])
    assert len(rows) == 8 and not {"q08", "q09", "q10", "q11"} & {r["question_id"] for r in rows}
    assert "4 question(s) where both answers are identical" in out["html"].read_text(encoding="utf-8")
    for r in rows:
        r["label"], r["complexity"] = "A better", r["complexity"] or "simple"
    write_rows(out["csv"], rows)
    df = import_review(out["csv"], out["key"])
    assert len(df) == 12 and df.attrs["n_identical"] == 4
    t4 = table4(df)
    # q09 carries complexity "complex" (9 % 3 == 0); q08, q10 and q11 none: unrated
    assert t4.loc["complex", "identical (not asked)"] == 1 and t4.loc["unrated", "both equal"] == 3
    assert t4.loc["total", "both equal"] == 4 and t4.loc["total", "n"] == 12
    assert t4.loc["total", "identical (not asked)"] == 4


def test_agreement_of_two_reviewers_is_raw_and_cohens_kappa(exported, tmp_path):
    rows = read_rows(exported["csv"])
    frames = {}
    for name, labels in {
        "ann": ["A better"] * 6 + ["B better"] * 6,
        "bob": ["A better"] * 3 + ["B better"] * 9,
    }.items():
        filled = [dict(r, label=label, complexity="simple") for r, label in zip(rows, labels)]
        path = tmp_path / f"{name}.csv"
        write_rows(path, filled)
        frames[name] = import_review(path, exported["key"])
    table = agreement(frames)
    row = table.iloc[0]
    assert (row["reviewer_1"], row["reviewer_2"], row["n"]) == ("ann", "bob", 12)
    assert row["agreement"] == pytest.approx(9 / 12)
    # kappa on the un-blinded outcomes (by variant), computed by hand
    a = frames["ann"].set_index("question_id")["outcome"]
    b = frames["bob"].set_index("question_id")["outcome"].loc[a.index]
    p_o = (a == b).mean()
    p_e = sum((a == o).mean() * (b == o).mean() for o in set(a) | set(b))
    assert row["kappa"] == pytest.approx((p_o - p_e) / (1 - p_e))


def test_numbered_citations_mark_their_sentences_inside_the_window_given(tmp_path):
    """Answers as ``ctxwin ask`` writes them now: ``[1]`` markers, and citations with exact offsets."""
    window = (
        "11.1 Notices are in writing. This Agreement is governed by the laws of Israel. 11.2 Either party may end it."
    )
    start = window.index("This Agreement")
    end = start + len("This Agreement is governed by the laws of Israel.")

    def record(variant: str, answer: str, cites: list[tuple[int, int]]) -> dict:
        return {
            "question_id": "q1",
            "doc_id": "contract",
            "question": "Which law governs?",
            "reference_answer": "the laws of Israel",
            "answer": answer,
            "contexts": [window],
            "context_spans": [[1000, 1000 + len(window), "contract"]],
            "citations": [
                {"chunk_id": "c", "doc_id": "contract", "start": 1000 + s, "end": 1000 + e, "excerpt": "", "marker": 1}
                for s, e in cites
            ],
        }

    a = [record("t_rag", "This Agreement is governed by the laws of Israel. [1]", [(start, end)])]
    b = [record("swb_rag", "11.2 Either party may end it. [1]", [(window.index("11.2 Either"), len(window))])]
    out = export_review(a, b, variant_a="t_rag", variant_b="swb_rag", out_dir=tmp_path, seed=0)
    html = out["html"].read_text(encoding="utf-8")
    assert "<mark>This Agreement is governed by the laws of Israel.</mark>" in html
    assert "<mark>11.2 Either party may end it.</mark>" in html
    assert html.count(f"contract, characters 1000–{1000 + len(window)}") == 2
    row = read_rows(out["csv"])[0]
    assert all(
        row[c].startswith(f"[1] contract 1000–{1000 + len(window)}: 11.1 Notices") for c in ("cited_A", "cited_B")
    )


def test_answers_of_the_same_sentences_in_another_order_are_a_tie(tmp_path):
    a = [dict(r, answer=f"Alpha is the first of {i}. Beta comes next.") for i, r in enumerate(answers("t_rag"))]
    b = [dict(r, answer=f"Beta comes next. Alpha is the first of {i}.") for i, r in enumerate(answers("swb_rag"))]
    b[0]["answer"] = "Beta comes next. Alpha is the first of 99."  # one sentence differs: asked
    out = export_review(a, b, variant_a="t_rag", variant_b="swb_rag", out_dir=tmp_path, seed=3)
    assert out["n_questions"] == 1 and out["identical"] == N - 1
    assert [r["question_id"] for r in read_rows(out["csv"])] == ["q00"]


def test_the_form_shows_the_passage_that_holds_the_reference_and_folds_each_question(tmp_path):
    document = "Preamble. " * 80 + "This Agreement is governed by the laws of Israel." + " Boilerplate." * 80
    start = document.index("the laws of Israel")
    span = [start, start + len("the laws of Israel")]
    a = [
        dict(r, doc_id="contract", reference_answer="the laws of Israel", reference_spans=[span])
        for r in answers("t_rag")
    ]
    b = [
        dict(r, doc_id="contract", reference_answer="the laws of Israel", reference_spans=[span])
        for r in answers("swb_rag")
    ]
    out = export_review(
        a, b, variant_a="t_rag", variant_b="swb_rag", out_dir=tmp_path, seed=0, document_text={"contract": document}.get
    )
    html = out["html"].read_text(encoding="utf-8")
    assert html.count("<mark>the laws of Israel</mark>") == N  # the reference's own passage, marked, per question
    shown = f"contract, characters {start - 300}–{span[1] + 300}"
    assert html.count(f"Where the document says it: {shown}") == N
    # each question folds under its title; the first is open, the others wait
    assert html.count("<details class=item") == N and html.count('<details class=item id="item_0" open>') == 1
    assert len(re.findall(r'<details class=item id="item_\d+" open>', html)) == 1
    # without the document (or without spans) the form says nothing of a passage
    plain = export_review(
        answers("t_rag"), answers("swb_rag"), variant_a="t_rag", variant_b="swb_rag", out_dir=tmp_path / "p", seed=0
    )
    assert "Where the document says it" not in plain["html"].read_text(encoding="utf-8")
