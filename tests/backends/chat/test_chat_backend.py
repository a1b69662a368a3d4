"""OpenAIChatBackend through the real ``openai`` client against FakeOpenAIServer (127.0.0.1 only):
retries, clear errors, fit-before-send, bounded concurrency, the response cache (also across a
killed process), usage and cost accounting. Also FakeOpenAIServer's embeddings endpoint."""

from __future__ import annotations

import asyncio
import json
import pickle
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest

from ctxwin_dagster.backends.base import CallTags, ChatBackend, ChatRequest
from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
from ctxwin_dagster.backends.chat.errors import ChatBackendError
from ctxwin_dagster.backends.chat.messages import token_upper_bound
from ctxwin_dagster.backends.planning.pricing import estimate_cost
from ctxwin_dagster.core.budget.fit import ContextOverflowError
from ctxwin_dagster.core.budget.limits import ModelLimits
from ctxwin_dagster.core.budget.tokens import get_token_counter
from ctxwin_dagster.testing import FakeOpenAIServer, default_responder, fake_embedding
from ctxwin_dagster.testing.chat import FAST_BACKOFF, TEST_MODEL, chat_request, loopback_chat

MODEL, FAST = TEST_MODEL, FAST_BACKOFF
req, make_backend = chat_request, loopback_chat


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- basics
def test_complete_returns_text_and_record(server: FakeOpenAIServer) -> None:
    with make_backend(server) as chat:
        assert isinstance(chat, ChatBackend)
        r = chat.complete(
            req("What does Article 5 prohibit?", tags=CallTags("answer", "doc1", "swb"), prompt_version="v2")
        )
    body = server.requests[0]
    assert r.text == default_responder(body)
    assert r.finish_reason == "stop"
    assert (
        body["model"] == MODEL and body["temperature"] == 0.2 and body["top_p"] == 0.95 and body["max_tokens"] == 2048
    )
    assert "response_format" not in body
    rec = r.record
    assert rec.ok and not rec.cache_hit and rec.attempts == 1
    assert rec.tags == CallTags("answer", "doc1", "swb") and rec.prompt_version == "v2"
    assert rec.input_chars == len("What does Article 5 prohibit?") and rec.output_chars == len(r.text)
    assert rec.backend == server.base_url and rec.latency_s > 0
    assert chat.ledger.records == [rec]


def test_json_mode_sends_response_format(server: FakeOpenAIServer) -> None:
    with make_backend(server) as chat:
        r = chat.complete(req("give me json", json_mode=True))
    assert server.requests[0]["response_format"] == {"type": "json_object"}
    assert json.loads(r.text)["echo"] == "give me json"


def test_usage_accounting_matches_server_usage() -> None:
    counter = get_token_counter(MODEL)
    messages = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Summarize chapter II."})
    with FakeOpenAIServer(cached_tokens=5) as server, make_backend(server) as chat:
        r = chat.complete(ChatRequest(messages=messages))
        rec = r.record
        assert rec.input_tokens == counter.count_messages(list(messages))
        assert rec.output_tokens == counter.count(r.text)
        assert rec.cached_tokens == 5 and not rec.usage_counted
        assert rec.input_chars == len("Be brief.") + len("Summarize chapter II.")
    # A server that reports no usage: tokens are counted, and flagged as counted.
    with FakeOpenAIServer(report_usage=False) as server, make_backend(server) as chat:
        rec = chat.complete(ChatRequest(messages=messages)).record
        assert rec.usage_counted and rec.cached_tokens == 0
        assert rec.input_tokens == counter.count_messages(list(messages))
        assert rec.output_tokens > 0


def test_cost_known_for_gpt4o_unknown_for_local_model_unless_overridden(server: FakeOpenAIServer) -> None:
    with make_backend(server, model="gpt-4o") as chat:
        rec = chat.complete(req("hello")).record
    assert rec.cost_usd is not None and rec.cost_usd > 0
    assert rec.cost_usd == pytest.approx(
        estimate_cost("gpt-4o", input_tokens=rec.input_tokens, output_tokens=rec.output_tokens)
    )
    with make_backend(server, model="llama3.1:8b") as chat:
        rec = chat.complete(req("hello")).record
        assert rec.cost_usd is None
        assert chat.ledger.totals()["cost_known"] is False
    with make_backend(server, model="llama3.1:8b", price_overrides={"llama3.1:8b": (1.0, 2.0)}) as chat:
        rec = chat.complete(req("hello")).record
    assert rec.cost_usd == pytest.approx((rec.input_tokens * 1.0 + rec.output_tokens * 2.0) / 1e6)


