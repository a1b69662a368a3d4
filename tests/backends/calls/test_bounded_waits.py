"""Bounded waits: a server that takes the connection and never answers fails a call within its
deadline, with an error that says which wait ran out, and every retry is logged (to the run's
log in a Dagster run, and from there on the console of `ctxwin run`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import dagster as dg
import httpx
import openai
import pytest

from ctxwin_dagster.backends.calls.retry import http_timeout
from ctxwin_dagster.backends.chat.errors import ChatBackendError, chat_error
from ctxwin_dagster.backends.embeddings.openai import OpenAIEmbedder
from ctxwin_dagster.backends.planning.preflight import EndpointError, check_endpoint
from ctxwin_dagster.core.budget.limits import get_model_limits
from ctxwin_dagster.defs.model_resources import ChatModelResource, EmbeddingsResource
from ctxwin_dagster.defs.versions import resource_versions
from ctxwin_dagster.runner.run_events import run_log_news
from ctxwin_dagster.testing import FakeOpenAIServer
from ctxwin_dagster.testing.chat import TEST_MODEL, chat_request, loopback_chat

#: How long a call may run before the test calls it hung (a guard, not a measure of speed).
HANG_GUARD_S = 60.0


def outcome(fn: Callable[[], Any]) -> BaseException | Any:
    """What ``fn()`` returned or raised, run in a thread that must end within the hang guard."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), f"the call still waits after {HANG_GUARD_S:g} s"
    return box[0]


def test_a_chat_call_to_a_server_that_never_answers_stops_at_its_deadline(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="ctxwin_dagster.backends.calls.retry")
    with FakeOpenAIServer(silent=True) as server:
        chat = loopback_chat(server, timeout_s=1, deadline_s=3, max_retries=20)
        err = outcome(lambda: chat.complete(chat_request("hello")))
        chat.close()
        received = server.request_count
    assert isinstance(err, ChatBackendError), err
    message = str(err)
    assert message.startswith(f"no reply within 1 s (read timeout) from the chat server at {server.base_url}")
    # the deadline ended the retries, long before the 21 attempts max_retries allows
    assert 1 < err.attempts < 21 and err.attempts == received
    assert f"gave up after the 3 s deadline ({err.attempts} attempts)" in message
    assert err.kind == "timeout" and "cannot reach" not in message
    (record,) = chat.ledger.records
    assert not record.ok and record.attempts == err.attempts

    retries = [r.getMessage() for r in caplog.records if r.name == "ctxwin_dagster.backends.calls.retry"]
    assert len(retries) == err.attempts - 1  # every attempt but the last is followed by a retry
    for number, line in enumerate(retries, start=1):
        assert line.startswith(f"attempt {number} (of at most 21) failed (no reply within 1 s (read timeout) from ")
        assert f"{server.base_url}/chat/completions); retrying in " in line


def test_retries_of_a_failing_server_are_logged_with_reason_and_wait(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="ctxwin_dagster.backends.calls.retry")
    with FakeOpenAIServer(faults=["503", "429"]) as server, loopback_chat(server) as chat:
        assert chat.complete(chat_request("hello")).record.attempts == 3
    lines = [r.getMessage() for r in caplog.records if r.name == "ctxwin_dagster.backends.calls.retry"]
    assert len(lines) == 2 and all(r.levelno == logging.WARNING for r in caplog.records)
    assert lines[0].startswith("attempt 1 (of at most 6) failed (InternalServerError: Error code: 503")
    assert lines[1].startswith("attempt 2 (of at most 6) failed (RateLimitError: Error code: 429")
    assert all(" s" in line.rsplit("retrying in ", 1)[1] for line in lines)


