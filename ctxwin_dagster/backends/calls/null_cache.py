"""A cache that keeps nothing: the :class:`~ctxwin_dagster.backends.calls.cache.ResponseCache` API
where no cache folder is given, so callers need no second path for "no cache"."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from ctxwin_dagster.backends.calls.cache import ResponseCache, json_bytes
from ctxwin_dagster.core.json_types import JSONValue

__all__ = ["NullCache"]


class NullCache:
    """The :class:`ResponseCache` API, storing nothing: every lookup misses.

    Example::

        >>> cache = NullCache()
        >>> cache.put("k", 1); cache.get("k") is None, len(cache)
        (True, 0)
    """

    path = None

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._misses = 0

    def __repr__(self) -> str:
        return "NullCache()"

    make_key = staticmethod(ResponseCache.make_key)

    def _miss(self, n: int = 1) -> None:
        with self._lock:
            self._misses += n

    def get(self, key: str) -> JSONValue | None:
        self._miss()
        return None

    def put(self, key: str, value: object) -> None:
        json_bytes(value)  # same validation as the real cache

    def get_many(self, keys: Iterable[str]) -> dict[str, JSONValue]:
        self._miss(len(set(keys)))
        return {}

    def put_many(self, mapping: Mapping[str, object]) -> None:
        for value in mapping.values():
            json_bytes(value)

    def get_blob(self, key: str) -> bytes | None:
        self._miss()
        return None

    def put_blob(self, key: str, data: bytes) -> None:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"put_blob() stores bytes; got {type(data).__name__} (use put() for JSON values)")

    def delete(self, key: str) -> bool:
        return False

    def clear(self) -> None:
        pass

    def __len__(self) -> int:
        return 0

    def __contains__(self, key: object) -> bool:
        return False

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"hits": 0, "misses": self._misses, "entries": 0}

    def close(self) -> None:
        pass

    def __enter__(self) -> NullCache:
        return self

    def __exit__(self, *exc: object) -> None:
        pass
