"""A chat backend over the ``openai`` SDK, for OpenAI or any OpenAI-compatible server.

:class:`OpenAIChatBackend` implements :class:`~ctxwin_dagster.backends.base.ChatBackend`. The
server is chosen by ``base_url``: OpenAI when None, else vLLM (``http://host:8000/v1``), Ollama
(``http://localhost:11434/v1``), llama.cpp's ``llama-server`` (``http://localhost:8080/v1``),
LM Studio (``http://localhost:1234/v1``) or anything speaking the same API.

What it adds to the SDK:

* **Bounded concurrency** — :meth:`~OpenAIChatBackend.complete_many` runs requests at once, at
  most ``max_concurrency`` in flight, and returns results in request order. Calls are blocking
  HTTP requests on the SDK's sync client, run by the backend's worker threads (or the caller's
  thread for :meth:`~OpenAIChatBackend.complete`), so the methods work from plain code, from
  other threads and from inside a running event loop alike.
* **Retries** — the shared :class:`~ctxwin_dagster.backends.calls.retry.RetryPolicy`: on 429
  (``Retry-After`` honoured), 408/409, 5xx, timeouts, dropped connections and malformed bodies,
  with exponential backoff and jitter; the SDK's own retries are off, and every record says how
  many attempts a call took. Each retry is logged (attempt, reason, wait).
* **Bounded waits** — each attempt has a connect timeout (``connect_timeout_s``, 10 s) and a read
  timeout (``timeout_s``, 120 s), and a request with its retries a deadline (``deadline_s``,
  600 s): a server that takes the connection and never answers fails in bounded time, and the
  error says which wait ran out.
* **Clear errors** — :class:`~ctxwin_dagster.backends.chat.errors.ChatBackendError` says what went
  wrong and what to check (unreachable server, unknown model, missing API key …); it never
  contains the key.
* **Fit before send** — a prompt that does not fit the model's context (with ``max_tokens``
  reserved for the reply) raises :class:`~ctxwin_dagster.core.budget.fit.ContextOverflowError` and is
  never sent.
* **Response cache** — a :class:`~ctxwin_dagster.backends.calls.cache.ResponseCache` keyed by everything
  that determines the answer; a finished call is stored at once, so a rerun after a crash only
  repeats unfinished calls.
* **Accounting** — every call (or cache hit) adds a :class:`~ctxwin_dagster.backends.base.CallRecord`
  to ``ledger``: tokens from the server's usage (or counted), characters, latency, cost, attempts.

Example::

    >>> from ctxwin_dagster.testing import FakeOpenAIServer
    >>> with FakeOpenAIServer() as server, OpenAIChatBackend(model="gpt-4o", base_url=server.base_url) as chat:
    ...     result = chat.complete(ChatRequest(messages=({"role": "user", "content": "Hello"},)))
    ...     result.text, result.record.input_tokens, result.record.attempts
    ('Reply 185f8db32271: Hello', 8, 1)
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Literal

from ctxwin_dagster.backends.base import BackendStats, ChatRequest, ChatResult, Ledger
from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.calls.endpoint import OPENAI_BASE_URL, normalize_base_url, resolve_api_key
from ctxwin_dagster.backends.calls.null_cache import NullCache
from ctxwin_dagster.backends.calls.retry import RetryPolicy, http_timeout
from ctxwin_dagster.backends.chat.accounting import answer_entry, duplicate_record, entry_result, failure_record
from ctxwin_dagster.backends.chat.errors import ChatBackendError, chat_error
from ctxwin_dagster.backends.chat.messages import Prepared, Reply, check_fit, max_tokens_param_for, prepare
from ctxwin_dagster.backends.chat.sending import SKIPPED, Attempts, Connection, Sent, post_with_retries, send_batch
from ctxwin_dagster.backends.chat.structured import ReplyFormats
from ctxwin_dagster.backends.planning.pricing import PriceOverrides, estimate_cost
from ctxwin_dagster.core.budget.limits import ModelLimits, get_model_limits
from ctxwin_dagster.core.budget.tokens import TokenCounter, get_token_counter
from ctxwin_dagster.core.json_types import JSONValue

__all__ = ["OpenAIChatBackend"]

log = logging.getLogger(__name__)


class OpenAIChatBackend:
    """Chat completions from OpenAI or an OpenAI-compatible server (see the module docstring).

    Args:
        model: the model name the server serves (``"gpt-4o"``, ``"llama3.1:8b"``, a vLLM model path).
        base_url: the server's API root including ``/v1``; None means OpenAI (or the
            ``OPENAI_BASE_URL`` environment variable when set).
        api_key: the key; None reads ``OPENAI_API_KEY``. A local server without a key gets a
            placeholder (:func:`~ctxwin_dagster.backends.calls.endpoint.resolve_api_key`). The key is never
            logged nor put in an error message.
        cache: a :class:`ResponseCache` to reuse answers across runs; None caches nothing.
        max_concurrency: most requests in flight at once (per backend instance).
        max_retries: retries after the first attempt for retryable failures.
        timeout_s: the read timeout: seconds an attempt waits for the server's reply (and for each
            part of it) once connected.
        connect_timeout_s: seconds an attempt waits for the connection to open.
        deadline_s: seconds a request may take with all its retries; no retry starts after it
            (None: only ``max_retries`` bounds them).
        logger: where retries are logged; default the retry module's logger (a Dagster resource
            passes its run's log).
        ledger: where call records go; a new :class:`Ledger` when None.
        limits: the model's token limits; default ``get_model_limits(model)``.
        price_overrides: ``{model: (USD per 1M input, USD per 1M output)}`` for models
            genai-prices does not know (local models: ``(0.0, 0.0)``).
        backoff_base_s / backoff_max_s: exponential backoff ``base * 2**n`` capped at max,
            with jitter. A server's ``Retry-After`` is honoured up to ``max(backoff_max_s, 60)``.
            With ``max_retries`` they make :attr:`retry`, a :class:`~ctxwin_dagster.backends.calls.retry.RetryPolicy`.
        cache_namespace: the backend part of cache keys; default the normalized base URL (or
            ``"openai"``). Set it to keep cache hits when the same server moves to a new URL.
        max_tokens_param: send the completion limit as ``"max_tokens"`` or
            ``"max_completion_tokens"``; None picks ``max_completion_tokens`` for OpenAI's
            reasoning models (o1/o3/o4/gpt-5) and ``max_tokens`` otherwise.
        max_reply_tokens: a cap on every reply (a request asking more gets this many; None: none),
            for a small local model that may repeat itself up to the request's limit.

    Records: every call adds one :class:`CallRecord` to ``ledger``. A cache hit (also a
    duplicate of another request in the same batch) has ``cache_hit=True``, ``attempts=0``, and
    the token counts and ``cost_usd`` (the cost of the work) of the original call; its
    ``paid_usd`` is 0. A failed call has ``ok=False``,
    its ``error``, ``attempts`` and zero volumes. ``latency_s`` runs from the first attempt to the
    answer (retries and backoff included, waiting for a concurrency slot not). A reply cut at
    ``max_tokens`` is returned and cached with ``finish_reason="length"`` on its ChatResult.

    Example::

        >>> from ctxwin_dagster.testing import FakeOpenAIServer
        >>> with FakeOpenAIServer(latency_s=0.01) as server:
        ...     chat = OpenAIChatBackend(model="llama3.1:8b", base_url=server.base_url,
        ...                              max_concurrency=4, price_overrides={"llama3.1:8b": (0.0, 0.0)})
        ...     reqs = [ChatRequest(messages=({"role": "user", "content": f"q{i}"},)) for i in range(8)]
        ...     results = chat.complete_many(reqs)
        ...     chat.close()
        >>> [r.text.split(": ")[1] for r in results][:3], chat.ledger.totals()["calls"]
        (['q0', 'q1', 'q2'], 8)
    """

    #: Whether the endpoint holds a reply to any JSON schema (ordered items, string lengths), not
    #: only to the subset OpenAI's strict mode takes; the task engine then sends the tighter
    #: schemas. True for ctxwin's own llama.cpp server (its grammar), set by the factory.
    decodes_any_schema = False

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        cache: ResponseCache | NullCache | None = None,
        max_concurrency: int = 8,
        max_retries: int = 5,
        timeout_s: float = 120.0,
        ledger: Ledger | None = None,
        limits: ModelLimits | None = None,
        price_overrides: PriceOverrides | None = None,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        cache_namespace: str | None = None,
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] | None = None,
        connect_timeout_s: float = 10.0,
        deadline_s: float | None = 600.0,
        logger: logging.Logger | None = None,
        max_reply_tokens: int | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model is empty; pass the name the server serves, e.g. model='gpt-4o' or 'llama3.1:8b'")
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an int >= 1; got {max_concurrency!r}")
        timeout = http_timeout(float(timeout_s), float(connect_timeout_s))  # both > 0, else a ValueError
        if limits is not None and not isinstance(limits, ModelLimits):
            raise TypeError(f"limits must be a ModelLimits; got {type(limits).__name__}")
        if ledger is not None and not isinstance(ledger, Ledger):
            raise TypeError(f"ledger must be a Ledger; got {type(ledger).__name__}")
        if cache is not None and not isinstance(cache, ResponseCache | NullCache):
            raise TypeError(f"cache must be a ResponseCache or NullCache; got {type(cache).__name__}")
        if max_tokens_param not in (None, "max_tokens", "max_completion_tokens"):
            raise ValueError(
                f"max_tokens_param must be 'max_tokens', 'max_completion_tokens' or None; got {max_tokens_param!r}"
            )
        if price_overrides is not None and not isinstance(price_overrides, Mapping):
            raise TypeError("price_overrides must map model -> (USD per 1M input, USD per 1M output)")
        self.retry = RetryPolicy(
            max_retries=max_retries,
            backoff_base_s=float(backoff_base_s),
            backoff_max_s=float(backoff_max_s),
            deadline_s=None if deadline_s is None else float(deadline_s),
            log=logger,
        )

        resolved = base_url if base_url is not None else (os.environ.get("OPENAI_BASE_URL") or None)
        self.base_url = normalize_base_url(resolved) if resolved else OPENAI_BASE_URL
        self.is_openai = self.base_url == OPENAI_BASE_URL
        self.backend_id = cache_namespace or ("openai" if self.is_openai else self.base_url)
        self.model = model
        self.cache = cache if cache is not None else NullCache()
        self.max_concurrency = max_concurrency
        self.timeout_s = float(timeout_s)
        self.ledger = ledger if ledger is not None else Ledger()
        self.limits = limits if limits is not None else get_model_limits(model)
        self.price_overrides = dict(price_overrides) if price_overrides else None
        self.max_tokens_param = max_tokens_param or max_tokens_param_for(model, is_openai=self.is_openai)
        if max_reply_tokens is not None and (not isinstance(max_reply_tokens, int) or max_reply_tokens < 1):
            raise ValueError(f"max_reply_tokens must be an int >= 1 or None; got {max_reply_tokens!r}")
        self.max_reply_tokens = max_reply_tokens
        self._counter: TokenCounter = get_token_counter(model)

        # The SDK client holds the key; this object keeps no other copy of it.
        self._connection = Connection(
            api_key=resolve_api_key(api_key, self.base_url, what=f"the chat model {model!r}"),
            base_url=self.base_url,
            timeout=timeout,
            workers=max_concurrency,
            name=f"ctxwin-chat-{model}",
        )
        #: What structured output the endpoint accepts (found out on the first request with a schema).
        self.reply_formats = ReplyFormats(self.cache if not isinstance(self.cache, NullCache) else None)

    @property
    def counter(self) -> TokenCounter:
        """The counter of this model's tokens (its own tokenizer where ctxwin has it, else an estimate)."""
        return self._counter

    def __repr__(self) -> str:
        return (
            f"OpenAIChatBackend(model={self.model!r}, base_url={self.base_url!r}, "
            f"max_concurrency={self.max_concurrency}, cache={self.cache!r})"
        )

    def close(self) -> None:
        """Stop the worker threads and close the HTTP client (idempotent; a later call reopens them)."""
        self._connection.close()

    def __enter__(self) -> OpenAIChatBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- public API
    def complete(self, request: ChatRequest) -> ChatResult:
        """Run one request and block until it is answered (or fails).

        Raises:
            ContextOverflowError: the prompt does not fit the model; nothing was sent.
            ChatBackendError: the server failed for good (after retries when retryable).
        """
        p = self._prepare(request)
        t0 = time.perf_counter()
        value = self.cache.get(p.key)
        if isinstance(value, dict):
            return self._result(p, value, latency_s=time.perf_counter() - t0, attempts=0)
        self._check_fit(p)
        result = self._send(p)
        assert result is not SKIPPED  # nothing stops a request sent alone
        return result

    async def acomplete(self, request: ChatRequest) -> ChatResult:
        """``await``-able :meth:`complete`, usable from any event loop (runs on a worker thread)."""
        return await asyncio.wrap_future(self._connection.pool().submit(self.complete, request))

    def complete_many(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Run ``requests`` concurrently (at most ``max_concurrency`` in flight); results in order.

        Cached answers are looked up in one query, and every prompt is checked to fit before
        anything is sent. With a cache, identical requests in the batch are sent once (the
        copies are recorded as cache hits). When a request fails for good, no new requests are
        started, the ones in flight finish (and are cached), and the first error is raised with
        a note of how much was done — running the same batch again resumes it.

        Example::

            >>> from ctxwin_dagster.testing import FakeOpenAIServer
            >>> with FakeOpenAIServer() as s, OpenAIChatBackend(model="m", base_url=s.base_url) as chat:
            ...     out = chat.complete_many([ChatRequest(messages=({"role": "user", "content": q},)) for q in "ab"])
            >>> [r.text[-1] for r in out]
            ['a', 'b']
        """
        if isinstance(requests, ChatRequest):
            raise TypeError("complete_many takes a sequence of ChatRequest; use complete() for one")
        prepared = [self._prepare(r) for r in requests]
        if not prepared:
            return []
        results: list[ChatResult | None] = [None] * len(prepared)
        t0 = time.perf_counter()
        found = self.cache.get_many([p.key for p in prepared])
        dedupe = not isinstance(self.cache, NullCache)
        groups: dict[str, list[int]] = {}
        for i, p in enumerate(prepared):
            entry = found.get(p.key)
            if isinstance(entry, dict):
                results[i] = self._result(p, entry, latency_s=time.perf_counter() - t0, attempts=0)
            elif dedupe and p.key in groups:
                groups[p.key].append(i)
            else:
                groups[p.key if dedupe else f"{p.key}#{i}"] = [i]
        firsts = [prepared[idx[0]] for idx in groups.values()]
        for p in firsts:  # nothing is sent unless every prompt fits
            self._check_fit(p)
        if firsts:
            sent = send_batch(self._connection.pool, self._send, firsts, cached=dedupe)
            for idx, result in zip(groups.values(), sent, strict=True):
                results[idx[0]] = result
                for j in idx[1:]:
                    results[j] = self._duplicate(prepared[j], result)
        return [r for r in results if r is not None]

    def stats(self) -> BackendStats:
        """Ledger totals of this backend plus the cache's hit/miss counters."""
        return {"ledger": self.ledger.totals(), "cache": self.cache.stats()}

    # ----------------------------------------------------------------- preparation
    def _prepare(self, request: ChatRequest) -> Prepared:
        if self.max_reply_tokens is not None and request.max_tokens > self.max_reply_tokens:
            request = replace(request, max_tokens=self.max_reply_tokens)
        return prepare(request, backend_id=self.backend_id, model=self.model)

    def _check_fit(self, p: Prepared) -> None:
        check_fit(p, model=self.model, limits=self.limits, counter=self._counter)

    # ----------------------------------------------------------------- accounting
    def _result(self, p: Prepared, entry: Mapping[str, JSONValue], *, latency_s: float, attempts: int) -> ChatResult:
        """The result and its record for a cache entry (:func:`~.accounting.entry_result`), recorded."""
        result = entry_result(
            p, entry, backend=self.backend_id, model=self.model, cost=self._cost, latency_s=latency_s, attempts=attempts
        )
        self.ledger.add(result.record)
        return result

    def _cost(self, input_tokens: int, output_tokens: int, cached_tokens: int) -> float | None:
        """USD for a call of this model with these token counts, None when its price is unknown."""
        return estimate_cost(
            self.model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached_tokens,
            overrides=self.price_overrides,
        )

    def _duplicate(self, p: Prepared, result: ChatResult) -> ChatResult:
        """The result of ``p``, answered by ``result`` of an identical request in the same batch."""
        record = duplicate_record(p, result)
        self.ledger.add(record)
        return ChatResult(text=result.text, record=record, finish_reason=result.finish_reason)

    def _answered(self, p: Prepared, reply: Reply, attempts: Attempts) -> ChatResult:
        """The result of ``reply``, the answer to ``p``: recorded, and cached before it counts as done."""
        latency = time.perf_counter() - attempts.t0
        entry = answer_entry(p, reply, counter=self._counter, cost=self._cost, reply_format=attempts.reply_format)
        if entry["finish_reason"] == "length":
            log.info("%s: reply cut at max_tokens=%d (finish_reason='length')", self.model, p.request.max_tokens)
        if not isinstance(self.cache, NullCache):
            try:
                self.cache.put(p.key, entry)  # stored before the call counts as done
            except Exception as exc:  # noqa: BLE001 - the answer is good; only reuse is lost
                log.warning(
                    "could not write the response cache %r (%s); the answer is returned but not cached", self.cache, exc
                )
        return self._result(p, entry, latency_s=latency, attempts=attempts.count)

    def _failed(self, p: Prepared, exc: Exception, attempts: Attempts, api_key: str) -> BaseException:
        """The error to raise for ``p``, failed for good with ``exc`` (:func:`~.errors.chat_error`),
        its call recorded as failed."""
        error = chat_error(
            exc,
            attempts=attempts.count,
            deadline_s=self.retry.deadline_s if self.retry.gave_up_at_deadline(attempts.count, exc) else None,
            base_url=self.base_url,
            model=self.model,
            timeout_s=self.timeout_s,
            limits=self.limits,
            api_key=api_key,
        )
        latency = time.perf_counter() - attempts.t0
        self.ledger.add(
            failure_record(
                p, error, backend=self.backend_id, model=self.model, latency_s=latency, attempts=attempts.count
            )
        )
        return error

    # ----------------------------------------------------------------- sending
    def _send(self, p: Prepared, stop: threading.Event | None = None) -> Sent:
        """Send ``p`` with retries, record it, cache the answer; ``SKIPPED`` when ``stop`` was set first."""
        client = self._connection.client()
        schema = p.request.schema is not None
        attempts = Attempts(reply_format=self.reply_formats.get(self.backend_id, self.model) if schema else "")
        try:
            reply = post_with_retries(
                client,
                p,
                attempts,
                model=self.model,
                max_tokens_param=self.max_tokens_param,
                retry=self.retry,
                slots=self._connection.slots,
                lesser_format=partial(self.reply_formats.refused, self.backend_id, self.model),
                stop=stop,
            )
        except Exception as exc:
            error = self._failed(p, exc, attempts, client.api_key)
            if isinstance(error, ChatBackendError) and error.kind == "auth":
                raise error from None  # the SDK's exception carries the request headers
            if error is exc:
                raise
            raise error from exc
        return reply if reply is SKIPPED else self._answered(p, reply, attempts)
