"""ResponseCache: content-addressed keys, JSON and bytes values, atomic writes, sharing across
threads and processes, and survival of a killed writer."""

from __future__ import annotations

import hashlib
import multiprocessing
import pickle
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.calls.null_cache import NullCache


@pytest.fixture
def cache(tmp_path: Path) -> ResponseCache:
    c = ResponseCache(tmp_path / "sub" / "responses.sqlite")
    yield c
    c.close()


# ----------------------------------------------------------------------------- keys
def test_make_key_is_sha256_of_canonical_json() -> None:
    key = ResponseCache.make_key("chat", {"b": 1, "a": "é"}, [1, 2])
    expected = hashlib.sha256('["chat",{"a":"é","b":1},[1,2]]'.encode()).hexdigest()
    assert key == expected


def test_make_key_ignores_dict_order_and_tuple_vs_list() -> None:
    a = ResponseCache.make_key("chat", ({"role": "user", "content": "x"},), 0.2)
    b = ResponseCache.make_key("chat", [{"content": "x", "role": "user"}], 0.2)
    assert a == b
    assert a != ResponseCache.make_key("chat", [{"content": "x", "role": "user"}], 0.3)
    assert a != ResponseCache.make_key("chat", [{"content": "x ", "role": "user"}], 0.2)


def test_make_key_rejects_unserializable_parts() -> None:
    with pytest.raises(TypeError, match="JSON-like parts"):
        ResponseCache.make_key(object())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=5), json_values, max_size=6))
def test_make_key_same_for_any_insertion_order(d: dict) -> None:
    reversed_d = dict(reversed(list(d.items())))
    assert ResponseCache.make_key("p", d) == ResponseCache.make_key("p", reversed_d)


# ----------------------------------------------------------------------------- values
def test_json_round_trip(cache: ResponseCache) -> None:
    @settings(max_examples=60, deadline=None)
    @given(value=json_values)
    def check(value: object) -> None:
        key = ResponseCache.make_key("rt", value)
        cache.put(key, value)
        assert cache.get(key) == value
        assert cache.get_many([key]) == {key: value}

    check()


def test_get_put_blob_and_kinds(cache: ResponseCache) -> None:
    assert cache.get("missing") is None
    cache.put("j", {"text": "Grüße", "n": [1, 2.5, None]})
    cache.put_blob("b", b"\x00\xff" * 10)
    assert cache.get("j") == {"text": "Grüße", "n": [1, 2.5, None]}
    assert cache.get_blob("b") == b"\x00\xff" * 10
    assert cache.get_blob("missing") is None
    with pytest.raises(TypeError, match="get_blob"):
        cache.get("b")
    with pytest.raises(TypeError, match="use get\\(\\)"):
        cache.get_blob("j")
    with pytest.raises(TypeError, match="put_blob"):
        cache.put("x", b"bytes")
    with pytest.raises(TypeError, match="put\\(\\)"):
        cache.put_blob("x", "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="JSON-serializable"):
        cache.put("x", {"obj": object()})
    assert "j" in cache and "x" not in cache
    assert len(cache) == 2
    cache.put("j", "replaced")
    assert cache.get("j") == "replaced" and len(cache) == 2
    assert cache.delete("j") and not cache.delete("j")
    cache.clear()
    assert len(cache) == 0


def test_get_many_put_many_and_stats(cache: ResponseCache) -> None:
    mapping = {f"k{i}": {"i": i} for i in range(1200)}  # more keys than one IN (...) query takes
    cache.put_many(mapping)
    assert len(cache) == 1200
    found = cache.get_many(list(mapping) + ["nope1", "nope2"])
    assert found == mapping
    cache.get("k1")
    cache.get("nope")
    stats = cache.stats()
    assert stats == {"hits": 1201, "misses": 3, "entries": 1200}
    cache.put_many({})
    assert cache.get_many([]) == {}


def test_put_many_is_all_or_nothing(cache: ResponseCache) -> None:
    with pytest.raises(TypeError):
        cache.put_many({"a": 1, "b": object(), "c": 3})
    assert len(cache) == 0


def test_entries_persist_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    with ResponseCache(path) as c:
        c.put("a", [1, 2])
        c.put_blob("b", b"xyz")
    with ResponseCache(path) as c:
        assert c.get("a") == [1, 2] and c.get_blob("b") == b"xyz"
        assert c.stats()["hits"] == 2
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_pickles_as_its_path(cache: ResponseCache) -> None:
    cache.put("a", 1)
    clone = pickle.loads(pickle.dumps(cache))
    try:
        assert clone.path == cache.path and clone.get("a") == 1
    finally:
        clone.close()


def test_bad_settings_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="NullCache"):
        ResponseCache(":memory:")
    with pytest.raises(ValueError, match="is a folder"):
        ResponseCache(tmp_path)
    with pytest.raises(ValueError, match="timeout_s"):
        ResponseCache(tmp_path / "x.sqlite", timeout_s=0)
    with pytest.raises(ValueError, match="synchronous"):
        ResponseCache(tmp_path / "x.sqlite", synchronous="SOMETIMES")
    c = ResponseCache(tmp_path / "x.sqlite")
    c.close()
    with pytest.raises(RuntimeError, match="closed"):
        c.get("a")


