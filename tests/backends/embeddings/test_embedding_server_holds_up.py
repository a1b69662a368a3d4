"""The embedding server holds up as a user probing it would find (issue 37): 50 clients at once
are all answered, a malformed body gets a 4xx saying what is wrong (never a 500), a body over the
limit is refused before it is read, a client slow to send its texts holds up no one, and the log
says where the server listens. The server is the real child process, on loopback."""

from __future__ import annotations

import json

import httpx
import pytest

from ctxwin_dagster.backends.embeddings.server import MAX_BODY_ENV, EmbeddingService
from ctxwin_dagster.backends.loopback import LISTEN_BACKLOG
from ctxwin_dagster.testing.http_probes import HeldRequest, burst, headers_only, listen_backlog

pytestmark = pytest.mark.slow

MODEL = "all-MiniLM-L6-v2"
LIMIT = 100_000  # the body limit this module's server starts with (bytes)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "embeddings.log"
    with pytest.MonkeyPatch.context() as env:
        env.setenv(MAX_BODY_ENV, str(LIMIT))
        service = EmbeddingService([MODEL], log=log)
        url = service.start()
    with service:
        yield url, int(url.rsplit(":", 1)[1]), log


def _embed(url: str, body) -> httpx.Response:
    """POST ``body`` (bytes as they are, anything else as JSON) to the server's embeddings."""
    payload = {"content": body} if isinstance(body, bytes) else {"json": body}
    return httpx.post(f"{url}/v1/embeddings", timeout=120, **payload)


def test_the_log_says_where_it_listens_and_what_it_serves(server):
    url, port, log = server
    line = next(line for line in log.read_text().splitlines() if "listening on" in line)
    assert f"listening on http://127.0.0.1:{port}" in line and MODEL in line and f"{LIMIT:,}" in line


def test_fifty_clients_at_once_are_all_answered(server):
    url, port, _ = server
    assert listen_backlog(port) == LISTEN_BACKLOG  # http.server's default was 5
    replies = burst(lambda i: _embed(url, {"model": MODEL, "input": [f"text {i}"]}))
    answered = [r for r in replies if isinstance(r, httpx.Response) and r.status_code == 200]
    assert len(answered) == 50, [r if isinstance(r, Exception) else r.text for r in replies if r not in answered]
    assert all(len(r.json()["data"][0]["embedding"]) == 384 for r in answered)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([1, 2], "must be a JSON object; got a JSON array"),
        (b"not json at all", "not JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"", "the body is empty"),
        ({"model": MODEL}, "input is missing"),
        ({"model": MODEL, "input": []}, "input is an empty list"),
        ({"model": MODEL, "input": [1, 2]}, "input must be a string or a list of strings"),
        ({"model": MODEL, "input": {"text": "a"}}, "input must be a string or a list of strings"),
        ({"model": 7, "input": "a"}, "model must be the name of a served model; got a JSON number"),
        (
            {"model": MODEL, "input": "a", "batch_size": "64"},
            "batch_size must be a whole number >= 1; got a JSON string",
        ),
        ({"model": MODEL, "input": "a", "batch_size": 0}, "batch_size must be >= 1"),
        ({"model": MODEL, "input": "a", "truncate": "yes"}, "truncate must be true or false"),
        ({"model": MODEL, "input": "a", "encoding_format": "hex"}, "encoding_format must be 'float' or 'base64'"),
        ({"model": MODEL, "input": "a", "precision": "float8"}, "precision must be one of"),
    ],
)
def test_a_malformed_body_gets_a_4xx_that_says_what_is_wrong(server, body, says):
    url, _, _ = server
    reply = _embed(url, body)
    assert 400 <= reply.status_code < 500, reply.text
    error = reply.json()["error"]
    assert says in error["message"] and error["type"] == "invalid_request_error"


def test_a_model_not_served_is_a_404_naming_the_served_ones(server):
    url, _, _ = server
    reply = _embed(url, {"model": "text-embedding-3-small", "input": "a"})
    assert reply.status_code == 404 and reply.json()["error"]["code"] == "model_not_found"
    assert MODEL in reply.json()["error"]["message"]


def test_a_body_over_the_limit_is_refused_before_it_is_read(server):
    url, port, _ = server
    # The body is declared and never sent: only a server that checks the length first answers.
    status, reply = headers_only(port, "/v1/embeddings", 10_000_000)
    assert status == 413 and f"at most {LIMIT:,} bytes" in reply["error"]["message"]
    assert MAX_BODY_ENV in reply["error"]["message"]
    # A client that sends it all the same gets the reason, not a broken connection.
    sent = _embed(url, {"model": MODEL, "input": "word " * LIMIT})
    assert sent.status_code == 413 and f"at most {LIMIT:,} bytes" in sent.json()["error"]["message"]
    # A body within the limit is read and answered.
    within = _embed(url, {"model": MODEL, "input": "word " * (LIMIT // 10), "truncate": True})
    assert within.status_code == 200 and within.json()["usage"]["prompt_tokens"] == 256


def test_a_client_slow_to_send_its_texts_holds_up_no_one(server):
    url, port, _ = server
    body = json.dumps({"model": MODEL, "input": ["a long text, sent slowly"] * 200}).encode()
    held = HeldRequest(port, "/v1/embeddings", body)
    try:
        quick = _embed(url, {"model": MODEL, "input": ["a short one"]})
        assert quick.status_code == 200  # answered while the other still waits for its body
        status, reply = held.finish()
    finally:
        held.close()
    assert status == 200 and len(reply["data"]) == 200


def test_the_limit_must_be_a_positive_number(monkeypatch):
    from ctxwin_dagster.backends.loopback import limit_from_env

    monkeypatch.setenv(MAX_BODY_ENV, "lots")
    with pytest.raises(ValueError, match=f"{MAX_BODY_ENV} must be a whole number > 0; got 'lots'"):
        limit_from_env(MAX_BODY_ENV, 1)
    monkeypatch.setenv(MAX_BODY_ENV, "2_000")
    assert limit_from_env(MAX_BODY_ENV, 1) == 2000
