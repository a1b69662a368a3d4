"""Evaluating answer records: ctxwin's metrics, ragas's non-LLM metrics, and a judge's when given.

Always (no model, no network):

* ctxwin's own metrics (:mod:`ctxwin_dagster.core.evaluation.metrics`: span hit, span-character recall,
  hit@k, MRR, ID-based context precision/recall, answer F1/EM, not-found correctness);
* RAGAS's non-LLM retrieval metrics, computed by ragas itself on ``SingleTurnSample`` s:
  ``non_llm_context_precision_with_reference`` and ``non_llm_context_recall`` (retrieved
  chunk texts against the texts of the reference chunks, by string similarity:
  :func:`~.compat.string_measure`; the result says which in ``string_distance``), and
  ``id_based_context_precision`` / ``id_based_context_recall`` (retrieved chunk ids against the
  ids of the chunks overlapping a reference span).

With a :class:`~.judge.JudgeConfig`, also the paper's five judge metrics (:mod:`.judge`).

Nothing is averaged away: per metric and variant the summary counts ``n`` (scored), ``n_nan``
(ragas returned NaN), ``n_failed`` (the judge call raised; the error is kept in ``failures``)
and ``n_skipped`` (the metric does not apply or an input is missing, with the reasons). In the
per-question rows a NaN or a failure is NaN, a skipped metric is None.

Example (no judge)::

    >>> recs = [{"question_id": "q1", "doc_id": "d", "variant": "t_rag", "question": "Where?",
    ...          "answer": "France", "reference_answer": "France", "reference_spans": [[3, 9]],
    ...          "retrieved": [{"chunk_id": "c0", "doc_id": "d", "start": 0, "end": 12,
    ...                         "text": "In France it", "score": 1.0}],
    ...          "contexts": ["In France it"], "context_spans": [[0, 12]]}]
    >>> chunks = {"d": [{"chunk_id": "c0", "start": 0, "end": 12, "text": "In France it"},
    ...                 {"chunk_id": "c1", "start": 12, "end": 30, "text": "rains in Spain..."}]}
    >>> result = evaluate_records(recs, chunks=chunks)
    >>> result.rows[0]["id_based_context_recall"], result.rows[0]["span_hit"]
    (1.0, 1.0)
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
import types
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    import pandas as pd

    from ctxwin_dagster.backends.base import Embedder

from ctxwin_dagster.backends.ragas.compat import import_ragas, string_distance_name, string_measure
from ctxwin_dagster.backends.ragas.judge import PAPER_METRICS, JudgeConfig, JudgeUsage, run_judge
from ctxwin_dagster.backends.ragas.outcomes import Outcomes
from ctxwin_dagster.core.evaluation.metrics.aggregation import aggregate, metric_names
from ctxwin_dagster.core.evaluation.metrics.scoring import (
    DEFAULT_KS,
    Catalog,
    ChunkSource,
    chunk_catalog,
    reference_chunk_ids,
    reference_spans,
    score_answers,
)
from ctxwin_dagster.core.evaluation.record_values import as_int, mappings

__all__ = ["NON_LLM_METRICS", "RagasEvaluation", "aevaluate_records", "evaluate_records"]

#: RAGAS metrics computed without a model.
NON_LLM_METRICS: tuple[str, ...] = (
    "non_llm_context_precision_with_reference",
    "non_llm_context_recall",
    "id_based_context_precision",
    "id_based_context_recall",
)
_TEXT_METRICS = NON_LLM_METRICS[:2]
_ID_METRICS = NON_LLM_METRICS[2:]
_NO_CHUNK_TEXTS = "no chunk catalog with chunk texts (pass chunks= with 'text')"

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class RagasEvaluation:
    """What :func:`evaluate_records` found.

    Attributes:
        rows: one dict per record: ctxwin's metrics (``core.metrics.scoring.score_record``) plus the
            ragas metrics (float; NaN when ragas gave NaN or the judge failed; None when skipped).
        summary: one dict per (variant, metric): ``source`` (``ctxwin``/``ragas``/``ragas-judge``),
            ``population``, ``n_population``, ``n``, ``n_nan``, ``n_failed``, ``n_skipped``,
            ``n_missing``, ``skip_reasons``, ``mean``, ``ci_low``, ``ci_high``.
        failures: ``{question_id, variant, metric, error}`` for every judge failure.
        metric_names: the metric columns of ``rows``.
        string_distance: ``"levenshtein"`` or ``"difflib"`` (for the non-LLM metrics).
        judge: the judge model (None without one); ``judge_usage``: requests and tokens.
    """

    rows: list[dict[str, object]]
    summary: list[dict[str, Any]]  # read as numbers by its consumers
    failures: list[dict[str, object]]
    metric_names: list[str]
    string_distance: str
    judge: str | None = None
    judge_usage: dict[str, int] = field(default_factory=dict)
    ragas_version: str = ""

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.rows)

    def summary_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.summary)

    def counts(self, metric: str, variant: str | None = None) -> dict[str, int]:
        """``n``, ``n_nan``, ``n_failed``, ``n_skipped`` of one metric (summed over variants)."""
        out: Counter[str] = Counter()
        for s in self.summary:
            if s["metric"] == metric and (variant is None or s["variant"] == variant):
                for k in ("n_population", "n", "n_nan", "n_failed", "n_skipped", "n_missing"):
                    out[k] += as_int(s.get(k) or 0)
        if not out:
            raise KeyError(f"no metric {metric!r} in this evaluation; known: {self.metric_names}")
        return dict(out)


async def aevaluate_records(
    records: Iterable[Mapping[str, object]],
    *,
    chunks: ChunkSource = None,
    judge: JudgeConfig | None = None,
    embedder: Embedder | None = None,
    string_distance: str = "auto",
    threshold: float = 0.5,
    ks: Sequence[int] = DEFAULT_KS,
    include_unanswerable: bool = False,
    n_boot: int = 2_000,
    seed: int = 0,
) -> RagasEvaluation:
    """Evaluate answer records with ragas (and ctxwin's metrics); see the module docstring.

    Args:
        records: answer records (see :mod:`ctxwin_dagster.core.evaluation.metrics.scoring`).
        chunks: a chunk catalog (``{doc_id: [{"chunk_id", "start", "end", "text"}]}`` or chunk
            rows with ``doc_id``): needed for ID-based recall and the non-LLM text metrics.
        judge: a :class:`JudgeConfig` for the paper's metrics (None: non-LLM metrics only).
        embedder: a ctxwin embedder for answer relevancy / correctness.
        string_distance: ``"auto"``, ``"levenshtein"`` (rapidfuzz) or ``"difflib"``.
        threshold: similarity above which a retrieved text matches a reference text.
        ks: ``hit@k`` cut-offs.
        include_unanswerable: run the judge metrics on unanswerable questions too.
        n_boot, seed: the bootstrap CIs of the summary.

    A coroutine, for a running event loop; :func:`evaluate_records` is the same call from plain
    code.
    """
    records = [dict(r) for r in records]
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be in [0, 1]; got {threshold}")
    catalog = chunk_catalog(chunks) if chunks is not None else None
    base_rows = score_answers(records, chunks=catalog, ks=ks)
    outcomes = Outcomes()
    usage = JudgeUsage()
    judge_metrics: tuple[str, ...] = () if judge is None else judge.metrics
    # ragas takes 3-10 s of CPU to import: a document without questions (a corpus indexed for
    # asking, not for evaluation) gets its empty rows without it.
    if not records:
        version, distance_name = _installed_ragas_version(), string_distance_name(string_distance)
    else:
        r = import_ragas()
        version = r.version
        measure, distance_name = string_measure(string_distance)
        non_llm = _non_llm_metrics(r, measure, threshold)
        for i, (rec, row) in enumerate(zip(records, base_rows)):
            await _score_samples(i, row, _non_llm_samples(r, i, rec, row, catalog, outcomes), non_llm, outcomes)
        if judge is not None:
            await run_judge(judge, embedder, records, base_rows, include_unanswerable, outcomes, usage)
    ragas_metrics = (*NON_LLM_METRICS, *judge_metrics)
    names = [*metric_names(base_rows), *ragas_metrics]
    populations = {m: "answerable" for m in NON_LLM_METRICS}
    populations.update({m: ("all" if include_unanswerable else "answerable") for m in judge_metrics})
    return RagasEvaluation(
        rows=outcomes.rows(base_rows, ragas_metrics),
        summary=_summary(base_rows, outcomes, names, ragas_metrics, populations, n_boot=n_boot, seed=seed),
        failures=outcomes.failures,
        metric_names=names,
        string_distance=distance_name,
        judge=None if judge is None else judge.model,
        judge_usage=usage.to_dict() if judge is not None else {},
        ragas_version=version,
    )


def _installed_ragas_version() -> str:
    """The installed ragas's version, read from its package metadata (no import of ragas)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ragas")
    except PackageNotFoundError:
        return ""


def _non_llm_metrics(r: types.SimpleNamespace, measure: Any, threshold: float) -> dict[str, Any]:
    """ragas's metric of each of :data:`NON_LLM_METRICS` (texts compared by ``measure``)."""
    return {
        "non_llm_context_precision_with_reference": r.NonLLMContextPrecisionWithReference(
            distance_measure=measure, threshold=threshold
        ),
        "non_llm_context_recall": r.NonLLMContextRecall(_distance_measure=measure, threshold=threshold),
        "id_based_context_precision": r.IDBasedContextPrecision(),
        "id_based_context_recall": r.IDBasedContextRecall(),
    }


def _non_llm_samples(
    r: types.SimpleNamespace,
    i: int,
    rec: Mapping[str, object],
    row: Mapping[str, object],
    catalog: Catalog | None,
    outcomes: Outcomes,
) -> dict[str, Any]:
    """ragas's sample of each non-LLM metric that applies to record ``i`` (``row``: its scored
    row); a metric that does not is put in ``outcomes`` as skipped (or NaN) with the reason."""
    if not row["answerable"]:
        outcomes.skip(i, NON_LLM_METRICS, "unanswerable question")
        return {}
    retrieved = mappings(rec.get("retrieved"))
    if not retrieved:
        outcomes.skip(i, NON_LLM_METRICS, "no retrieved chunks")
        return {}
    spans = reference_spans(rec, f"record {i}")
    ret_ids = [str(h["chunk_id"]) for h in retrieved]
    ret_texts = [str(h.get("text") or "") for h in retrieved]
    ref_ids = reference_chunk_ids(rec, catalog)
    if ref_ids is None:
        # Precision only asks which retrieved chunks are relevant: the relevant retrieved ids suffice.
        relevant = [
            str(h["chunk_id"])
            for h in retrieved
            if any(as_int(h["start"]) < e and s < as_int(h["end"]) for s, e in spans)
        ]
        sample = r.SingleTurnSample(retrieved_context_ids=ret_ids, reference_context_ids=relevant)
        outcomes.skip(i, ("id_based_context_recall",), "no chunk catalog (pass chunks=) nor reference_chunk_ids")
        outcomes.skip(i, _TEXT_METRICS, _NO_CHUNK_TEXTS)
        return {"id_based_context_precision": sample}
    samples = {m: r.SingleTurnSample(retrieved_context_ids=ret_ids, reference_context_ids=ref_ids) for m in _ID_METRICS}
    doc_chunks = {str(c["chunk_id"]): c for c in (catalog or {}).get(str(rec.get("doc_id")), [])}
    if not ref_ids:
        for m in _TEXT_METRICS:
            outcomes.put(i, m, "nan", math.nan, "no chunk of the catalog overlaps the reference spans")
    elif all(cid in doc_chunks and "text" in doc_chunks[cid] for cid in ref_ids):
        ref_texts = [str(doc_chunks[cid]["text"]) for cid in ref_ids]
        for m in _TEXT_METRICS:
            samples[m] = r.SingleTurnSample(retrieved_contexts=ret_texts, reference_contexts=ref_texts)
    else:
        outcomes.skip(i, _TEXT_METRICS, _NO_CHUNK_TEXTS)
    return samples


async def _score_samples(
    i: int, row: Mapping[str, object], samples: Mapping[str, Any], metrics: Mapping[str, Any], outcomes: Outcomes
) -> None:
    """Score record ``i``'s ``samples`` with their ``metrics`` into ``outcomes``."""
    for m, sample in samples.items():
        try:
            value = float(await metrics[m].single_turn_ascore(sample))
        except Exception as exc:  # noqa: BLE001 - counted and reported
            outcomes.fail(i, row, m, exc)
            continue
        outcomes.scored(i, m, value)


def _summary(
    base_rows: Sequence[Mapping[str, object]],
    outcomes: Outcomes,
    names: Sequence[str],
    ragas_metrics: Sequence[str],
    populations: Mapping[str, str],
    *,
    n_boot: int,
    seed: int,
) -> list[dict[str, object]]:
    """ctxwin's own metrics summarized per variant, then each of ``ragas_metrics`` per variant
    over its population (``all`` questions or the ``answerable`` ones)."""
    summary = []
    own = [m for m in names if m not in populations]
    for s in aggregate(base_rows, metrics=own, n_boot=n_boot, seed=seed):
        s.update(source="ctxwin", n_failed=0, n_skipped=0, skip_reasons={})
        summary.append(s)
    variants = list(dict.fromkeys(str(row["variant"]) for row in base_rows))
    for variant in variants:
        idx = [i for i, row in enumerate(base_rows) if row["variant"] == variant]
        for m in ragas_metrics:
            pop = populations[m]
            members = [i for i in idx if pop == "all" or base_rows[i]["answerable"]]
            source = "ragas-judge" if m in PAPER_METRICS else "ragas"
            summary.append(outcomes.summary(variant, m, pop, members, source=source, n_boot=n_boot, seed=seed))
    return summary


def _in_own_loop(fn: Callable[P, Coroutine[object, object, R]], *, name: str, doc: str) -> Callable[P, R]:
    """``fn`` made synchronous, called ``name`` and documented by ``doc``: each call runs its own
    event loop (in a worker thread when the caller's thread already runs one)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(fn(*args, **kwargs))
        results: list[R] = []
        errors: list[BaseException] = []

        def in_thread() -> None:
            try:
                results.append(asyncio.run(fn(*args, **kwargs)))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(exc)

        t = threading.Thread(target=in_thread, name="ctxwin-ragas-eval")
        t.start()
        t.join()
        if errors:
            raise errors[0]
        return results[0]

    run.__name__ = run.__qualname__ = name
    run.__doc__ = doc
    return run


evaluate_records = _in_own_loop(
    aevaluate_records,
    name="evaluate_records",
    doc="""Evaluate answer records with ragas (and ctxwin's metrics): :func:`aevaluate_records` (see
    its arguments) from plain code. It runs its own event loop (in a worker thread when one is
    already running).""",
)
