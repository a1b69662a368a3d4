"""A document's rows taken out of a variant's table and put back: what ``ctxwin prune`` sets
aside (an Arrow file per variant, vectors included) and what ``ctxwin prune --undo`` merges back
on ``chunk_id``; and a whole table set aside as it is on disk (``ctxwin run --rebuild-index``)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather

from ctxwin_dagster.backends.index.locks import local_folder
from ctxwin_dagster.backends.index.schema import IndexError_
from ctxwin_dagster.backends.index.tables import LanceTables, sql_string
from ctxwin_dagster.backends.index.upkeep import ensure_primary_key

__all__ = ["export_rows", "read_rows", "restore_rows", "set_aside", "table_version", "write_rows"]


def table_version(index: LanceTables, variant: str) -> int | None:
    """The table's current LanceDB version (None when there is no table)."""
    table = index.lance_table(variant)
    return None if table is None else int(table.version)


def export_rows(index: LanceTables, variant: str, doc_ids: Sequence[str]) -> pa.Table:
    """Every row of ``doc_ids`` with all its columns (vectors included), as Arrow."""
    table = index.lance_table(variant)
    if table is None or not doc_ids:
        return pa.table({})
    where = f"doc_id IN ({', '.join(sql_string(d) for d in doc_ids)})"
    n = table.count_rows(where)
    if not n:
        return table.schema.empty_table()
    with index.reading(variant, table):
        return table.search().where(where).limit(n).to_arrow()


def restore_rows(index: LanceTables, variant: str, rows: pa.Table) -> int:
    """Merge ``rows`` (from :func:`export_rows`) back on ``chunk_id``; returns how many."""
    if rows.num_rows == 0:
        return 0
    dim = rows.schema.field("vector").type.list_size
    with index.writing(variant):
        table = index.lance_table(variant, dim, create=True)
        ensure_primary_key(table)
        names = [f.name for f in table.schema if f.name in rows.schema.names]
        rows = rows.select(names).cast(pa.schema([table.schema.field(n) for n in names]))
        table.merge_insert("chunk_id").when_matched_update_all().when_not_matched_insert_all().execute(rows)
    return int(rows.num_rows)


def write_rows(path: str | Path, rows: pa.Table) -> None:
    """Keep ``rows`` in an Arrow IPC (Feather) file."""
    feather.write_feather(rows, str(path))


def read_rows(path: str | Path) -> pa.Table:
    return feather.read_table(str(path))


def set_aside(index: LanceTables, variant: str, folder: str | Path) -> Path | None:
    """Move the variant's table folder, as it is on disk (damaged or not), into ``folder``; the
    next write makes a new table. Returns where it went (None: there was no table).

    Raises:
        IndexError_: the index is on an object store, where a table cannot be moved.
    """
    name, base = index.table_name(variant), local_folder(index.uri)
    if base is None:
        raise IndexError_(
            f"{index.table_path(variant)} is on an object store, where a table cannot be moved aside; copy it "
            f"elsewhere with the store's tools, then drop it (ChunkIndex({index.uri!r}).drop_table({variant!r})) and "
            "run again"
        )
    source, target = Path(base) / f"{name}.lance", Path(folder) / f"{name}.lance"
    n = 1
    while target.exists():  # never into (or over) a table set aside before
        n += 1
        target = Path(folder) / f"{name}.{n}.lance"
    with index.writing(variant):
        moved = source.exists()
        if moved:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(source), str(target))
        index.forget(name)
    return target if moved else None
