"""Telling a damaged table from a healthy one, and naming the fix.

A variant's table can be damaged on disk behind the project's back, and LanceDB does not notice
by itself: its row counts come from the manifest, so they stay right while a data file is
garbled, cut short or deleted, and a table whose newest manifest (``<table>.lance/_versions/``)
is deleted opens at the version before it, as if the last writes had never happened. Three
checks find such damage:

* **the written version**: after each write (under the table's write lock) the index notes the
  table's version in ``.<table>.written.json`` beside the tables (:class:`WrittenVersions`; a
  local folder only, like the write locks). A table whose latest version is older than the one
  noted lost its newest manifests. A newer one is fine (someone wrote it without the project);
* **a full scan** of every column, read in batches (:func:`scan_problem`): every data file of
  the current version is read, and the rows read must be as many as the manifest counts;
* **a failed read** (a search, a document's rows) is scanned at once, and, when the scan finds
  damage, reported as damage instead of LanceDB's own error (or a panic of its Rust code).

What is found is raised as :class:`DamagedIndexError`: which table (variant and path), what is
wrong, and the fix, ``ctxwin run --rebuild-index VARIANT`` (it moves the damaged table into the
Dagster home's ``ctxwin_trash/`` and builds the variant's index of every document again).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ctxwin_dagster.backends.index.locks import local_folder
from ctxwin_dagster.backends.index.schema import IndexError_

__all__ = [
    "REBUILD_FLAG",
    "DamagedIndexError",
    "WrittenVersions",
    "describe_failure",
    "reraise_as_damage",
    "run_command_for",
    "scan_problem",
    "version_problem",
]

#: The option of ``ctxwin run`` that rebuilds a damaged variant's table.
REBUILD_FLAG = "--rebuild-index"
#: Rows per batch of the full scan (bounded memory whatever the table's size).
SCAN_BATCH_ROWS = 4096
_FATAL = (KeyboardInterrupt, SystemExit, GeneratorExit)


class DamagedIndexError(IndexError_, ValueError):
    """A variant's table cannot be read as the project wrote it.

    The message names the variant, the table's path, what is wrong and the fix. It is a
    ``ValueError`` too, so everything that reports a question it cannot answer (``ctxwin ask``,
    its server) reports this with its message.

    Args:
        variant: the variant (``t_rag``…).
        path: the table's folder (``…/t_rag_chunks.lance``) or URI.
        problem: what is wrong, as a clause (``a data file is missing: …``).
        run_command: the command that runs the table's experiment (``ctxwin run``, or with
            ``--dagster-home HOME`` for another experiment); the fix adds the option to it.
    """

    def __init__(self, variant: str, path: str, problem: str, *, run_command: str = "ctxwin run") -> None:
        self.variant, self.path, self.problem, self.run_command = variant, path, problem, run_command
        super().__init__(
            f"the {variant} index is damaged: {path}: {problem}. Fix: `{self.fix}` moves the damaged table into the "
            f"Dagster home's ctxwin_trash/ (nothing is deleted) and builds the {variant} index of every document "
            "again from its chunks and contexts; the other variants are not touched"
        )

    @property
    def fix(self) -> str:
        return f"{self.run_command} {REBUILD_FLAG} {self.variant}"


def run_command_for(home: str | Path) -> str:
    """``ctxwin run`` as it runs the experiment of the Dagster home ``home``: as it is for the
    sample in its usual home, else with ``--dagster-home`` (which runs the experiment the home holds)."""
    from ctxwin_dagster.core.experiment import SAMPLE, default_home, home_experiment

    home = Path(home)
    if home_experiment(home).name == SAMPLE and home.resolve() == default_home(SAMPLE).resolve():
        return "ctxwin run"
    try:
        shown = home.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        shown = home.resolve()
    return f"ctxwin run --dagster-home {shown}"


class WrittenVersions:
    """The version each table had after the project's last write to it, one small JSON file per
    table beside the tables (``.<table>.written.json``). On an object store nothing is kept
    (as for the write locks), and the version check is not made.

    Example::

        >>> import tempfile
        >>> written = WrittenVersions(tempfile.mkdtemp())
        >>> written.note("t_rag_chunks", 7); written.get("t_rag_chunks")
        7
        >>> written.forget("t_rag_chunks"); written.get("t_rag_chunks") is None
        True
    """

    def __init__(self, uri: str) -> None:
        self.folder = local_folder(uri)

    def _path(self, table: str) -> Path | None:
        return None if self.folder is None else Path(self.folder) / f".{table}.written.json"

    def get(self, table: str) -> int | None:
        path = self._path(table)
        try:
            return int(json.loads(path.read_text(encoding="utf-8"))["version"]) if path is not None else None
        except (OSError, ValueError, KeyError, TypeError):
            return None  # never written by this project (or the note is unreadable): nothing to compare

    def note(self, table: str, version: int) -> None:
        """Keep ``version`` (written whole: a reader never sees half a file)."""
        path = self._path(table)
        if path is None:
            return
        temporary = path.with_name(path.name + f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"table": table, "version": int(version)}), encoding="utf-8")
        os.replace(temporary, path)

    def forget(self, table: str) -> None:
        """The table was dropped or set aside: a table made again under its name starts at version 1."""
        path = self._path(table)
        if path is not None:
            path.unlink(missing_ok=True)


def version_problem(version: int, written: int | None) -> str | None:
    """What is wrong when a table is at ``version`` but the project's last write made ``written``."""
    if written is None or version >= written:
        return None
    return (
        f"the table is at version {version}, but the last write of this project made version {written}; the manifests "
        f"of the newer versions are missing from _versions/, so it reads as it was before those writes"
    )


def describe_failure(exc: BaseException) -> str:
    """LanceDB's error on reading a damaged table, as the damage it shows (one line)."""
    text = " ".join(str(exc).split())
    text = re.sub(r",? /\S+\.rs:\d+:\d+", "", text)  # the Rust source location
    missing = re.search(r"Not found: \S*?(data/[^/\s]+\.lance)", text)
    if missing:
        return f"a data file is missing: {missing.group(1)}"
    return f"a data file cannot be read (garbled or cut short): {text[:300]}"


def scan_problem(table: Any) -> str | None:
    """Read every column of every row of ``table`` (a LanceDB table, at its current version) in
    batches; what is wrong, or None when every data file reads and the rows are as many as the
    manifest counts."""
    try:
        expected = table.count_rows()
        read = 0
        for batch in table.search().limit(max(expected, 1)).to_batches(SCAN_BATCH_ROWS):
            read += batch.num_rows
    except _FATAL:
        raise
    except BaseException as exc:  # noqa: BLE001 - LanceDB's Rust code panics on some damage (a BaseException)
        return describe_failure(exc)
    if read != expected:
        return f"{read} rows read but its manifest counts {expected}: a deletion or data file is missing or damaged"
    return None


@contextlib.contextmanager
def reraise_as_damage(table: Any, damage: Callable[[str], IndexError_]) -> Iterator[None]:
    """Around reads of ``table``: when one fails (LanceDB's error, or a panic of its Rust code),
    scan the table; if the scan finds damage, raise ``damage(problem)`` instead, else the failure
    as it was. The project's own errors pass unchanged."""
    try:
        yield
    except (IndexError_, *_FATAL):
        raise
    except BaseException as exc:  # noqa: BLE001 - a panic is a BaseException
        problem = scan_problem(table)
        if problem is None:
            raise
        raise damage(problem) from exc
