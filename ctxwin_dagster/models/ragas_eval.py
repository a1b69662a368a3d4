"""RAGAS evaluation of answer records: non-LLM metrics always, the paper's five with a judge.

Always (no model, no network):

* ctxwin's own metrics (:mod:`ctxwin_dagster.core.metrics`: span hit, span-character recall,
  hit@k, MRR, ID-based context precision/recall, answer F1/EM, not-found correctness);
* RAGAS's non-LLM retrieval metrics, computed by ragas itself on ``SingleTurnSample`` s:
  ``non_llm_context_precision_with_reference`` and ``non_llm_context_recall`` (retrieved
  chunk texts against the texts of the reference chunks, by string similarity), and
  ``id_based_context_precision`` / ``id_based_context_recall`` (retrieved chunk ids against the
  ids of the chunks overlapping a reference span).

With a judge (:class:`JudgeConfig`: an OpenAI-compatible ``base_url`` + ``model``, the key read
from an environment variable when called), the five metrics of the SWB-RAG paper through
ragas's ``ragas.metrics.collections``: ``faithfulness``, ``answer_relevancy``,
``context_recall``, ``context_precision`` (with reference) and ``answer_correctness``.
``answer_relevancy`` and ``answer_correctness`` need embeddings: any ctxwin
:class:`~ctxwin_dagster.models.base.Embedder` (the local ``LocalEmbedder`` or an
``OpenAIEmbedder``), wrapped for ragas by :func:`ragas_embeddings`.

Nothing is averaged away: per metric and variant the summary counts ``n`` (scored), ``n_nan``
(ragas returned NaN), ``n_failed`` (the judge call raised; the error is kept in ``failures``)
and ``n_skipped`` (the metric does not apply or an input is missing, with the reasons). In the
per-question rows a NaN or a failure is NaN, a skipped metric is None.

RAGAS 0.4.3 and current langchain-community: ``ragas.llms.base`` imports
``langchain_community.chat_models.vertexai``, which langchain-community no longer ships, so
``import ragas`` fails (ragas issues #2745, #2753, #2995). :func:`import_ragas` registers a
placeholder module for that one import when it is missing (ragas uses the class only in an
``isinstance`` list for legacy LangChain LLMs, which ctxwin never passes). It also sets
``RAGAS_DO_NOT_TRACK=true`` unless the variable is set, so ragas sends no usage analytics.

RAGAS's default string similarity for the non-LLM metrics is Levenshtein from ``rapidfuzz``,
which is not a ctxwin dependency: ``string_distance="auto"`` uses it when installed and
``difflib.SequenceMatcher`` otherwise; the result says which (``string_distance``).

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
import difflib
import importlib.util
import json
import math
import os
import sys
import threading
import types
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core import metrics as cm

__all__ = [
    "JUDGE_METRICS",
    "NON_LLM_METRICS",
    "PAPER_METRICS",
    "JudgeConfig",
    "RagasEvaluation",
    "aevaluate_records",
    "evaluate_records",
    "import_ragas",
    "ragas_embeddings",
]

#: The paper's five RAGAS metrics (need a judge model).
PAPER_METRICS: tuple[str, ...] = ("faithfulness", "answer_relevancy", "context_recall", "context_precision", "answer_correctness")
JUDGE_METRICS = PAPER_METRICS
#: RAGAS metrics computed without a model.
NON_LLM_METRICS: tuple[str, ...] = (
    "non_llm_context_precision_with_reference",
    "non_llm_context_recall",
    "id_based_context_precision",
    "id_based_context_recall",
)
_NEEDS_EMBEDDINGS = ("answer_relevancy", "answer_correctness")
_STRING_DISTANCES = ("auto", "levenshtein", "difflib")

_IMPORT_LOCK = threading.Lock()
_RAGAS: types.SimpleNamespace | None = None


# --------------------------------------------------------------------------------------
# Importing ragas
# --------------------------------------------------------------------------------------


def _install_vertexai_placeholder() -> bool:
    """Register ``langchain_community.chat_models.vertexai`` when langchain-community lacks it."""
    name = "langchain_community.chat_models.vertexai"
    if name in sys.modules:
        return False
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community warns on import
            if importlib.util.find_spec(name) is not None:
                return False
    except (ImportError, ValueError):
        pass
    module = types.ModuleType(name)
    module.__doc__ = "Placeholder registered by ctxwin: langchain-community no longer ships this module."

    class ChatVertexAI:  # noqa: D401 - a placeholder, never instantiated
        """Placeholder: ragas 0.4.3 imports it only for an isinstance check."""

    module.ChatVertexAI = ChatVertexAI  # type: ignore[attr-defined]
    sys.modules[name] = module
    return True


def import_ragas() -> types.SimpleNamespace:
    """Import the parts of ragas ctxwin uses (once), working around ragas 0.4.3's broken import.

    Returns a namespace with ``SingleTurnSample``, ``BaseRagasEmbedding``, ``SingleTurnMetric``,
    ``MetricType``, ``llm_factory``, the non-LLM metric classes and the collections metrics.
    """
    global _RAGAS
    with _IMPORT_LOCK:
        if _RAGAS is not None:
            return _RAGAS
        os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
        placeholder = _install_vertexai_placeholder()
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import ragas
            from ragas import _analytics
            from ragas.dataset_schema import SingleTurnSample
            from ragas.embeddings.base import BaseRagasEmbedding
            from ragas.llms.base import llm_factory
            from ragas.metrics._context_precision import IDBasedContextPrecision, NonLLMContextPrecisionWithReference
            from ragas.metrics._context_recall import IDBasedContextRecall, NonLLMContextRecall
            from ragas.metrics.base import MetricType, SingleTurnMetric
            from ragas.metrics.collections import (
                AnswerCorrectness,
                AnswerRelevancy,
                ContextPrecision,
                ContextRecall,
                Faithfulness,
            )
        _analytics.do_not_track.cache_clear()  # read RAGAS_DO_NOT_TRACK as it is now
        # instructor warns on every structured call because it compares against a deprecated mode.
        warnings.filterwarnings("ignore", message="FUNCTIONS is deprecated", category=DeprecationWarning)
        _RAGAS = types.SimpleNamespace(
            version=ragas.__version__,
            vertexai_placeholder=placeholder,
            SingleTurnSample=SingleTurnSample,
            BaseRagasEmbedding=BaseRagasEmbedding,
            SingleTurnMetric=SingleTurnMetric,
            MetricType=MetricType,
            llm_factory=llm_factory,
            NonLLMContextPrecisionWithReference=NonLLMContextPrecisionWithReference,
            NonLLMContextRecall=NonLLMContextRecall,
            IDBasedContextPrecision=IDBasedContextPrecision,
            IDBasedContextRecall=IDBasedContextRecall,
            Faithfulness=Faithfulness,
            AnswerRelevancy=AnswerRelevancy,
            ContextRecall=ContextRecall,
            ContextPrecision=ContextPrecision,
            AnswerCorrectness=AnswerCorrectness,
        )
        return _RAGAS


# --------------------------------------------------------------------------------------
# Embeddings and string similarity for ragas
# --------------------------------------------------------------------------------------

_ADAPTER_CLASS: type | None = None


def ragas_embeddings(embedder: Any) -> Any:
    """Wrap a ctxwin embedder (``embed(texts) -> (n, dim) array``) as a ragas ``BaseRagasEmbedding``.

    Works with :class:`~ctxwin_dagster.models.embeddings.LocalEmbedder` (offline
    all-MiniLM-L6-v2) and :class:`~ctxwin_dagster.models.embeddings.OpenAIEmbedder`; their
    caches and stats keep working. Async calls run the embedder in a worker thread.
    """
    global _ADAPTER_CLASS
    if not callable(getattr(embedder, "embed", None)):
        raise TypeError(f"embedder must have embed(texts) -> array (a ctxwin Embedder); got {type(embedder).__name__}")
    r = import_ragas()
    if _ADAPTER_CLASS is None:

        class CtxwinRagasEmbeddings(r.BaseRagasEmbedding):
            """A ctxwin embedder seen by ragas."""

            def __init__(self, inner: Any) -> None:
                super().__init__(cache=None)
                self.inner = inner
                self.model = getattr(inner, "model", type(inner).__name__)

            def embed_text(self, text: str, **kwargs: Any) -> list[float]:
                return np.asarray(self.inner.embed([text]), dtype=float)[0].tolist()

            async def aembed_text(self, text: str, **kwargs: Any) -> list[float]:
                return await asyncio.to_thread(self.embed_text, text)

            def embed_texts(self, texts: list[str], **kwargs: Any) -> list[list[float]]:
                return np.asarray(self.inner.embed(list(texts)), dtype=float).tolist()

            async def aembed_texts(self, texts: list[str], **kwargs: Any) -> list[list[float]]:
                return await asyncio.to_thread(self.embed_texts, texts)

            def __repr__(self) -> str:
                return f"CtxwinRagasEmbeddings({self.inner!r})"

        _ADAPTER_CLASS = CtxwinRagasEmbeddings
    return _ADAPTER_CLASS(embedder)


def _difflib_similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _string_measure(choice: str) -> tuple[Any, str]:
    """A ragas non-LLM ``SingleTurnMetric`` scoring ``reference`` vs ``response`` in [0, 1]."""
    r = import_ragas()
    if choice not in _STRING_DISTANCES:
        raise ValueError(f"string_distance must be one of {_STRING_DISTANCES}; got {choice!r}")
    has_rapidfuzz = importlib.util.find_spec("rapidfuzz") is not None
    if choice == "levenshtein" or (choice == "auto" and has_rapidfuzz):
        if not has_rapidfuzz:
            raise RuntimeError(
                "string_distance='levenshtein' needs rapidfuzz (ragas's default string distance): "
                "pip install rapidfuzz, or use string_distance='difflib'"
            )
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from ragas.metrics._string import NonLLMStringSimilarity
        return NonLLMStringSimilarity(), "levenshtein"

    from dataclasses import dataclass as _dc
    from dataclasses import field as _field

    @_dc
    class DifflibSimilarity(r.SingleTurnMetric):
        """``difflib.SequenceMatcher(autojunk=False).ratio()`` of reference and response."""

        name: str = "difflib_similarity"
        _required_columns: dict = _field(default_factory=lambda: {r.MetricType.SINGLE_TURN: {"reference", "response"}})

        def init(self, run_config: Any) -> None:
            pass

        async def _single_turn_ascore(self, sample: Any, callbacks: Any) -> float:
            return _difflib_similarity(str(sample.reference or ""), str(sample.response or ""))

        async def _ascore(self, row: dict, callbacks: Any) -> float:
            return _difflib_similarity(str(row.get("reference") or ""), str(row.get("response") or ""))

    return DifflibSimilarity(), "difflib"


# --------------------------------------------------------------------------------------
# Judge
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeConfig:
    """An OpenAI-compatible judge model for the paper's RAGAS metrics.

    Args:
        model: the judge model name the server knows.
        base_url: the server (``http://localhost:8000/v1`` for vLLM …); None = OpenAI.
        api_key_env: the environment variable holding the key, read when evaluating. For a
            local server (``base_url`` given) a missing key becomes a placeholder.
        metrics: which of :data:`PAPER_METRICS` to compute.
        embedding_model: an OpenAI-compatible embeddings model (on ``embedding_base_url`` or
            ``base_url``) for answer relevancy / correctness, used when no ``embedder`` is
            passed to :func:`evaluate_records`.
        embedding_base_url: where ``embedding_model`` is served (default ``base_url``).
        max_tokens, temperature: judge generation settings (ragas's defaults: 1024, 0.01).
        timeout_s, max_retries: per HTTP request, with the ``openai`` client's backoff on 429/5xx.
        attempts: tries per judge call by instructor (ragas's structured-output layer), which
            re-asks on invalid JSON and also repeats a call that raised (instructor's default 3).
            One judge call makes at most ``attempts * (1 + max_retries)`` HTTP requests.
        max_concurrency: judge metric calls in flight at once.
        answer_relevancy_strictness: questions generated per answer (ragas default 3).
        answer_correctness_weights: ``[factuality, similarity]`` (ragas default [0.75, 0.25]).

    Example::

        >>> JudgeConfig(model="gpt-4o-mini", metrics=("faithfulness", "context_recall")).metrics
        ('faithfulness', 'context_recall')
    """

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    metrics: tuple[str, ...] = PAPER_METRICS
    embedding_model: str | None = None
    embedding_base_url: str | None = None
    max_tokens: int = 2048
    temperature: float = 0.01
    timeout_s: float = 120.0
    max_retries: int = 3
    attempts: int = 3
    max_concurrency: int = 4
    answer_relevancy_strictness: int = 3
    answer_correctness_weights: tuple[float, float] = (0.75, 0.25)

    def __post_init__(self) -> None:
        if not self.model or not str(self.model).strip():
            raise ValueError("JudgeConfig.model is empty; name the judge model the server knows")
        object.__setattr__(self, "metrics", tuple(self.metrics))
        unknown = [m for m in self.metrics if m not in PAPER_METRICS]
        if unknown:
            raise ValueError(f"unknown judge metric(s) {unknown}; choose from {PAPER_METRICS}")
        if not self.metrics:
            raise ValueError(f"JudgeConfig.metrics is empty; choose from {PAPER_METRICS}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1; got {self.max_tokens}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0; got {self.timeout_s}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0; got {self.max_retries}")
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1; got {self.attempts}")
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1; got {self.max_concurrency}")
        if self.answer_relevancy_strictness < 1:
            raise ValueError(f"answer_relevancy_strictness must be >= 1; got {self.answer_relevancy_strictness}")
        w = tuple(float(x) for x in self.answer_correctness_weights)
        if len(w) != 2 or min(w) < 0 or sum(w) == 0:
            raise ValueError(f"answer_correctness_weights must be two non-negative numbers, not both 0; got {w}")
        object.__setattr__(self, "answer_correctness_weights", w)

    def needs_embeddings(self) -> bool:
        return "answer_relevancy" in self.metrics or ("answer_correctness" in self.metrics and self.answer_correctness_weights[1] > 0)

    def api_key(self) -> str:
        key = os.environ.get(self.api_key_env)
        if key:
            return key
        if self.base_url:
            return "not-needed"
        raise RuntimeError(
            f"no API key for the judge {self.model!r}: set {self.api_key_env} "
            "(or give base_url= for a local server that needs none)"
        )


class _Usage:
    """Counts the judge's HTTP requests and token usage (from the responses' ``usage``)."""

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.input_tokens = 0
        self.output_tokens = 0

    async def hook(self, response: Any) -> None:
        if "/chat/completions" not in str(response.request.url):
            return
        self.requests += 1
        if response.status_code >= 400:
            self.errors += 1
            return
        try:
            await response.aread()
            usage = json.loads(response.content).get("usage") or {}
        except Exception:  # noqa: BLE001 - usage is best effort; the call itself is judged by ragas
            return
        self.input_tokens += int(usage.get("prompt_tokens") or 0)
        self.output_tokens += int(usage.get("completion_tokens") or 0)

    def to_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "http_errors": self.errors,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


# --------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------


@dataclass
class RagasEvaluation:
    """What :func:`evaluate_records` found.

    Attributes:
        rows: one dict per record: ctxwin's metrics (``core.metrics.score_record``) plus the
            ragas metrics (float; NaN when ragas gave NaN or the judge failed; None when skipped).
        summary: one dict per (variant, metric): ``source`` (``ctxwin``/``ragas``/``ragas-judge``),
            ``population``, ``n_population``, ``n``, ``n_nan``, ``n_failed``, ``n_skipped``,
            ``n_missing``, ``skip_reasons``, ``mean``, ``ci_low``, ``ci_high``.
        failures: ``{question_id, variant, metric, error}`` for every judge failure.
        metric_names: the metric columns of ``rows``.
        string_distance: ``"levenshtein"`` or ``"difflib"`` (for the non-LLM metrics).
        judge: the judge model (None without one); ``judge_usage``: requests and tokens.
    """

    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    metric_names: list[str]
    string_distance: str
    judge: str | None = None
    judge_usage: dict[str, int] = field(default_factory=dict)
    ragas_version: str = ""

    def to_frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.rows)

    def summary_frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.summary)

    def counts(self, metric: str, variant: str | None = None) -> dict[str, int]:
        """``n``, ``n_nan``, ``n_failed``, ``n_skipped`` of one metric (summed over variants)."""
        out = Counter()
        for s in self.summary:
            if s["metric"] == metric and (variant is None or s["variant"] == variant):
                for k in ("n_population", "n", "n_nan", "n_failed", "n_skipped", "n_missing"):
                    out[k] += int(s.get(k) or 0)
        if not out:
            raise KeyError(f"no metric {metric!r} in this evaluation; known: {self.metric_names}")
        return dict(out)


# --------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------


class _Skip(Exception):
    """A metric does not apply to a record (the reason is counted)."""


def _has_text(value: Any) -> bool:
    return bool(str(value or "").strip())


async def aevaluate_records(
    records: Iterable[Mapping[str, Any]],
    *,
    chunks: Any = None,
    judge: JudgeConfig | None = None,
    embedder: Any = None,
    string_distance: str = "auto",
    threshold: float = 0.5,
    ks: Sequence[int] = cm.DEFAULT_KS,
    include_unanswerable: bool = False,
    n_boot: int = 2_000,
    seed: int = 0,
) -> RagasEvaluation:
    """Async :func:`evaluate_records` (use it inside a running event loop)."""
    records = [dict(r) for r in records]
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be in [0, 1]; got {threshold}")
    r = import_ragas()
    catalog = cm.chunk_catalog(chunks) if chunks is not None else None
    base_rows = cm.score_answers(records, chunks=catalog, ks=ks)

    measure, distance_name = _string_measure(string_distance)
    m_prec = r.NonLLMContextPrecisionWithReference(distance_measure=measure, threshold=threshold)
    m_rec = r.NonLLMContextRecall(_distance_measure=measure, threshold=threshold)
    m_idp = r.IDBasedContextPrecision()
    m_idr = r.IDBasedContextRecall()

    status: dict[tuple[int, str], tuple[str, str]] = {}  # (row, metric) -> (state, detail)
    values: dict[tuple[int, str], float | None] = {}
    failures: list[dict[str, Any]] = []

    def put(i: int, metric: str, state: str, value: float | None, detail: str = "") -> None:
        status[(i, metric)] = (state, detail)
        values[(i, metric)] = value

    # ---------------- non-LLM ragas metrics
    for i, (rec, row) in enumerate(zip(records, base_rows)):
        if not row["answerable"]:
            for m in NON_LLM_METRICS:
                put(i, m, "skipped", None, "unanswerable question")
            continue
        retrieved = list(rec.get("retrieved") or [])
        if not retrieved:
            for m in NON_LLM_METRICS:
                put(i, m, "skipped", None, "no retrieved chunks")
            continue
        spans = cm._reference_spans(rec, f"record {i}")
        ret_ids = [str(h["chunk_id"]) for h in retrieved]
        ret_texts = [str(h.get("text") or "") for h in retrieved]
        ref_ids = cm.reference_chunk_ids(rec, catalog)
        samples: dict[str, Any] = {}
        if ref_ids is not None:
            samples["id_based_context_precision"] = r.SingleTurnSample(retrieved_context_ids=ret_ids, reference_context_ids=ref_ids)
            samples["id_based_context_recall"] = r.SingleTurnSample(retrieved_context_ids=ret_ids, reference_context_ids=ref_ids)
            doc_chunks = {str(c["chunk_id"]): c for c in (catalog or {}).get(str(rec.get("doc_id")), [])}
            if not ref_ids:
                for m in ("non_llm_context_precision_with_reference", "non_llm_context_recall"):
                    put(i, m, "nan", math.nan, "no chunk of the catalog overlaps the reference spans")
            elif all(cid in doc_chunks and "text" in doc_chunks[cid] for cid in ref_ids):
                ref_texts = [str(doc_chunks[cid]["text"]) for cid in ref_ids]
                for m in ("non_llm_context_precision_with_reference", "non_llm_context_recall"):
                    samples[m] = r.SingleTurnSample(retrieved_contexts=ret_texts, reference_contexts=ref_texts)
            else:
                for m in ("non_llm_context_precision_with_reference", "non_llm_context_recall"):
                    put(i, m, "skipped", None, "no chunk catalog with chunk texts (pass chunks= with 'text')")
        else:
            # Precision only asks which retrieved chunks are relevant: the relevant retrieved ids suffice.
            relevant = [str(h["chunk_id"]) for h in retrieved if any(int(h["start"]) < e and s < int(h["end"]) for s, e in spans)]
            samples["id_based_context_precision"] = r.SingleTurnSample(retrieved_context_ids=ret_ids, reference_context_ids=relevant)
            put(i, "id_based_context_recall", "skipped", None, "no chunk catalog (pass chunks=) nor reference_chunk_ids")
            for m in ("non_llm_context_precision_with_reference", "non_llm_context_recall"):
                put(i, m, "skipped", None, "no chunk catalog with chunk texts (pass chunks= with 'text')")
        metric_objs = {
            "non_llm_context_precision_with_reference": m_prec,
            "non_llm_context_recall": m_rec,
            "id_based_context_precision": m_idp,
            "id_based_context_recall": m_idr,
        }
        for m, sample in samples.items():
            try:
                v = float(await metric_objs[m].single_turn_ascore(sample))
            except Exception as exc:  # noqa: BLE001 - counted and reported
                put(i, m, "failed", math.nan, f"{type(exc).__name__}: {exc}")
                failures.append({"question_id": row["question_id"], "variant": row["variant"], "metric": m,
                                 "error": f"{type(exc).__name__}: {exc}"[:500]})
                continue
            put(i, m, "nan" if math.isnan(v) else "ok", v)

    # ---------------- judge metrics
    usage = _Usage()
    judge_metrics: tuple[str, ...] = ()
    if judge is not None:
        judge_metrics = judge.metrics
        await _run_judge(judge, embedder, records, base_rows, include_unanswerable, put, failures, usage)

    # ---------------- rows and summary
    metric_names = [m for m in cm._metric_names(base_rows)] + list(NON_LLM_METRICS) + list(judge_metrics)
    rows = []
    for i, base in enumerate(base_rows):
        row = dict(base)
        for m in (*NON_LLM_METRICS, *judge_metrics):
            row[m] = values.get((i, m))
        rows.append(row)

    populations = {m: "answerable" for m in NON_LLM_METRICS}
    populations.update({m: ("all" if include_unanswerable else "answerable") for m in judge_metrics})
    summary = []
    own = [m for m in metric_names if m not in populations]
    for s in cm.aggregate(base_rows, metrics=own, n_boot=n_boot, seed=seed):
        s.update(source="ctxwin", n_failed=0, n_skipped=0, skip_reasons={})
        summary.append(s)
    variants = list(dict.fromkeys(row["variant"] for row in base_rows))
    for variant in variants:
        idx = [i for i, row in enumerate(base_rows) if row["variant"] == variant]
        for m in (*NON_LLM_METRICS, *judge_metrics):
            pop = populations[m]
            members = [i for i in idx if pop == "all" or base_rows[i]["answerable"]]
            states = [status.get((i, m), ("skipped", "not evaluated")) for i in members]
            vals = [values[(i, m)] for i in members if status.get((i, m), ("",))[0] == "ok"]
            reasons = Counter(d for st, d in states if st == "skipped")
            lo = hi = None
            if vals:
                lo, hi = cm.bootstrap_mean_ci(vals, n_boot=n_boot, seed=seed)
            summary.append({
                "variant": variant, "metric": m, "population": pop, "n_population": len(members),
                "n": len(vals), "n_missing": 0,
                "n_nan": sum(1 for st, _ in states if st == "nan"),
                "mean": float(np.mean(vals)) if vals else None, "ci_low": lo, "ci_high": hi,
                "source": "ragas-judge" if m in PAPER_METRICS else "ragas",
                "n_failed": sum(1 for st, _ in states if st == "failed"),
                "n_skipped": sum(reasons.values()),
                "skip_reasons": dict(reasons),
            })
    return RagasEvaluation(
        rows=rows,
        summary=summary,
        failures=failures,
        metric_names=metric_names,
        string_distance=distance_name,
        judge=None if judge is None else judge.model,
        judge_usage=usage.to_dict() if judge is not None else {},
        ragas_version=r.version,
    )


async def _run_judge(
    judge: JudgeConfig,
    embedder: Any,
    records: list[dict[str, Any]],
    base_rows: list[dict[str, Any]],
    include_unanswerable: bool,
    put: Callable[..., None],
    failures: list[dict[str, Any]],
    usage: _Usage,
) -> None:
    r = import_ragas()
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient

    own_embedder = None
    if judge.needs_embeddings() and embedder is None:
        if judge.embedding_model is None:
            raise ValueError(
                "answer_relevancy and answer_correctness need embeddings: pass embedder= (e.g. "
                "LocalEmbedder()) or set JudgeConfig.embedding_model, or leave those metrics out of "
                "JudgeConfig.metrics"
            )
        from .embeddings import OpenAIEmbedder

        own_embedder = OpenAIEmbedder(model=judge.embedding_model, base_url=judge.embedding_base_url or judge.base_url,
                                      api_key=os.environ.get(judge.api_key_env) or None, max_retries=judge.max_retries,
                                      timeout_s=judge.timeout_s)
        embedder = own_embedder
    emb = ragas_embeddings(embedder) if judge.needs_embeddings() else None

    http_client = DefaultAsyncHttpxClient(event_hooks={"response": [usage.hook]})
    client = AsyncOpenAI(base_url=judge.base_url, api_key=judge.api_key(), max_retries=judge.max_retries,
                         timeout=judge.timeout_s, http_client=http_client)
    try:
        # Extra model args reach instructor's create(): max_retries there is its number of attempts.
        llm = r.llm_factory(judge.model, client=client, max_tokens=judge.max_tokens, temperature=judge.temperature,
                            max_retries=judge.attempts)
        objs: dict[str, Any] = {}
        for m in judge.metrics:
            if m == "faithfulness":
                objs[m] = r.Faithfulness(llm=llm)
            elif m == "answer_relevancy":
                objs[m] = r.AnswerRelevancy(llm=llm, embeddings=emb, strictness=judge.answer_relevancy_strictness)
            elif m == "context_recall":
                objs[m] = r.ContextRecall(llm=llm)
            elif m == "context_precision":
                objs[m] = r.ContextPrecision(llm=llm)
            elif m == "answer_correctness":
                objs[m] = r.AnswerCorrectness(llm=llm, embeddings=emb, weights=list(judge.answer_correctness_weights))
        sem = asyncio.Semaphore(judge.max_concurrency)

        def inputs(metric: str, rec: Mapping[str, Any], row: Mapping[str, Any]) -> dict[str, Any]:
            question = str(rec.get("question") or "")
            answer = str(rec.get("answer") or "")
            reference = next((x for x in cm._references(rec.get("reference_answer")) if x.strip()), "")
            contexts = [str(c) for c in (rec.get("contexts") or []) if _has_text(c)]
            if not row["answerable"] and not include_unanswerable:
                raise _Skip("unanswerable question")
            if not _has_text(question):
                raise _Skip("empty question")
            needs = {
                "faithfulness": ("answer", "contexts"),
                "answer_relevancy": ("answer",),
                "context_recall": ("contexts", "reference"),
                "context_precision": ("contexts", "reference"),
                "answer_correctness": ("answer", "reference"),
            }[metric]
            if "answer" in needs and not _has_text(answer):
                raise _Skip("empty answer")
            if "contexts" in needs and not contexts:
                raise _Skip("no contexts given to the model")
            if "reference" in needs and not _has_text(reference):
                raise _Skip("no reference answer")
            args: dict[str, Any] = {"user_input": question}
            if "answer" in needs:
                args["response"] = answer
            if "contexts" in needs:
                args["retrieved_contexts"] = contexts
            if "reference" in needs:
                args["reference"] = reference
            return args

        async def one(i: int, metric: str) -> None:
            rec, row = records[i], base_rows[i]
            try:
                args = inputs(metric, rec, row)
            except _Skip as skip:
                put(i, metric, "skipped", None, str(skip))
                return
            async with sem:
                try:
                    result = await objs[metric].ascore(**args)
                    v = float(result.value)
                except Exception as exc:  # noqa: BLE001 - counted and reported
                    message = f"{type(exc).__name__}: {exc}"
                    put(i, metric, "failed", math.nan, message)
                    failures.append({"question_id": row["question_id"], "variant": row["variant"], "metric": metric,
                                     "error": message[:500]})
                    return
            put(i, metric, "nan" if math.isnan(v) else "ok", v)

        await asyncio.gather(*(one(i, m) for i in range(len(records)) for m in judge.metrics))
    finally:
        await client.close()


def evaluate_records(
    records: Iterable[Mapping[str, Any]],
    *,
    chunks: Any = None,
    judge: JudgeConfig | None = None,
    embedder: Any = None,
    string_distance: str = "auto",
    threshold: float = 0.5,
    ks: Sequence[int] = cm.DEFAULT_KS,
    include_unanswerable: bool = False,
    n_boot: int = 2_000,
    seed: int = 0,
) -> RagasEvaluation:
    """Evaluate answer records with ragas (and ctxwin's metrics); see the module docstring.

    Args:
        records: answer records (see :mod:`ctxwin_dagster.core.metrics`).
        chunks: a chunk catalog (``{doc_id: [{"chunk_id", "start", "end", "text"}]}`` or chunk
            rows with ``doc_id``): needed for ID-based recall and the non-LLM text metrics.
        judge: a :class:`JudgeConfig` for the paper's metrics (None: non-LLM metrics only).
        embedder: a ctxwin embedder for answer relevancy / correctness.
        string_distance: ``"auto"``, ``"levenshtein"`` (rapidfuzz) or ``"difflib"``.
        threshold: similarity above which a retrieved text matches a reference text.
        ks: ``hit@k`` cut-offs.
        include_unanswerable: run the judge metrics on unanswerable questions too.
        n_boot, seed: the bootstrap CIs of the summary.

    Synchronous: runs its own event loop (in a worker thread when one is already running).
    """
    kwargs = dict(chunks=chunks, judge=judge, embedder=embedder, string_distance=string_distance, threshold=threshold,
                  ks=ks, include_unanswerable=include_unanswerable, n_boot=n_boot, seed=seed)
    records = list(records)
    coro_factory = lambda: aevaluate_records(records, **kwargs)  # noqa: E731
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_factory())
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = asyncio.run(coro_factory())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=run, name="ctxwin-ragas-eval")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["result"]