def test_cached_prompt_tokens_are_priced_apart_and_the_saving_kept(tmp_path: Path) -> None:
    with (
        FakeOpenAIServer(cached_tokens=600) as server,
        make_backend(server, model="gpt-4o", cache=ResponseCache(tmp_path / "c.sqlite")) as chat,
    ):
        first = chat.complete(req("the document " * 400 + "and the first chunk")).record
        again = chat.complete(req("the document " * 400 + "and the first chunk")).record  # a response-cache hit
        totals = chat.ledger.totals()
    assert first.cached_tokens == 600 and again.cache_hit
    full = estimate_cost("gpt-4o", input_tokens=first.input_tokens, output_tokens=first.output_tokens)
    cached = estimate_cost(
        "gpt-4o", input_tokens=first.input_tokens, output_tokens=first.output_tokens, cached_tokens=600
    )
    assert full is not None and cached is not None and cached < full
    assert first.cost_usd == pytest.approx(cached) and first.uncached_cost_usd == pytest.approx(full)
    assert again.cost_usd == pytest.approx(cached) and again.uncached_cost_usd == pytest.approx(full)
    assert totals["uncached_cost_usd"] == pytest.approx(2 * full) and totals["cost_usd"] == pytest.approx(2 * cached)
    assert first.to_dict()["uncached_cost_usd"] == pytest.approx(full)


def test_estimate_cost_rules() -> None:
    assert estimate_cost("gpt-4o", input_tokens=1_000_000, output_tokens=0) == pytest.approx(2.5)
    assert estimate_cost("openai/gpt-4o", input_tokens=1_000_000, output_tokens=1_000_000) == pytest.approx(12.5)
    cached = estimate_cost("gpt-4o", input_tokens=1_000_000, output_tokens=0, cached_tokens=1_000_000)
    assert cached is not None and cached < 2.5
    assert estimate_cost("no-such-model-xyz", input_tokens=10, output_tokens=10) is None
    assert (
        estimate_cost(
            "ollama/no-such-model", input_tokens=10, output_tokens=10, overrides={"no-such-model": (0.0, 0.0)}
        )
        == 0.0
    )
    with pytest.raises(ValueError, match="input_tokens"):
        estimate_cost("gpt-4o", input_tokens=-1, output_tokens=0)
    with pytest.raises(ValueError, match="USD per 1M"):
        estimate_cost("m", input_tokens=1, output_tokens=1, overrides={"m": (1.0,)})  # type: ignore[dict-item]


# ----------------------------------------------------------------------------- retries
@pytest.mark.parametrize(
    ("faults", "attempts"), [(["429"], 2), (["429", "429"], 3), (["500"], 2), (["503", "502"], 3), (["malformed"], 2)]
)
def test_retryable_faults_are_retried(faults: list[str], attempts: int) -> None:
    with FakeOpenAIServer(faults=faults) as server, make_backend(server, max_retries=5) as chat:
        r = chat.complete(req("hello"))
        assert r.text == default_responder(server.requests[-1])
        assert r.record.attempts == attempts and server.request_count == attempts


def test_retry_after_header_is_honoured() -> None:
    with (
        FakeOpenAIServer(faults=["429"], retry_after_s=0.4) as server,
        make_backend(server, backoff_base_s=0.0) as chat,
    ):
        t0 = time.perf_counter()
        r = chat.complete(req("hello"))
        assert time.perf_counter() - t0 >= 0.35
        assert r.record.attempts == 2


