"""The local model through a real, independent OpenAI-compatible server: llama.cpp's (the
``llama-cpp-python[server]`` that ``make setup`` builds), started by the test on loopback and
stopped after, serving SmolLM2-135M's GGUF. ctxwin calls it with the same client as any server,
and the faults a user's server gives are met the way the issue asks: a reply cut by
``max_tokens`` is counted and repaired, a schema the server refuses falls back to what it
accepts, and a server killed mid-run fails the call clearly and, restarted, lets the same batch
resume from the cache."""

from __future__ import annotations

import json
import socket

import pytest

from ctxwin_dagster.backends.base import ChatRequest
from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
from ctxwin_dagster.backends.chat.errors import ChatBackendError
from ctxwin_dagster.backends.chat.factory import make_chat_backend
from ctxwin_dagster.backends.chat.llama_server import ENV_VAR, LlamaServer, available, served_urls
from ctxwin_dagster.backends.chat.local_model import register_local_model
from ctxwin_dagster.backends.chat.structured import ReplyFormats
from ctxwin_dagster.core.methods.prompts.schemas import ReplySchema

pytestmark = pytest.mark.slow

MODEL = "local:smollm2"
QUESTION = ({"role": "user", "content": "What is the capital of France? Answer in one word."},)
YES = ReplySchema(
    name="yes",
    schema={
        "type": "object",
        "properties": {"yes": {"type": "boolean"}},
        "required": ["yes"],
        "additionalProperties": False,
    },
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    assert available(), "llama-cpp-python[server] is not installed: make setup builds it"
    folder = tmp_path_factory.mktemp("llama")
    with LlamaServer(MODEL, log=folder / "server.log") as running:
        url = running.start()
        yield running, url, folder


@pytest.fixture
def served(server, monkeypatch):
    """The server's address as a command gives it to its runs."""
    _running, url, folder = server
    monkeypatch.setenv(ENV_VAR, f"{MODEL}={url}")
    return url, folder


def test_the_local_model_is_called_like_any_server(served):
    url, _ = served
    assert served_urls() == {MODEL: url}
    chat = make_chat_backend(MODEL, max_new_tokens=8)
    assert isinstance(chat, OpenAIChatBackend) and chat.base_url == url
    # the cache keys name the weights, not the port, so the next command's server reuses them
    assert chat.backend_id.startswith("llama.cpp:SmolLM2-135M-Instruct")
    with chat:
        result = chat.complete(ChatRequest(messages=QUESTION, temperature=0.0, max_tokens=64))
    assert "paris" in result.text.lower(), result.text
    record = result.record
    # the server's own count of the prompt is the count the fit check made before sending it
    counter = register_local_model(MODEL)[2]
    assert record.input_tokens == counter.count_messages(QUESTION), (record.input_tokens, record.usage_counted)
    assert not record.usage_counted and record.output_tokens <= 8 and record.cost_usd == 0.0  # capped at 8


def test_a_reply_cut_by_max_tokens_is_returned_as_cut_and_a_cut_batch_is_repaired_and_counted(served, tmp_path):
    from ctxwin_dagster.backends.tasks.llm import LLMTasks
    from ctxwin_dagster.core.text.splitting import RecursiveSplitter

    chat = make_chat_backend(MODEL, max_new_tokens=512, cache=ResponseCache(tmp_path / "cache"))
    with chat:
        cut = chat.complete(
            ChatRequest(messages=({"role": "user", "content": "Count from one to fifty in words."},), max_tokens=3)
        )
        assert cut.finish_reason == "length" and cut.record.output_tokens == 3

        text = "The Normans were a people of Normandy in France. " * 20
        chunks = RecursiveSplitter(chunk_size=200, chunk_overlap=0).split(text, doc_id="d", doc_sha256="x")[:5]
        tasks = LLMTasks(chat, max_tokens=12)  # too few tokens for five contexts in JSON: every reply is cut
        results = tasks.contextualize_swb(text, chunks, "The Normans.", doc_id="d", window_chars=400)
        stats = dict(tasks.stats)
        assert [r.chunk_id for r in results] == [c.chunk_id for c in chunks]
        assert stats["swb_invalid"] >= 1 and stats["swb_fallback_chunks"] == sum(r.fallback for r in results)
        assert all(r.context.strip() or r.error for r in results)
        # the same batch again: from the cache, cut as before, and counted the same way
        sent = sum(not r.cache_hit for r in chat.ledger.records)
        again = LLMTasks(chat, max_tokens=12)
        again.contextualize_swb(text, chunks, "The Normans.", doc_id="d", window_chars=400)
        assert again.stats["swb_invalid"] == stats["swb_invalid"]
        assert again.stats["swb_fallback_chunks"] == stats["swb_fallback_chunks"]
        assert sum(not r.cache_hit for r in chat.ledger.records) == sent  # no new call


def test_a_schema_the_server_refuses_falls_back_to_its_grammar(served):
    ReplyFormats.forget()
    chat = make_chat_backend(MODEL, max_new_tokens=16)
    with chat:
        result = chat.complete(
            ChatRequest(
                messages=({"role": "user", "content": "Is Paris in France? Reply in JSON."},),
                max_tokens=16,
                temperature=0.0,
                schema=YES,
            )
        )
    # llama-cpp-python refuses response_format json_schema (422); json_object with the schema is its grammar
    assert result.record.reply_format == "grammar"
    assert set(json.loads(result.text)) == {"yes"}
    assert ReplyFormats().get(chat.backend_id, MODEL) == "grammar"


def test_a_server_killed_mid_run_fails_clearly_and_the_batch_resumes_from_the_cache(tmp_path, monkeypatch):
    port = _free_port()
    cache = ResponseCache(tmp_path / "cache")
    requests = [
        ChatRequest(messages=({"role": "user", "content": f"Say the number {n}."},), max_tokens=6, temperature=0.0)
        for n in range(3)
    ]
    first = LlamaServer(MODEL, log=tmp_path / "server.log", port=port)
    url = first.start()
    monkeypatch.setenv(ENV_VAR, f"{MODEL}={url}")
    chat = make_chat_backend(MODEL, cache=cache, max_retries=1, connect_timeout_s=2.0)
    try:
        done = chat.complete_many(requests[:2])
        assert all(r.record.attempts >= 1 for r in done)
        first.process.kill()  # type: ignore[union-attr]
        first.process.wait()  # type: ignore[union-attr]
        with pytest.raises(ChatBackendError) as failed:
            chat.complete_many(requests)
        message = str(failed.value)
        assert "127.0.0.1" in message or "connect" in message.lower(), message
        again = LlamaServer(MODEL, log=tmp_path / "server.log", port=port)
        assert again.start() == url
        try:
            resumed = chat.complete_many(requests)
        finally:
            again.stop()
    finally:
        chat.close()
        first.stop()
    assert [r.record.cache_hit for r in resumed] == [True, True, False]
    assert [r.text for r in resumed[:2]] == [r.text for r in done]


def test_what_the_server_can_do_is_asked_once_and_kept_in_the_home(served, tmp_path, monkeypatch):
    from ctxwin_dagster.backends.chat import capabilities

    url, _ = served
    chat = make_chat_backend(MODEL, max_new_tokens=32)
    with chat:
        found = capabilities.endpoint_capabilities(chat, home=tmp_path)
    assert found["endpoint"] == url and found["model"] == MODEL
    # llama.cpp takes the schema as a grammar, and the reply parses
    assert found["structured_output"] == {"format": "grammar", "held_to_the_schema": True, "reply_parsed": True}
    # usage comes with each reply, and the prompt tokens served from the kept context with it
    assert found["usage"] == "reported" and found["cached_prompt_tokens"]["reported"], found
    # its own tokenizer agrees with ctxwin's count of the model's tokens
    tokenizer = found["tokenizer"]
    assert tokenizer["from"] == "/extras/tokenize" and abs(tokenizer["server"] - tokenizer["ctxwin"]) <= 1, tokenizer
    assert found["context_length"] == {"server": None, "ctxwin": 8192}  # llama-cpp-python does not say its n_ctx
    kept = json.loads((tmp_path / capabilities.FILE).read_text(encoding="utf-8"))
    assert list(kept.values()) == [found]

    # another process reads the record instead of asking again
    capabilities.forget()
    monkeypatch.setattr(capabilities, "probe", lambda chat: pytest.fail("asked again"))
    with make_chat_backend(MODEL) as again:
        assert capabilities.endpoint_capabilities(again, home=tmp_path) == found


def test_what_the_stand_in_server_can_do(tmp_path):
    """ctxwin's loopback stand-in, as a server without a schema mode: JSON mode, no grammar."""
    from ctxwin_dagster.backends.chat import capabilities
    from ctxwin_dagster.testing import FakeOpenAIServer

    with (
        FakeOpenAIServer(structured="json_object", cached_tokens=64) as server,
        OpenAIChatBackend(model="gpt-4o-mini", base_url=server.base_url, api_key="k") as chat,
    ):
        found = capabilities.endpoint_capabilities(chat, home=tmp_path)
    assert found["structured_output"] == {"format": "json_object", "held_to_the_schema": False, "reply_parsed": False}
    assert found["usage"] == "reported" and found["cached_prompt_tokens"]["reported"]
    assert found["tokenizer"]["server"] is None and found["context_length"]["server"] is None


def test_the_server_computes_with_every_core_but_one_unless_told(monkeypatch):
    """llama.cpp's threads wait for each other at every token: the server leaves a core to the
    runs that feed it, and ``CTXWIN_LLAMA_THREADS`` sets the number."""
    import os

    from ctxwin_dagster.backends.chat.llama_server import THREADS_VAR, threads

    monkeypatch.delenv(THREADS_VAR, raising=False)
    assert threads() == max(1, len(os.sched_getaffinity(0)) - 1)
    monkeypatch.setenv(THREADS_VAR, "3")
    assert threads() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(THREADS_VAR, bad)
        with pytest.raises(ValueError, match=THREADS_VAR):
            threads()
