"""The one retry policy for calls to an OpenAI-compatible API (chat, embeddings, the judge).

:func:`is_transient` is the classifier that drives it: a timeout, a dropped connection, a
malformed body, 429 (except ``insufficient_quota``), 408, 409 and 5xx are retried; 400, 401,
403, 404, 422 and anything unexpected are not. :class:`RetryPolicy` turns it into `tenacity`_
retrying with exponential backoff and jitter that honours the server's ``Retry-After``. The
SDK's own retries must be off (``max_retries=0`` on the client), so that retries are not doubled.

Waits are bounded twice: each attempt by the client's ``httpx.Timeout`` (a connect timeout and a
read timeout, made by :func:`http_timeout`), and the whole request by the policy's ``deadline_s``
across its retries. :func:`failure_reason` says which one an attempt hit ("no reply within 120 s
(read timeout)", "could not connect within 10 s (connect timeout)"), and every retry is logged
with its attempt number, that reason and the wait before the next attempt.

.. _tenacity: https://tenacity.readthedocs.io

Example::

    >>> import httpx, openai
    >>> request = httpx.Request("POST", "http://localhost/v1/chat/completions")
    >>> def status_error(status, body=None, headers=None):
    ...     response = httpx.Response(status, headers=headers, request=request)
    ...     return openai.APIStatusError("failed", response=response, body=body)
    >>> [is_transient(status_error(s)) for s in (429, 500, 503, 400, 401, 404)]
    [True, True, True, False, False, False]
    >>> is_transient(status_error(429, body={"code": "insufficient_quota"}))
    False
    >>> RetryPolicy().delay_s(1, status_error(429, headers={"retry-after": "2"}))
    2.0
    >>> calls = []
    >>> def flaky():
    ...     calls.append(1)
    ...     if len(calls) < 3:
    ...         raise status_error(503)
    ...     return "ok"
    >>> RetryPolicy(backoff_base_s=0.0, backoff_max_s=0.0).call(flaky), len(calls)
    ('ok', 3)
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import ParamSpec, TypedDict, TypeVar

import httpx
import openai
import tenacity

from ctxwin_dagster.backends.calls.endpoint import redact_key

__all__ = [
    "MalformedResponseError",
    "RetryPolicy",
    "error_code",
    "failure_reason",
    "http_timeout",
    "is_transient",
    "retry_after_s",
    "attempts_text",
    "timed_out",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")


class _Options(TypedDict):
    """tenacity's settings of a :class:`RetryPolicy` (for ``Retrying`` and ``AsyncRetrying`` alike)."""

    retry: tenacity.retry_base
    stop: tenacity.stop.stop_base
    wait: Callable[[tenacity.RetryCallState], float]
    before_sleep: Callable[[tenacity.RetryCallState], None]
    reraise: bool


class MalformedResponseError(Exception):
    """The server answered 200 with a body that is not what the API returns (retried)."""


def error_code(exc: openai.APIStatusError) -> str:
    """The API's error code (``"insufficient_quota"``, ``"context_length_exceeded"``…), or ``""``."""
    if isinstance(exc.body, Mapping):
        return str(exc.body.get("code") or "")
    return str(getattr(exc, "code", "") or "")


def invalid_request_body(exc: BaseException) -> bool:
    """Whether ``exc`` is a server's 5xx that reports the request's body failing its validation
    (llama-cpp-python's server answers a field it does not take, such as ``response_format`` of
    type ``json_schema``, with a 500 and pydantic's ``validation error`` naming ``('body', …)``):
    the request's fault, which no retry mends.

    >>> import httpx
    >>> response = httpx.Response(500, request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))
    >>> body = {"message": "1 validation error: {'loc': ('body', 'response_format', 'type')}"}
    >>> invalid_request_body(openai.InternalServerError("x", response=response, body=body))
    True
    """
    if not isinstance(exc, openai.APIStatusError) or exc.status_code < 500:
        return False
    body = exc.body
    inner = body.get("message") if isinstance(body, Mapping) else None
    text = inner if isinstance(inner, str) else f"{getattr(exc, 'message', '')} {body}"
    return "validation error" in text and "('body'" in text


