"""Structured output against the loopback server: a strict JSON schema where the server takes
it, ``json_object`` or nothing where it does not (found out once per endpoint, remembered in the
response cache), and replies that ignore an accepted schema counted and never used as they are."""

from __future__ import annotations

import json

import pytest

from ctxwin_dagster.backends.base import ChatRequest
from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
from ctxwin_dagster.backends.chat.structured import ReplyFormats
from ctxwin_dagster.backends.tasks.llm import LLMTasks
from ctxwin_dagster.core.methods.prompts.schemas import ReplySchema, swb_contexts_schema, window_answer_schema
from ctxwin_dagster.core.text.splitting import RecursiveSplitter
from ctxwin_dagster.testing import FakeOpenAIServer

MODEL = "gpt-4o-mini"


def _backend(server, **kw):
    return OpenAIChatBackend(model=MODEL, base_url=server.base_url, api_key="test", max_retries=0, **kw)


def _ask(chat, n: int = 3) -> list:
    reqs = [
        ChatRequest(messages=({"role": "user", "content": f"window {i}"},), schema=window_answer_schema())
        for i in range(n)
    ]
    return [chat.complete(r) for r in reqs]  # one after another: the first finds out, the others know


def _formats(server) -> list[str | None]:
    return [(b.get("response_format") or {}).get("type") for b in server.requests]


def test_a_server_with_structured_output_gets_the_strict_schema_and_its_replies_parse():
    with FakeOpenAIServer(structured="schema") as server, _backend(server) as chat:
        results = _ask(chat)
    assert _formats(server) == ["json_schema"] * 3
    assert server.requests[0]["response_format"]["json_schema"] == {
        "name": "window_answer",
        "schema": dict(window_answer_schema().schema),
        "strict": True,
    }
    assert all(set(json.loads(r.text)) == {"answer", "confidence", "evidence"} for r in results)
    assert [r.record.reply_format for r in results] == ["schema"] * 3
    totals = chat.ledger.totals()
    assert totals["schema_enforced"] == 3 and totals["schema_not_enforced"] == 0


@pytest.mark.parametrize(
    ("structured", "sent", "held"),
    [
        # llama.cpp: refuses json_schema, then json_object with the schema (its grammar) for every request
        ("grammar", ["json_schema", "json_object", "json_object", "json_object"], "grammar"),
        # refuses json_schema and a schema beside json_object: two refused requests, then JSON mode
        ("json_object", ["json_schema", "json_object", "json_object", "json_object", "json_object"], "json_object"),
        # refuses any response_format: json_schema, the grammar and json_object refused once each, then nothing
        ("none", ["json_schema", "json_object", "json_object", None, None, None], "text"),
    ],
)
def test_a_server_without_structured_output_is_found_out_once_and_remembered(tmp_path, structured, sent, held):
    cache = ResponseCache(tmp_path / "responses.sqlite")
    with FakeOpenAIServer(structured=structured) as server, _backend(server, cache=cache) as chat:
        results = _ask(chat)
        assert _formats(server) == sent
        assert [r.record.reply_format for r in results] == [held] * 3
        totals = chat.ledger.totals()
        enforced = 3 if held == "grammar" else 0  # the grammar holds the reply to the schema
        assert totals["schema_enforced"] == enforced and totals["schema_not_enforced"] == 3 - enforced
        if held == "grammar":
            assert all(set(json.loads(r.text)) == {"answer", "confidence", "evidence"} for r in results)
        assert totals["failures"] == 0 and totals["calls"] == 3

        # Another process (the finding forgotten in memory) reads it from the response cache:
        # no request is refused again.
        ReplyFormats.forget()
        before = server.request_count
        with _backend(server, cache=cache) as again:
            again.complete(
                ChatRequest(messages=({"role": "user", "content": "another"},), schema=window_answer_schema())
            )
        assert _formats(server)[before:] == [sent[-1]]


def test_a_bad_request_about_something_else_is_not_taken_for_a_format_refusal():
    with (
        FakeOpenAIServer(faults=["400"]) as server,
        _backend(server) as chat,
        pytest.raises(Exception, match="400|Fake fault"),
    ):
        _ask(chat, 1)
    assert _formats(server) == ["json_schema"]  # not asked again with less
    assert ReplyFormats().get(server.base_url, MODEL) == "schema"


def test_replies_that_ignore_an_accepted_schema_are_counted_and_not_used(ai_act_text):
    doc = ai_act_text[228_229:240_229]
    chunks = RecursiveSplitter(chunk_size=1000, chunk_overlap=100).split(doc, doc_id="ai_act", doc_sha256="x")
    with FakeOpenAIServer(structured="ignore") as server, _backend(server) as chat:
        tasks = LLMTasks(chat)
        results = tasks.contextualize_swb(doc, chunks, "SUMMARY", doc_id="ai_act", window_chars=2_000)
    batches = -(-len(chunks) // 5)
    stats = tasks.stats
    # The server took the schema (no refusal) and replied with prose: each first reply is counted
    # as held to the schema yet unusable, retried, and its chunks fall back to single-chunk calls.
    assert stats["swb_schema_enforced"] == batches and stats["swb_schema_ignored"] == batches
    assert stats["swb_invalid"] == batches and stats["swb_retried"] == batches
    assert stats["swb_fallback_chunks"] == len(chunks) and sum(r.fallback for r in results) == len(chunks)
    assert all(r.context.startswith("Reply ") for r in results)  # the single-chunk calls' text replies


def test_the_schemas_keep_to_what_strict_mode_accepts():
    def walk(node, path="$"):
        if isinstance(node, dict):
            if node.get("type") == "object":
                assert node["additionalProperties"] is False, path
                assert sorted(node["required"]) == sorted(node["properties"]), path
            assert not {"prefixItems", "maxLength", "minLength", "const"} & set(node), path
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    for schema in (swb_contexts_schema(["a", "b"]), window_answer_schema()):
        walk(dict(schema.schema))
    with pytest.raises(ValueError, match="JSON object"):
        ReplySchema("x", {"type": "array"})
    with pytest.raises(ValueError, match="name"):
        ReplySchema("a b", {"type": "object"})
