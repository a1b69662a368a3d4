"""A chat backend over the ``openai`` SDK, for OpenAI or any OpenAI-compatible server.

:class:`OpenAIChatBackend` implements :class:`~ctxwin_dagster.models.base.ChatBackend`. The
server is chosen by ``base_url``: OpenAI when None, else vLLM (``http://host:8000/v1``), Ollama
(``http://localhost:11434/v1``), llama.cpp's ``llama-server`` (``http://localhost:8080/v1``),
LM Studio (``http://localhost:1234/v1``) or anything speaking the same API.

What it adds to the SDK:

* **Bounded concurrency** — :meth:`~OpenAIChatBackend.complete_many` runs requests at once, at
  most ``max_concurrency`` in flight, and returns results in request order. Calls run on an event
  loop owned by the backend (in its own thread), so the blocking methods work from plain code,
  from worker threads and from inside a running event loop alike.
* **Retries** — on 429 (``Retry-After`` honoured), 408/409, 5xx, timeouts, dropped connections
  and malformed bodies, with exponential backoff and jitter; the SDK's own retries are off, and
  every record says how many attempts a call took.
* **Clear errors** — :class:`ChatBackendError` says what went wrong and what to check
  (unreachable server, unknown model, missing API key …); it never contains the key.
* **Fit before send** — a prompt that does not fit the model's context (with ``max_tokens``
  reserved for the reply) raises :class:`~ctxwin_dagster.core.fit.ContextOverflowError` and is
  never sent.
* **Response cache** — a :class:`~ctxwin_dagster.models.cache.ResponseCache` keyed by everything
  that determines the answer; a finished call is stored at once, so a rerun after a crash only
  repeats unfinished calls.
* **Accounting** — every call (or cache hit) adds a :class:`~ctxwin_dagster.models.base.CallRecord`
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
import concurrent.futures
import email.utils
import json
import logging
import os
import random
import re
import threading
import time
import weakref
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
import openai
from openai.types.chat import ChatCompletion

from ..core.fit import ContextOverflowError, check_fit
from ..core.limits import ModelLimits, get_model_limits
from ..core.tokens import TokenCounter, get_token_counter
from .base import CallRecord, ChatRequest, ChatResult, Ledger
from .cache import NullCache, ResponseCache
from .pricing import PriceOverrides, estimate_cost

__all__ = ["ChatBackendError", "OpenAIChatBackend"]

log = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
_PLACEHOLDER_KEY = "sk-no-key-required"
_CACHE_FORMAT = 1
# Models that take ``max_completion_tokens`` instead of ``max_tokens`` on OpenAI's API.
_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")
_PER_SHARD = 4  # requests in flight per HTTP connection pool (see _runtime)
_MAX_SHARDS = 8
_KEY_PATTERN = re.compile(r"\b(sk-[A-Za-z0-9_\-*]{2})[A-Za-z0-9_\-*]{4,}")

ErrorKind = Literal[
    "unreachable", "timeout", "rate_limited", "server_error", "malformed", "model_not_found",
    "auth", "permission", "quota", "bad_request",
]


class ChatBackendError(RuntimeError):
    """A chat call failed for good; the message says what to check.

    Attributes:
        kind: ``"unreachable"``, ``"timeout"``, ``"rate_limited"``, ``"server_error"``,
            ``"malformed"``, ``"model_not_found"``, ``"auth"``, ``"permission"``, ``"quota"`` or
            ``"bad_request"``.
        base_url: the server's base URL.
        model: the model asked for.
        status: the HTTP status, when there was one.
        attempts: how many times the request was sent.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind,
        base_url: str,
        model: str,
        status: int | None = None,
        attempts: int = 0,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.base_url = base_url
        self.model = model
        self.status = status
        self.attempts = attempts

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes (keyword-only init)
        return (_rebuild_error, (str(self), self.kind, self.base_url, self.model, self.status, self.attempts))


def _rebuild_error(message: str, kind: ErrorKind, base_url: str, model: str, status: int | None, attempts: int) -> ChatBackendError:
    return ChatBackendError(message, kind=kind, base_url=base_url, model=model, status=status, attempts=attempts)


