"""The one retry policy for calls to an OpenAI-compatible API (chat, embeddings, the judge).

:func:`is_transient` is the classifier that drives it: a timeout, a dropped connection, a
malformed body, 429 (except ``insufficient_quota``), 408, 409 and 5xx are retried; 400, 401,
403, 404, 422 and anything unexpected are not. :class:`RetryPolicy` turns it into `tenacity`_
retrying with exponential backoff and jitter that honours the server's ``Retry-After``. The
SDK's own retries must be off (``max_retries=0`` on the client), so that retries are not doubled.

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
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import openai
import tenacity

from ctxwin_dagster.backends.calls.endpoint import redact_key

__all__ = ["MalformedResponseError", "RetryPolicy", "error_code", "is_transient", "retry_after_s"]

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")


class MalformedResponseError(Exception):
    """The server answered 200 with a body that is not what the API returns (retried)."""


def error_code(exc: openai.APIStatusError) -> str:
    """The API's error code (``"insufficient_quota"``, ``"context_length_exceeded"``…), or ``""``."""
    if isinstance(exc.body, Mapping):
        return str(exc.body.get("code") or "")
    return str(getattr(exc, "code", "") or "")


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
        return status in (408, 409) or status >= 500
    return False


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

    Use :meth:`call` for one function call, or iterate :meth:`retrying` (``for attempt in
    policy.retrying(): with attempt: ...``) to run a block per attempt; :meth:`async_retrying`
    is the same for coroutines. After the last attempt the last error is raised as it is.
    """

    max_retries: int = 5
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0 (0 = no retries); got {self.max_retries!r}")
        if not self.backoff_base_s >= 0:
            raise ValueError(f"backoff_base_s must be >= 0; got {self.backoff_base_s!r}")
        if not self.backoff_max_s >= self.backoff_base_s:
            raise ValueError(f"backoff_max_s ({self.backoff_max_s}) must be >= backoff_base_s ({self.backoff_base_s})")

    def delay_s(self, attempt: int, exc: BaseException | None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (from 1) that raised ``exc``."""
        after = retry_after_s(exc)
        if after is not None:
            return min(after, max(self.backoff_max_s, 60.0))
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # jitter, not crypto

    def _options(self) -> dict[str, Any]:
        return {
            "retry": tenacity.retry_if_exception(is_transient),
            "stop": tenacity.stop_after_attempt(self.max_retries + 1),
            "wait": self._wait,
            "before_sleep": _log_retry,
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


def _log_retry(state: tenacity.RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    wait = state.next_action.sleep if state.next_action else 0.0
    log.info(
        "attempt %d failed (%s: %.200s); retrying in %.2f s",
        state.attempt_number,
        type(exc).__name__,
        redact_key(str(exc)),
        wait,
    )