def test_timeout_is_retried() -> None:
    with (
        FakeOpenAIServer(faults=["timeout"], timeout_sleep_s=3.0) as server,
        make_backend(server, timeout_s=0.3) as chat,
    ):
        t0 = time.perf_counter()
        r = chat.complete(req("hello"))
        assert r.record.attempts == 2 and server.request_count == 2
        assert time.perf_counter() - t0 < 2.0


def test_retries_exhausted_raise_with_attempts_and_ledger_failure() -> None:
    with FakeOpenAIServer(faults=["500"] * 3) as server, make_backend(server, max_retries=2) as chat:
        with pytest.raises(ChatBackendError, match="kept failing") as info:
            chat.complete(req("hello"))
        assert info.value.kind == "server_error" and info.value.status == 500 and info.value.attempts == 3
        assert server.request_count == 3
        (rec,) = chat.ledger.records
        assert not rec.ok and rec.attempts == 3 and "500" in (rec.error or "")
        assert chat.ledger.totals()["failures"] == 1
    with FakeOpenAIServer(faults=["timeout"] * 2, timeout_sleep_s=3.0) as server:
        with (
            make_backend(server, max_retries=1, timeout_s=0.2) as chat,
            pytest.raises(ChatBackendError, match=r"no reply within 0.2 s \(read timeout\)") as info,
        ):
            chat.complete(req("hello"))
        assert info.value.kind == "timeout"


def test_truncated_reply_is_returned_flagged_and_cached(tmp_path: Path) -> None:
    with FakeOpenAIServer(faults=["truncated"]) as server:
        with make_backend(server, cache=ResponseCache(tmp_path / "c.sqlite")) as chat:
            first = chat.complete(req("a question long enough to be cut in half"))
            again = chat.complete(req("a question long enough to be cut in half"))
        assert first.finish_reason == "length" and first.text
        assert default_responder(server.requests[0]).startswith(first.text) and first.text != default_responder(
            server.requests[0]
        )
        assert again.record.cache_hit and again.finish_reason == "length" and again.text == first.text
        assert server.request_count == 1


# ----------------------------------------------------------------------------- errors
def test_unreachable_endpoint_fails_fast_with_the_url() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    chat = OpenAIChatBackend(model=MODEL, base_url=url, max_retries=2, **FAST)
    t0 = time.perf_counter()
    with pytest.raises(ChatBackendError) as info:
        chat.complete(req("hello"))
    assert time.perf_counter() - t0 < 3.0
    err = info.value
    assert err.kind == "unreachable" and err.attempts == 3 and err.base_url == url
    assert url in str(err) and "running" in str(err)
    assert chat.ledger.records[0].attempts == 3 and not chat.ledger.records[0].ok
    chat.close()


def test_unknown_model_gives_a_clear_error_without_retries() -> None:
    with FakeOpenAIServer(models=["llama3.1:8b"]) as server, make_backend(server, model="llama3:8b") as chat:
        with pytest.raises(ChatBackendError) as info:
            chat.complete(req("hello"))
        err = info.value
        assert err.kind == "model_not_found" and err.status == 404 and err.attempts == 1
        assert (
            "'llama3:8b'" in str(err)
            and server.base_url in str(err)
            and "check the model name the server serves" in str(err)
        )
        assert server.request_count == 1


def test_bad_api_key_says_set_openai_api_key_and_never_shows_the_key() -> None:
    secret = "sk-wrongwrongwrong1234567890"
    with FakeOpenAIServer(api_key="sk-right") as server:
        with make_backend(server, api_key=secret) as chat:
            with pytest.raises(ChatBackendError) as info:
                chat.complete(req("hello"))
            assert secret not in repr(chat) and secret not in str(vars(chat))
        err = info.value
        assert err.kind == "auth" and "OPENAI_API_KEY" in str(err) and secret not in str(err)
        assert err.__cause__ is None and err.attempts == 1
        assert secret not in (chat.ledger.records[0].error or "")
        clone = pickle.loads(pickle.dumps(err))
        assert (clone.kind, clone.status, clone.base_url, str(clone)) == (err.kind, err.status, err.base_url, str(err))
        with make_backend(server, api_key="sk-right") as chat:
            assert chat.complete(req("hello")).text


