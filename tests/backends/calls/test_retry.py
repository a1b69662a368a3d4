"""The one retry policy (backends/calls/retry.py) and API-key resolution (backends/calls/endpoint.py)."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from ctxwin_dagster.backends.calls.endpoint import PLACEHOLDER_KEY, MissingAPIKeyError, resolve_api_key
from ctxwin_dagster.backends.calls.retry import MalformedResponseError, RetryPolicy, is_transient, retry_after_s

NO_WAIT = RetryPolicy(max_retries=3, backoff_base_s=0.0, backoff_max_s=0.0)
REQUEST = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")


def status_error(status: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    return openai.APIStatusError("failed", response=httpx.Response(status, headers=headers, request=REQUEST), body=None)


def failing(*errors: BaseException):
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "ok"

    return fn, calls


def test_transient_failures_are_retried_and_final_ones_are_not() -> None:
    assert is_transient(openai.APITimeoutError(REQUEST)) and is_transient(openai.APIConnectionError(request=REQUEST))
    assert is_transient(MalformedResponseError("no choices")) and is_transient(status_error(408))
    assert not any(is_transient(status_error(s)) for s in (400, 401, 403, 404, 422))
    assert not is_transient(KeyError("a bug"))
    fn, calls = failing(status_error(500), openai.APITimeoutError(REQUEST))
    assert NO_WAIT.call(fn) == "ok" and len(calls) == 3
    fn, calls = failing(status_error(401))
    with pytest.raises(openai.APIStatusError):
        NO_WAIT.call(fn)
    assert len(calls) == 1


def test_exhausted_retries_raise_the_last_error_and_async_retrying_is_the_same_policy() -> None:
    fn, calls = failing(*[status_error(503)] * 10)
    with pytest.raises(openai.APIStatusError) as info:
        NO_WAIT.call(fn)
    assert info.value.status_code == 503 and len(calls) == 4

    async def run() -> int:
        attempts = 0
        async for attempt in NO_WAIT.async_retrying():
            with attempt:
                attempts += 1
                if attempts < 3:
                    raise status_error(502)
        return attempts

    assert asyncio.run(run()) == 3


def test_backoff_and_retry_after() -> None:
    policy = RetryPolicy(backoff_base_s=1.0, backoff_max_s=4.0)
    assert 0.5 <= policy.delay_s(1, None) <= 1.0 and 2.0 <= policy.delay_s(3, None) <= 4.0
    assert 2.0 <= policy.delay_s(10, None) <= 4.0  # capped
    assert policy.delay_s(1, status_error(429, {"retry-after-ms": "1500"})) == 1.5
    assert policy.delay_s(1, status_error(429, {"retry-after": "600"})) == 60.0  # honoured up to max(backoff_max_s, 60)
    assert retry_after_s(status_error(429, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0  # a date past
    assert retry_after_s(status_error(429)) is None and retry_after_s(None) is None
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError, match="backoff_max_s"):
        RetryPolicy(backoff_base_s=2.0, backoff_max_s=1.0)


def test_resolve_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="OPENAI_API_KEY") as info:
        resolve_api_key(None, None, what="the chat model 'gpt-4o'")
    assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)
    with pytest.raises(MissingAPIKeyError, match="JUDGE_KEY"):
        resolve_api_key("", "https://api.openai.com/v1/", what="the judge", env="JUDGE_KEY")
    assert resolve_api_key(None, "http://localhost:11434/v1", what="x") == PLACEHOLDER_KEY
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    assert resolve_api_key(None, None, what="x") == "sk-from-env"
    assert resolve_api_key("sk-given", None, what="x") == "sk-given"
