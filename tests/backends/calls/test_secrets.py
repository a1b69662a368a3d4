"""API keys stay out of what ctxwin prints and stores, whatever their shape: masked by value in
the error bodies a server sends back (the transport under every client), and in any text
(:func:`redact`)."""

from __future__ import annotations

import logging
import traceback

import httpx
import openai
import pytest

from ctxwin_dagster.backends.base import ChatRequest
from ctxwin_dagster.backends.calls.secrets import http_client, redact, register_secret
from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
from ctxwin_dagster.backends.chat.errors import ChatBackendError
from ctxwin_dagster.backends.planning.preflight import EndpointError, check_endpoint
from ctxwin_dagster.testing.server import FakeOpenAIServer

# Not shaped like an OpenAI key: redaction must go by value, not by the "sk-" pattern.
KEY = "Zq7-unusual-key-shape-4242"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("header Authorization: Bearer abc.def-ghi", "header Authorization: Bearer ***"),
        ('{"authorization": "Basic dXNlcjpwYXNz"}', '{"authorization": "Basic ***"}'),
        ("?api_key=plain123&x=1", "?api_key=***&x=1"),
        ('"x-api-key": "k-1"', '"x-api-key": "***"'),
        ("key sk-proj-abcdefghijkl rejected", "key sk-pr*** rejected"),
        ("nothing secret here", "nothing secret here"),
    ],
)
def test_redact_masks_credentials_by_their_place_in_the_text(text, shown):
    assert redact(text) == shown


def test_redact_masks_registered_keys_and_the_environments_key_variables(monkeypatch):
    register_secret("registered-value-77")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "from-the-environment-88")
    monkeypatch.setenv("MY_SERVICE_URL", "http://not-a-secret:8080")
    text = "a registered-value-77, b from-the-environment-88, c http://not-a-secret:8080"
    assert redact(text) == "a ***, b ***, c http://not-a-secret:8080"
    assert redact("given-only-here-99 ok", "given-only-here-99") == "*** ok"
    register_secret("short")  # under MIN_SECRET_CHARS: would mask ordinary words
    assert redact("a short note") == "a short note"


def test_an_error_body_that_echoes_the_key_reaches_the_client_masked():
    with FakeOpenAIServer(faults=["500"], echo_key=True) as server:
        raw = httpx.post(f"{server.base_url}/chat/completions", json={}, headers={"Authorization": f"Bearer {KEY}"})
        assert KEY in raw.text  # what the server really sends
        server.add_faults("500")
        with http_client() as client:
            masked = client.post(
                f"{server.base_url}/chat/completions", json={}, headers={"Authorization": f"Bearer {KEY}"}
            )
    assert masked.status_code == 500 and KEY not in masked.text
    assert "Authorization: Bearer ***" in masked.json()["error"]["message"]


def test_a_chat_error_its_cause_its_traceback_and_the_retry_log_hold_no_key(caplog):
    caplog.set_level(logging.DEBUG)
    with FakeOpenAIServer(faults=["500"] * 3, echo_key=True) as server:
        chat = OpenAIChatBackend(
            model="m", base_url=server.base_url, api_key=KEY, max_retries=1, backoff_base_s=0.01, backoff_max_s=0.01
        )
        with pytest.raises(ChatBackendError) as info:
            chat.complete(ChatRequest(messages=({"role": "user", "content": "hi"},)))
        chat.close()
    error = info.value
    assert error.kind == "server_error" and "Fake fault 500" in str(error), str(error)
    told = "".join(traceback.format_exception(error)) + caplog.text + repr(chat.ledger.records)
    assert "Authorization: Bearer ***" in told
    assert KEY not in told


def test_the_endpoint_check_says_the_servers_error_without_the_key():
    with (
        FakeOpenAIServer(echo_key=True, api_key="another-key-entirely") as server,
        pytest.raises(EndpointError) as info,
    ):
        check_endpoint("contextualizer", "m", server.base_url, KEY)
    assert KEY not in str(info.value) and KEY not in "".join(traceback.format_exception(info.value))


def test_the_key_masked_in_an_sdk_exception_made_outside_the_transport():
    """An SDK exception built from an unmasked body (another client, a proxy the transport does not
    sit under) is still masked where ctxwin turns it into a message."""
    from ctxwin_dagster.backends.chat.errors import server_message

    register_secret(KEY)
    response = httpx.Response(500, request=httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions"))
    exc = openai.InternalServerError("failed", response=response, body={"error": {"message": f"bad key {KEY}"}})
    assert server_message(exc) == "bad key ***"