def test_missing_openai_key_is_rejected_in_the_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIChatBackend(model="gpt-4o")
    local = OpenAIChatBackend(model="llama3.1:8b", base_url="http://localhost:11434/v1/")  # placeholder key
    assert local.base_url == "http://localhost:11434/v1" and local.backend_id == local.base_url
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-abcdefgh")
    hosted = OpenAIChatBackend(model="gpt-4o")
    assert hosted.backend_id == "openai" and "sk-from-env" not in repr(hosted)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": ""}, "model is empty"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_retries": -1}, "max_retries"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"backoff_base_s": 2.0, "backoff_max_s": 1.0}, "backoff_max_s"),
        ({"base_url": "localhost:8000"}, "http"),
        ({"max_tokens_param": "max_len"}, "max_tokens_param"),
    ],
)
def test_bad_settings_are_rejected(kwargs: dict, match: str) -> None:
    opts = {"model": MODEL, "base_url": "http://127.0.0.1:9/v1", **kwargs}
    with pytest.raises(ValueError, match=match):
        OpenAIChatBackend(**opts)


def test_bad_requests_are_rejected_before_sending(server: FakeOpenAIServer) -> None:
    limits = ModelLimits(MODEL, context_length=4096, max_completion_tokens=1024)
    with make_backend(server, limits=limits) as chat:
        with pytest.raises(ValueError, match="lower max_tokens"):
            chat.complete(req("hi", max_tokens=2048))
        with pytest.raises(ValueError, match="non-empty"):
            chat.complete(ChatRequest(messages=()))
        with pytest.raises(ValueError, match="top_p"):
            chat.complete(req("hi", top_p=0.0, max_tokens=10))
    assert server.request_count == 0


def test_oversize_prompt_raises_and_nothing_is_sent(server: FakeOpenAIServer) -> None:
    limits = ModelLimits(MODEL, context_length=1000, max_completion_tokens=200)
    big = "word " * 900
    with make_backend(server, limits=limits) as chat:
        with pytest.raises(ContextOverflowError, match="Nothing was sent") as info:
            chat.complete(req(big, max_tokens=200))
        assert "over by" in str(info.value)
        # In a batch, one oversize prompt stops the whole batch before anything is sent.
        with pytest.raises(ContextOverflowError):
            chat.complete_many(
                [req("small 1", max_tokens=200), req(big, max_tokens=200), req("small 2", max_tokens=200)]
            )
        # A prompt within the limit is sent:
        assert chat.complete(req("word " * 700, max_tokens=100)).text
    assert server.request_count == 1


def test_server_side_400s_are_not_retried() -> None:
    with FakeOpenAIServer(faults=["overflow", "400"]) as server, make_backend(server) as chat:
        # The server's own context limit is smaller than the local limits believed:
        with pytest.raises(ContextOverflowError, match="pass limits=ModelLimits"):
            chat.complete(req("hello"))
        # A plain 400 is a bad request:
        with pytest.raises(ChatBackendError, match="rejected the request") as info:
            chat.complete(req("hello"))
        assert info.value.kind == "bad_request" and server.request_count == 2


# ----------------------------------------------------------------------------- concurrency
def test_bounded_concurrency_and_request_order() -> None:
    n, latency = 32, 0.1
    with FakeOpenAIServer(latency_s=latency) as server, make_backend(server, max_concurrency=8) as chat:
        t0 = time.perf_counter()
        results = chat.complete_many([req(f"question {i}") for i in range(n)])
        wall = time.perf_counter() - t0
    assert [r.text for r in results] == [
        default_responder({"messages": [{"content": f"question {i}"}]}) for i in range(n)
    ]
    assert 4 <= server.max_in_flight <= 8
    assert wall < 0.5 * n * latency, f"wall {wall:.2f}s is not well under serial {n * latency:.1f}s"
    assert server.request_count == n and chat.ledger.totals()["calls"] == n


