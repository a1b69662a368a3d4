"""Per-question metrics and their aggregation (ctxwin_dagster.core.evaluation.metrics)."""

from __future__ import annotations

import math

import pytest

from ctxwin_dagster.core.evaluation.metrics.aggregation import (
    aggregate,
    aggregate_efficiency,
    bootstrap_mean_ci,
    scores_by_variant,
)
from ctxwin_dagster.core.evaluation.metrics.answers import answer_f1, exact_match, normalize_answer, strip_citations
from ctxwin_dagster.core.evaluation.metrics.records import RecordError, is_answerable
from ctxwin_dagster.core.evaluation.metrics.scoring import (
    reference_chunk_ids,
    score_answers,
    score_record,
)

CHUNKS = {
    "d": [
        {"chunk_id": "c0", "start": 0, "end": 100},
        {"chunk_id": "c1", "start": 90, "end": 200},
        {"chunk_id": "c2", "start": 190, "end": 300},
        {"chunk_id": "c3", "start": 290, "end": 400},
    ]
}


def hit(cid: str, start: int, end: int, doc: str = "d", score: float = 0.5) -> dict:
    return {"chunk_id": cid, "doc_id": doc, "start": start, "end": end, "text": "x" * (end - start), "score": score}


def record(**kw) -> dict:
    base = {
        "question_id": "q1",
        "doc_id": "d",
        "variant": "t_rag",
        "question": "Who?",
        "answer": "Marie Curie",
        "not_found": False,
        "reference_answer": "Marie Curie",
        "reference_spans": [[120, 150]],
        "retrieved": [hit("c3", 290, 400), hit("c1", 90, 200), hit("c0", 0, 100)],
        "contexts": ["a" * 110, "b" * 110],
        "context_spans": [[290, 400], [90, 200]],
        "latency_s": 1.5,
        "input_tokens": 1000,
        "output_tokens": 20,
        "cost_usd": 0.002,
    }
    base.update(kw)
    return base


# ---------------------------------------------------------------- answer text


