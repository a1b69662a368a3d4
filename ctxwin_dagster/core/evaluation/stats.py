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
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from ctxwin_dagster.core.evaluation.metrics.aggregation import bootstrap_mean_ci, scores_by_variant

__all__ = ["COLUMNS", "bonferroni", "compare_variants", "format_p", "paired_test", "rank_biserial"]


def format_p(p: Any, alpha: float = 0.05, m: int = 1) -> str:
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
        value = float(p)
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


def rank_biserial(d: Sequence[float] | np.ndarray) -> float:
    """Matched-pairs rank-biserial correlation of differences (zeros dropped, ties averaged).

    ``(R+ - R-) / (R+ + R-)``: +1 when every difference is positive, -1 when all negative.

    Example::

        >>> rank_biserial([1.0, 2.0, -0.5, 0.0])
        0.6666666666666666
    """
    x = np.asarray(d, dtype=float)
    x = x[x != 0]
    if x.size == 0:
        return math.nan
    ranks = sps.rankdata(np.abs(x))
    r_plus = float(ranks[x > 0].sum())
    r_minus = float(ranks[x < 0].sum())
    return (r_plus - r_minus) / (r_plus + r_minus)


def bonferroni(p: float, m: int) -> float:
    """``min(1, p * m)``; NaN stays NaN.

    Example::

        >>> bonferroni(0.02, 3), bonferroni(0.5, 3)
        (0.06, 1.0)
    """
    if m < 1:
        raise ValueError(f"the number of comparisons must be >= 1; got {m}")
    if p is None or math.isnan(p):
        return math.nan
    return min(1.0, float(p) * m)


def paired_test(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    normality_alpha: float = 0.05,
    n_boot: int = 10_000,
    seed: int = 0,
    ci_level: float = 0.95,
) -> dict[str, Any]:
    """Test paired samples ``a`` and ``b`` (aligned; NaN pairs dropped and counted).

    Returns a dict with the columns of :data:`COLUMNS` that do not depend on the other
    comparisons (``n_pairs``, ``n_dropped_nan``, means, ``test``, ``p_value``, effect size,
    bootstrap CI of ``mean(b - a)``, ``reason``).

    Example::

        >>> r = paired_test([1, 2, 3], [1, 2, 3])
        >>> r["test"], r["reason"]
        ('none', 'all differences are zero')
    """
    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    if xa.shape != xb.shape or xa.ndim != 1:
        raise ValueError(f"a and b must be one-dimensional and of the same length; got {xa.shape} and {xb.shape}")
    keep = ~(np.isnan(xa) | np.isnan(xb))
    xa, xb = xa[keep], xb[keep]
    n = int(xa.size)
    out: dict[str, Any] = {
        "n_pairs": n,
        "n_dropped_nan": int((~keep).sum()),
        "mean_a": float(xa.mean()) if n else math.nan,
        "mean_b": float(xb.mean()) if n else math.nan,
        "mean_diff": math.nan,
        "sd_diff": math.nan,
        "shapiro_w": math.nan,
        "shapiro_p": math.nan,
        "normal": None,
        "test": "none",
        "statistic": math.nan,
        "p_value": math.nan,
        "effect_size": math.nan,
        "effect_size_name": None,
        "ci_low": math.nan,
        "ci_high": math.nan,
        "ci_level": ci_level,
        "n_boot": n_boot,
        "seed": seed,
        "reason": "",
    }
    if n == 0:
        out["reason"] = "no question has a score in both variants"
        return out
    d = xb - xa
    out["mean_diff"] = float(d.mean())
    out["sd_diff"] = float(d.std(ddof=1)) if n > 1 else math.nan
    out["ci_low"], out["ci_high"] = bootstrap_mean_ci(d, n_boot=n_boot, seed=seed, level=ci_level)
    if n < 3:
        out["reason"] = f"only {n} pair(s): Shapiro–Wilk and the paired tests need at least 3"
        return out
    if np.all(d == 0):
        out["reason"] = "all differences are zero"
        return out
    use_t = False
    if np.ptp(d) == 0:
        out["reason"] = "differences are constant: Shapiro–Wilk is undefined, Wilcoxon used"
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # large-n accuracy warning; the p-value is still reported
            sw = sps.shapiro(d)
        out["shapiro_w"], out["shapiro_p"] = float(sw.statistic), float(sw.pvalue)
        use_t = bool(sw.pvalue > normality_alpha)
        out["normal"] = use_t
    if use_t:
        res = sps.ttest_rel(xb, xa)
        out.update(
            test="paired_t",
            statistic=float(res.statistic),
            p_value=float(res.pvalue),
            effect_size=float(d.mean() / d.std(ddof=1)),
            effect_size_name="cohen_dz",
        )
    else:
        n_nonzero = int(np.count_nonzero(d))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # small-n / zeros warnings from scipy
            res = sps.wilcoxon(xb, xa, zero_method="wilcox")
        out.update(
            test="wilcoxon",
            statistic=float(res.statistic),
            p_value=float(res.pvalue),
            effect_size=rank_biserial(d),
            effect_size_name="rank_biserial",
        )
        out["n_nonzero"] = n_nonzero
        if n_nonzero < n:
            extra = f"{n - n_nonzero} zero difference(s) dropped by Wilcoxon"
            out["reason"] = f"{out['reason']}; {extra}" if out["reason"] else extra
    return out


def _as_nested(scores: Any, metrics: Sequence[str] | None) -> tuple[dict[str, dict[str, dict[str, float]]], list[str]]:
    """``{variant: {qid: {metric: value}}}`` and the metric list, from the accepted shapes."""
    if isinstance(scores, pd.DataFrame):
        scores = scores.to_dict("records")
    if not isinstance(scores, Mapping):  # score rows
        rows = list(scores)
        nested = scores_by_variant(rows, metrics)
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


def _value(values: Mapping[str, Any] | None, metric: str) -> float:
    if values is None:
        return math.nan
    v = values.get(metric)
    if v is None:
        return math.nan
    return float(v)


def compare_variants(
    scores: Mapping[str, Mapping[str, Any]] | Iterable[Mapping[str, Any]] | pd.DataFrame,
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
    rows: list[dict[str, Any]] = []
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
            res.update(metric=metric, variant_a=a, variant_b=b, n_questions=len(union), n_unpaired=unpaired)
            rows.append(res)
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