def test_a_connect_timeout_and_a_refused_connection_are_told_apart() -> None:
    request = httpx.Request(
        "POST", "http://10.1.2.3:8000/v1/chat/completions", extensions={"timeout": http_timeout(120, 10).as_dict()}
    )
    timeout = openai.APITimeoutError(request)
    timeout.__cause__ = httpx.ConnectTimeout("timed out")
    refused = openai.APIConnectionError(request=request)
    refused.__cause__ = httpx.ConnectError("[Errno 111] Connection refused")
    common: dict[str, Any] = {
        "base_url": "http://10.1.2.3:8000/v1",
        "model": "m",
        "timeout_s": 120,
        "limits": get_model_limits("m"),
    }
    slow = chat_error(timeout, attempts=4, deadline_s=600, **common)
    assert str(slow).startswith("could not connect to the chat server at http://10.1.2.3:8000/v1 within 10 s")
    assert "gave up after the 600 s deadline (4 attempts)" in str(slow)
    down = chat_error(refused, attempts=6, **common)
    assert str(down).startswith("cannot reach the chat server at http://10.1.2.3:8000/v1 (6 attempts; ConnectError")


def test_an_embeddings_request_to_a_server_that_never_answers_stops_at_its_deadline() -> None:
    with FakeOpenAIServer(silent=True) as server:
        embedder = OpenAIEmbedder(
            model="emb", base_url=server.base_url, dim=8, timeout_s=1, deadline_s=3, max_retries=20
        )
        err = outcome(lambda: embedder.embed(["a text"]))
    assert isinstance(err, openai.APITimeoutError), err
    (note,) = err.__notes__
    assert note.startswith(f"emb at {server.base_url}: no reply within 1 s (read timeout); gave up after the 3 s")
    attempts = int(note.rsplit("(", 1)[1].split()[0])
    assert 1 < attempts < 21


def test_the_preflight_check_of_a_server_that_never_answers_is_bounded_and_says_so() -> None:
    with FakeOpenAIServer(silent=True) as server:
        err = outcome(lambda: check_endpoint("contextualizer", "m", server.base_url, "k", timeout_s=1))
    assert isinstance(err, EndpointError), err
    assert str(err).startswith(f"contextualizer: no reply within 1 s (read timeout) from {server.base_url}")


def test_a_runs_retries_are_in_its_log(tmp_path) -> None:
    @dg.asset
    def one_answer(chat: ChatModelResource) -> str:
        backend = chat.backend()
        assert backend is not None
        return backend.complete(chat_request("hello")).text

    instance = dg.DagsterInstance.ephemeral()
    with FakeOpenAIServer(faults=["500"]) as server:
        chat = ChatModelResource(model=TEST_MODEL, base_url=server.base_url, cache_dir=str(tmp_path))
        result = dg.materialize([one_answer], resources={"chat": chat}, instance=instance)
    assert result.success
    logged = [(e.level, e.user_message) for e in instance.all_logs(result.run_id) if not e.is_dagster_event]
    retries = [m for level, m in logged if "(of at most 6) failed" in m]
    assert len(retries) == 1 and retries[0].startswith("attempt 1 (of at most 6) failed (InternalServerError")
    assert "retrying in" in retries[0] and (logging.WARNING, retries[0]) in logged
    # what `ctxwin run` prints on its console while the run goes on
    news = run_log_news(instance, result.run_id, None)
    assert [line for line in news.warnings if "(of at most 6) failed" in line] == [f"one_answer: {retries[0]}"]
    assert (news.started, news.finished) == ("one_answer", 1)
    again = run_log_news(instance, result.run_id, news.cursor)
    assert (again.warnings, again.started, again.finished) == ([], "", 0)  # each line and step once


def test_the_waits_change_no_result() -> None:
    base = {"chat": ChatModelResource(model="m"), "embeddings": EmbeddingsResource()}
    patient = {
        "chat": ChatModelResource(model="m", timeout_s=600, connect_timeout_s=30, deadline_s=3600),
        "embeddings": EmbeddingsResource(timeout_s=300, connect_timeout_s=30, deadline_s=3600),
    }
    assert resource_versions(base) == resource_versions(patient)
    assert resource_versions(base) != resource_versions({**base, "chat": ChatModelResource(model="other")})


@pytest.mark.parametrize("field", ["timeout_s", "connect_timeout_s", "deadline_s"])
def test_a_wait_must_be_positive(field) -> None:
    with pytest.raises(ValueError):
        ChatModelResource(model="m", **{field: 0})