@pytest.mark.parametrize(
    ("text", "expected"),
    [("The Eiffel Tower!", "eiffel tower"), ("  A  cat, an apple ", "cat apple"), ("", ""), ("Theater", "theater")],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_answer_f1_matches_squad_arithmetic():
    # prediction tokens: [marie, curie, physicist]; reference: [marie, curie] -> P=2/3, R=1
    assert answer_f1("Marie Curie, a physicist", "Marie Curie") == pytest.approx(0.8)
    assert answer_f1("Pierre", "Marie Curie") == 0.0
    assert answer_f1("", "") == 1.0
    assert answer_f1("", "x") == 0.0
    assert answer_f1("curie", ["Marie", "Curie"]) == 1.0  # best over references
    # repeated tokens count with their multiplicity (Counter intersection)
    assert answer_f1("the the paris paris", "paris") == pytest.approx(2 * 0.5 * 1 / 1.5)


def test_citation_markers_are_not_words_of_the_answer():
    from ctxwin_dagster.core.evaluation.metrics.scoring import score_record

    hexid = "a7f76ab74c881991fabf7461db1c82a0"
    assert strip_citations(f"Paris [1]. Lyon [1, 2]; Nice [{hexid}] [W3] [sic] [Article 5]") == (
        "Paris. Lyon; Nice [sic] [Article 5]"
    )
    base = {"question_id": "q", "doc_id": "d", "variant": "t_rag", "question": "Where?", "not_found": False}
    rec = {**base, "answer": "France [1]", "reference_answer": "France", "reference_spans": [[0, 6]]}
    scores = score_record(rec)
    assert scores["answer_f1"] == 1.0 and scores["exact_match"] == 1.0


def test_exact_match():
    assert exact_match("the Paris.", "paris") == 1.0
    assert exact_match("Paris, France", "Paris") == 0.0
    with pytest.raises(ValueError):
        exact_match("x", [])


# ---------------------------------------------------------------- records


def test_answerable_question_metrics_known_values():
    s = score_record(record(), chunks=CHUNKS, ks=(1, 2, 3))
    assert s["answerable"] is True
    # reference [120,150] lies wholly inside context block [90,200]
    assert s["span_hit"] == 1.0 and s["span_char_recall"] == 1.0
    # c3 irrelevant at rank 1, c1 relevant at rank 2
    assert (s["hit@1"], s["hit@2"], s["hit@3"]) == (0.0, 1.0, 1.0)
    assert s["mrr"] == 0.5
    assert s["id_context_precision"] == pytest.approx(1 / 3)
    assert s["id_context_recall"] == 1.0  # only c1 overlaps [120,150]
    assert s["n_reference_chunks"] == 1
    assert s["answer_f1"] == 1.0 and s["exact_match"] == 1.0 and s["abstained"] == 0.0
    assert s["not_found_correct"] is None
    assert s["context_chars"] == 220 and s["latency_s"] == 1.5


def test_span_partially_covered_is_not_a_hit_but_counts_characters():
    rec = record(reference_spans=[[80, 120]], context_spans=[[90, 200], [0, 85]])
    s = score_record(rec, chunks=CHUNKS)
    assert s["span_hit"] == 0.0  # no single block holds 80..120
    assert s["span_char_recall"] == pytest.approx((5 + 30) / 40)  # 80..85 and 90..120


def test_span_hit_needs_one_block_not_the_union():
    # 100..140 covered by the union [90,120)+[120,200) but by neither block alone
    rec = record(reference_spans=[[100, 140]], contexts=["a", "b"], context_spans=[[90, 120], [120, 200]])
    s = score_record(rec)
    assert s["span_hit"] == 0.0 and s["span_char_recall"] == 1.0


def test_any_reference_span_counts_and_recall_uses_union_of_spans():
    rec = record(reference_spans=[[10, 20], [350, 370]], contexts=["a"], context_spans=[[300, 400]])
    s = score_record(rec, chunks=CHUNKS)
    assert s["span_hit"] == 1.0
    assert s["span_char_recall"] == pytest.approx(20 / 30)
    assert s["id_context_recall"] == pytest.approx(2 / 2)  # c0 and c3 overlap, both retrieved
    assert s["mrr"] == 1.0


def test_context_span_of_another_document_does_not_count():
    rec = record(contexts=["a"], context_spans=[[90, 200, "other"]])
    assert score_record(rec)["span_hit"] == 0.0
    rec = record(contexts=["a"], context_spans=[{"start": 90, "end": 200, "doc_id": "d"}])
    assert score_record(rec)["span_hit"] == 1.0


def test_retrieved_chunk_from_another_document_is_not_relevant():
    rec = record(retrieved=[hit("x", 100, 160, doc="other"), hit("c1", 90, 200)])
    s = score_record(rec, ks=(1,))
    assert s["hit@1"] == 0.0 and s["mrr"] == 0.5


def test_no_relevant_chunk_gives_zero_not_none():
    rec = record(retrieved=[hit("c3", 290, 400)])
    s = score_record(rec, chunks=CHUNKS, ks=(1,))
    assert s["hit@1"] == 0.0 and s["mrr"] == 0.0
    assert s["id_context_precision"] == 0.0 and s["id_context_recall"] == 0.0


def test_not_found_on_answerable_question_scores_zero_and_is_counted_as_abstained():
    s = score_record(record(answer="The document does not say.", not_found=True))
    assert s["answer_f1"] == 0.0 and s["exact_match"] == 0.0 and s["abstained"] == 1.0


def test_unanswerable_question_is_separated():
    rec = record(reference_answer="", reference_spans=[], not_found=True)
    s = score_record(rec, chunks=CHUNKS)
    assert s["answerable"] is False
    assert s["not_found_correct"] == 1.0
    for m in (
        "span_hit",
        "span_char_recall",
        "hit@1",
        "mrr",
        "id_context_precision",
        "id_context_recall",
        "answer_f1",
        "exact_match",
        "abstained",
    ):
        assert s[m] is None, m
    s = score_record(dict(rec, not_found=False))
    assert s["not_found_correct"] == 0.0


def test_is_impossible_wins_over_inference():
    assert is_answerable({"reference_answer": "", "reference_spans": []}) is False
    assert is_answerable({"reference_answer": "", "reference_spans": [], "is_impossible": False}) is True
    assert is_answerable({"reference_answer": "x", "is_impossible": True}) is False


def test_missing_inputs_give_none_not_nan():
    rec = record()
    del rec["context_spans"]
    s = score_record(rec)  # no catalog either
    assert s["span_hit"] is None and s["span_char_recall"] is None
    assert s["id_context_recall"] is None and s["id_context_precision"] is not None
    assert not any(isinstance(v, float) and math.isnan(v) for v in s.values())


def test_reference_chunk_ids_from_record_win_over_catalog():
    rec = record(reference_chunk_ids=["c1", "c9"])
    assert reference_chunk_ids(rec, CHUNKS) == ["c1", "c9"]
    s = score_record(rec, chunks=CHUNKS)
    assert s["id_context_recall"] == 0.5


def test_catalog_as_rows_or_dataframe():
    import pandas as pd

    rows = [dict(c, doc_id="d") for c in CHUNKS["d"]]
    assert reference_chunk_ids(record(reference_spans=[[95, 195]]), rows) == ["c0", "c1", "c2"]
    out = score_answers([record()], chunks=pd.DataFrame(rows))
    assert out[0]["id_context_recall"] == 1.0


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"question_id": None}, "question_id"),
        ({"context_spans": [[0, 10]]}, "one \\[start, end\\] per context"),
        ({"reference_spans": [[5, 2]]}, "start <= end"),
        ({"reference_spans": [["a", 2]]}, "integers"),
        ({"retrieved": [{"text": "x"}]}, "chunk_id"),
        ({"contexts": "abc"}, "must be a list"),
    ],
)
def test_bad_records_are_rejected_with_the_record_named(change, match):
    with pytest.raises(RecordError, match=match):
        score_answers([record(**change)])