class _Malformed(Exception):
    """The server answered 200 with a body that is not a chat completion."""


@dataclass(frozen=True, slots=True)
class _Prepared:
    request: ChatRequest
    messages: list[dict[str, Any]]
    key: str
    input_chars: int


@dataclass(slots=True)
class _Runtime:
    pid: int
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    clients: list[openai.AsyncOpenAI]
    semaphore: asyncio.Semaphore
    turn: int = 0

    def client(self) -> openai.AsyncOpenAI:
        """The next client, round-robin (called on the loop thread only)."""
        self.turn = (self.turn + 1) % len(self.clients)
        return self.clients[self.turn]


@dataclass(frozen=True, slots=True)
class _Failure:
    """How one failed attempt is handled: retried (after ``delay_s``) or raised."""

    retry: bool
    error: BaseException  # what to raise when not retried
    cause: BaseException  # the exception the attempt failed with
    delay_s: float | None = None  # the server's Retry-After, when it sent one


_SKIPPED = object()


def _stop_runtime(rt: _Runtime) -> None:
    """Close the client and stop the event loop thread of ``rt`` (in the process that made it)."""
    if rt.pid != os.getpid() or not rt.thread.is_alive():
        return
    if threading.current_thread() is rt.thread:  # pragma: no cover - collected on its own loop
        rt.loop.stop()
        return
    async def close_all() -> None:
        await asyncio.gather(*(c.close() for c in rt.clients), return_exceptions=True)

    try:
        asyncio.run_coroutine_threadsafe(close_all(), rt.loop).result(timeout=5)
    except (concurrent.futures.TimeoutError, RuntimeError):  # pragma: no cover
        pass
    rt.loop.call_soon_threadsafe(rt.loop.stop)
    rt.thread.join(timeout=5)
    if not rt.thread.is_alive():
        rt.loop.close()


def _normalize_base_url(url: str) -> str:
    raw = url.strip()
    parts = urlsplit(raw)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"base_url must be an http(s) URL such as 'http://localhost:8000/v1' (vLLM) or "
            f"'http://localhost:11434/v1' (Ollama); got {url!r}"
        )
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), parts.query, ""))


def _content_chars(content: Any) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(
            len(p["text"]) if isinstance(p, Mapping) and isinstance(p.get("text"), str) else len(p) if isinstance(p, str) else 0
            for p in content
        )
    return len(str(content))


def _retry_after_s(response: httpx.Response | None) -> float | None:
    """Seconds to wait from ``Retry-After`` / ``retry-after-ms`` headers, or None."""
    if response is None:
        return None
    headers = response.headers
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and inner.get("message"):
            return str(inner["message"])
        if body.get("message"):
            return str(body["message"])
    return str(exc.message or "")