def is_transient(exc: BaseException) -> bool:
    """Whether a failed call may succeed when sent again (see the module docstring)."""
    if isinstance(
        exc,
        (openai.APIConnectionError, MalformedResponseError, json.JSONDecodeError, openai.APIResponseValidationError),
    ):
        return True  # APITimeoutError is an APIConnectionError
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status == 429:
            return error_code(exc) != "insufficient_quota"
        return status in (408, 409) or (status >= 500 and not invalid_request_body(exc))
    return False


def http_timeout(read_s: float, connect_s: float) -> httpx.Timeout:
    """The ``httpx.Timeout`` of one attempt: ``connect_s`` to open the connection, ``read_s`` to
    wait for each part of the reply (and to send the request)."""
    if not read_s > 0 or not connect_s > 0:
        raise ValueError(
            f"timeout_s (read) and connect_timeout_s must be > 0 seconds; got {read_s!r} and {connect_s!r}"
        )
    return httpx.Timeout(read_s, connect=connect_s)


_TIMEOUT_PHASES = (
    (httpx.ConnectTimeout, "connect"),
    (httpx.ReadTimeout, "read"),
    (httpx.WriteTimeout, "write"),
    (httpx.PoolTimeout, "pool"),
)


def timed_out(exc: BaseException) -> tuple[str, float | None] | None:
    """``(phase, seconds)`` when ``exc`` is a timeout of the SDK: the phase is ``"connect"``,
    ``"read"``, ``"write"`` or ``"pool"`` and the seconds that phase was given (from the request's
    timeout); None for any other error.

    Example::

        >>> request = httpx.Request("POST", "http://localhost/v1/chat/completions",
        ...                         extensions={"timeout": http_timeout(60, 10).as_dict()})
        >>> exc = openai.APITimeoutError(request)
        >>> exc.__cause__ = httpx.ReadTimeout("timed out")
        >>> timed_out(exc), failure_reason(exc)
        (('read', 60.0), 'no reply within 60 s (read timeout)')
    """
    if not isinstance(exc, openai.APITimeoutError):
        return None
    phase = next((name for kind, name in _TIMEOUT_PHASES if isinstance(exc.__cause__, kind)), "read")
    limits = exc.request.extensions.get("timeout") or {}
    seconds = limits.get(phase)
    return phase, None if seconds is None else float(seconds)


def failure_reason(exc: BaseException) -> str:
    """What went wrong in one attempt, in words: ``no reply within 120 s (read timeout)``,
    ``could not connect within 10 s (connect timeout)``, ``cannot reach the server (ConnectError:
    …)`` for a refused or dropped connection, else the error's type and message."""
    timeout = timed_out(exc)
    if timeout is not None:
        phase, seconds = timeout
        within = "" if seconds is None else f" within {seconds:g} s"
        if phase == "read":
            return f"no reply{within} (read timeout)"
        if phase == "connect":
            return f"could not connect{within} (connect timeout)"
        return f"timed out{within} ({phase} timeout)"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return f"cannot reach the server ({type(cause).__name__}: {cause})"
    return redact_key(f"{type(exc).__name__}: {exc}")


def attempts_text(attempts: int, deadline_s: float | None = None) -> str:
    """How a request ended, for an error message: ``"3 attempts"``, or with ``deadline_s`` (the
    deadline ended the retries) ``"gave up after the 600 s deadline (3 attempts)"``."""
    count = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    return count if deadline_s is None else f"gave up after the {deadline_s:g} s deadline ({count})"