def test_duplicate_question_per_variant_is_rejected():
    with pytest.raises(RecordError, match="appears twice"):
        score_answers([record(), record()])
    assert len(score_answers([record(), record(variant="swb_rag")])) == 2


# ---------------------------------------------------------------- aggregation


def test_aggregate_separates_populations_and_counts_missing():
    recs = [
        record(question_id="q1"),
        record(question_id="q2", answer="wrong"),
        record(question_id="q3", reference_answer="", reference_spans=[], not_found=True),
        record(question_id="q4", reference_answer="", reference_spans=[], not_found=False),
    ]
    del recs[1]["context_spans"]
    del recs[1]["contexts"]
    rows = score_answers(recs, chunks=CHUNKS)
    agg = {r["metric"]: r for r in aggregate(rows, n_boot=200)}
    assert agg["span_hit"]["population"] == "answerable"
    assert agg["span_hit"]["n_population"] == 2 and agg["span_hit"]["n"] == 1 and agg["span_hit"]["n_missing"] == 1
    assert agg["exact_match"]["mean"] == 0.5 and agg["exact_match"]["n"] == 2
    nf = agg["not_found_correct"]
    assert nf["population"] == "unanswerable" and nf["n"] == 2 and nf["mean"] == 0.5
    assert agg["hit@1"]["population"] == "answerable"
    for r in agg.values():
        assert r["ci_low"] is None or r["ci_low"] <= r["mean"] <= r["ci_high"]


def test_aggregate_counts_nan_separately():
    rows = [
        {"variant": "a", "question_id": str(i), "answerable": True, "faithfulness": v}
        for i, v in enumerate([1.0, float("nan"), None, 0.0])
    ]
    (r,) = aggregate(rows, metrics=["faithfulness"], populations={"faithfulness": "answerable"}, ci=False)
    assert (r["n"], r["n_nan"], r["n_missing"], r["mean"]) == (2, 1, 1, 0.5)


def test_aggregate_groups_by_variant():
    rows = score_answers([record(), record(variant="swb_rag", answer="no")])
    agg = aggregate(rows, metrics=["exact_match"], ci=False)
    assert {(r["variant"], r["mean"]) for r in agg} == {("t_rag", 1.0), ("swb_rag", 0.0)}


def test_aggregate_efficiency_totals_and_missing_counts():
    recs = [record(), record(question_id="q2", cost_usd=None, calls=3, cache_hits=1)]
    (e,) = aggregate_efficiency(recs)
    assert e["n_questions"] == 2
    assert e["runtime_s"] == 3.0 and e["mean_latency_s"] == 1.5
    assert e["input_tokens"] == 2000 and e["output_tokens"] == 40
    assert e["cost_usd"] == pytest.approx(0.002) and e["n_missing_cost_usd"] == 1
    assert e["calls"] == 4 and e["n_missing_calls"] == 1  # one default call for the record without calls
    assert e["cache_hits"] == 1 and e["n_missing_cache_hits"] == 1
    assert e["context_chars"] == 440 and e["context_chars_per_question"] == 220
    assert e["n_missing_input_chars"] == 2
    # the same from score rows
    (e2,) = aggregate_efficiency(score_answers(recs))
    assert e2["context_chars"] == 440 and e2["runtime_s"] == 3.0


def test_scores_by_variant_drops_not_applicable_keeps_nan():
    rows = [
        {"variant": "a", "question_id": "q1", "m": 1.0, "n": None},
        {"variant": "a", "question_id": "q2", "m": float("nan")},
    ]
    nested = scores_by_variant(rows, ["m", "n"])
    assert nested["a"]["q1"] == {"m": 1.0}
    assert math.isnan(nested["a"]["q2"]["m"])


def test_bootstrap_mean_ci_is_seeded_and_contains_mean():
    x = [0.1, 0.5, 0.9, 0.3, 0.7, 0.2]
    a = bootstrap_mean_ci(x, n_boot=5000, seed=3)
    assert a == bootstrap_mean_ci(x, n_boot=5000, seed=3)
    assert a != bootstrap_mean_ci(x, n_boot=5000, seed=4)
    assert a[0] <= sum(x) / len(x) <= a[1]
    assert all(math.isnan(v) for v in bootstrap_mean_ci([], n_boot=10))
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_mean_ci([1.0, float("nan")])