def test_complete_works_inside_a_running_event_loop_and_from_threads(server: FakeOpenAIServer) -> None:
    with make_backend(server, max_concurrency=4) as chat:

        async def main() -> list[str]:
            blocking = chat.complete(req("from a coroutine")).text  # blocking call inside a loop
            many = chat.complete_many([req("m1"), req("m2")])
            awaited = await asyncio.gather(*(chat.acomplete(req(f"a{i}")) for i in range(6)))
            return [blocking] + [r.text for r in many] + [r.text for r in awaited]

        texts = asyncio.run(main())
        assert texts[0].endswith("from a coroutine") and [t.rsplit(" ", 1)[-1] for t in texts[1:]] == ["m1", "m2"] + [
            f"a{i}" for i in range(6)
        ]
        assert asyncio.run(chat.acomplete(req("second loop"))).text.endswith("second loop")

        out: dict[int, str] = {}
        threads = [
            threading.Thread(target=lambda i=i: out.__setitem__(i, chat.complete(req(f"t{i}")).text)) for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(out[i].endswith(f"t{i}") for i in range(8))
    assert len(chat.ledger) == 1 + 2 + 6 + 1 + 8


# ----------------------------------------------------------------------------- test server
def test_fake_server_embeddings_float_and_base64() -> None:
    with FakeOpenAIServer(embed_dim=16, models=["embed-m"]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        default = client.embeddings.create(model="embed-m", input=["alpha", "beta"])  # the SDK asks for base64
        floats = client.embeddings.create(model="embed-m", input="alpha", encoding_format="float")
        small = client.embeddings.create(model="embed-m", input=["alpha"], dimensions=4)
        with pytest.raises(openai.NotFoundError):
            client.embeddings.create(model="other", input="alpha")
        assert len(server.embedding_requests) == 4 and server.request_count == 0
    a, b = (np.array(d.embedding, dtype=np.float32) for d in default.data)
    assert a.shape == (16,) and np.allclose(a, fake_embedding("alpha", 16)) and not np.allclose(a, b)
    assert np.allclose(floats.data[0].embedding, a, atol=1e-6)
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-5)
    assert len(small.data[0].embedding) == 4
    assert default.usage.prompt_tokens > 0


def test_fake_server_rejects_unknown_faults_and_lists_models() -> None:
    with pytest.raises(ValueError, match="unknown fault"):
        FakeOpenAIServer(faults=["explode"])
    with pytest.raises(TypeError, match="sequence"):
        FakeOpenAIServer(faults="429")
    with FakeOpenAIServer(models=["a", "b"]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        assert [m.id for m in client.models.list()] == ["a", "b"]


def test_close_stops_the_worker_threads_and_the_backend_reopens(server: FakeOpenAIServer) -> None:
    def workers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith(f"ctxwin-chat-{MODEL}")]

    chat = make_backend(server, max_concurrency=4)
    assert len(chat.complete_many([req(f"x{i}") for i in range(8)])) == 8
    assert 1 <= len(workers()) <= 4
    chat.close()
    assert workers() == []
    assert chat.complete(req("y")).text  # usable again after close: a new HTTP client
    assert chat.complete_many([req("z1"), req("z2")])[1].text.endswith("z2")  # and new threads
    chat.close()
    chat.close()  # idempotent
    assert workers() == []


def test_fit_upper_bound_never_undercounts() -> None:
    texts = ["word " * 50, "Grüße, ça va? 日本語のテキスト " * 20, "", "a" * 1000, "🙂" * 30 + " mixed 123 ,.;"]
    counter = get_token_counter(MODEL)
    for text in texts:
        messages = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "name": "alice", "content": text},
            {
                "role": "user",
                "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": "x"}}],
            },
        ]
        assert token_upper_bound(messages, counter) >= counter.count_messages(messages)


def test_fake_server_serves_many_slow_requests_at_once() -> None:
    # All 24 are in flight at once (the server counts them); how long that takes is a benchmark's
    # business (benchmarks/bench_chat.py), not a test's: a loaded machine would make it flaky.
    # Each reply waits 2 s, so the last request starts before the first one ends even when two test
    # processes share the cores (at 0.3 s, 21 of 24 overlapped once).
    with FakeOpenAIServer(latency_s=2.0) as server, make_backend(server, max_concurrency=24) as chat:
        replies = chat.complete_many([req(f"q{i}") for i in range(24)])
        assert len(replies) == 24
        assert server.max_in_flight == 24
