"""The ask server holds up as a user probing it would find (issue 37): 50 questions at once are
all answered, a malformed body gets a 4xx saying what is wrong (never a 500), a body or a
question over its limit is refused with the limit named, a client slow to send its question
holds up no one, and the chat model's API key is the one of the asking command's environment,
read again for each question, never the one the server started with. The server is the real
background process ``ctxwin ask`` starts, on loopback; its chat model is a test server on
loopback that takes one key only."""

from __future__ import annotations

import json

import httpx
import pytest

from ctxwin_dagster.ask import server
from ctxwin_dagster.ask.session import AskerSpec
from ctxwin_dagster.backends.loopback import LISTEN_BACKLOG
from ctxwin_dagster.testing.http_probes import HeldRequest, burst, headers_only, listen_backlog
from ctxwin_dagster.testing.server import FakeOpenAIServer

pytestmark = pytest.mark.slow

KEY = "key-two"  # the only key the chat server takes
QUESTION_LIMIT = 500  # the question limit this module's ask server starts with (characters)
OPTIONS = {"doc": "squad_Normans", "variant": "swb"}


@pytest.fixture(scope="module")
def chat():
    with FakeOpenAIServer(api_key=KEY) as chat_server:
        yield chat_server


@pytest.fixture(scope="module")
def ask_server(workspace, chat, tmp_path_factory):
    """The ask server of an experiment whose answers come from ``chat``, started with the right
    key and a question limit of :data:`QUESTION_LIMIT`: its client, port and log file."""
    cache = tmp_path_factory.mktemp("ask-cache")
    spec = AskerSpec(
        str(workspace["lancedb"]),
        str(workspace["documents"]),
        "gpt-4o-mini",
        chat.base_url,
        str(cache),
        256,
        "{}",
        None,
    )
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_API_KEY", KEY)
        env.setenv(server.MAX_QUESTION_ENV, str(QUESTION_LIMIT))
        env.delenv("CTXWIN_EMBEDDING_SERVER", raising=False)
        client = server.start(spec)
    assert client is not None, "the ask server did not start"
    try:
        yield client, int(client.url.rsplit(":", 1)[1]), server.state_file(spec).with_suffix(".log")
    finally:
        client.stop()


def _post(client: server.Client, body) -> httpx.Response:
    """POST ``body`` to ``/ask`` with the server's token (bytes as they are, anything else as JSON)."""
    payload = {"content": body} if isinstance(body, bytes) else {"json": body}
    headers = {"Authorization": f"Bearer {client.token}"}
    return httpx.post(f"{client.url}/ask", headers=headers, timeout=300, **payload)


def test_fifty_questions_at_once_are_all_answered(ask_server, monkeypatch):
    client, port, _ = ask_server
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert listen_backlog(port) == LISTEN_BACKLOG  # http.server's default was 5
    replies = burst(lambda i: client.ask(f"Who led the Normans? ({i % 5})", OPTIONS, as_json=True))
    answered = [r for r in replies if isinstance(r, server.Reply) and r.status == 0]
    assert len(answered) == 50, [r for r in replies if r not in answered]
    assert all(json.loads(r.out)["model"] == "gpt-4o-mini" for r in answered)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([1, 2], "must be a JSON object; got a JSON array"),
        (b"not json at all", "not JSON"),
        (b"", "the body is empty"),
        ({}, "question is empty"),
        ({"question": "   "}, "question is empty"),
        ({"question": 5}, "question must be a string; got a JSON number"),
        ({"question": "Who?", "options": ["doc"]}, "options must be an object"),
        ({"question": "Who?", "options": {"k": "many"}}, "k must be a whole number; got a JSON string"),
        ({"question": "Who?", "options": {"doc": 5}}, "doc must be a string"),
        ({"question": "Who?", "options": {"retrieval": "best"}}, "options: unknown retrieval setting 'best'"),
        ({"question": "Who?", "json": "yes"}, "json must be true or false"),
        ({"question": "Who?", "keys": {"LD_PRELOAD": "x"}}, "'LD_PRELOAD' is not one of ['OPENAI_API_KEY']"),
        ({"question": "Who?", "keys": {"OPENAI_API_KEY": 5}}, "OPENAI_API_KEY must be a string or null"),
    ],
)
def test_a_malformed_body_gets_a_4xx_that_says_what_is_wrong(ask_server, body, says):
    client, _, _ = ask_server
    reply = _post(client, body)
    assert 400 <= reply.status_code < 500, reply.text
    assert says in reply.json()["error"]["message"]


def test_a_body_over_the_limit_is_refused_before_it_is_read(ask_server):
    client, port, _ = ask_server
    # The body is declared and never sent: only a server that checks the length first answers.
    status, reply = headers_only(port, "/ask", 10_000_000, headers={"Authorization": f"Bearer {client.token}"})
    assert status == 413 and f"at most {server.MAX_BODY_BYTES:,} bytes" in reply["error"]["message"]
    # ctxwin ask with a 10 MB question prints the server's reason.
    huge = client.ask("x" * 10_000_000, OPTIONS, as_json=True)
    assert huge.status == 1 and f"at most {server.MAX_BODY_BYTES:,} bytes" in huge.err


def test_a_question_over_the_limit_gets_a_4xx_naming_it(ask_server, monkeypatch):
    client, _, _ = ask_server
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    long = client.ask("Who " + "x" * QUESTION_LIMIT, OPTIONS, as_json=True)
    assert long.status == 1 and "at most 500" in long.err and server.MAX_QUESTION_ENV in long.err
    assert _post(client, {"question": "x" * (QUESTION_LIMIT + 1)}).status_code == 400
    within = client.ask("Who led the Normans? " + "x" * (QUESTION_LIMIT - 30), OPTIONS, as_json=True)
    assert within.status == 0, within.err


def test_a_client_slow_to_send_its_question_holds_up_no_one(ask_server, monkeypatch):
    client, port, _ = ask_server
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    body = json.dumps({"question": "Where is Normandy?", "options": OPTIONS, "json": True}).encode()
    held = HeldRequest(port, "/ask", body, headers={"Authorization": f"Bearer {client.token}"})
    try:
        quick = client.ask("Who led the Normans?", OPTIONS, as_json=True)
        assert quick.status == 0, quick.err  # answered while the other still waits for its question
        status, reply = held.finish()
    finally:
        held.close()
    assert status == 200 and reply["status"] == 0, reply


def test_the_key_is_read_again_for_each_question(ask_server, chat, monkeypatch):
    client, _, log = ask_server
    question = "Who was the leader of the Normans, asked with a changed key?"
    # The server started with the right key; the asking command now has another one.
    monkeypatch.setenv("OPENAI_API_KEY", "key-one")
    seen = chat.request_count
    refused = client.ask(question, OPTIONS, as_json=True)
    assert refused.status != 0 and "401" in refused.err, refused
    assert chat.request_count == seen  # the chat server refused it before counting it
    # The user sets the right key again: the next question uses it.
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    answered = client.ask(question, OPTIONS, as_json=True)
    assert answered.status == 0, answered.err
    assert chat.request_count == seen + 1
    # A key removed from the environment is gone from the server too (a local server gets a placeholder).
    monkeypatch.delenv("OPENAI_API_KEY")
    keyless = client.ask(question + " Again.", OPTIONS, as_json=True)
    assert keyless.status != 0 and chat.request_count == seen + 1
    text = log.read_text(errors="replace")
    assert "key-one" not in text and KEY not in text