class OpenAIChatBackend:
    """Chat completions from OpenAI or an OpenAI-compatible server (see the module docstring).

    Args:
        model: the model name the server serves (``"gpt-4o"``, ``"llama3.1:8b"``, a vLLM model path).
        base_url: the server's API root including ``/v1``; None means OpenAI (or the
            ``OPENAI_BASE_URL`` environment variable when set).
        api_key: the key; None reads ``OPENAI_API_KEY``. A local server without a key gets a
            placeholder. The key is never logged nor put in an error message.
        cache: a :class:`ResponseCache` to reuse answers across runs; None caches nothing.
        max_concurrency: most requests in flight at once (per backend instance).
        max_retries: retries after the first attempt for retryable failures.
        timeout_s: seconds one attempt may take.
        ledger: where call records go; a new :class:`Ledger` when None.
        limits: the model's token limits; default ``get_model_limits(model)``.
        price_overrides: ``{model: (USD per 1M input, USD per 1M output)}`` for models
            genai-prices does not know (local models: ``(0.0, 0.0)``).
        backoff_base_s / backoff_max_s: exponential backoff ``base * 2**n`` capped at max,
            with jitter. A server's ``Retry-After`` is honoured up to ``max(backoff_max_s, 60)``.
        cache_namespace: the backend part of cache keys; default the normalized base URL (or
            ``"openai"``). Set it to keep cache hits when the same server moves to a new URL.
        max_tokens_param: send the completion limit as ``"max_tokens"`` or
            ``"max_completion_tokens"``; None picks ``max_completion_tokens`` for OpenAI's
            reasoning models (o1/o3/o4/gpt-5) and ``max_tokens`` otherwise.

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
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model is empty; pass the name the server serves, e.g. model='gpt-4o' or 'llama3.1:8b'")
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an int >= 1; got {max_concurrency!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0 (0 = no retries); got {max_retries!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds; got {timeout_s!r}")
        if backoff_base_s < 0:
            raise ValueError(f"backoff_base_s must be >= 0; got {backoff_base_s!r}")
        if backoff_max_s < backoff_base_s:
            raise ValueError(f"backoff_max_s ({backoff_max_s}) must be >= backoff_base_s ({backoff_base_s})")
        if limits is not None and not isinstance(limits, ModelLimits):
            raise TypeError(f"limits must be a ModelLimits; got {type(limits).__name__}")
        if ledger is not None and not isinstance(ledger, Ledger):
            raise TypeError(f"ledger must be a Ledger; got {type(ledger).__name__}")
        if cache is not None and not all(hasattr(cache, m) for m in ("get", "put", "get_many")):
            raise TypeError(f"cache must be a ResponseCache or NullCache; got {type(cache).__name__}")
        if max_tokens_param not in (None, "max_tokens", "max_completion_tokens"):
            raise ValueError(f"max_tokens_param must be 'max_tokens', 'max_completion_tokens' or None; got {max_tokens_param!r}")
        if price_overrides is not None and not isinstance(price_overrides, Mapping):
            raise TypeError("price_overrides must map model -> (USD per 1M input, USD per 1M output)")

        resolved = base_url if base_url is not None else (os.environ.get("OPENAI_BASE_URL") or None)
        self.base_url = _normalize_base_url(resolved) if resolved else OPENAI_BASE_URL
        self.is_openai = self.base_url == OPENAI_BASE_URL
        self.backend_id = cache_namespace or ("openai" if self.is_openai else self.base_url)
        self.model = model
        self.cache = cache if cache is not None else NullCache()
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.timeout_s = float(timeout_s)
        self.ledger = ledger if ledger is not None else Ledger()
        self.limits = limits if limits is not None else get_model_limits(model)
        self.price_overrides = dict(price_overrides) if price_overrides else None
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        if max_tokens_param is None:
            bare = model.split("/")[-1].lower()
            max_tokens_param = "max_completion_tokens" if self.is_openai and bare.startswith(_REASONING_PREFIXES) else "max_tokens"
        self.max_tokens_param = max_tokens_param
        self._counter: TokenCounter = get_token_counter(model)

        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not key:
            if self.is_openai:
                raise ValueError(
                    "no API key for OpenAI: set the OPENAI_API_KEY environment variable or pass api_key=…; "
                    "for a local server pass base_url= (e.g. 'http://localhost:11434/v1')"
                )
            key = _PLACEHOLDER_KEY
        # The SDK client holds the key; this object keeps no other copy of it.
        # One TLS context (about 40 ms to build) shared by every HTTP pool of this backend.
        self._ssl_context = httpx.create_ssl_context()
        self._template = openai.AsyncOpenAI(
            api_key=key,
            base_url=self.base_url,
            max_retries=0,
            timeout=self.timeout_s,
            http_client=openai.DefaultAsyncHttpxClient(verify=self._ssl_context),
        )
        del key
        self._rt_lock = threading.Lock()
        self._rt: _Runtime | None = None
        self._finalizer: weakref.finalize | None = None

    def __repr__(self) -> str:
        return (
            f"OpenAIChatBackend(model={self.model!r}, base_url={self.base_url!r}, "
            f"max_concurrency={self.max_concurrency}, cache={self.cache!r})"
        )

    # ----------------------------------------------------------------- runtime
    def _runtime(self) -> _Runtime:
        """The backend's event loop thread and client (created on first use, and after a fork)."""
        rt = self._rt
        if rt is not None and rt.pid == os.getpid() and rt.thread.is_alive():
            return rt
        with self._rt_lock:
            rt = self._rt
            if rt is not None and rt.pid == os.getpid() and rt.thread.is_alive():
                return rt
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            thread = threading.Thread(target=run, name=f"ctxwin-chat-{self.model}", daemon=True)
            thread.start()
            ready.wait()
            # httpcore's pool does work proportional to (waiting requests x connections) on every
            # request; a few small pools instead of one big one cut the client's CPU per call by
            # about a third at 16 in flight, which shows as throughput on a busy machine.
            shards = min(_MAX_SHARDS, -(-self.max_concurrency // _PER_SHARD))
            per_shard = -(-self.max_concurrency // shards)
            clients = [
                self._template.copy(
                    http_client=openai.DefaultAsyncHttpxClient(
                        verify=self._ssl_context,
                        limits=httpx.Limits(
                            max_connections=max(32, 2 * per_shard), max_keepalive_connections=max(8, per_shard)
                        ),
                        timeout=httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0)),
                    )
                )
                for _ in range(shards)
            ]
            self._rt = rt = _Runtime(os.getpid(), loop, thread, clients, asyncio.Semaphore(self.max_concurrency))
            # Stops the loop thread when the backend is garbage-collected without close().
            self._finalizer = weakref.finalize(self, _stop_runtime, rt)
            return rt

    def _run(self, coro: Awaitable[Any]) -> Any:
        rt = self._runtime()
        if threading.current_thread() is rt.thread:
            raise RuntimeError("a blocking chat method was called on the backend's own event loop; use `await acomplete()`")
        future = asyncio.run_coroutine_threadsafe(coro, rt.loop)  # type: ignore[arg-type]
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt: stop the batch instead of finishing it unseen
            raise

    def close(self) -> None:
        """Close the HTTP client and stop the backend's event loop thread (idempotent)."""
        with self._rt_lock:
            rt, self._rt = self._rt, None
            finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()
        if rt is not None:
            _stop_runtime(rt)

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
        hit = self._lookup(p)
        if hit is not None:
            return hit
        self._check_fit(p)
        return self._run(self._send(p))

    async def acomplete(self, request: ChatRequest) -> ChatResult:
        """``await``-able :meth:`complete`, usable from any event loop."""
        p = self._prepare(request)
        hit = await asyncio.to_thread(self._lookup_or_check, p)
        if hit is not None:
            return hit
        rt = self._runtime()
        if asyncio.get_running_loop() is rt.loop:
            return await self._send(p)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._send(p), rt.loop))

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
            if p.key in found:
                results[i] = self._from_cache(p, found[p.key], time.perf_counter() - t0)
            elif dedupe and p.key in groups:
                groups[p.key].append(i)
            else:
                groups[p.key if dedupe else f"{p.key}#{i}"] = [i]
        firsts = [prepared[idx[0]] for idx in groups.values()]
        for p in firsts:  # nothing is sent unless every prompt fits
            self._check_fit(p)
        if firsts:
            sent = self._run(self._send_many(firsts))
            for idx, result in zip(groups.values(), sent, strict=True):
                results[idx[0]] = result
                for j in idx[1:]:
                    results[j] = self._duplicate(prepared[j], result)
        return [r for r in results if r is not None]

    def stats(self) -> dict[str, Any]:
        """Ledger totals of this backend plus the cache's hit/miss counters."""
        return {"ledger": self.ledger.totals(), "cache": self.cache.stats()}

    # ----------------------------------------------------------------- preparation
    def _prepare(self, request: ChatRequest) -> _Prepared:
        if not isinstance(request, ChatRequest):
            raise TypeError(f"expected a ChatRequest; got {type(request).__name__}")
        if isinstance(request.messages, str | bytes) or not request.messages:
            raise ValueError("ChatRequest.messages must be a non-empty sequence of {'role', 'content'} dicts")
        messages: list[dict[str, Any]] = []
        for i, m in enumerate(request.messages):
            if not isinstance(m, Mapping) or "role" not in m:
                raise ValueError(f"ChatRequest.messages[{i}] must be a mapping with 'role' and 'content'; got {m!r}")
            messages.append(dict(m))
        if not isinstance(request.max_tokens, int) or request.max_tokens < 1:
            raise ValueError(f"ChatRequest.max_tokens must be an int >= 1; got {request.max_tokens!r}")
        if not 0 <= request.temperature <= 2:
            raise ValueError(f"ChatRequest.temperature must be between 0 and 2; got {request.temperature!r}")
        if not 0 < request.top_p <= 1:
            raise ValueError(f"ChatRequest.top_p must be in (0, 1]; got {request.top_p!r}")
        key = ResponseCache.make_key(
            "chat",
            self.backend_id,
            self.model,
            messages,
            request.temperature,
            request.top_p,
            request.max_tokens,
            request.json_mode,
            request.prompt_version,
        )
        return _Prepared(request, messages, key, sum(_content_chars(m.get("content")) for m in messages))

    def _check_fit(self, p: _Prepared) -> None:
        limits = self.limits
        if p.request.max_tokens > limits.max_completion_tokens:
            raise ValueError(
                f"max_tokens={p.request.max_tokens} exceeds {self.model!r}'s max completion of "
                f"{limits.max_completion_tokens} tokens (limits from {limits.source}); lower max_tokens"
                + ("" if limits.known else ", or pass limits=ModelLimits(...) with the model's real limits")
            )
        limit = limits.available_prompt_tokens(p.request.max_tokens)
        if self._token_upper_bound(p.messages) <= limit:
            return  # fits for sure, without tokenizing
        report = check_fit(p.messages, limits=limits, reserved_completion=p.request.max_tokens, counter=self._counter)
        if not report.fits:
            hint = "" if limits.known else (
                f"; the limits of {self.model!r} are defaults for an unknown model — pass "
                "limits=ModelLimits(...) with its real context length"
            )
            raise ContextOverflowError(
                f"prompt of {report.prompt_tokens} tokens does not fit {self.model!r}: the limit is {report.limit} "
                f"(context {report.context_length} minus {report.reserved_completion} reserved for the reply), "
                f"over by {report.overflow}. Shorten the prompt (ensure_fit), lower max_tokens, or use a model "
                f"with a larger context{hint}. Nothing was sent."
            )

    def _token_upper_bound(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """An upper bound of ``count_messages`` (a byte-level BPE token covers at least one byte)."""
        overhead = self._counter.overhead
        total = overhead.reply_priming
        for m in messages:
            total += overhead.per_message
            for key, value in m.items():
                if value is None:
                    continue
                if key == "content":
                    if isinstance(value, list):
                        total += sum(
                            len(part["text"].encode("utf-8")) if isinstance(part, Mapping) and isinstance(part.get("text"), str)
                            else len(part.encode("utf-8")) if isinstance(part, str) else 0
                            for part in value
                        )
                    else:
                        total += len(str(value).encode("utf-8"))
                elif key in ("role", "name"):
                    total += len(str(value).encode("utf-8")) + (overhead.per_name if key == "name" else 0)
        return total

    def _lookup(self, p: _Prepared) -> ChatResult | None:
        t0 = time.perf_counter()
        value = self.cache.get(p.key)
        return None if value is None else self._from_cache(p, value, time.perf_counter() - t0)

    def _lookup_or_check(self, p: _Prepared) -> ChatResult | None:
        hit = self._lookup(p)
        if hit is None:
            self._check_fit(p)
        return hit

    def _from_cache(self, p: _Prepared, value: Mapping[str, Any], latency_s: float) -> ChatResult:
        text = str(value.get("text", ""))
        input_tokens = int(value.get("input_tokens", 0))
        output_tokens = int(value.get("output_tokens", 0))
        cached_tokens = int(value.get("cached_tokens", 0))
        # The cost of the work is the cost of the call this hit reuses (paid_usd is 0); an entry
        # without a recorded price is priced from its stored token counts.
        cost = value.get("cost_usd")
        if not isinstance(cost, int | float):
            cost = self._cost(input_tokens, output_tokens, cached_tokens)
        record = CallRecord(
            backend=self.backend_id,
            model=self.model,
            tags=p.request.tags,
            prompt_version=p.request.prompt_version,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached_tokens,
            input_chars=p.input_chars,
            output_chars=len(text),
            latency_s=latency_s,
            cost_usd=None if cost is None else float(cost),
            cache_hit=True,
            usage_counted=bool(value.get("usage_counted", False)),
            attempts=0,
        )
        self.ledger.add(record)
        return ChatResult(text=text, record=record, finish_reason=value.get("finish_reason"))

    def _cost(self, input_tokens: int, output_tokens: int, cached_tokens: int) -> float | None:
        """USD for a call of this model with these token counts, None when its price is unknown."""
        return estimate_cost(
            self.model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached_tokens,
            overrides=self.price_overrides,
        )

    def _duplicate(self, p: _Prepared, result: ChatResult) -> ChatResult:
        # Keeps its twin's token counts and cost of the work; as a cache hit it paid nothing.
        record = replace(result.record, tags=p.request.tags, latency_s=0.0, cache_hit=True, attempts=0)
        self.ledger.add(record)
        return ChatResult(text=result.text, record=record, finish_reason=result.finish_reason)

    # ----------------------------------------------------------------- sending
    def _params(self, p: _Prepared) -> dict[str, Any]:
        r = p.request
        params: dict[str, Any] = {
            "model": self.model,
            "messages": p.messages,
            "temperature": r.temperature,
            "top_p": r.top_p,
            self.max_tokens_param: r.max_tokens,
        }
        if r.json_mode:
            params["response_format"] = {"type": "json_object"}
        return params

    async def _send_many(self, prepared: list[_Prepared]) -> list[ChatResult]:
        stop = asyncio.Event()
        first_error: list[BaseException] = []

        async def one(p: _Prepared) -> Any:
            try:
                return await self._send(p, stop=stop)
            except Exception as exc:
                if not first_error:
                    first_error.append(exc)
                stop.set()
                raise

        outcomes = await asyncio.gather(*(one(p) for p in prepared), return_exceptions=True)
        if first_error:
            exc = first_error[0]
            done = sum(isinstance(o, ChatResult) for o in outcomes)
            skipped = sum(o is _SKIPPED for o in outcomes)
            failed = len(outcomes) - done - skipped
            exc.add_note(
                f"complete_many: {done} of {len(outcomes)} requests finished"
                f"{' and were cached' if not isinstance(self.cache, NullCache) else ''}, {failed} failed, "
                f"{skipped} were not sent; fix the cause and run the batch again to resume"
            )
            raise exc
        for o in outcomes:  # e.g. a CancelledError
            if isinstance(o, BaseException):
                raise o
        return outcomes  # type: ignore[return-value]

    async def _send(self, p: _Prepared, *, stop: asyncio.Event | None = None) -> Any:
        rt = self._runtime()
        params = self._params(p)
        t0 = 0.0  # set when the first attempt starts: latency excludes waiting for a slot
        attempts = 0
        while True:
            async with rt.semaphore:
                if attempts == 0:
                    if stop is not None and stop.is_set():
                        return _SKIPPED
                    t0 = time.perf_counter()
                attempts += 1
                client = rt.client()
                try:
                    # ``post`` with a plain body is the SDK's documented way to call an endpoint; it
                    # skips ``create``'s per-call TypedDict transform of params this backend built itself.
                    response = await client.post("/chat/completions", body=params, cast_to=ChatCompletion)
                    text, finish, usage, served_model = self._parse(response)
                    break
                except Exception as exc:  # noqa: BLE001 - classified below; CancelledError passes
                    failure = self._classify(exc, attempts, client)
            if not failure.retry or attempts > self.max_retries:
                error = failure.error
                if failure.retry:  # retries exhausted
                    error = self._exhausted(failure.cause, attempts)
                if isinstance(error, ChatBackendError):
                    error.attempts = attempts
                self.ledger.add(
                    CallRecord(
                        backend=self.backend_id,
                        model=self.model,
                        tags=p.request.tags,
                        prompt_version=p.request.prompt_version,
                        latency_s=time.perf_counter() - t0,
                        attempts=attempts,
                        ok=False,
                        error=f"{type(error).__name__}: {error}"[:500],
                    )
                )
                if isinstance(error, ChatBackendError) and error.kind == "auth":
                    raise error from None  # the SDK's exception carries the request headers
                if error is failure.cause:
                    raise error
                raise error from failure.cause
            await asyncio.sleep(self._delay(attempts, failure.delay_s))

        latency = time.perf_counter() - t0
        if usage is not None:
            input_tokens, output_tokens, cached_tokens, counted = *usage, False
        else:
            input_tokens = self._counter.count_messages(p.messages)
            output_tokens, cached_tokens, counted = self._counter.count(text), 0, True
        cost = self._cost(input_tokens, output_tokens, cached_tokens)
        record = CallRecord(
            backend=self.backend_id,
            model=self.model,
            tags=p.request.tags,
            prompt_version=p.request.prompt_version,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached_tokens,
            input_chars=p.input_chars,
            output_chars=len(text),
            latency_s=latency,
            cost_usd=cost,
            usage_counted=counted,
            attempts=attempts,
        )
        if finish == "length":
            log.info("%s: reply cut at max_tokens=%d (finish_reason='length')", self.model, p.request.max_tokens)
        if not isinstance(self.cache, NullCache):
            entry = {
                "format": _CACHE_FORMAT,
                "text": text,
                "finish_reason": finish,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cached_tokens": cached_tokens,
                "usage_counted": counted,
                "served_model": served_model,
                "cost_usd": cost,
            }
            try:
                # Stored before the call counts as done. On the loop thread when the file is free
                # (a fraction of a millisecond), else on a worker thread that waits for the lock.
                try_put = getattr(self.cache, "try_put", None)
                if try_put is None or not try_put(p.key, entry):
                    await asyncio.to_thread(self.cache.put, p.key, entry)
            except Exception as exc:  # noqa: BLE001 - the answer is good; only reuse is lost
                log.warning("could not write the response cache %r (%s); the answer is returned but not cached", self.cache, exc)
        self.ledger.add(record)
        return ChatResult(text=text, record=record, finish_reason=finish)

    @staticmethod
    def _parse(response: Any) -> tuple[str, str | None, tuple[int, int, int] | None, str]:
        choices = getattr(response, "choices", None)
        if not choices:
            raise _Malformed(f"the response has no choices: {str(response)[:200]!r}")
        choice = choices[0]
        message = getattr(choice, "message", None)
        if message is None:
            raise _Malformed("the first choice has no message")
        content = getattr(message, "content", None)
        if content is not None and not isinstance(content, str):
            raise _Malformed(f"message content is a {type(content).__name__}, not text")
        usage = getattr(response, "usage", None)
        counts = None
        if usage is not None and isinstance(getattr(usage, "prompt_tokens", None), int):
            details = getattr(usage, "prompt_tokens_details", None)
            cached = getattr(details, "cached_tokens", None) if details is not None else None
            counts = (usage.prompt_tokens, int(getattr(usage, "completion_tokens", 0) or 0), int(cached or 0))
        return content or "", getattr(choice, "finish_reason", None), counts, str(getattr(response, "model", "") or "")

    def _delay(self, attempts: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, max(self.backoff_max_s, 60.0))
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempts - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not crypto

    # ----------------------------------------------------------------- errors
    def _err(self, message: str, kind: ErrorKind, status: int | None = None) -> ChatBackendError:
        return ChatBackendError(message, kind=kind, base_url=self.base_url, model=self.model, status=status)

    def _scrub(self, text: str, client: openai.AsyncOpenAI) -> str:
        key = client.api_key
        if key and key != _PLACEHOLDER_KEY and len(key) >= 4:
            text = text.replace(key, "***")
        return _KEY_PATTERN.sub(r"\1***", text)

    def _classify(self, exc: Exception, attempts: int, client: openai.AsyncOpenAI) -> _Failure:
        """Whether a failed attempt is retried, and the error to raise if not."""
        where = f"{self.base_url} (model {self.model!r})"
        if isinstance(exc, openai.APITimeoutError):
            return _Failure(True, exc, exc)
        if isinstance(exc, openai.APIConnectionError):
            return _Failure(True, exc, exc)
        if isinstance(exc, (_Malformed, json.JSONDecodeError, openai.APIResponseValidationError)):
            return _Failure(True, exc, exc)
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            detail = self._scrub(_server_message(exc), client)
            code = str((exc.body or {}).get("code") or "") if isinstance(exc.body, Mapping) else str(getattr(exc, "code", "") or "")
            if status == 429 and code == "insufficient_quota":
                return _Failure(False, cause=exc, error=self._err(
                    f"{where} says the account is out of quota (429 insufficient_quota): check the plan and billing "
                    f"of the API key. Server: {detail}", "quota", status))
            if status == 429 or status in (408, 409) or status >= 500:
                return _Failure(True, exc, exc, _retry_after_s(exc.response) if status == 429 else None)
            if status == 401:
                return _Failure(False, cause=exc, error=self._err(
                    f"{where} rejected the API key (401 Unauthorized): set OPENAI_API_KEY (or pass api_key=) to a "
                    "valid key for this server", "auth", status))
            if status == 403:
                return _Failure(False, cause=exc, error=self._err(
                    f"{where} refused the request (403 Forbidden): the API key has no access to this model or "
                    f"endpoint. Server: {detail}", "permission", status))
            if status == 404:
                return _Failure(False, cause=exc, error=self._err(
                    f"model {self.model!r} not found at {self.base_url} (404): check the model name the server "
                    f"serves (GET {self.base_url}/models lists them; for Ollama run `ollama pull {self.model}`) "
                    f"and that base_url ends with the API root such as /v1. Server: {detail}",
                    "model_not_found", status))
            lowered = detail.lower()
            if status in (400, 413, 422) and (
                code == "context_length_exceeded" or "context length" in lowered or "context window" in lowered
                or "maximum context" in lowered or "too many tokens" in lowered
            ):
                return _Failure(False, cause=exc, error=ContextOverflowError(
                    f"{where} says the prompt is too long for the model ({status}): {detail}. The local limits "
                    f"({self.limits.context_length} tokens context, source {self.limits.source}) are larger than the "
                    "server's; pass limits=ModelLimits(...) with the server's real context length (e.g. vLLM "
                    "--max-model-len, Ollama num_ctx)"))
            return _Failure(False, cause=exc, error=self._err(
                f"{where} rejected the request ({status}): {detail}. Check the request settings the server "
                "supports (temperature, top_p, max_tokens, response_format)", "bad_request", status))
        return _Failure(False, exc, exc)  # a bug or an unexpected error: do not retry blindly

    def _exhausted(self, exc: BaseException, attempts: int) -> ChatBackendError:
        """The error for a retryable failure that kept happening."""
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if isinstance(exc, openai.APITimeoutError):
            return self._err(
                f"the chat server at {self.base_url} did not answer within {self.timeout_s:g} s ({tries}, model "
                f"{self.model!r}): raise timeout_s, lower max_concurrency, or check the server's load",
                "timeout")
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            return self._err(
                f"cannot reach the chat server at {self.base_url} ({tries}; {type(cause).__name__}: {cause}). "
                "Check that the server is running and listening there (`vllm serve …`, `ollama serve`, "
                "llama.cpp `llama-server`, LM Studio's server), that host, port and the /v1 path of base_url "
                "are right, and that no firewall or proxy is in the way",
                "unreachable")
        if isinstance(exc, openai.APIStatusError) and exc.status_code == 429:
            return self._err(
                f"{self.base_url} kept rate-limiting model {self.model!r} (429, {tries}): lower max_concurrency, "
                "raise max_retries or backoff_max_s, or check the key's rate limits", "rate_limited", 429)
        if isinstance(exc, openai.APIStatusError):
            return self._err(
                f"{self.base_url} kept failing for model {self.model!r} ({exc.status_code}, {tries}): "
                f"{_server_message(exc)[:300]}. Check the server's logs and health", "server_error", exc.status_code)
        return self._err(
            f"{self.base_url} sent malformed responses for model {self.model!r} ({tries}; {exc}). "
            "Check that base_url points at an OpenAI-compatible API root (usually ending in /v1)", "malformed")
