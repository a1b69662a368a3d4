"""Paired comparisons (ctxwin_dagster.core.evaluation.stats) against scipy's own results."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps

from ctxwin_dagster.core.evaluation.metrics.scoring import score_answers
from ctxwin_dagster.core.evaluation.paired import (
    bonferroni,
    paired_test,
    rank_biserial,
    scipy_permutes,
    signed_rank_permutation_p,
)
from ctxwin_dagster.core.evaluation.stats import COLUMNS, compare_variants

# Fixed samples: A/B with normal-looking differences, C with heavy-tailed differences.
A = np.array([0.61, 0.72, 0.55, 0.80, 0.67, 0.59, 0.74, 0.70, 0.63, 0.69, 0.58, 0.77])
B = A + np.array([0.05, 0.08, 0.02, 0.06, 0.04, 0.07, 0.03, 0.05, 0.06, 0.04, 0.05, 0.06])
C = A + np.array([0.0, 0.01, -0.01, 0.02, 0.0, 0.01, 0.6, 0.01, -0.02, 0.01, 0.9, 0.0])
QIDS = [f"q{i:02d}" for i in range(len(A))]


def nested(**variants: np.ndarray) -> dict:
    return {name: dict(zip(QIDS, map(float, values))) for name, values in variants.items()}


def test_normal_differences_use_paired_t_like_scipy():
    df = compare_variants(nested(a=A, b=B), metrics=["m"], n_boot=2000)
    assert list(df.columns) == list(COLUMNS)
    row = df.iloc[0]
    d = B - A
    sw = sps.shapiro(d)
    assert sw.pvalue > 0.05
    assert row["shapiro_w"] == pytest.approx(sw.statistic) and row["shapiro_p"] == pytest.approx(sw.pvalue)
    t = sps.ttest_rel(B, A)
    assert row["test"] == "paired_t" and bool(row["normal"])
    assert row["statistic"] == pytest.approx(t.statistic) and row["p_value"] == pytest.approx(t.pvalue)
    assert row["effect_size_name"] == "cohen_dz"
    assert row["effect_size"] == pytest.approx(d.mean() / d.std(ddof=1))
    assert row["mean_a"] == pytest.approx(A.mean()) and row["mean_b"] == pytest.approx(B.mean())
    assert row["mean_diff"] == pytest.approx(d.mean())
    assert row["n_pairs"] == 12 and row["n_dropped_nan"] == 0 and row["n_unpaired"] == 0


def test_small_samples_with_ties_get_scipys_permutation_p_value():
    """n <= 13 with ties or zeros: scipy's Wilcoxon runs a permutation test over every sign
    assignment, one Python call each; ours is the same test vectorized, and gives the same p-value."""
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(60):
        n = int(rng.integers(3, 11))
        a = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=n)
        b = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=n)
        d = b - a
        if np.all(d == 0) or np.ptp(d) == 0:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = sps.wilcoxon(b, a, zero_method="wilcox")
        if scipy_permutes(d):
            assert signed_rank_permutation_p(d) == pytest.approx(expected.pvalue, abs=1e-12)
        row = paired_test(a, b)
        if row["test"] == "wilcoxon":
            checked += scipy_permutes(d)
            assert row["p_value"] == pytest.approx(expected.pvalue, abs=1e-12)
            assert row["statistic"] == expected.statistic
    assert checked >= 5  # paired_test itself took the permutation case (others were normal: the t-test)
    # without ties or zeros, or above 13 pairs, scipy's own method is kept
    assert not scipy_permutes(np.array([0.1, -0.2, 0.3, 0.4]))
    assert not scipy_permutes(np.r_[np.zeros(3), np.arange(1.0, 12.0)])


def test_non_normal_differences_use_wilcoxon_like_scipy():
    df = compare_variants(nested(a=A, c=C), metrics=["m"], n_boot=2000)
    row = df.iloc[0]
    d = C - A
    assert sps.shapiro(d).pvalue <= 0.05
    w = sps.wilcoxon(C, A, zero_method="wilcox")
    assert row["test"] == "wilcoxon" and not bool(row["normal"])
    assert row["statistic"] == pytest.approx(w.statistic) and row["p_value"] == pytest.approx(w.pvalue)
    assert row["effect_size_name"] == "rank_biserial"
    # r = (R+ - R-) / (R+ + R-) over the non-zero differences
    nz = d[d != 0]
    ranks = sps.rankdata(np.abs(nz))
    expected = (ranks[nz > 0].sum() - ranks[nz < 0].sum()) / ranks.sum()
    assert row["effect_size"] == pytest.approx(expected)
    assert "zero difference" in row["reason"]  # three zeros were dropped by Wilcoxon


def test_rank_biserial_extremes():
    assert rank_biserial([1, 2, 3]) == 1.0
    assert rank_biserial([-1, -2]) == -1.0
    assert math.isnan(rank_biserial([0, 0]))


def test_bonferroni_arithmetic_over_all_tests_and_per_metric():
    rng = np.random.default_rng(11)  # n = 20: scipy's Wilcoxon uses its fast asymptotic p above 13 pairs
    qids = [f"q{i}" for i in range(20)]
    base = rng.uniform(0.3, 0.8, 20)
    near = base + rng.normal(0.02, 0.05, 20)
    heavy = base + rng.standard_cauchy(20) * 0.05
    scores = {
        "a": {q: {"m1": x, "m2": x} for q, x in zip(qids, base)},
        "b": {q: {"m1": x, "m2": y} for q, x, y in zip(qids, near, heavy)},
        "c": {q: {"m1": y, "m2": x + 0.01 * (i % 3)} for i, (q, x, y) in enumerate(zip(qids, base, heavy))},
    }
    df = compare_variants(scores, metrics=["m1", "m2"], n_boot=500)
    assert len(df) == 6  # 2 metrics x 3 pairs
    tested = df[df["test"] != "none"]
    assert set(tested["test"]) == {"paired_t", "wilcoxon"}
    m = len(tested)
    assert (df["n_comparisons"] == m).all()
    for _, r in df.iterrows():
        assert r["p_bonferroni"] == pytest.approx(min(1.0, r["p_value"] * m))
        assert bool(r["significant"]) == (r["p_bonferroni"] < 0.05)
    per_metric = compare_variants(scores, metrics=["m1", "m2"], n_boot=500, correction="metric")
    for _, r in per_metric.iterrows():
        k = int((tested["metric"] == r["metric"]).sum())
        assert r["n_comparisons"] == k
        assert r["p_bonferroni"] == pytest.approx(min(1.0, r["p_value"] * k))
    fixed = compare_variants(scores, metrics=["m1"], n_boot=200, n_comparisons=10)
    assert (fixed["n_comparisons"] == 10).all()
    assert bonferroni(0.3, 4) == 1.0 and bonferroni(0.01, 4) == pytest.approx(0.04)
    assert math.isnan(bonferroni(float("nan"), 2))


def test_bootstrap_ci_contains_mean_difference_and_is_seeded():
    s = nested(a=A, b=B)
    one = compare_variants(s, metrics=["m"], seed=7).iloc[0]
    two = compare_variants(s, metrics=["m"], seed=7).iloc[0]
    other = compare_variants(s, metrics=["m"], seed=8).iloc[0]
    assert one["n_boot"] == 10_000
    assert one["ci_low"] <= one["mean_diff"] <= one["ci_high"]
    assert (one["ci_low"], one["ci_high"]) == (two["ci_low"], two["ci_high"])
    assert (one["ci_low"], one["ci_high"]) != (other["ci_low"], other["ci_high"])
    assert one["ci_low"] > 0  # every difference is positive


def test_nan_pairs_are_dropped_and_counted():
    b = B.copy()
    b[[1, 4]] = np.nan
    s = nested(a=A, b=b)
    del s["a"]["q11"]  # a question only variant b has
    row = compare_variants(s, metrics=["m"], n_boot=500).iloc[0]
    assert row["n_questions"] == 12
    assert row["n_dropped_nan"] == 2
    assert row["n_unpaired"] == 1
    assert row["n_pairs"] == 9
    keep = [i for i in range(11) if i not in (1, 4)]
    assert row["mean_diff"] == pytest.approx((B[keep] - A[keep]).mean())


def test_degenerate_cases_are_explicit():
    r = paired_test([0.5, 0.6], [0.7, 0.9])
    assert r["test"] == "none" and "at least 3" in r["reason"] and math.isnan(r["p_value"])
    assert r["mean_diff"] == pytest.approx(0.25)
    r = paired_test(A, A)
    assert r["test"] == "none" and r["reason"] == "all differences are zero"
    r = paired_test([np.nan, 1.0], [1.0, np.nan])
    assert r["test"] == "none" and r["n_dropped_nan"] == 2 and "no question" in r["reason"]
    r = paired_test(A[:6], A[:6] + 0.1)  # constant non-zero difference
    assert r["test"] == "wilcoxon" and "constant" in r["reason"]
    assert r["p_value"] == pytest.approx(sps.wilcoxon(A[:6] + 0.1, A[:6]).pvalue)
    df = compare_variants({"a": {"q": 1.0}, "b": {"q": 0.0}}, metrics=["m"])
    assert df.iloc[0]["test"] == "none" and df.iloc[0]["n_comparisons"] == 1
    assert not bool(df.iloc[0]["significant"])


def test_accepts_score_rows_and_not_applicable_metrics_are_not_counted():
    recs = []
    for i, q in enumerate(QIDS):
        for variant, hit_rank in (("t_rag", 1 + i % 3), ("swb_rag", 1)):
            recs.append(
                {
                    "question_id": q,
                    "doc_id": "d",
                    "variant": variant,
                    "question": "?",
                    "answer": "x",
                    "reference_answer": "x",
                    "reference_spans": [[1000, 1010]],
                    "retrieved": [
                        {
                            "chunk_id": f"c{k}",
                            "doc_id": "d",
                            "start": 1000 * k - (0 if k != hit_rank else 1000 * k - 1000),
                            "end": 1000 * k + 5 if k == hit_rank else 1000 * k + 500,
                            "text": "",
                            "score": 1.0,
                        }
                        for k in (1, 2, 3)
                    ],
                }
            )
    recs.append(
        {
            "question_id": "u1",
            "doc_id": "d",
            "variant": "t_rag",
            "question": "?",
            "answer": "",
            "not_found": True,
            "reference_answer": "",
            "reference_spans": [],
        }
    )
    recs.append(
        {
            "question_id": "u1",
            "doc_id": "d",
            "variant": "swb_rag",
            "question": "?",
            "answer": "",
            "not_found": True,
            "reference_answer": "",
            "reference_spans": [],
        }
    )
    rows = score_answers(recs)
    df = compare_variants(rows, metrics=["mrr", "not_found_correct"], n_boot=500)
    mrr = df[df["metric"] == "mrr"].iloc[0]
    assert mrr["n_questions"] == 12 and mrr["n_dropped_nan"] == 0  # the unanswerable question is not applicable
    nf = df[df["metric"] == "not_found_correct"].iloc[0]
    assert nf["n_pairs"] == 1 and nf["test"] == "none"


def test_bad_arguments():
    with pytest.raises(ValueError, match="exactly one metric"):
        compare_variants(nested(a=A, b=B))
    with pytest.raises(ValueError, match="no scores"):
        compare_variants(nested(a=A, b=B), metrics=["m"], pairs=[("a", "zzz")])
    with pytest.raises(ValueError, match="correction"):
        compare_variants(nested(a=A, b=B), metrics=["m"], correction="holm")


def test_explicit_pair_order_sets_the_sign():
    df = compare_variants(nested(a=A, b=B), metrics=["m"], pairs=[("b", "a")], n_boot=200)
    assert df.iloc[0]["mean_diff"] == pytest.approx((A - B).mean())
    assert df.iloc[0]["variant_a"] == "b"
