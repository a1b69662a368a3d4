"""A damaged table is found and named with its fix, by the index layer itself.

Each test builds a small real LanceDB table (two documents written as the index assets write
them, then the indexes' upkeep), damages it on disk as a user's disk or hands might, and reads
it again through a fresh :class:`ChunkIndex`, as the next command would.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from ctxwin_dagster.backends.index.health import DamagedIndexError, describe_failure, reraise_as_damage
from ctxwin_dagster.backends.index.rows import set_aside
from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
from ctxwin_dagster.testing.rows import synthetic_document

TABLE = "t_rag_chunks"
FIX = "Fix: `ctxwin run --rebuild-index t_rag`"


def _document(i: int, n: int, seed: int | None = None) -> tuple[str, list[dict], np.ndarray]:
    return synthetic_document(i, n, dim=8, seed=seed)


@pytest.fixture
def built(tmp_path) -> Path:
    """A t_rag table of documents d000 (30 rows) and d001 (20), written in three writes and an
    upkeep; its folder."""
    index = ChunkIndex(str(tmp_path / "lancedb"))
    for doc_id, rows, vectors in (_document(0, 30), _document(1, 20)):
        index.replace_document("t_rag", doc_id, rows, vectors)
    index.maintain("t_rag")
    index.replace_document("t_rag", *_document(1, 20, seed=7))  # the newest version rewrites d001
    index.verify("t_rag")  # a healthy table passes
    return tmp_path / "lancedb"


def _data_files(root: Path) -> list[Path]:
    return sorted((root / f"{TABLE}.lance" / "data").glob("*.lance"), key=lambda p: p.stat().st_mtime_ns)


def _newest_manifest(root: Path) -> Path:
    # Lance names version v's manifest u64::MAX - v, so the newest sorts first.
    return sorted((root / f"{TABLE}.lance" / "_versions").glob("*.manifest"))[0]


def _damaged(call) -> str:
    with pytest.raises(DamagedIndexError) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize(
    "garble",
    [
        pytest.param(lambda p: p.write_bytes(os.urandom(p.stat().st_size)), id="junk-of-the-same-size"),
        pytest.param(lambda p: p.write_bytes(b"junk" * 10), id="short-junk"),
    ],
)
def test_a_garbled_data_file_is_named_with_the_fix_by_every_read(built, garble):
    garble(_data_files(built)[0])
    index = ChunkIndex(str(built))
    assert index.count("t_rag") == 50  # the manifest's count does not see it: why a scan is needed
    message = _damaged(lambda: index.verify("t_rag"))
    assert message.startswith(f"the t_rag index is damaged: {built}/{TABLE}.lance: a data file cannot be read")
    assert FIX in message and "ctxwin_trash/" in message
    # A search and a document's rows that touch the file fail with the same error, never LanceDB's own.
    assert _damaged(lambda: index.search("t_rag", np.ones(8, dtype=np.float32), k=3)) == message
    assert _damaged(lambda: [index.rows("t_rag", doc_id=d) for d in ("d000", "d001")]) == message


def test_a_deleted_data_file_is_named(built):
    gone = _data_files(built)[0]
    gone.unlink()
    message = _damaged(lambda: ChunkIndex(str(built)).verify("t_rag"))
    assert f"a data file is missing: data/{gone.name}. {FIX}" in message


def test_a_deleted_newest_manifest_is_named_by_reads_and_writes(built):
    index = ChunkIndex(str(built))
    newest = index.lance_table("t_rag").version
    _newest_manifest(built).unlink()
    fresh = ChunkIndex(str(built))
    message = _damaged(lambda: fresh.verify("t_rag"))
    assert f"the table is at version {newest - 1}, but the last write of this project made version {newest}" in message
    assert FIX in message
    # Never an answer from the older version, and no write on top of it (which would hide the loss).
    assert _damaged(lambda: fresh.search("t_rag", np.ones(8, dtype=np.float32), k=3)) == message
    assert _damaged(lambda: fresh.count("t_rag", doc_id="d001")) == message
    assert _damaged(lambda: fresh.replace_document("t_rag", *_document(2, 2))) == message


def test_a_table_written_since_by_someone_else_is_not_damaged(built):
    import lancedb

    lancedb.connect(str(built)).open_table(TABLE).delete("doc_id = 'd000'")
    index = ChunkIndex(str(built))
    index.verify("t_rag")
    assert index.count("t_rag") == 20


def test_a_table_set_aside_is_moved_whole_and_a_new_one_starts_afresh(built, tmp_path):
    _newest_manifest(built).unlink()
    index = ChunkIndex(str(built))
    trash = tmp_path / "home" / "ctxwin_trash" / "now" / "lancedb"
    moved = set_aside(index, "t_rag", trash)
    assert moved == trash / f"{TABLE}.lance" and (moved / "data").is_dir()
    assert not (built / f"{TABLE}.lance").exists() and not (built / f".{TABLE}.written.json").exists()
    assert set_aside(index, "t_rag", trash) is None  # nothing left to move
    # The next writes make a new table at version 1, which the old table's note does not refuse.
    index.replace_document("t_rag", *_document(0, 30))
    index.verify("t_rag")
    assert ChunkIndex(str(built)).count("t_rag", doc_id="d000") == 30


def test_set_aside_refuses_an_object_store():
    index = ChunkIndex.__new__(ChunkIndex)  # no connection needed to refuse
    index.uri, index.table_suffix = "s3://bucket/lancedb", "_chunks"
    with pytest.raises(Exception, match=r"object store, where a table cannot be moved aside.*drop_table\('t_rag'\)"):
        set_aside(index, "t_rag", "/nowhere")


def test_lancedbs_messages_become_the_damage_they_show():
    missing = RuntimeError(
        "lance error: Not found: tmp/x/t_rag_chunks.lance/data/0101abc.lance, /root/.cargo/registry/src/x/local.rs:273:40"
    )
    assert describe_failure(missing) == "a data file is missing: data/0101abc.lance"
    panic = describe_failure(ValueError("range end index 4096 out of range for slice of length 40"))
    assert (
        panic
        == "a data file cannot be read (garbled or cut short): range end index 4096 out of range for slice of length 40"
    )


class _Panic(BaseException):
    """What a panic of LanceDB's Rust code raises (pyo3's PanicException is a BaseException)."""


class _GarbledTable:
    def count_rows(self):
        return 3

    def search(self):
        raise _Panic("range end index 4096 out of range for slice of length 40")


def test_a_panic_while_reading_becomes_the_named_error_and_an_interrupt_stays_one():
    def damage(problem: str) -> DamagedIndexError:
        return DamagedIndexError("t_rag", "/x/t_rag_chunks.lance", problem)

    with (
        pytest.raises(DamagedIndexError, match=re.escape("range end index 4096 out of range")) as caught,
        reraise_as_damage(_GarbledTable(), damage),
    ):
        raise _Panic("range end index 4096 out of range for slice of length 40")
    assert isinstance(caught.value.__cause__, _Panic)
    with pytest.raises(KeyboardInterrupt), reraise_as_damage(_GarbledTable(), damage):
        raise KeyboardInterrupt
