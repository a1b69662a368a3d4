"""The judge of the paper's five RAGAS metrics: its settings, its usage accounting, and its scores.

A judge (:class:`JudgeConfig`: an OpenAI-compatible ``base_url`` + ``model``, the key read from
an environment variable when called) computes the five metrics of the SWB-RAG paper through
ragas's ``ragas.metrics.collections``: ``faithfulness``, ``answer_relevancy``,
``context_recall``, ``context_precision`` (with reference) and ``answer_correctness``.
``answer_relevancy`` and ``answer_correctness`` need embeddings: any ctxwin
:class:`~ctxwin_dagster.backends.base.Embedder` (the local ``LocalEmbedder`` or an
``OpenAIEmbedder``), wrapped for ragas by :func:`~.compat.ragas_embeddings`.

:func:`run_judge` scores answer records with it for
:func:`~ctxwin_dagster.backends.ragas.evaluate.aevaluate_records`; :class:`JudgeUsage` counts
the judge's HTTP requests and tokens.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import types
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxwin_dagster.backends.calls.endpoint import resolve_api_key
from ctxwin_dagster.backends.calls.retry import RetryPolicy
from ctxwin_dagster.backends.chat.local_model import is_local_model
from ctxwin_dagster.backends.ragas.compat import import_ragas, ragas_embeddings
from ctxwin_dagster.backends.ragas.outcomes import Outcomes
from ctxwin_dagster.core.evaluation.metrics.answers import reference_answers
from ctxwin_dagster.core.evaluation.record_values import items

if TYPE_CHECKING:
    import httpx
    from openai import AsyncOpenAI

    from ctxwin_dagster.backends.base import Embedder
    from ctxwin_dagster.backends.chat.local_server import LocalChatServer

__all__ = ["JUDGE_METRICS", "PAPER_METRICS", "JudgeConfig", "JudgeUsage", "run_judge"]

#: The paper's five RAGAS metrics (need a judge model).
PAPER_METRICS: tuple[str, ...] = (
    "faithfulness",
    "answer_relevancy",
    "context_recall",
    "context_precision",
    "answer_correctness",
)
JUDGE_METRICS = PAPER_METRICS


@dataclass(frozen=True)
class JudgeConfig:
    """An OpenAI-compatible judge model for the paper's RAGAS metrics.

    Args:
        model: the judge model name the server knows, or ``local:smollm2`` (a GGUF model run in
            process behind a loopback OpenAI-compatible endpoint; ``base_url`` is then unused).
        base_url: the server (``http://localhost:8000/v1`` for vLLM …); None = OpenAI.
        api_key_env: the environment variable holding the key, read when evaluating. For a
            local server (``base_url`` given) a missing key becomes a placeholder.
        metrics: which of :data:`PAPER_METRICS` to compute.
        embedding_model: an OpenAI-compatible embeddings model (on ``embedding_base_url`` or
            ``base_url``) for answer relevancy / correctness, used when no ``embedder`` is
            passed to :func:`~.evaluate.evaluate_records`.
        embedding_base_url: where ``embedding_model`` is served (default ``base_url``).
        max_tokens, temperature: judge generation settings (ragas's defaults: 1024, 0.01).
        timeout_s, max_retries: per HTTP request, retried with backoff on 429/5xx/timeouts by the
            project's retry policy (:mod:`ctxwin_dagster.backends.calls.retry`).
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
        return "answer_relevancy" in self.metrics or (
            "answer_correctness" in self.metrics and self.answer_correctness_weights[1] > 0
        )

    def api_key(self) -> str:
        """The key from ``api_key_env`` (a placeholder for a local server; an error for OpenAI)."""
        return resolve_api_key(None, self.base_url, what=f"the judge {self.model!r}", env=self.api_key_env)


class JudgeUsage:
    """Counts the judge's HTTP requests and token usage (from the responses' ``usage``)."""

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.input_tokens = 0
        self.output_tokens = 0

    async def hook(self, response: httpx.Response) -> None:
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
        return {
            "requests": self.requests,
            "http_errors": self.errors,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }


class _Skip(Exception):
    """A metric does not apply to a record (the reason is counted)."""


#: What each judge metric reads from a record besides its question.
_NEEDS: dict[str, tuple[str, ...]] = {
    "faithfulness": ("answer", "contexts"),
    "answer_relevancy": ("answer",),
    "context_recall": ("contexts", "reference"),
    "context_precision": ("contexts", "reference"),
    "answer_correctness": ("answer", "reference"),
}


def _tightened(kwargs: dict[str, object], max_tokens: int) -> dict[str, object]:
    """The judge's request for a small local model: its schema (instructor's JSON_SCHEMA mode puts
    it beside ``json_object``) tightened so that the verdict's JSON closes within the reply's
    tokens (:func:`~ctxwin_dagster.backends.chat.local_server.decoding_schema`), which llama.cpp
    then decodes under as a grammar."""
    from ctxwin_dagster.backends.chat.local_server import decoding_schema

    asked = kwargs.get("max_tokens")
    schema = decoding_schema(kwargs.get("response_format"), asked if isinstance(asked, int) and asked else max_tokens)
    if schema is None:
        return kwargs
    return {**kwargs, "response_format": {"type": "json_object", "schema": dict(schema.schema)}}


def _has_text(value: object) -> bool:
    return bool(str(value or "").strip())


async def run_judge(
    judge: JudgeConfig,
    embedder: Embedder | None,
    records: Sequence[Mapping[str, object]],
    base_rows: Sequence[Mapping[str, object]],
    include_unanswerable: bool,
    outcomes: Outcomes,
    usage: JudgeUsage,
) -> None:
    """Score ``records`` (``base_rows``: their scored rows) with the judge's metrics into
    ``outcomes``, the judge's HTTP requests and tokens counted in ``usage``.

    Unanswerable questions are skipped unless ``include_unanswerable``. A local judge model
    answers through an endpoint on loopback (:func:`_judge_endpoint`), one verdict at a time.
    """
    r = import_ragas()
    emb = _judge_embeddings(judge, embedder)
    base_url, local = _judge_endpoint(judge)
    is_local = is_local_model(judge.model)
    client = _judge_client(judge, base_url, usage, tighten=is_local and local is None)
    try:
        metrics = _metric_objects(r, judge, _judge_llm(r, judge, client, is_local), emb)
        sem = asyncio.Semaphore(1 if is_local else judge.max_concurrency)  # a local model generates one reply at a time

        async def one(i: int, metric: str) -> None:
            try:
                args = _metric_inputs(metric, records[i], base_rows[i], include_unanswerable)
            except _Skip as skip:
                outcomes.skip(i, (metric,), str(skip))
                return
            async with sem:
                try:
                    value = await _verdict(metrics[metric], metric, args)
                except Exception as exc:  # noqa: BLE001 - counted and reported
                    outcomes.fail(i, base_rows[i], metric, exc)
                    return
            outcomes.scored(i, metric, value)

        await asyncio.gather(*(one(i, m) for i in range(len(records)) for m in judge.metrics))
    finally:
        await client.close()
        if local is not None:
            local.stop()


def _judge_embeddings(judge: JudgeConfig, embedder: Embedder | None) -> Any:
    """ragas's embeddings for the metrics that need them (None when none does): ``embedder``, else
    ``JudgeConfig.embedding_model`` served OpenAI-compatibly."""
    if judge.needs_embeddings() and embedder is None:
        if judge.embedding_model is None:
            raise ValueError(
                "answer_relevancy and answer_correctness need embeddings: pass embedder= (e.g. "
                "LocalEmbedder()) or set JudgeConfig.embedding_model, or leave those metrics out of "
                "JudgeConfig.metrics"
            )
        from ctxwin_dagster.backends.embeddings.openai import OpenAIEmbedder

        embedder = OpenAIEmbedder(
            model=judge.embedding_model,
            base_url=judge.embedding_base_url or judge.base_url,
            api_key=os.environ.get(judge.api_key_env) or None,
            max_retries=judge.max_retries,
            timeout_s=judge.timeout_s,
        )
    return ragas_embeddings(embedder) if judge.needs_embeddings() and embedder is not None else None


def _judge_endpoint(judge: JudgeConfig) -> tuple[str | None, LocalChatServer | None]:
    """The judge's base URL, and the loopback server started for it (to be stopped) if any.

    A local model judges through an OpenAI-compatible endpoint on loopback (ragas speaks only
    that API): llama.cpp's server (the command's, or this process's), else the in-process model's.
    """
    if not is_local_model(judge.model):
        return judge.base_url, None
    from ctxwin_dagster.backends.chat.llama_server import local_chat_url

    base_url = local_chat_url(judge.model)
    if base_url is not None:
        return base_url, None
    from ctxwin_dagster.backends.chat.local import LocalChatBackend
    from ctxwin_dagster.backends.chat.local_server import LocalChatServer

    local = LocalChatServer(LocalChatBackend(model=judge.model.strip(), max_new_tokens=judge.max_tokens)).start()
    return local.base_url, local


def _judge_client(judge: JudgeConfig, base_url: str | None, usage: JudgeUsage, *, tighten: bool) -> AsyncOpenAI:
    """The judge's client: its requests counted in ``usage`` and retried by the project's one
    policy (backends/calls/retry.py), not the SDK's own; with ``tighten`` (llama.cpp serving a
    local model) each verdict's schema is tightened as in process (:func:`_tightened`)."""
    from openai import AsyncOpenAI

    from ctxwin_dagster.backends.calls.secrets import async_http_client

    http_client = async_http_client(response_hooks=[usage.hook])  # error bodies with the key masked
    client = AsyncOpenAI(
        base_url=base_url,
        api_key=resolve_api_key(None, base_url, what=f"the judge {judge.model!r}", env=judge.api_key_env),
        max_retries=0,
        timeout=judge.timeout_s,
        http_client=http_client,
    )
    policy = RetryPolicy(max_retries=judge.max_retries)
    create: Callable[..., Coroutine[object, object, object]] = client.chat.completions.create

    async def create_with_retries(*args: object, **kwargs: object) -> object:
        if tighten:
            kwargs = _tightened(kwargs, judge.max_tokens)
        return await policy.async_retrying()(create, *args, **kwargs)

    client.chat.completions.create = create_with_retries  # type: ignore[method-assign, assignment]
    return client


def _judge_llm(r: types.SimpleNamespace, judge: JudgeConfig, client: AsyncOpenAI, is_local: bool) -> Any:
    """ragas's LLM of the judge on ``client``."""
    # Extra model args reach instructor's create(): max_retries there is its number of attempts.
    llm = r.llm_factory(
        judge.model,
        client=client,
        max_tokens=judge.max_tokens,
        temperature=judge.temperature,
        max_retries=judge.attempts,
    )
    if is_local:
        # The local judge decodes each verdict under its schema: instructor's JSON_SCHEMA mode
        # puts the schema in ``response_format`` (``json_object`` with the schema; ragas asks for
        # JSON mode, which only names it in the prompt), and llama.cpp (or the loopback server)
        # decodes under it.
        import instructor

        llm.client = instructor.from_openai(client, mode=instructor.Mode.JSON_SCHEMA)
    return llm


def _metric_objects(r: types.SimpleNamespace, judge: JudgeConfig, llm: Any, emb: Any) -> dict[str, Any]:
    """ragas's metric of each of the judge's metrics."""
    make: dict[str, Callable[[], Any]] = {
        "faithfulness": lambda: r.Faithfulness(llm=llm),
        "answer_relevancy": lambda: r.AnswerRelevancy(
            llm=llm, embeddings=emb, strictness=judge.answer_relevancy_strictness
        ),
        "context_recall": lambda: r.ContextRecall(llm=llm),
        "context_precision": lambda: r.ContextPrecision(llm=llm),
        "answer_correctness": lambda: r.AnswerCorrectness(
            llm=llm, embeddings=emb, weights=list(judge.answer_correctness_weights)
        ),
    }
    return {m: make[m]() for m in judge.metrics}


def _metric_inputs(
    metric: str, rec: Mapping[str, object], row: Mapping[str, object], include_unanswerable: bool
) -> dict[str, str | list[str]]:
    """The arguments of ``metric``'s ``ascore`` for a record (``row``: its scored row).

    Raises:
        _Skip: the metric does not apply to the record, or an input it needs is empty.
    """
    question = str(rec.get("question") or "")
    answer = str(rec.get("answer") or "")
    reference = next((x for x in reference_answers(rec.get("reference_answer")) if x.strip()), "")
    contexts = [str(c) for c in items(rec, "contexts") if _has_text(c)]
    if not row["answerable"] and not include_unanswerable:
        raise _Skip("unanswerable question")
    if not _has_text(question):
        raise _Skip("empty question")
    needs = _NEEDS[metric]
    if "answer" in needs and not _has_text(answer):
        raise _Skip("empty answer")
    if "contexts" in needs and not contexts:
        raise _Skip("no contexts given to the model")
    if "reference" in needs and not _has_text(reference):
        raise _Skip("no reference answer")
    args: dict[str, str | list[str]] = {"user_input": question}
    if "answer" in needs:
        args["response"] = answer
    if "contexts" in needs:
        args["retrieved_contexts"] = contexts
    if "reference" in needs:
        args["reference"] = reference
    return args


async def _verdict(scorer: Any, metric: str, args: Mapping[str, str | list[str]]) -> float:
    """``metric``'s score of one record by its ragas ``scorer`` (NaN when ragas gives NaN).

    Raises:
        ValueError: the judge's verdicts give a value outside [0, 1].
    """
    result = await scorer.ascore(**args)
    value = float(result.value)
    if not math.isnan(value) and not 0.0 <= value <= 1.0:
        # e.g. a verdict of 143320 where the schema's int meant 0 or 1: never a score
        raise ValueError(f"the judge's verdicts give {metric} = {value:g}, outside [0, 1]")
    return value
