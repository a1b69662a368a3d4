"""Aggregation of per-question scores: means with bootstrap CIs, efficiency totals, per-variant tables.

The rows come from :func:`~ctxwin_dagster.core.evaluation.metrics.scoring.score_answers` (or any rows of
the same shape). Each metric is averaged over its population (answerable or unanswerable
questions, or all); a metric that does not apply or whose input is missing (``None``) is
counted as ``n_missing`` and a NaN as ``n_nan``, so nothing is averaged away silently.

Plain Python (numpy only): no dagster, ragas or lancedb.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ctxwin_dagster.core.evaluation.metrics.records import RecordError, number_or_none
from ctxwin_dagster.core.evaluation.metrics.scoring import EFFICIENCY_FIELDS, METRIC_POPULATION
from ctxwin_dagster.core.evaluation.record_values import as_float, as_int, items

__all__ = [
    "aggregate",
    "aggregate_efficiency",
    "bootstrap_mean_ci",
    "metric_names",
    "scores_by_variant",
]


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray,
    *,
    n_boot: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
    block: int = 1_000,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean, vectorized in blocks of resamples, seeded.

    Returns ``(nan, nan)`` for an empty input.

    Example::

        >>> lo, hi = bootstrap_mean_ci([0.0, 1.0, 1.0, 0.0, 1.0], n_boot=2000, seed=1)
        >>> lo <= 0.6 <= hi
        True
    """
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1; got {n_boot}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}")
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"values must be one-dimensional; got shape {x.shape}")
    n = x.shape[0]
    if n == 0:
        return (math.nan, math.nan)
    if np.isnan(x).any():
        raise ValueError("values contain NaN; drop (and count) them before bootstrapping")
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot, dtype=float)
    step = max(1, min(block, (4_000_000 // max(n, 1)) or 1))
    for b in range(0, n_boot, step):
        m = min(step, n_boot - b)
        idx = rng.integers(0, n, size=(m, n))
        means[b : b + m] = x[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def metric_names(rows: Sequence[Mapping[str, object]]) -> list[str]:
    """The metric columns of score rows, in order of appearance: numeric or ``None`` values,
    leaving out identifiers, counts and :data:`~.scoring.EFFICIENCY_FIELDS`."""
    names: list[str] = []
    skip = {
        "question_id",
        "doc_id",
        "variant",
        "answerable",
        "not_found",
        "complexity",
        "n_retrieved",
        "n_contexts",
        "context_chars",
        "n_reference_chunks",
        *EFFICIENCY_FIELDS,
    }
    for row in rows:
        for key, value in row.items():
            if key in skip or key in names:
                continue
            if (
                value is None
                or isinstance(value, (int, float, np.floating, np.integer))
                and not isinstance(value, bool)
            ):
                names.append(key)
    return names


def _population(metric: str, populations: Mapping[str, str]) -> str:
    if metric in populations:
        return populations[metric]
    if metric.startswith("hit@"):
        return "answerable"
    return "all"


def aggregate(
    scores: Iterable[Mapping[str, object]],
    *,
    metrics: Sequence[str] | None = None,
    by: str | Sequence[str] = "variant",
    populations: Mapping[str, str] | None = None,
    ci: bool = True,
    n_boot: int = 2_000,
    seed: int = 0,
    ci_level: float = 0.95,
) -> list[dict[str, object]]:
    """Means of per-question metrics per group, one row per (group, metric).

    Each metric is averaged over its population (``"answerable"``, ``"unanswerable"`` or
    ``"all"``, from ``populations`` merged over :data:`METRIC_POPULATION`); within it a
    ``None`` is counted as ``n_missing`` and a NaN as ``n_nan`` and neither enters the mean.

    Returns rows ``{<by...>, metric, population, n_population, n, n_missing, n_nan, mean,
    ci_low, ci_high}`` (``mean``/``ci_*`` are None when ``n == 0``).

    Example::

        >>> rows = [{"variant": "a", "answerable": True, "span_hit": 1.0},
        ...         {"variant": "a", "answerable": True, "span_hit": None},
        ...         {"variant": "a", "answerable": False, "span_hit": None}]
        >>> r = aggregate(rows, metrics=["span_hit"], ci=False)[0]
        >>> r["n_population"], r["n"], r["n_missing"], r["mean"]
        (2, 1, 1, 1.0)
    """
    rows = [dict(r) for r in scores]
    keys = [by] if isinstance(by, str) else list(by)
    pops = {**METRIC_POPULATION, **(populations or {})}
    names = list(metrics) if metrics is not None else metric_names(rows)
    groups: dict[tuple[object, ...], list[dict[str, object]]] = defaultdict(list)
    for row in rows:
        missing = [k for k in keys if k not in row]
        if missing:
            raise RecordError(
                f"score row for question_id={row.get('question_id')!r} has no {missing}; cannot group by {keys}"
            )
        groups[tuple(row[k] for k in keys)].append(row)
    out: list[dict[str, object]] = []
    for group, members in groups.items():
        for metric in names:
            population = _population(metric, pops)
            if population == "answerable":
                pop = [r for r in members if r.get("answerable", True)]
            elif population == "unanswerable":
                pop = [r for r in members if not r.get("answerable", True)]
            else:
                pop = members
            values: list[float] = []
            n_missing, n_nan = 0, 0
            for r in pop:
                v = r.get(metric)
                if v is None:
                    n_missing += 1
                elif isinstance(v, (float, np.floating)) and math.isnan(v):
                    n_nan += 1
                else:
                    values.append(as_float(v))
            row_out: dict[str, object] = dict(zip(keys, group))
            row_out.update(
                metric=metric,
                population=population,
                n_population=len(pop),
                n=len(values),
                n_missing=n_missing,
                n_nan=n_nan,
                mean=None,
                ci_low=None,
                ci_high=None,
            )
            if values:
                row_out["mean"] = float(np.mean(values))
                if ci:
                    row_out["ci_low"], row_out["ci_high"] = bootstrap_mean_ci(
                        values, n_boot=n_boot, seed=seed, level=ci_level
                    )
            out.append(row_out)
    return out


def aggregate_efficiency(
    records_or_scores: Iterable[Mapping[str, object]],
    *,
    by: str = "variant",
) -> list[dict[str, object]]:
    """Totals per variant: questions, runtime, calls, tokens, characters, costs, cache hits.

    ``cost_usd`` sums the cost of the work (cache hits at the cost of the call they reuse),
    ``paid_usd`` what was paid in the run that made the records. Works on answer records or on
    :func:`score_answers` rows. ``context_chars`` is computed
    from ``contexts`` (or taken from a score row); the other fields come from the records, and a
    record that lacks one is counted in ``n_missing_<field>`` instead of being taken as 0.
    ``calls`` defaults to one call per record only where a record gives no ``calls``, which is
    also counted (``n_missing_calls``).

    Example::

        >>> aggregate_efficiency([{"variant": "a", "latency_s": 1.5, "contexts": ["abc"], "cost_usd": 0.1},
        ...                       {"variant": "a", "latency_s": 0.5, "contexts": ["de"]}])[0]["runtime_s"]
        2.0
    """
    groups: dict[object, list[Mapping[str, object]]] = defaultdict(list)
    for r in records_or_scores:
        groups[r.get(by)].append(r)
    out: list[dict[str, object]] = []
    for group, members in groups.items():
        row: dict[str, object] = {by: group, "n_questions": len(members)}
        sums: dict[str, float] = {}
        missing: dict[str, int] = {}
        for field_, label in (
            ("latency_s", "runtime_s"),
            ("calls", "calls"),
            ("input_tokens", "input_tokens"),
            ("input_chars", "input_chars"),
            ("output_tokens", "output_tokens"),
            ("cost_usd", "cost_usd"),
            ("paid_usd", "paid_usd"),
            ("cache_hits", "cache_hits"),
        ):
            total, n_missing = 0.0, 0
            for r in members:
                value = r.get(field_)
                if field_ == "cache_hits" and value is None and r.get("cached") is not None:
                    value = int(bool(r["cached"]))
                v = number_or_none(value)
                if v is None:
                    n_missing += 1
                    if field_ == "calls":
                        total += 1.0
                else:
                    total += v
            sums[label] = total
            missing[label] = n_missing
        ctx = 0
        for r in members:
            if "context_chars" in r and r["context_chars"] is not None:
                ctx += as_int(r["context_chars"])
            else:
                ctx += sum(len(str(c)) for c in items(r, "contexts"))
        row.update(sums)
        n_timed = len(members) - missing["runtime_s"]
        row["mean_latency_s"] = sums["runtime_s"] / n_timed if n_timed else None
        row["context_chars"] = ctx
        row["context_chars_per_question"] = ctx / len(members) if members else None
        for label, n in missing.items():
            row[f"n_missing_{label}"] = n
        out.append(row)
    return out


def scores_by_variant(
    rows: Iterable[Mapping[str, object]],
    metrics: Sequence[str] | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """Score rows as ``{variant: {question_id: {metric: value}}}`` for :func:`stats.compare_variants`.

    Not-applicable metrics (``None``) are left out; NaN values are kept (the comparison counts
    the pairs it drops because of them).

    Example::

        >>> scores_by_variant([{"variant": "a", "question_id": "q", "span_hit": 1.0, "mrr": None}], ["span_hit", "mrr"])
        {'a': {'q': {'span_hit': 1.0}}}
    """
    rows = list(rows)
    names = list(metrics) if metrics is not None else metric_names(rows)
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for row in rows:
        values = {m: as_float(row[m]) for m in names if row.get(m) is not None}
        out[str(row["variant"])].setdefault(str(row["question_id"]), {}).update(values)
    return dict(out)
