"""The report opens with a verdict written from its numbers; the evaluation measures ctxwin ask's retrieval."""

from __future__ import annotations

import pandas as pd
import pytest

from ctxwin_dagster.core.evaluation.comparison import compare_experiment
from ctxwin_dagster.core.evaluation.verdict import ExperimentSetup, verdict_markdown
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings
from ctxwin_dagster.defs.resources import EvaluationSettings


def _rows(n: int = 60) -> tuple[list[dict], list[dict]]:
    """Scores where SWB-RAG finds more spans than T-RAG (clearly), and CC-RAG is T-RAG's twin."""
    scores, answers = [], []
    for i in range(n):
        for v in ("t_rag", "cc_rag", "swb_rag"):
            hit = 1.0 if (v == "swb_rag" and i % 10 < 9) or (v != "swb_rag" and i % 2 == 0) else 0.0
            scores.append(
                {
                    "variant": v,
                    "question_id": f"q{i}",
                    "doc_id": "d",
                    "span_hit": hit,
                    "answer_f1": 0.5,
                    "is_impossible": False,
                }
            )
            answers.append(
                {
                    "variant": v,
                    "question_id": f"q{i}",
                    "doc_id": "d",
                    "contexts": ["x" * 100],
                    "latency_s": 0.1,
                    "calls": 1,
                    "cost_usd": 0.0,
                    "paid_usd": 0.0,
                    "input_tokens": 10,
                    "input_chars": 100,
                    "output_tokens": 5,
                    "cache_hits": 0,
                }
            )
    return scores, answers


def test_verdict_is_generated_from_the_numbers(tmp_path):
    scores, answers = _rows()
    indexing = {
        "t_rag": {},
        "cc_rag": {"calls": 100, "input_chars": 1_000_000, "cost_usd": 2.0, "paid_usd": 0.0},
        "swb_rag": {"calls": 20, "input_chars": 20_000, "cost_usd": 0.05, "paid_usd": 0.05},
    }
    setup = ExperimentSetup(
        contextualizer="extractive engine (no chat model configured)",
        contextualizer_engine="extractive",
        answerer="extractive engine",
        embedding_model="all-MiniLM-L6-v2",
        embedding_window="256 tokens",
        embed_strategy="context_budget",
        retrieval=RetrievalSettings.named("ask").describe(),
        window={"cc_rag": {"rows_over_window": 5, "rows_pooled": 0, "chunk_tokens_cut": 0, "context_tokens_cut": 40}},
        documents=1,
        questions=60,
    )
    out = compare_experiment(scores, answers, indexing, tmp_path, title="t", setup=setup, n_boot=200)
    verdict = out["verdict"]
    assert "SWB-RAG is better on span_hit (0.900 vs 0.500" in verdict
    assert "**CC-RAG vs T-RAG**: no significant difference" in verdict
    assert "no significant difference on the other 1 metric" in verdict  # answer_f1 is equal
    assert "SWB-RAG read 2.0 % of CC-RAG's input characters" in verdict
    assert "$2.0000 of work ($0.0000 paid in this run)" in verdict
    assert "It cost 2.5 % of CC-RAG's; the server reported no input tokens read from a prompt cache" in verdict
    assert "extractive engine" in verdict and "measure that stand-in" in verdict
    assert "sentence focus" in verdict and "40 context tokens cut" in verdict
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert md.index("## Verdict") < md.index("## Quality")  # the verdict comes first
    assert "](quality.png)" in md and "data:image" not in md
    assert "](data:image/png;base64," in out["markdown_inline"]
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<h2>Verdict</h2>" in html and "<strong>" in html


def test_verdict_prices_cc_rag_with_the_prompt_caching_the_server_did():
    efficiency = pd.DataFrame(
        [
            {"variant": "cc_rag", "index_calls": 49, "index_input_chars": 1_600_000, "index_input_tokens": 400_000}
            | {"index_cached_tokens": 380_000, "index_cost_usd": 0.0174, "index_uncached_cost_usd": 0.0574},
            {"variant": "swb_rag", "index_calls": 12, "index_input_chars": 500_000, "index_input_tokens": 110_000}
            | {"index_cached_tokens": 11_000, "index_cost_usd": 0.0056, "index_uncached_cost_usd": 0.0061},
        ]
    )
    text = verdict_markdown(None, efficiency, ExperimentSetup())
    assert (
        "95.0 % of its 400,000 input tokens read from the server's prompt cache ($0.0574 without prompt caching)"
        in text
    )
    assert "10.0 % of its 110,000 input tokens" in text
    assert (
        "It cost 10.6 % of CC-RAG's without prompt caching and 32.2 % with the caching the server did "
        "(CC-RAG $0.0174 instead of $0.0574)" in text
    )


def test_verdict_changes_with_the_numbers():
    tests = pd.DataFrame(
        [
            {
                "metric": "mrr",
                "variant_a": "t_rag",
                "variant_b": "cc_rag",
                "mean_a": 0.7,
                "mean_b": 0.6,
                "mean_diff": -0.1,
                "p_bonferroni": 0.01,
                "significant": True,
                "n_comparisons": 3,
            }
        ]
    )
    text = verdict_markdown(tests, None, ExperimentSetup(contextualizer_engine="llm"))
    assert "T-RAG is better on mrr (0.700 vs 0.600, +0.100, p=0.010)" in text
    assert "stand-in" not in text
    assert "SWB-RAG replies" not in text  # no batch was recorded
    tests.loc[0, "significant"] = False
    assert "no significant difference on any of the 1 metrics" in verdict_markdown(tests, None, ExperimentSetup())


