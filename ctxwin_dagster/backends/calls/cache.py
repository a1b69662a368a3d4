"""A persistent, content-addressed response cache in SQLite.

Keys are SHA-256 digests of the canonical JSON of whatever determines a response (see
:meth:`ResponseCache.make_key`), so the same request always finds the same entry and a changed
prompt, setting or prompt version never does. Values are JSON values or raw bytes.

The store is one SQLite file in WAL mode with a busy timeout, so several processes (Dagster's
multiprocess executor) and threads can read and write it at once. Every write is one
transaction: a run killed mid-way leaves each entry complete or absent, and a resumed run reuses
every entry that was finished.

Example::

    >>> import tempfile, os
    >>> cache = ResponseCache(os.path.join(tempfile.mkdtemp(), "responses.sqlite"))
    >>> key = ResponseCache.make_key("chat", "gpt-4o", [{"role": "user", "content": "hi"}])
    >>> cache.get(key) is None
    True
    >>> cache.put(key, {"text": "hello"})
    >>> cache.get(key), len(cache), cache.stats()["hits"]
    ({'text': 'hello'}, 1, 1)
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypedDict

from ctxwin_dagster.core.json_types import JSONValue

__all__ = ["ResponseCache", "cache_in", "json_bytes"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('json', 'blob')),
    value BLOB NOT NULL,
    created REAL NOT NULL
) WITHOUT ROWID
"""

# SQLite's bound-parameter limit is 999 on old builds; stay below it.
_IN_CHUNK = 500


