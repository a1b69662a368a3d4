"""Paired comparison of variants over per-question scores, as in the SWB-RAG paper.

For each metric and each pair of variants ``(a, b)``: the questions scored by both are paired,
pairs with a NaN are dropped and counted, and on the differences ``d = b - a``:

1. Shapiro–Wilk; if its p > ``normality_alpha`` (0.05) a paired t-test
   (``scipy.stats.ttest_rel``) with Cohen's ``d_z = mean(d) / sd(d)``; otherwise the Wilcoxon
   signed-rank test (``scipy.stats.wilcoxon``, zero differences dropped) with the
   matched-pairs rank-biserial correlation ``r = (R+ - R-) / (R+ + R-)``;
2. a Bonferroni-corrected p: ``min(1, p * m)``, ``m`` = the number of tests performed
   (over all rows, or per metric with ``correction="metric"``);
3. a seeded percentile bootstrap 95 % CI of the mean difference (10,000 resamples).

The test of one pair is :func:`~ctxwin_dagster.core.evaluation.paired.paired_test`.
Degenerate cases get ``test="none"`` and a ``reason``: no complete pair, fewer than 3 pairs,
all differences zero. Constant non-zero differences skip Shapiro–Wilk (undefined) and use
Wilcoxon, saying so in ``reason``.

Example::

    >>> scores = {"t_rag": {"q1": 0.2, "q2": 0.5, "q3": 0.4, "q4": 0.1},
    ...           "swb_rag": {"q1": 0.6, "q2": 0.7, "q3": 0.9, "q4": 0.2}}
    >>> df = compare_variants(scores, metrics=["context_recall"], n_boot=1000)
    >>> row = df.iloc[0]
    >>> row["variant_a"], row["variant_b"], int(row["n_pairs"]), round(float(row["mean_diff"]), 3)
    ('t_rag', 'swb_rag', 4, 0.3)
    >>> str(row["test"]), bool(row["ci_low"] <= row["mean_diff"] <= row["ci_high"])
    ('paired_t', True)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias

import numpy as np
import pandas as pd

from ctxwin_dagster.core.evaluation.metrics.aggregation import scores_by_variant
from ctxwin_dagster.core.evaluation.paired import PairedTest, bonferroni, paired_test
from ctxwin_dagster.core.evaluation.record_values import as_float

__all__ = [
    "COLUMNS",
    "ComparisonRow",
    "Scores",
    "compare_variants",
    "format_p",
]

#: Scores as :func:`compare_variants` takes them (see there).
Scores: TypeAlias = "Mapping[str, Mapping[str, object]] | Iterable[Mapping[str, object]] | pd.DataFrame"
#: ``{variant: {question_id: {metric: value}}}``.
_Nested: TypeAlias = dict[str, dict[str, Mapping[str, object]]]


def format_p(p: object, alpha: float = 0.05, m: int = 1) -> str:
    """A p-value as reports print it: three decimals, ``<0.001`` below that, and more digits
    where three would put it on the other side of ``alpha`` or of the Bonferroni threshold
    ``alpha / m`` (0.0497 is not printed as 0.050, and with m = 27 tests 0.00157 is printed
    0.0016, not 0.002 as 0.00203 is, since only the first is below 0.05 / 27). ``—`` for a
    missing value.

    >>> format_p(0.0102), format_p(0.0497), format_p(0.0503), format_p(0.0004), format_p(None)
    ('0.010', '0.0497', '0.050', '<0.001', '—')
    >>> format_p(0.00157, m=27), format_p(0.00203, m=27), format_p(0.0009, m=100)
    ('0.0016', '0.002', '0.001')
    """
    try:
        value = as_float(p)
    except (TypeError, ValueError):
        return "—"
    if math.isnan(value):
        return "—"
    thresholds = (alpha, alpha / max(1, m))
    if value < 0.001 and min(thresholds) >= 0.001:
        return "<0.001"
    digits = 3

    def shown(d: int) -> float:
        return float(f"{value:.{d}f}")

    while digits < 12 and any((shown(digits) < t) != (value < t) for t in thresholds):
        digits += 1
    return f"{value:.{digits}f}"


#: The columns of :func:`compare_variants`'s DataFrame, in order.
COLUMNS: tuple[str, ...] = (
    "metric",
    "variant_a",
    "variant_b",
    "n_questions",
    "n_pairs",
    "n_dropped_nan",
    "n_unpaired",
    "mean_a",
    "mean_b",
    "mean_diff",
    "sd_diff",
    "shapiro_w",
    "shapiro_p",
    "normal",
    "test",
    "statistic",
    "p_value",
    "n_comparisons",
    "p_bonferroni",
    "significant",
    "effect_size",
    "effect_size_name",
    "n_nonzero",  # Wilcoxon: the differences that are not zero (its effect r_rb is over them alone)
    "ci_low",
    "ci_high",
    "ci_level",
    "n_boot",
    "seed",
    "reason",
)


class ComparisonRow(PairedTest):
    """A row of :func:`compare_variants`: the paired test of one metric and pair of variants."""

    metric: str
    variant_a: str
    variant_b: str
    n_questions: int
    n_unpaired: int
    n_comparisons: int
    p_bonferroni: float
    significant: bool


def _as_nested(scores: Scores, metrics: Sequence[str] | None) -> tuple[_Nested, list[str]]:
    """``{variant: {qid: {metric: value}}}`` and the metric list, from the accepted shapes."""
    if isinstance(scores, pd.DataFrame):
        scores = scores.to_dict("records")
    nested: _Nested
    if not isinstance(scores, Mapping):  # score rows
        rows = list(scores)
        nested = {v: dict(per_q) for v, per_q in scores_by_variant(rows, metrics).items()}
    else:
        nested = {}
        for variant, per_q in scores.items():
            nested[str(variant)] = {}
            for qid, value in per_q.items():
                if isinstance(value, Mapping):
                    nested[str(variant)][str(qid)] = {str(k): v for k, v in value.items()}
                else:
                    if metrics is None or len(metrics) != 1:
                        raise ValueError(
                            "scores map question ids to single numbers; pass exactly one metric name, "
                            "e.g. metrics=['context_recall']"
                        )
                    nested[str(variant)][str(qid)] = {metrics[0]: value}
    if metrics is None:
        names: list[str] = []
        for per_q in nested.values():
            for values in per_q.values():
                names.extend(k for k in values if k not in names)
        metrics = names
    return nested, list(metrics)


def _value(values: Mapping[str, object] | None, metric: str) -> float:
    if values is None:
        return math.nan
    v = values.get(metric)
    if v is None:
        return math.nan
    return as_float(v)


def compare_variants(
    scores: Scores,
    metrics: Sequence[str] | None = None,
    *,
    pairs: Sequence[tuple[str, str]] | None = None,
    alpha: float = 0.05,
    normality_alpha: float = 0.05,
    correction: str = "all",
    n_comparisons: int | None = None,
    n_boot: int = 10_000,
    seed: int = 0,
    ci_level: float = 0.95,
) -> pd.DataFrame:
    """One row per (metric, pair of variants) with the paired test (see the module docstring).

    Args:
        scores: ``{variant: {question_id: {metric: value}}}``, or ``{variant: {question_id:
            value}}`` with one metric name, or score rows (``metrics.score_answers`` output,
            a list of dicts or a DataFrame with ``variant`` and ``question_id``).
        metrics: the metrics to compare (default: every metric found).
        pairs: ``[(a, b), ...]`` (default: every pair of variants, in the order given);
            differences are ``b - a``.
        alpha: significance level of the corrected p (column ``significant``).
        normality_alpha: Shapiro–Wilk level above which the differences count as normal.
        correction: ``"all"`` (Bonferroni over every test performed) or ``"metric"`` (over the
            tests of the same metric).
        n_comparisons: override ``m`` of the Bonferroni correction.
        n_boot, seed, ci_level: the bootstrap CI of the mean difference.

    A question scored in only one variant of a pair is counted in ``n_unpaired``; a pair with a
    NaN (or a metric missing on one side) in ``n_dropped_nan``.
    """
    if correction not in ("all", "metric"):
        raise ValueError(f"correction must be 'all' or 'metric'; got {correction!r}")
    if n_comparisons is not None and n_comparisons < 1:
        raise ValueError(f"n_comparisons must be >= 1; got {n_comparisons}")
    nested, names = _as_nested(scores, metrics)
    variants = list(nested)
    if pairs is None:
        pairs = list(itertools.combinations(variants, 2))
    for a, b in pairs:
        for v in (a, b):
            if v not in nested:
                raise ValueError(f"variant {v!r} has no scores; known variants: {variants}")
        if a == b:
            raise ValueError(f"a pair compares two different variants; got ({a!r}, {b!r})")
    rows: list[ComparisonRow] = []
    for metric in names:
        for a, b in pairs:
            sa, sb = nested[a], nested[b]
            # A question counts for this metric when at least one side has the metric.
            qa = {q for q, v in sa.items() if metric in v}
            qb = {q for q, v in sb.items() if metric in v}
            union = qa | qb
            both = sorted(q for q in union if q in sa and q in sb)
            unpaired = len([q for q in union if not (q in sa and q in sb)])
            xa = np.array([_value(sa.get(q), metric) for q in both], dtype=float)
            xb = np.array([_value(sb.get(q), metric) for q in both], dtype=float)
            res = paired_test(xa, xb, normality_alpha=normality_alpha, n_boot=n_boot, seed=seed, ci_level=ci_level)
            rows.append(
                {
                    **res,
                    "metric": metric,
                    "variant_a": a,
                    "variant_b": b,
                    "n_questions": len(union),
                    "n_unpaired": unpaired,
                    # set below, once every test is known
                    "n_comparisons": 1,
                    "p_bonferroni": math.nan,
                    "significant": False,
                }
            )
    tested = [r for r in rows if r["test"] != "none"]
    for r in rows:
        if n_comparisons is not None:
            m = n_comparisons
        elif correction == "all":
            m = max(1, len(tested))
        else:
            m = max(1, sum(1 for t in tested if t["metric"] == r["metric"]))
        r["n_comparisons"] = m
        r["p_bonferroni"] = bonferroni(r["p_value"], m)
        r["significant"] = bool(r["p_bonferroni"] < alpha) if not math.isnan(r["p_bonferroni"]) else False
    return pd.DataFrame(rows, columns=list(COLUMNS))
