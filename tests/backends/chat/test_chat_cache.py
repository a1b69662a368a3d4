"""The chat backend's response cache: a rerun makes no calls and keeps the cost of the work, the
key covers every setting, a failed or killed run resumes with only its unfinished calls, and an
answer is kept even while another process holds the cache file."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxwin_dagster.backends.base import CallTags, Ledger
from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.chat.errors import ChatBackendError
from ctxwin_dagster.backends.planning.pricing import estimate_cost
from ctxwin_dagster.testing import FakeOpenAIServer
from ctxwin_dagster.testing.chat import TEST_MODEL, chat_request, loopback_chat

MODEL = TEST_MODEL
req, make_backend = chat_request, loopback_chat


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


# ----------------------------------------------------------------------------- cache
def test_second_run_with_the_same_cache_makes_no_calls(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite"
    requests = [req(f"chunk {i}", tags=CallTags("contextualize", "doc1", "swb")) for i in range(20)]
    with FakeOpenAIServer(latency_s=0.01) as server:
        with make_backend(server, cache=ResponseCache(path)) as chat:
            first = chat.complete_many(requests)
        assert server.request_count == 20
        ledger = Ledger()
        with make_backend(server, cache=ResponseCache(path), ledger=ledger) as chat:
            second = chat.complete_many(requests)
            single = chat.complete(requests[3])
        assert server.request_count == 20
    assert [r.text for r in second] == [r.text for r in first] and single.text == first[3].text
    totals = ledger.totals(stage="contextualize")
    assert totals["cache_hits"] == 21 and totals["calls"] == 0 and totals["paid_usd"] == 0
    for a, b in zip(first, second, strict=True):
        assert b.record.cache_hit and b.record.attempts == 0
        assert (b.record.input_tokens, b.record.output_tokens) == (a.record.input_tokens, a.record.output_tokens)


def test_cached_rerun_keeps_the_cost_of_the_work(tmp_path: Path) -> None:
    """A rerun served from the cache pays nothing but records the cost of the work it reuses,
    and so does a duplicate within a batch (priced model: gpt-4o-mini)."""
    path = tmp_path / "responses.sqlite"
    requests = [req(f"chunk {i} " + "text " * 50, tags=CallTags("contextualize", "doc1", "cc")) for i in range(5)]
    with FakeOpenAIServer() as server:
        first_ledger = Ledger()
        with make_backend(server, model="gpt-4o-mini", cache=ResponseCache(path), ledger=first_ledger) as chat:
            first = chat.complete_many([*requests, requests[0]])  # the last one is a duplicate
        assert server.request_count == 5
        again_ledger = Ledger()
        with make_backend(server, model="gpt-4o-mini", cache=ResponseCache(path), ledger=again_ledger) as chat:
            again = chat.complete_many(requests)
        assert server.request_count == 5
    one = first_ledger.totals()
    assert one["calls"] == 5 and one["cache_hits"] == 1 and one["cost_known"]
    twin, dup = first[0].record, first[5].record
    assert dup.cache_hit and dup.cost_usd == twin.cost_usd > 0 and dup.paid_usd == 0 and twin.paid_usd == twin.cost_usd
    assert one["paid_usd"] == pytest.approx(sum(r.record.cost_usd for r in first[:5])) and one["paid_usd"] > 0
    assert one["cost_usd"] == pytest.approx(one["paid_usd"] + twin.cost_usd)
    two = again_ledger.totals()
    assert two["calls"] == 0 and two["cache_hits"] == 5 and two["cost_known"]
    assert two["paid_usd"] == 0
    assert two["cost_usd"] == pytest.approx(one["paid_usd"])  # the cost of the same work, not 0
    for a, b in zip(first, again, strict=False):
        assert b.record.cache_hit and b.record.paid_usd == 0 and b.record.cost_usd == pytest.approx(a.record.cost_usd)
        assert b.record.cost_usd == pytest.approx(
            estimate_cost(
                "gpt-4o-mini",
                input_tokens=b.record.input_tokens,
                output_tokens=b.record.output_tokens,
                cached_tokens=b.record.cached_tokens,
            )
        )


def test_cache_key_covers_settings_and_prompt_version(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server, make_backend(server, cache=ResponseCache(tmp_path / "c.sqlite")) as chat:
        chat.complete(req("q"))
        chat.complete(req("q", prompt_version="v2"))
        chat.complete(req("q", temperature=0.0))
        chat.complete(req("q", max_tokens=100))
        chat.complete(req("q", json_mode=True))
        chat.complete(req("q", tags=CallTags("other-stage")))  # tags do not change the answer: a hit
        assert server.request_count == 5
        # Identical requests in one batch are sent once when there is a cache.
        results = chat.complete_many([req("dup"), req("dup"), req("other")])
        assert server.request_count == 7 and results[0].text == results[1].text
        assert [r.record.cache_hit for r in results] == [False, True, False]


def test_failed_batch_then_resumed_batch_repeats_only_unfinished_calls(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    requests = [req(f"chunk {i}") for i in range(12)]
    with FakeOpenAIServer(faults=["ok"] * 4 + ["401"]) as server:
        with (
            make_backend(server, cache=ResponseCache(path), max_concurrency=2) as chat,
            pytest.raises(ChatBackendError) as info,
        ):
            chat.complete_many(requests)
        assert any("run the batch again to resume" in note for note in info.value.__notes__)
        sent_first = server.request_count
        with ResponseCache(path) as c:
            finished = len(c)
        assert 4 <= finished < 12 and sent_first < 12  # stopped early: later requests were not sent
        with make_backend(server, cache=ResponseCache(path), max_concurrency=2) as chat:
            results = chat.complete_many(requests)
        assert server.request_count - sent_first == 12 - finished
        assert [r.text.rsplit(" ", 1)[-1] for r in results] == [str(i) for i in range(12)]
        assert chat.ledger.totals()["cache_hits"] == finished


_KILLED_RUN = textwrap.dedent(
    """
    import sys
    from ctxwin_dagster.backends.base import ChatRequest
    from ctxwin_dagster.backends.calls.cache import ResponseCache
    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
    base_url, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    chat = OpenAIChatBackend(model="test-model", base_url=base_url, cache=ResponseCache(path), max_concurrency=4)
    print("ready", flush=True)
    chat.complete_many([ChatRequest(messages=({"role": "user", "content": f"chunk {i}"},)) for i in range(n)])
    print("finished", flush=True)
    """
)


def test_killed_process_then_resumed_run_repeats_only_unfinished_calls(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    n = 80
    with FakeOpenAIServer(latency_s=0.05) as server:
        proc = subprocess.Popen(
            [sys.executable, "-c", _KILLED_RUN, server.base_url, str(path), str(n)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if path.exists():
                    with ResponseCache(path) as c:
                        if len(c) >= 12:
                            break
                time.sleep(0.01)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        time.sleep(0.2)  # let requests already on the wire arrive
        with ResponseCache(path) as c:
            finished = len(c)
            conn = sqlite3.connect(path)
            keys = [k for (k,) in conn.execute("SELECT key FROM entries")]
            conn.close()
            entries = c.get_many(keys)
        assert len(entries) == finished and all(v["text"].startswith("Reply ") for v in entries.values())
        assert 12 <= finished < n, "the run was not killed mid-way"
        before = server.request_count
        ledger = Ledger()
        with make_backend(server, cache=ResponseCache(path), ledger=ledger, max_concurrency=8) as chat:
            results = chat.complete_many([req(f"chunk {i}") for i in range(n)])
        assert server.request_count - before == n - finished
        assert ledger.totals()["cache_hits"] == finished and ledger.totals()["calls"] == n - finished
        assert [r.text.rsplit(" ", 1)[-1] for r in results] == [str(i) for i in range(n)]


def test_answer_is_cached_even_when_the_cache_file_is_busy(tmp_path: Path, server: FakeOpenAIServer) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite")
    with make_backend(server, cache=cache) as chat:
        chat.complete(req("warm up"))
        other = sqlite3.connect(cache.path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # e.g. another Dagster process writing
        release = threading.Timer(0.3, lambda: (other.execute("ROLLBACK"), other.close()))
        release.start()
        t0 = time.perf_counter()
        r = chat.complete(req("while the file is busy"))
        assert time.perf_counter() - t0 >= 0.25  # it waited for the lock, off the event loop
        release.join()
    assert (
        cache.get(
            cache.make_key(
                "chat",
                server.base_url,
                MODEL,
                [{"role": "user", "content": "while the file is busy"}],
                0.2,
                0.95,
                2048,
                False,
                "",
            )
        )["text"]
        == r.text
    )