def _canonical_default(obj: object) -> object:
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, (tuple, list, set, frozenset)):
        return sorted(obj) if isinstance(obj, (set, frozenset)) else list(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(
        f"cannot build a cache key from a {type(obj).__name__}; pass JSON-like parts "
        "(str, int, float, bool, None, lists, dicts, dataclasses)"
    )


def json_bytes(value: object) -> bytes:
    """``value`` as the compact UTF-8 JSON the cache stores.

    Raises:
        TypeError: bytes (stored with ``put_blob``) or a value JSON cannot hold.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        raise TypeError("put() stores JSON values; use put_blob() for bytes")
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except TypeError as exc:
        raise TypeError(f"cache values must be JSON-serializable ({exc}); convert the value or use put_blob()") from exc


class _State(TypedDict):
    """What a pickled :class:`ResponseCache` carries: its file and settings."""

    path: str
    timeout_s: float
    synchronous: str


class _ThreadConnection(threading.local):
    """The connection of the current thread (None until it opens one)."""

    conn: sqlite3.Connection | None = None


class ResponseCache:
    """A persistent key → value store in one SQLite file, safe across processes and threads.

    Args:
        path: the SQLite file; its folder is created. ``":memory:"`` is refused (each thread
            would see its own empty database) — use :class:`~ctxwin_dagster.backends.calls.null_cache.NullCache` or a temporary file.
        timeout_s: how long a writer waits for another process's lock before failing.
        synchronous: SQLite's ``synchronous`` pragma. ``"NORMAL"`` (default) keeps every entry
            atomic when a process is killed; ``"FULL"`` also survives a power cut.

    Each thread uses its own connection. Counters of :meth:`stats` are per instance.

    Example::

        >>> import tempfile, os
        >>> cache = ResponseCache(os.path.join(tempfile.mkdtemp(), "c.sqlite"))
        >>> cache.put_many({"a": 1, "b": [2, 3]})
        >>> cache.get_many(["a", "b", "missing"])
        {'a': 1, 'b': [2, 3]}
        >>> cache.put_blob("raw", b"\\x00\\x01"); cache.get_blob("raw")
        b'\\x00\\x01'
    """

    def __init__(self, path: str | Path, *, timeout_s: float = 60.0, synchronous: str = "NORMAL") -> None:
        if str(path) in ("", ":memory:") or str(path).startswith("file::memory:"):
            raise ValueError(
                f"ResponseCache needs a file path, got {str(path)!r}; use NullCache() for no cache "
                "or a temporary file for a throwaway one"
            )
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0; got {timeout_s}")
        synchronous = synchronous.upper()
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be 'NORMAL', 'FULL', 'EXTRA' or 'OFF'; got {synchronous!r}")
        self.path = Path(path).expanduser().resolve()
        if self.path.is_dir():
            raise ValueError(f"{self.path} is a folder; pass a file path such as {self.path / 'responses.sqlite'}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout_s = float(timeout_s)
        self.synchronous = synchronous
        self._local = _ThreadConnection()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._hits = 0
        self._misses = 0
        self._closed = False
        self._conn()  # create the file and schema now, so a bad path fails here

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"

    # ----------------------------------------------------------------- keys
    @staticmethod
    def make_key(*parts: object) -> str:
        """SHA-256 (hex) of the canonical JSON of ``parts`` (sorted keys, UTF-8 kept as is).

        Tuples and lists give the same key, as do dicts with the same items in any order.

        Example::

            >>> ResponseCache.make_key("chat", {"b": 1, "a": 2}) == ResponseCache.make_key("chat", {"a": 2, "b": 1})
            True
            >>> len(ResponseCache.make_key("x"))
            64
        """
        text = json.dumps(
            list(parts), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=_canonical_default
        )
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    # ----------------------------------------------------------------- connections
    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed; create a new ResponseCache")
        if os.getpid() != self._pid:  # forked: never reuse the parent's connections
            with self._lock:
                if os.getpid() != self._pid:
                    self._pid = os.getpid()
                    self._connections = []
                    self._local = _ThreadConnection()
        conn = self._local.conn
        if conn is None:
            conn = self._open()
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.path), timeout=self.timeout_s, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
        deadline = time.monotonic() + self.timeout_s
        while True:  # switching to WAL takes a lock that busy_timeout does not always wait for
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    conn.close()
                    raise
                time.sleep(0.01)
        if str(mode).lower() != "wal":
            conn.close()
            raise RuntimeError(
                f"could not put {self.path} in WAL mode (got {mode!r}); the cache needs a local file "
                "system that supports shared memory (not a network share)"
            )
        conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        self._write(conn, lambda c: c.execute(_SCHEMA))
        return conn

    @staticmethod
    def _write(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], object]) -> None:
        """Run ``fn(conn)`` in one IMMEDIATE transaction: all of it is stored, or none."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            fn(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection this instance opened (in any thread)."""
        with self._lock:
            conns, self._connections = self._connections, []
            self._closed = True
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> _State:
        """Pickles as its path and settings (connections are reopened in the new process)."""
        return {"path": str(self.path), "timeout_s": self.timeout_s, "synchronous": self.synchronous}

    def __setstate__(self, state: _State) -> None:
        self.__init__(state["path"], timeout_s=state["timeout_s"], synchronous=state["synchronous"])  # type: ignore[misc]

    # ----------------------------------------------------------------- counters
    def _count(self, hits: int, misses: int) -> None:
        with self._lock:
            self._hits += hits
            self._misses += misses

    def stats(self) -> dict[str, int]:
        """``hits`` and ``misses`` of this instance's lookups, and ``entries`` in the file."""
        with self._lock:
            hits, misses = self._hits, self._misses
        return {"hits": hits, "misses": misses, "entries": len(self)}

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    def __contains__(self, key: object) -> bool:
        return self._conn().execute("SELECT 1 FROM entries WHERE key = ?", (key,)).fetchone() is not None

    # ----------------------------------------------------------------- JSON values
    def _get_kind(self, key: str, kind: str) -> bytes | None:
        row = self._conn().execute("SELECT kind, value FROM entries WHERE key = ?", (key,)).fetchone()
        if row is None:
            self._count(0, 1)
            return None
        if row[0] != kind:
            raise TypeError(
                f"cache entry {key[:12]}… holds {'bytes' if row[0] == 'blob' else 'a JSON value'}; "
                f"use {'get_blob' if row[0] == 'blob' else 'get'}() for it"
            )
        self._count(1, 0)
        return bytes(row[1])

    def get(self, key: str) -> JSONValue | None:
        """The JSON value stored under ``key``, or None."""
        raw = self._get_kind(key, "json")
        if raw is None:
            return None
        value: JSONValue = json.loads(raw)
        return value

    def put(self, key: str, value: object) -> None:
        """Store a JSON value (anything :func:`json.dumps` takes) under ``key`` (replacing any previous one) in one transaction."""
        self._write(self._conn(), _json_insert(key, json_bytes(value)))

    def get_many(self, keys: Iterable[str]) -> dict[str, JSONValue]:
        """The JSON values found for ``keys``, as ``{key: value}`` (missing keys are left out)."""
        wanted = list(dict.fromkeys(keys))
        found: dict[str, JSONValue] = {}
        conn = self._conn()
        for i in range(0, len(wanted), _IN_CHUNK):
            chunk = wanted[i : i + _IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            for key, kind, value in conn.execute(f"SELECT key, kind, value FROM entries WHERE key IN ({marks})", chunk):
                if kind == "json":
                    found[key] = json.loads(bytes(value))
        self._count(len(found), len(wanted) - len(found))
        return found

    def put_many(self, mapping: Mapping[str, object]) -> None:
        """Store many JSON values in one transaction: all of them, or none."""
        now = time.time()
        rows = [(key, json_bytes(value), now) for key, value in mapping.items()]
        if not rows:
            return
        self._write(
            self._conn(),
            lambda c: c.executemany(
                "INSERT OR REPLACE INTO entries (key, kind, value, created) VALUES (?, 'json', ?, ?)", rows
            ),
        )

    # ----------------------------------------------------------------- bytes
    def get_blob(self, key: str) -> bytes | None:
        """The bytes stored under ``key`` with :meth:`put_blob`, or None."""
        return self._get_kind(key, "blob")

    def put_blob(self, key: str, data: bytes) -> None:
        """Store raw bytes under ``key`` in one transaction."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"put_blob() stores bytes; got {type(data).__name__} (use put() for JSON values)")
        payload = bytes(data)
        self._write(
            self._conn(),
            lambda c: c.execute(
                "INSERT OR REPLACE INTO entries (key, kind, value, created) VALUES (?, 'blob', ?, ?)",
                (key, payload, time.time()),
            ),
        )

    # ----------------------------------------------------------------- maintenance
    def delete(self, key: str) -> bool:
        """Remove ``key``; True when it was there."""
        deleted: list[int] = []
        self._write(
            self._conn(), lambda c: deleted.append(c.execute("DELETE FROM entries WHERE key = ?", (key,)).rowcount)
        )
        return bool(deleted and deleted[0])

    def clear(self) -> None:
        """Remove every entry."""
        self._write(self._conn(), lambda c: c.execute("DELETE FROM entries"))


def _json_insert(key: str, data: bytes) -> Callable[[sqlite3.Connection], object]:
    """The write that stores serialized JSON ``data`` under ``key``."""
    return lambda c: c.execute(
        "INSERT OR REPLACE INTO entries (key, kind, value, created) VALUES (?, 'json', ?, ?)",
        (key, data, time.time()),
    )


def cache_in(cache_dir: str | Path | None, filename: str) -> ResponseCache | None:
    """The cache ``filename`` in the folder ``cache_dir`` (made if missing); None without a folder
    (None or blank)."""
    if cache_dir is None or not str(cache_dir).strip():
        return None
    folder = Path(cache_dir).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    return ResponseCache(folder / filename)
