"""How the requests of :class:`~ctxwin_dagster.backends.chat.backend.OpenAIChatBackend` reach
the server, apart from what they ask and how they are accounted.

* :class:`Connection` — the SDK client and the worker threads, made anew after
  :meth:`~Connection.close` and in a forked process;
* :func:`post_with_retries` — one request through the retry policy, asked again with less
  structured output when the server refuses a reply format; :class:`Attempts` says how far it got;
* :func:`send_batch` — requests at once on the worker threads: the first that fails for good
  stops the ones not started yet and is raised with a note of how much was done.
"""

from __future__ import annotations

import enum
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final, Literal

import httpx
import openai
from openai.types.chat import ChatCompletion

from ctxwin_dagster.backends.base import ChatResult
from ctxwin_dagster.backends.calls.retry import RetryPolicy
from ctxwin_dagster.backends.calls.secrets import http_client
from ctxwin_dagster.backends.chat.messages import Prepared, Reply, parse_completion, request_body

__all__ = ["SKIPPED", "Attempts", "Connection", "Sent", "Skipped", "post_with_retries", "send_batch"]


class Skipped(enum.Enum):
    """What sending a request gives when the batch was stopped before its first attempt."""

    SKIPPED = "skipped"


SKIPPED: Final = Skipped.SKIPPED
#: What sending one request gives: its result, or :data:`SKIPPED`.
Sent = ChatResult | Literal[Skipped.SKIPPED]


class Connection:
    """The SDK client of a chat backend for ``base_url`` with ``api_key`` (its retries off: they
    are the backend's), its ``workers`` threads (started on first use, their names prefixed with
    ``name``) and as many :attr:`slots` for requests in flight."""

    def __init__(self, *, api_key: str, base_url: str, timeout: httpx.Timeout, workers: int, name: str) -> None:
        self._client = openai.OpenAI(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=timeout,
            http_client=http_client(),  # error bodies come back with the key masked
        )
        self.slots = threading.BoundedSemaphore(workers)
        self._size = workers
        self._name = name
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._workers: ThreadPoolExecutor | None = None

    def client(self) -> openai.OpenAI:
        """The SDK client: made anew after :meth:`close` and in a forked process."""
        if self._client.is_closed() or self._pid != os.getpid():
            with self._lock:
                if self._client.is_closed() or self._pid != os.getpid():
                    self._client = self._client.copy(http_client=http_client())
                    self._workers = None  # a forked process has none of its parent's threads
                    self._pid = os.getpid()
        return self._client

    def pool(self) -> ThreadPoolExecutor:
        """The worker threads (started on first use)."""
        self.client()
        with self._lock:
            if self._workers is None:
                self._workers = ThreadPoolExecutor(self._size, thread_name_prefix=self._name)
            return self._workers

    def close(self) -> None:
        """Stop the worker threads and close the HTTP client (idempotent; a later call reopens them)."""
        with self._lock:
            workers, self._workers = self._workers, None
        if self._pid != os.getpid():
            return  # a forked process: the client and threads are its parent's
        if workers is not None:
            workers.shutdown(wait=True, cancel_futures=True)
        self._client.close()


@dataclass
class Attempts:
    """How far sending one request got: the reply format it asks with, the attempts made, and
    when the first attempt started (latency excludes waiting for a concurrency slot)."""

    reply_format: str
    count: int = 0
    t0: float = 0.0


def post_with_retries(
    client: openai.OpenAI,
    p: Prepared,
    attempts: Attempts,
    *,
    model: str,
    max_tokens_param: str,
    retry: RetryPolicy,
    slots: threading.BoundedSemaphore,
    lesser_format: Callable[[str, openai.APIStatusError], str | None],
    stop: threading.Event | None = None,
) -> Reply | Literal[Skipped.SKIPPED]:
    """The reply (:func:`~ctxwin_dagster.backends.chat.messages.parse_completion`) of ``model`` to
    ``p``, each attempt holding one of ``slots``, retried by ``retry``; ``max_tokens_param`` names
    the reply's token limit in the body (:func:`~ctxwin_dagster.backends.chat.messages.request_body`).

    When the server refuses the reply format, ``lesser_format(reply_format, error)`` names the
    one to ask with instead (None: the error is raised). :data:`SKIPPED` when ``stop`` was set
    before the first attempt. ``attempts`` counts the attempts as they are made.
    """
    while True:
        body = request_body(p, model=model, max_tokens_param=max_tokens_param, reply_format=attempts.reply_format)
        try:
            for attempt in retry.retrying():
                with attempt, slots:
                    if attempts.count == 0:
                        if stop is not None and stop.is_set():
                            return SKIPPED
                        attempts.t0 = time.perf_counter()
                    attempts.count += 1
                    # ``post`` with a plain body is the SDK's documented way to call an endpoint; it
                    # skips ``create``'s per-call TypedDict transform of a body the backend built itself.
                    response = client.post("/chat/completions", body=body, cast_to=ChatCompletion)
                    reply = parse_completion(response)
            return reply
        except openai.APIStatusError as exc:  # a server without structured output: ask with less
            fmt = attempts.reply_format
            lower = lesser_format(fmt, exc) if fmt else None
            if lower is None:
                raise
            attempts.reply_format = lower


def send_batch(
    pool: Callable[[], ThreadPoolExecutor],
    send: Callable[[Prepared, threading.Event], Sent],
    prepared: list[Prepared],
    *,
    cached: bool,
) -> list[ChatResult]:
    """``send(p, stop)`` of each of ``prepared`` at once on the worker threads of ``pool()``;
    the results in order.

    When one fails for good, ``stop`` is set: requests not started yet are not sent (``send``
    gives :data:`SKIPPED`), the ones in flight finish, and the first error is raised with a note
    of how much was done (``cached``: the finished ones were cached, so running the batch again
    resumes it).
    """
    stop = threading.Event()
    errors: list[Exception] = []  # in the order they happened

    def one(p: Prepared) -> Sent | Exception:
        try:
            return send(p, stop)
        except Exception as exc:  # noqa: BLE001 - kept as its outcome; the batch raises the first
            errors.append(exc)
            stop.set()
            return exc

    futures = [pool().submit(one, p) for p in prepared]
    try:
        outcomes = [f.result() for f in futures]
    except BaseException:  # e.g. KeyboardInterrupt: start nothing more, let calls in flight finish
        stop.set()
        raise
    if errors:
        exc = errors[0]
        done = sum(isinstance(o, ChatResult) for o in outcomes)
        skipped = sum(o is SKIPPED for o in outcomes)
        exc.add_note(
            f"complete_many: {done} of {len(outcomes)} requests finished"
            f"{' and were cached' if cached else ''}, {len(errors)} failed, "
            f"{skipped} were not sent; fix the cause and run the batch again to resume"
        )
        raise exc
    return [o for o in outcomes if isinstance(o, ChatResult)]  # every one, when none failed
