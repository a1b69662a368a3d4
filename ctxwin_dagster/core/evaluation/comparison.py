"""An experiment's comparison: quality, paired tests and efficiency of the variants, as a report.

Plain Python over plain data: score rows (``backends.ragas`` / ``metrics.score_answers`` output),
answer records, and per-variant indexing costs. :func:`compare_experiment` writes the report
files and returns the tables.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict

import pandas as pd

from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.core.evaluation.metrics.aggregation import aggregate, aggregate_efficiency, scores_by_variant
from ctxwin_dagster.core.evaluation.report import FrameLike, render_report
from ctxwin_dagster.core.evaluation.stats import compare_variants
from ctxwin_dagster.core.evaluation.verdict import ExperimentSetup, verdict_markdown

__all__ = ["DEFAULT_METRICS", "ExperimentComparison", "compare_experiment", "INDEXING_FIELDS"]

#: Metrics compared by default (those present in the rows are used).
DEFAULT_METRICS = (
    "span_hit",
    "span_char_recall",
    "hit@4",
    "mrr",
    "id_context_precision",
    "id_context_recall",
    "answer_f1",
    "not_found_correct",
    "non_llm_context_precision_with_reference",
    "non_llm_context_recall",
    "faithfulness",
    "answer_relevancy",
    "context_recall",
    "context_precision",
    "answer_correctness",
)

#: Scores from RAGAS that, like ctxwin's retrieval metrics, apply to answerable questions only.
RAGAS_ANSWERABLE = (
    "non_llm_context_precision_with_reference",
    "non_llm_context_recall",
    "id_based_context_precision",
    "id_based_context_recall",
    "faithfulness",
    "answer_relevancy",
    "context_recall",
    "context_precision",
    "answer_correctness",
)

#: Indexing-cost fields summed per variant (from the contextualization assets): ``cost_usd`` is
#: the cost of the work (cache hits at the cost of the call they reuse), ``paid_usd`` what the
#: latest materializations paid, ``cached_tokens`` the input tokens the server read from its
#: prompt cache and ``uncached_cost_usd`` the cost of the work on a server without one.
INDEXING_FIELDS = (
    "calls",
    "cache_hits",
    "input_tokens",
    "cached_tokens",
    "input_chars",
    "output_tokens",
    "cost_usd",
    "uncached_cost_usd",
    "paid_usd",
    "runtime_s",
)


class ExperimentComparison(TypedDict):
    """What :func:`compare_experiment` returns: the report's paths and Markdown (see
    :func:`~ctxwin_dagster.core.evaluation.report.render_report`), the verdict and the tables."""

    paths: dict[str, Path | None]
    markdown: str
    markdown_inline: str
    verdict: str
    quality: list[dict[str, object]]
    comparison: pd.DataFrame
    efficiency: pd.DataFrame


def _clean(v: object) -> object:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


def compare_experiment(
    score_rows: Sequence[Mapping[str, object]],
    answer_rows: Sequence[Mapping[str, object]],
    indexing: Mapping[str, Mapping[str, float]],
    out_dir: str | Path,
    *,
    title: str,
    variants: Sequence[str] = VARIANTS,
    metrics: Sequence[str] | None = None,
    table4: FrameLike = None,
    notes: Sequence[str] = (),
    setup: ExperimentSetup | None = None,
    n_boot: int = 10_000,
    seed: int = 0,
) -> ExperimentComparison:
    """Means per variant, paired tests for every pair of variants, and the efficiency table.

    ``indexing`` maps a variant to its contextualization totals (``INDEXING_FIELDS``); the
    efficiency table shows those (prefixed ``index_``) beside the answering totals (prefixed
    ``answer_``), each with two costs: ``*_cost_usd``, the cost of the work, and ``*_paid_usd``,
    what was paid in the run (a cache hit keeps the first, adds nothing to the second). Writes
    ``report.md``, ``report.html``, the plots and ``comparison.json`` to ``out_dir``; the
    report opens with a verdict written from the numbers and ``setup`` (which engines, models,
    embedding window and retrieval setting made them).
    """
    present = {str(v) for v in (r.get("variant") for r in score_rows) if v is not None}
    order = [v for v in variants if v in present]
    if len(order) < 2:
        raise ValueError(
            f"need scores of at least two variants to compare; found {sorted(present)}. "
            "Materialize the *_ragas_scores assets for the experiment first."
        )
    available = set().union(*(r.keys() for r in score_rows))
    chosen = [m for m in (metrics or DEFAULT_METRICS) if m in available]
    quality = aggregate(
        score_rows, metrics=chosen, populations={m: "answerable" for m in RAGAS_ANSWERABLE}, n_boot=2_000, seed=seed
    )
    by_variant = scores_by_variant(score_rows, chosen)
    pairs = [(a, b) for i, a in enumerate(order) for b in order[i + 1 :]]
    comparison = compare_variants(
        {v: by_variant.get(v, {}) for v in order}, chosen, pairs=pairs, n_boot=n_boot, seed=seed
    )
    answering = {row["variant"]: row for row in aggregate_efficiency(answer_rows)}
    eff_rows = []
    for v in order:
        row: dict[str, object] = {"variant": v}
        for f in INDEXING_FIELDS:
            row[f"index_{f}"] = float(indexing.get(v, {}).get(f, 0.0))
        a = answering.get(v, {})
        for f in (
            "n_questions",
            "runtime_s",
            "input_tokens",
            "input_chars",
            "output_tokens",
            "cost_usd",
            "paid_usd",
            "context_chars_per_question",
        ):
            row[f"answer_{f}" if f not in ("n_questions", "context_chars_per_question") else f] = a.get(f)
        eff_rows.append(row)
    efficiency = pd.DataFrame(eff_rows)
    out = Path(out_dir)
    verdict = verdict_markdown(comparison, efficiency, setup or ExperimentSetup())
    rendered = render_report(
        comparison, quality, efficiency, out, title=title, table4=table4, notes=notes, verdict=verdict
    )
    payload = {
        "title": title,
        "variants": order,
        "metrics": chosen,
        "quality": [{k: _clean(v) for k, v in r.items()} for r in quality],
        "comparison": json.loads(comparison.to_json(orient="records")),
        "efficiency": json.loads(efficiency.to_json(orient="records")),
        "n_questions": {v: len(by_variant.get(v, {})) for v in order},
        "setup": None
        if setup is None
        else {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in vars(setup).items()},
        "verdict": verdict,
    }
    (out / "comparison.json").write_text(json.dumps(payload, indent=2, ensure_ascii=False), encoding="utf-8")
    return {
        "paths": rendered["paths"],
        "markdown": rendered["markdown"],
        "markdown_inline": rendered["markdown_inline"],
        "verdict": verdict,
        "quality": quality,
        "comparison": comparison,
        "efficiency": efficiency,
    }