def retry_after_s(exc: BaseException | None) -> float | None:
    """Seconds to wait from the ``Retry-After`` / ``retry-after-ms`` headers of a failed response, or None."""
    response = getattr(exc, "response", None)
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


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry transient failures with backoff.

    Args:
        max_retries: retries after the first attempt (0 = none).
        backoff_base_s / backoff_max_s: the n-th wait is drawn between half and all of
            ``min(backoff_max_s, backoff_base_s * 2**(n-1))`` (jitter). A server's
            ``Retry-After`` is honoured instead, up to ``max(backoff_max_s, 60)`` seconds.
        deadline_s: the request's total time across its retries (None: no limit). No attempt
            starts once the deadline would have passed before it (tenacity's
            ``stop_before_delay``); the attempt in flight ends within its own timeouts.
        log: where each retry is logged (attempt number, reason, wait); default this module's
            logger. A Dagster resource passes its run's log (``context.log``).

    Use :meth:`call` for one function call, or iterate :meth:`retrying` (``for attempt in
    policy.retrying(): with attempt: ...``) to run a block per attempt; :meth:`async_retrying`
    is the same for coroutines. After the last attempt the last error is raised as it is.
    """

    max_retries: int = 5
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    deadline_s: float | None = None
    log: logging.Logger | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0 (0 = no retries); got {self.max_retries!r}")
        if not self.backoff_base_s >= 0:
            raise ValueError(f"backoff_base_s must be >= 0; got {self.backoff_base_s!r}")
        if not self.backoff_max_s >= self.backoff_base_s:
            raise ValueError(f"backoff_max_s ({self.backoff_max_s}) must be >= backoff_base_s ({self.backoff_base_s})")
        if self.deadline_s is not None and not self.deadline_s > 0:
            raise ValueError(f"deadline_s must be > 0 seconds or None; got {self.deadline_s!r}")

    def delay_s(self, attempt: int, exc: BaseException | None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (from 1) that raised ``exc``."""
        after = retry_after_s(exc)
        if after is not None:
            return min(after, max(self.backoff_max_s, 60.0))
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # jitter, not crypto

    def gave_up_at_deadline(self, attempts: int, exc: BaseException) -> bool:
        """Whether the deadline, not the number of attempts, ended a request that failed with
        ``exc`` after ``attempts`` attempts."""
        return self.deadline_s is not None and is_transient(exc) and 0 < attempts < self.max_retries + 1

    def outcome(self, attempts: int, exc: BaseException) -> str:
        """:func:`attempts_text` of a request that failed with ``exc`` after ``attempts`` attempts."""
        return attempts_text(attempts, self.deadline_s if self.gave_up_at_deadline(attempts, exc) else None)

    def _options(self) -> _Options:
        stop: tenacity.stop.stop_base = tenacity.stop_after_attempt(self.max_retries + 1)
        if self.deadline_s is not None:
            stop = stop | tenacity.stop_before_delay(self.deadline_s)
        return {
            "retry": tenacity.retry_if_exception(is_transient),
            "stop": stop,
            "wait": self._wait,
            "before_sleep": partial(_log_retry, self.log or log, self.max_retries + 1),
            "reraise": True,
        }

    def _wait(self, state: tenacity.RetryCallState) -> float:
        return self.delay_s(state.attempt_number, state.outcome.exception() if state.outcome else None)

    def retrying(self) -> tenacity.Retrying:
        """A tenacity ``Retrying`` with this policy."""
        return tenacity.Retrying(**self._options())

    def async_retrying(self) -> tenacity.AsyncRetrying:
        """A tenacity ``AsyncRetrying`` with this policy (it sleeps with ``asyncio.sleep``)."""
        return tenacity.AsyncRetrying(**self._options())

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)``, retried by this policy."""
        return self.retrying()(fn, *args, **kwargs)


def _log_retry(logger: logging.Logger, most: int, state: tenacity.RetryCallState) -> None:
    """A warning that attempt N of at most ``most`` failed, why (:func:`failure_reason`, from
    which server) and how long the wait before the next one is."""
    exc = state.outcome.exception() if state.outcome else None
    wait = state.next_action.sleep if state.next_action else 0.0
    request = getattr(exc, "request", None)
    where = f" from {request.url}" if isinstance(request, httpx.Request) else ""
    logger.warning(
        "attempt %d (of at most %d) failed (%.300s); retrying in %.2f s",
        state.attempt_number,
        most,
        redact_key((failure_reason(exc) if exc is not None else "no error") + where),
        wait,
    )
