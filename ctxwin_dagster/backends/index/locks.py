"""Writers of one LanceDB table take turns.

LanceDB lets two ``merge_insert`` calls that insert the same new key at once both commit
(lance-format/lance#4585, lancedb/lancedb#3377), so two runs of one document at once could store
its rows twice. ``chunk_id`` as the table's unenforced primary key makes Lance detect most of
those, but not all (a CI run still found 7 duplicates). So on a local folder every write of a
table holds an OS file lock, ``.<table>.write.lock`` in the LanceDB folder (:mod:`filelock`):
writers of different tables, and every reader, never wait. An object store (``s3://``...) has
no such lock: there the primary key is the only guard, and the index asset's
``rows_match_chunks`` check reports what slips through.

Example::

    >>> import tempfile
    >>> locks = TableLocks(tempfile.mkdtemp())
    >>> with locks.hold("t_rag_chunks"):
    ...     with locks.hold("t_rag_chunks"):   # re-entrant within one object
    ...         pass
    >>> TableLocks("s3://bucket/lancedb").folder is None
    True
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from filelock import BaseFileLock

__all__ = ["TableLockTimeout", "TableLocks", "local_folder"]


def local_folder(uri: str) -> str | None:
    """The folder of a local LanceDB URI (a path or ``file://…``); None for an object store."""
    uri = str(uri)
    if uri.startswith("file://"):
        return uri[len("file://") :]
    return None if "://" in uri else uri


class TableLockTimeout(RuntimeError):
    """Another writer held a table's lock for longer than the wait allowed."""


class TableLocks:
    """The write locks of the tables under one LanceDB URI."""

    def __init__(self, uri: str) -> None:
        self.uri = str(uri)
        self.folder = local_folder(self.uri)
        self._locks: dict[str, BaseFileLock] = {}

    @contextlib.contextmanager
    def hold(self, table: str, *, timeout_s: float = 900.0) -> Iterator[None]:
        """Hold ``table``'s write lock; re-entrant within this object, other processes and
        threads wait up to ``timeout_s``. Does nothing for an object store."""
        if self.folder is None:
            yield
            return
        from filelock import FileLock, Timeout

        lock = self._locks.get(table)
        if lock is None:
            os.makedirs(self.folder, exist_ok=True)
            lock = self._locks[table] = FileLock(os.path.join(self.folder, f".{table}.write.lock"), thread_local=False)
        try:
            lock.acquire(timeout=timeout_s)
        except Timeout:
            raise TableLockTimeout(
                f"table {table!r} in {self.uri} has been locked by another writer for {timeout_s:.0f} s "
                f"({lock.lock_file}); wait for the other run to finish, or stop it, then run again"
            ) from None
        try:
            yield
        finally:
            lock.release()
