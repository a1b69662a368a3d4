"""The LanceDB connection of an index and its variant tables: each opened once, checked for
damage, and written under its write lock.

Writers of one table take turns: every write (upsert, delete, index upkeep, restore) holds the
table's write lock (:mod:`ctxwin_dagster.backends.index.locks` says why, and what happens on an
object store).

A damaged table (a garbled or missing data file, lost newest manifests) is found and named with
its fix by :meth:`LanceTables.verify`, by every open of a table (the version check) and by every
failed read (:mod:`~ctxwin_dagster.backends.index.health`); :func:`~ctxwin_dagster.backends.index.rows.set_aside`
moves a table out of the folder for ``ctxwin run --rebuild-index``.

:class:`~ctxwin_dagster.backends.index.vectorstore.ChunkIndex` is these tables with the rows
written and read in them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

from ctxwin_dagster.backends.index.health import (
    DamagedIndexError,
    WrittenVersions,
    reraise_as_damage,
    scan_problem,
    version_problem,
)
from ctxwin_dagster.backends.index.locks import TableLocks
from ctxwin_dagster.backends.index.reads import VersionedReads
from ctxwin_dagster.backends.index.schema import IndexRecord, table_schema
from ctxwin_dagster.backends.index.upkeep import VECTOR, IndexPolicy
from ctxwin_dagster.core.defaults import VARIANTS

__all__ = ["LanceTables", "sql_string"]


def sql_string(value: str) -> str:
    """``value`` as an SQL string literal (quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


_SAFE_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")


class LanceTables:
    """The variant tables under one LanceDB URI (the arguments are
    :class:`~ctxwin_dagster.backends.index.vectorstore.ChunkIndex`'s)."""

    def __init__(
        self,
        uri: str,
        *,
        storage_options: Mapping[str, str] | None = None,
        table_suffix: str = "_chunks",
        policy: IndexPolicy | None = None,
        run_command: str = "ctxwin run",
    ) -> None:
        import lancedb  # imported here: only the index layer needs it

        self.uri = str(uri)
        # Every read checks for a newer version (another process may write), so open tables are kept.
        self._db = lancedb.connect(
            self.uri, storage_options=dict(storage_options or {}) or None, read_consistency_interval=timedelta(0)
        )
        self.table_suffix = table_suffix
        self.policy = policy or IndexPolicy()
        self._locks = TableLocks(self.uri)
        self._open: dict[str, Any] = {}  # LanceDB tables by name
        self._reads = VersionedReads()  # one document's rows, counts and vectors per table version
        self.run_command = run_command
        self._written = WrittenVersions(self.uri)  # each table's version after the project's last write
        self._scanned: dict[str, int] = {}  # table name -> the version a full scan found whole

    @contextlib.contextmanager
    def writing(self, variant: str, *, timeout_s: float = 900.0) -> Iterator[None]:
        """Hold the variant table's write lock (see :mod:`~ctxwin_dagster.backends.index.locks`);
        when the writes inside succeed, note the table's version they made."""
        name = self.table_name(variant)
        with self._locks.hold(name, timeout_s=timeout_s):
            yield
            table = self._open.get(name)
            if table is not None:
                self._written.note(name, table.version)

    def table_path(self, variant: str) -> str:
        """Where the variant's table is: its folder, or its object-store URI."""
        return f"{self.uri.rstrip('/')}/{self.table_name(variant)}.lance"

    def _damage(self, variant: str, problem: str) -> DamagedIndexError:
        return DamagedIndexError(variant, self.table_path(variant), problem, run_command=self.run_command)

    def _checked(self, variant: str, table: Any) -> Any:
        """``table``, after checking that it is not older than the project's last write made it."""
        written = self._written.get(table.name)  # read before the version: a writer notes after it commits
        problem = version_problem(int(table.version), written)
        if problem:
            raise self._damage(variant, problem)
        return table

    def verify(self, variant: str) -> None:
        """Check the variant's table: its version against the project's last write, then a full
        scan of every column (once per table version in this object). Nothing to check when
        there is no table.

        Raises:
            DamagedIndexError: naming the table, what is wrong and the fix.
        """
        table = self.lance_table(variant)
        if table is None:
            return
        version = int(table.version)
        if self._scanned.get(table.name) != version:
            problem = scan_problem(table)
            if problem:
                raise self._damage(variant, problem)
            self._scanned[table.name] = version

    def reading(self, variant: str, table: Any) -> contextlib.AbstractContextManager[None]:
        """A context manager around reads of ``table``: a read that fails on a damaged table
        raises :class:`DamagedIndexError` instead of LanceDB's error."""
        return reraise_as_damage(table, lambda problem: self._damage(variant, problem))

    def table_name(self, variant: str) -> str:
        if not _SAFE_NAME.match(variant):
            raise ValueError(f"variant {variant!r} must be letters, digits, '_' or '-'; e.g. one of {VARIANTS}")
        return f"{variant}{self.table_suffix}"

    def lance_table(
        self, variant: str, dim: int | None = None, *, create: bool = False, record: IndexRecord | None = None
    ) -> Any:
        """The variant's LanceDB table, checked for damage (None when there is none): for the
        index's own modules (rows set aside and restored, upkeep) and tests. With ``create`` a
        missing table is made with ``dim``-wide vectors and ``record`` in its schema. Writes go
        through :meth:`writing`, reads of many rows through :meth:`reading`."""
        name = self.table_name(variant)
        table = self._open.get(name)
        if table is not None:
            try:
                table.version  # noqa: B018 - fails once another process has dropped the table
            except Exception:
                self._open.pop(name, None)
            else:
                return self._checked(variant, table)
        if name in self._table_names():
            table = self._checked(variant, self._db.open_table(name))
        elif not create:
            return None
        elif dim is None:
            raise ValueError("dim is needed to create a table")
        else:
            self._written.forget(name)  # a table made again starts at version 1
            # A new table carries its record from its creation (in the vector field's metadata).
            try:
                table = self._db.create_table(name, schema=table_schema(dim, record), exist_ok=True)
            except TypeError:  # older LanceDB without exist_ok
                table = self._db.create_table(name, schema=table_schema(dim, record))
        self._open[name] = table
        return table

    def _table_names(self) -> list[str]:
        lister = getattr(self._db, "list_tables", None)
        if lister is not None:
            result = lister()
            names = getattr(result, "tables", result)
            return list(names)
        return list(self._db.table_names())

    def drop_table(self, variant: str) -> bool:
        """Delete the variant's table and every row in it (explicit: nothing else deletes a
        table); True if there was one."""
        name = self.table_name(variant)
        if name not in self._table_names():
            return False
        with self.writing(variant):
            self._db.drop_table(name)
            self.forget(name)
        return True

    def forget(self, name: str) -> None:
        """The table ``name`` is gone (dropped, or set aside): forget what was read and noted of it;
        a table made again under the name starts at version 1."""
        self._open.pop(name, None)
        self._reads.forget(name)
        self._written.forget(name)
        self._scanned.pop(name, None)

    def record(self, variant: str) -> IndexRecord | None:
        """What built the table (model, dimension, provider, row strategy); None when there is
        no table, or it was made before records and no writer has named its embedder since."""
        table = self.lance_table(variant)
        return None if table is None else IndexRecord.from_metadata(table.schema.field(VECTOR).metadata)