def test_null_cache_stores_nothing() -> None:
    c = NullCache()
    c.put("a", 1)
    c.put_many({"b": 2})
    c.put_blob("c", b"x")
    assert c.get("a") is None and c.get_many(["a", "b"]) == {} and c.get_blob("c") is None
    assert len(c) == 0 and "a" not in c
    assert c.stats() == {"hits": 0, "misses": 4, "entries": 0}
    assert c.make_key("x") == ResponseCache.make_key("x")
    with pytest.raises(TypeError):
        c.put("a", object())


# ----------------------------------------------------------------------------- concurrency
def test_many_threads_share_one_instance(cache: ResponseCache) -> None:
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(40):
                cache.put(f"t{t}-{i}", {"t": t, "i": i})
                assert cache.get(f"t{t}-{i}") == {"t": t, "i": i}
            cache.put_many({f"t{t}-m{i}": i for i in range(20)})
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len(cache) == 8 * 60


def _process_worker(path: str, worker: int, n: int, start_at: float) -> dict:
    """Writes its own keys and shared keys, reads the other worker's keys as they appear."""
    c = ResponseCache(path)
    time.sleep(max(0.0, start_at - time.time()))  # both workers start writing together
    seen_other = 0
    for i in range(n):
        c.put(f"w{worker}-{i}", {"worker": worker, "i": i, "text": "x" * 200})
        c.put_many({f"shared-{i}": {"i": i}, f"w{worker}-batch-{i}": [worker, i]})
        other = c.get(f"w{1 - worker}-{i}")
        if other is not None:
            assert other == {"worker": 1 - worker, "i": i, "text": "x" * 200}
            seen_other += 1
    c.close()
    return {"worker": worker, "seen_other": seen_other}


def test_two_processes_share_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    n = 150
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 2.0
    pool = ctx.Pool(2)
    try:
        results = pool.starmap(_process_worker, [(path, 0, n, start_at), (path, 1, n, start_at)])
    finally:
        pool.close()  # the workers end on their own; the pool's context manager would SIGTERM them
        pool.join()
    assert sorted(r["worker"] for r in results) == [0, 1]
    assert sum(r["seen_other"] for r in results) > 0, "the workers did not overlap"
    with ResponseCache(path) as c:
        assert len(c) == 2 * n + n + 2 * n  # own keys, shared keys (once), batch keys
        assert all(c.get(f"w{w}-{i}") == {"worker": w, "i": i, "text": "x" * 200} for w in (0, 1) for i in range(n))
        assert c.get_many([f"shared-{i}" for i in range(n)]) == {f"shared-{i}": {"i": i} for i in range(n)}


_KILLED_WRITER = textwrap.dedent(
    """
    import sys
    from ctxwin_dagster.backends.calls.cache import ResponseCache
    c = ResponseCache(sys.argv[1])
    print("ready", flush=True)
    batch = 0
    while True:
        c.put_many({f"b{batch}-{i}": {"batch": batch, "i": i, "pad": "y" * 2000} for i in range(25)})
        batch += 1
    """
)


def test_killed_writer_leaves_only_complete_transactions(tmp_path: Path) -> None:
    path = tmp_path / "killed.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        with ResponseCache(path) as c:
            while len(c) < 200 and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with ResponseCache(path) as c:
        n = len(c)
        assert n >= 200
        assert n % 25 == 0, "a put_many was stored in part"
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for (key,) in conn.execute("SELECT key FROM entries"):
            batch, i = key[1:].split("-")
            assert c.get(key) == {"batch": int(batch), "i": int(i), "pad": "y" * 2000}
        conn.close()
        c.put("after", "the file is still writable")
        assert c.get("after") == "the file is still writable"


def test_reads_are_not_blocked_by_a_writer(cache: ResponseCache) -> None:
    cache.put("k", 1)
    other = sqlite3.connect(cache.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    t0 = time.perf_counter()
    assert cache.get("k") == 1 and cache.get("missing") is None  # WAL: readers do not wait
    assert time.perf_counter() - t0 < 0.5
    other.execute("ROLLBACK")
    other.close()
