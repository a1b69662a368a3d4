"""The paired test of two variants' scores on one metric, as in the SWB-RAG paper: Shapiro–Wilk
on the differences picks the paired t-test (effect: Cohen's ``d_z``) or the Wilcoxon signed-rank
test (effect: the matched-pairs rank-biserial correlation), with a bootstrap CI of the mean
difference; and the Bonferroni correction of its p-value. :mod:`~ctxwin_dagster.core.evaluation.stats`
runs it for every metric and pair of variants.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import NotRequired, TypedDict

import numpy as np
from scipy import stats as sps

from ctxwin_dagster.core.evaluation.metrics.aggregation import bootstrap_mean_ci

__all__ = ["PairedTest", "bonferroni", "paired_test", "rank_biserial", "scipy_permutes", "signed_rank_permutation_p"]


class PairedTest(TypedDict):
    """What :func:`paired_test` gives: the columns of
    :data:`~ctxwin_dagster.core.evaluation.stats.COLUMNS` that do not depend on the other
    comparisons (``n_nonzero`` only for the Wilcoxon test)."""

    n_pairs: int
    n_dropped_nan: int
    mean_a: float
    mean_b: float
    mean_diff: float
    sd_diff: float
    shapiro_w: float
    shapiro_p: float
    normal: bool | None
    test: str
    statistic: float
    p_value: float
    effect_size: float
    effect_size_name: str | None
    ci_low: float
    ci_high: float
    ci_level: float
    n_boot: int
    seed: int
    reason: str
    n_nonzero: NotRequired[int]


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


# scipy's ``wilcoxon(method="auto")`` takes a permutation test over every sign assignment
# (2**n of them) when n <= 13 and there are ties or zero differences; it computes the statistic
# once per assignment in a Python loop: 3-4 s per test at n = 13, and a comparison runs dozens.
_PERMUTATION_MAX_N = 13


def scipy_permutes(d: np.ndarray) -> bool:
    """Whether ``scipy.stats.wilcoxon(method="auto")`` takes its permutation test for the
    differences ``d``: at most 13 of them, with a zero or a tie among the nonzero ones."""
    nonzero = np.abs(d[d != 0])
    return d.size <= _PERMUTATION_MAX_N and (nonzero.size < d.size or np.unique(nonzero).size < nonzero.size)


def signed_rank_permutation_p(d: np.ndarray) -> float:
    """The two-sided p-value of the Wilcoxon signed-rank test (zeros dropped, tied ranks
    averaged) by the permutation test over all ``2**n`` sign assignments: the p-value
    ``scipy.stats.wilcoxon`` gives for ``n <= 13`` with ties or zeros, computed by
    ``scipy.stats.permutation_test`` with a vectorized statistic (one array operation instead of
    one Python call per assignment).

    Example::

        >>> round(signed_rank_permutation_p(np.array([0.5, 0.5, 1.0, -0.2, 0.0, 0.5])), 4)
        0.125
    """
    x = np.asarray(d, dtype=float)
    ranks = np.zeros_like(x)
    nonzero = x != 0
    ranks[nonzero] = sps.rankdata(np.abs(x[nonzero]))

    def r_plus(sample: np.ndarray, axis: int) -> np.ndarray:
        return np.asarray(np.sum((sample > 0) * ranks, axis=axis))

    res = sps.permutation_test(
        (x,), r_plus, permutation_type="samples", vectorized=True, n_resamples=9999, alternative="two-sided", axis=-1
    )
    return float(res.pvalue)


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
) -> PairedTest:
    """Test paired samples ``a`` and ``b`` (aligned; NaN pairs dropped and counted).

    Returns a dict with the columns of :data:`~ctxwin_dagster.core.evaluation.stats.COLUMNS` that do not depend on the other
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
    out: PairedTest = {
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
        out["test"] = "paired_t"
        out["statistic"] = float(res.statistic)
        out["p_value"] = float(res.pvalue)
        out["effect_size"] = float(d.mean() / d.std(ddof=1))
        out["effect_size_name"] = "cohen_dz"
    else:
        n_nonzero = int(np.count_nonzero(d))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # small-n / zeros warnings from scipy
            # the statistic does not depend on the method; the p-value of the permutation case is ours
            permuted = scipy_permutes(d)
            res = sps.wilcoxon(xb, xa, zero_method="wilcox", method="asymptotic" if permuted else "auto")
        out["test"] = "wilcoxon"
        out["statistic"] = float(res.statistic)
        out["p_value"] = signed_rank_permutation_p(d) if permuted else float(res.pvalue)
        out["effect_size"] = rank_biserial(d)
        out["effect_size_name"] = "rank_biserial"
        out["n_nonzero"] = n_nonzero
        if n_nonzero < n:
            extra = f"{n - n_nonzero} zero difference(s) dropped by Wilcoxon"
            out["reason"] = f"{out['reason']}; {extra}" if out["reason"] else extra
    return out