def test_the_swb_replies_are_reported_and_fallbacks_said_to_leave_the_papers_method():
    replies = {
        "batches": 4,
        "n_contexts": 17,
        "fallbacks": 0,
        "replies_swb_schema_enforced": 4,
        "replies_swb_invalid": 0,
        "replies_swb_repaired": 0,
    }
    text = verdict_markdown(None, None, ExperimentSetup(contextualizer_engine="llm", swb_replies=replies))
    assert (
        "**SWB-RAG replies.** 4 batches; 4 first replies held to their JSON schema (structured output or "
        "constrained decoding), 0 unusable, 0 repaired; 0 of 17 chunks fell back to single-chunk calls." in text
    )
    assert "not contextualized in batches" not in text
    fell_back = {**replies, "replies_swb_schema_enforced": 0, "replies_swb_invalid": 4, "fallbacks": 17}
    text = verdict_markdown(None, None, ExperimentSetup(contextualizer_engine="llm", swb_replies=fell_back))
    assert "17 of 17 chunks fell back" in text and "not contextualized in batches" in text
    # The extractive engine makes no SWB replies to count.
    assert "SWB-RAG replies" not in verdict_markdown(
        None, None, ExperimentSetup(contextualizer_engine="extractive", swb_replies=replies)
    )


def test_a_p_value_just_under_the_threshold_is_not_printed_as_the_threshold():
    """The rule is p < 0.05: a significant 0.0497 must not read "p=0.050" in the verdict or the table."""
    from ctxwin_dagster.core.evaluation.report_tables import format_p_cell as _fmt_p

    row = {"metric": "mrr", "variant_a": "t_rag", "variant_b": "swb_rag", "mean_a": 0.773, "mean_b": 0.803}
    tests = pd.DataFrame([{**row, "mean_diff": 0.03, "p_bonferroni": 0.0497, "significant": True, "n_comparisons": 3}])
    text = verdict_markdown(tests, None, ExperimentSetup())
    assert "SWB-RAG is better on mrr (0.803 vs 0.773, +0.030, p=0.0497)" in text
    assert _fmt_p(0.0497) == "0.0497" and _fmt_p(0.0503) == "0.050" and _fmt_p(float("nan")) == "—"


def test_evaluation_measures_what_ctxwin_ask_gives():
    settings = EvaluationSettings().retrieval_settings()
    assert settings == RetrievalSettings.named("ask") and settings.enhance_mode == "focus"
    assert settings.hybrid and settings.question_parts and settings.score_drop == 0.23 and settings.effective_k == 24
    assert settings.opening_chars == 500 and EvaluationSettings(opening_chars=0).retrieval_settings().opening_chars == 0
    paper = EvaluationSettings(retrieval="paper").retrieval_settings()
    assert (paper.effective_k, paper.hybrid, paper.enhance_mode) == (4, False, "none")
    assert "paper's protocol" in paper.describe()
    custom = EvaluationSettings(focus_chars=6000, k=16, hybrid=False).retrieval_settings()
    assert (custom.effective_k, custom.hybrid, custom.focus_chars, custom.question_parts) == (16, False, 6000, True)
    assert "changed from 'ask'" in custom.describe()
    assert (
        EvaluationSettings(enhance_mode="budget", context_window_size=2000).retrieval_settings().context_window_size
        == 2000
    )
    # An option of another mode picks that mode, as `ctxwin ask --neighbors 2` does ...
    neighbors = EvaluationSettings(num_neighbors=2).retrieval_settings()
    assert (neighbors.enhance_mode, neighbors.num_neighbors, neighbors.effective_k, neighbors.hybrid) == (
        "neighbors",
        2,
        4,
        False,
    )
    # ... and clashes with a mode named otherwise.
    with pytest.raises(ValueError, match="num_neighbors is an option of enhance_mode='neighbors'"):
        EvaluationSettings(enhance_mode="focus", num_neighbors=2).retrieval_settings()


def test_every_retrieval_option_is_a_field_of_the_evaluation_and_reaches_its_settings():
    """The evaluation's fields come from the table ctxwin ask's flags come from: each one sets its
    settings field, and none is missing (route_to was once left out)."""
    from ctxwin_dagster.core.retrieval.options import RETRIEVAL_OPTIONS

    fields = EvaluationSettings.model_fields
    values = {int: 3, float: 0.4, bool: True}
    for option in RETRIEVAL_OPTIONS:
        assert fields[option.field].description == option.help
        mode = {"num_neighbors": "neighbors", "context_window_size": "budget"}.get(option.field, "focus")
        value = values[option.kind]
        settings = EvaluationSettings(
            retrieval="ask" if mode == "focus" else "paper", **{option.field: value}
        ).retrieval_settings()
        assert getattr(settings, option.field) == value and settings.enhance_mode == mode, option
    assert EvaluationSettings(route_to=0).retrieval_settings().route_to == 0
