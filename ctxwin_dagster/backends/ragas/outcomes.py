"""What became of each (record, metric) of a ragas evaluation, and its summary per variant.

:class:`Outcomes` keeps, for the non-LLM metrics and the judge's alike, whether a metric was
scored (``ok``), came back NaN (``nan``), raised (``failed``, its error also kept in
:attr:`~Outcomes.failures`) or does not apply (``skipped``, with the reason); it gives the
metrics' columns of the per-question rows and the summary of one metric over some records.

Example::

    >>> out = Outcomes()
    >>> out.scored(0, "m", 1.0)
    >>> out.skip(1, ("m",), "no contexts")
    >>> out.rows([{"variant": "v"}, {"variant": "v"}], ("m",))
    [{'variant': 'v', 'm': 1.0}, {'variant': 'v', 'm': None}]
    >>> s = out.summary("v", "m", "answerable", [0, 1], source="ragas", n_boot=10, seed=0)
    >>> s["n"], s["n_skipped"], s["skip_reasons"], s["mean"]
    (1, 1, {'no contexts': 1}, 1.0)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ctxwin_dagster.core.evaluation.metrics.aggregation import bootstrap_mean_ci

__all__ = ["Outcomes"]


class Outcomes:
    """The state, detail and value of each ``(record index, metric)``, and the failures."""

    def __init__(self) -> None:
        self.status: dict[tuple[int, str], tuple[str, str]] = {}  # (row, metric) -> (state, detail)
        self.values: dict[tuple[int, str], float | None] = {}
        #: ``{question_id, variant, metric, error}`` of every metric that raised.
        self.failures: list[dict[str, object]] = []

    def put(self, i: int, metric: str, state: str, value: float | None, detail: str = "") -> None:
        """Keep what became of ``metric`` for record ``i``."""
        self.status[(i, metric)] = (state, detail)
        self.values[(i, metric)] = value

    def scored(self, i: int, metric: str, value: float) -> None:
        """A score of ``metric`` for record ``i``: ``ok``, or ``nan`` when ragas gave NaN."""
        self.put(i, metric, "nan" if math.isnan(value) else "ok", value)

    def skip(self, i: int, metrics: Iterable[str], reason: str) -> None:
        """``metrics`` do not apply to record ``i``, for ``reason``."""
        for metric in metrics:
            self.put(i, metric, "skipped", None, reason)

    def fail(self, i: int, row: Mapping[str, object], metric: str, exc: Exception) -> None:
        """``metric`` raised ``exc`` for record ``i`` (``row``: its scored row): NaN, and a failure."""
        message = f"{type(exc).__name__}: {exc}"
        self.put(i, metric, "failed", math.nan, message)
        self.failures.append(
            {"question_id": row["question_id"], "variant": row["variant"], "metric": metric, "error": message[:500]}
        )

    def rows(self, base_rows: Sequence[Mapping[str, object]], metrics: Sequence[str]) -> list[dict[str, object]]:
        """``base_rows`` with a column for each of ``metrics``: its value (None when skipped)."""
        return [{**base, **{m: self.values.get((i, m)) for m in metrics}} for i, base in enumerate(base_rows)]

    def summary(
        self, variant: str, metric: str, population: str, members: Sequence[int], *, source: str, n_boot: int, seed: int
    ) -> dict[str, object]:
        """The summary of ``metric`` over the records ``members`` (the ``population`` of
        ``variant``): counts by state, the reasons for skipping, and the mean of the scores with
        its bootstrap CI."""
        states = [self.status.get((i, metric), ("skipped", "not evaluated")) for i in members]
        vals = [
            float(val)
            for i in members
            if self.status.get((i, metric), ("",))[0] == "ok" and (val := self.values[(i, metric)]) is not None
        ]
        reasons = Counter(d for st, d in states if st == "skipped")
        lo = hi = None
        if vals:
            lo, hi = bootstrap_mean_ci(vals, n_boot=n_boot, seed=seed)
        return {
            "variant": variant,
            "metric": metric,
            "population": population,
            "n_population": len(members),
            "n": len(vals),
            "n_missing": 0,
            "n_nan": sum(1 for st, _ in states if st == "nan"),
            "mean": float(np.mean(vals)) if vals else None,
            "ci_low": lo,
            "ci_high": hi,
            "source": source,
            "n_failed": sum(1 for st, _ in states if st == "failed"),
            "n_skipped": sum(reasons.values()),
            "skip_reasons": dict(reasons),
        }
