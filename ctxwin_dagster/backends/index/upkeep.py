"""Index upkeep for a chunk table written one document at a time.

What writing one document costs must not grow with the table, so no index is rebuilt per
document:

* **BTREE indexes on** ``doc_id`` (per-document search, counts, deletes, the duplicate check)
  and ``chunk_id`` (the merge on it) and the **full-text index** on ``embedded_text`` are made
  once, when missing;
* new rows are **folded into the existing indexes** by LanceDB's ``optimize()`` (compaction and
  index append, no retraining), once ``append_rows`` rows are not yet indexed. Until then search
  still finds them: LanceDB scans unindexed rows exactly (flat) and merges them with the index's
  results;
* the **ANN vector index** (IVF_SQ, cosine) is trained once the table holds ``ann_min_rows`` rows
  and retrained only when the table has grown by ``retrain_growth`` since the last training, or
  when more than ``max_deltas`` appended parts have piled up on it (each append adds one, and
  search visits each). When it was trained, how many rows it covers and how many trainings the
  table has had are kept in the vector column's field metadata (``ctxwin:ann:*``), so every
  writer and reader sees them, on a local folder as on object storage.

``optimize()`` also compacts the new small fragments, and LanceDB merges them into the large
fragment next to them, rewriting it: that step (once per ``append_rows`` rows) grows with the
table; LanceDB's Python API offers no index-only optimize (pylance's ``optimize_indices`` is one).

Settings were chosen by measurement (``benchmarks/bench_index.py``: recall@10 against exact
search and latency at 10 K-100 K rows of 384-d vectors).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict, TypeVar

from ctxwin_dagster.core.json_types import JSONObject

__all__ = [
    "AnnState",
    "IndexPolicy",
    "IndexStats",
    "UpkeepReport",
    "ann_state",
    "ensure_fts",
    "maintain",
    "retry_on_conflict",
    "train_vector_index",
]

_KEY = "ctxwin:ann:"
VECTOR = "vector"
T = TypeVar("T")


class AnnState(TypedDict):
    """When the ANN index was last trained, on how many rows, how many trainings, and its config."""

    trained_rows: int
    trained_at: str
    trainings: int
    config: str


class IndexStats(TypedDict):
    """LanceDB's statistics of one index."""

    name: str
    type: str
    indexed_rows: int
    unindexed_rows: int
    parts: int


@dataclass(frozen=True)
class IndexPolicy:
    """When indexes are made, appended to and retrained, and how the ANN index is searched.

    Args:
        ann_min_rows: train the ANN index once the table holds this many rows (below it a flat
            scan is fast and exact).
        retrain_growth: retrain when the table has grown by this fraction of the rows the index
            was trained on (0.5: at 20 K, 30 K, 45 K, 67.5 K, 101 K ... rows).
        max_deltas: retrain also when the vector index has more appended parts than this.
        append_rows: run ``optimize()`` (append new rows to every index) once this many rows
            are unindexed; fewer are searched by a flat scan.
        rows_per_partition: IVF partitions = rows / this (at least 8, at most 4,096).
        nprobes: IVF partitions searched per query.
        refine_factor: candidates re-ranked with full vectors = ``k * refine_factor``.
    """

    ann_min_rows: int = 20_000
    retrain_growth: float = 0.5
    max_deltas: int = 16
    append_rows: int = 5_000
    rows_per_partition: int = 800
    nprobes: int = 20
    refine_factor: int = 5

    def __post_init__(self) -> None:
        if self.ann_min_rows < 256:
            raise ValueError(
                f"ann_min_rows must be >= 256 (an IVF index needs rows to train on); got {self.ann_min_rows}"
            )
        if self.retrain_growth <= 0:
            raise ValueError(
                f"retrain_growth must be > 0 (e.g. 0.5 = retrain after 50% growth); got {self.retrain_growth}"
            )
        counts = {
            "max_deltas": self.max_deltas,
            "append_rows": self.append_rows,
            "rows_per_partition": self.rows_per_partition,
            "nprobes": self.nprobes,
            "refine_factor": self.refine_factor,
        }
        for name, value in counts.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1; got {value}")

    def partitions(self, rows: int) -> int:
        return max(8, min(4096, rows // self.rows_per_partition))


@dataclass
class UpkeepReport:
    """What one upkeep pass did and the state it left."""

    rows: int
    created: list[str]
    trained: bool
    appended: bool
    ann_index: str
    ann_trained_rows: int
    ann_trained_at: str
    ann_trainings: int
    ann_deltas: int
    unindexed_rows: int
    seconds: float

    def to_metadata(self) -> JSONObject:
        metadata: JSONObject = asdict(self)
        return metadata


def retry_on_conflict(op: Callable[[], T], *, retries: int = 8, refresh: Callable[[], object] | None = None) -> T:
    """Run ``op``; on a commit conflict with another writer wait (jittered backoff) and retry."""
    for attempt in range(retries + 1):
        try:
            return op()
        except Exception as exc:
            if attempt == retries or not is_conflict(exc):
                raise
            time.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + random.random()))
            if refresh is not None:
                refresh()
    raise AssertionError("unreachable")


def is_conflict(exc: Exception) -> bool:
    text = str(exc).lower()
    return any(w in text for w in ("conflict", "commit", "retryable", "concurrent", "version"))


# Lance's "unenforced primary key" marker. With it, two concurrent ``merge_insert`` calls that
# both insert the same new ``chunk_id`` conflict at commit (one is retried and updates instead);
# without it both succeed and the table holds the row twice (lance-format/lance#4585, #8949).
PRIMARY_KEY = {"lance-schema:unenforced-primary-key:position": "1"}


def _has_primary_key(table: Any) -> bool:
    meta = table.schema.field("chunk_id").metadata or {}
    return any(
        (k.decode() if isinstance(k, bytes) else str(k)).startswith("lance-schema:unenforced-primary-key") for k in meta
    )


def ensure_primary_key(table: Any, *, retries: int = 8) -> None:
    """Mark ``chunk_id`` as the table's primary key in a table made before the marker (it must
    first be declared non-null; chunk ids never are null), so concurrent writers of one
    document cannot both insert a row."""
    if _has_primary_key(table):
        return

    def mark() -> None:
        table.checkout_latest()
        if _has_primary_key(table):
            return
        if table.schema.field("chunk_id").nullable:
            table.alter_columns({"path": "chunk_id", "nullable": False})
        table.set_unenforced_primary_key("chunk_id")

    retry_on_conflict(mark, retries=retries, refresh=table.checkout_latest)


def ann_state(table: Any) -> AnnState:
    """The ANN training record kept in the vector column's metadata (zeros if never trained)."""
    raw = table.schema.field(VECTOR).metadata or {}
    meta = {
        k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v for k, v in raw.items()
    }
    return {
        "trained_rows": int(meta.get(_KEY + "trained_rows", 0)),
        "trained_at": meta.get(_KEY + "trained_at", ""),
        "trainings": int(meta.get(_KEY + "trainings", 0)),
        "config": meta.get(_KEY + "config", ""),
    }


def _indexes(table: Any) -> dict[str, Any]:
    """Index configs by their single column."""
    out = {}
    for cfg in table.list_indices():
        cols = list(getattr(cfg, "columns", None) or [])
        if len(cols) == 1:
            out[cols[0]] = cfg
    return out


def train_vector_index(table: Any, rows: int, policy: IndexPolicy) -> str:
    """(Re)train the IVF_SQ index on all rows and record it; returns the config used."""
    from lancedb.index import IvfSq

    partitions = policy.partitions(rows)
    table.create_index(VECTOR, config=IvfSq(distance_type="cosine", num_partitions=partitions), replace=True)
    config = f"IVF_SQ cosine, {partitions} partitions"
    trainings = ann_state(table)["trainings"] + 1
    table.update_field_metadata(
        {
            "path": VECTOR,
            "metadata": {
                _KEY + "trained_rows": str(rows),
                _KEY + "trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
                _KEY + "trainings": str(trainings),
                _KEY + "config": config,
            },
        }
    )
    return config


def _create_once(table: Any, column: str, config: object, refresh: Callable[[], object] | None) -> bool:
    """Create an index that is missing; False if another writer made it meanwhile."""
    try:
        retry_on_conflict(lambda: table.create_index(column, config=config, replace=False), refresh=refresh)
    except Exception as exc:
        if "already exists" not in str(exc):
            raise
        return False
    return True


def _stats(table: Any, index_name: str) -> Any:
    return table.index_stats(index_name)


def maintain(table: Any, policy: IndexPolicy, *, refresh: Callable[[], object] | None = None) -> UpkeepReport:
    """Bring ``table``'s indexes up to date: cheap after most writes; ``optimize()`` once every
    ``append_rows`` new rows and the rare retraining of the ANN index cost time that grows with
    the table (see the module's docstring)."""
    from lancedb.index import FTS, BTree

    started = time.perf_counter()
    if refresh is None:
        refresh = table.checkout_latest  # after a conflict, retry on the latest version
    created: list[str] = []
    have = _indexes(table)
    for column, config, label in (
        ("doc_id", BTree(), "doc_id BTREE"),
        ("chunk_id", BTree(), "chunk_id BTREE"),
        ("embedded_text", FTS(), "embedded_text FTS"),
    ):
        if column not in have and _create_once(table, column, config, refresh):
            created.append(label)
    rows = table.count_rows()
    state = ann_state(table)
    vec = have.get(VECTOR)
    deltas = 0
    if vec is not None:
        deltas = int(getattr(_stats(table, vec.name), "num_indices", 1) or 1)
    due = rows >= policy.ann_min_rows and (
        vec is None or rows >= state["trained_rows"] * (1 + policy.retrain_growth) or deltas > policy.max_deltas
    )
    trained = False
    if due:
        retry_on_conflict(lambda: train_vector_index(table, rows, policy), refresh=refresh)
        trained = True
        have = _indexes(table)
    unindexed = max((_stats(table, cfg.name).num_unindexed_rows for cfg in have.values()), default=0)
    appended = False
    if unindexed >= policy.append_rows:
        retry_on_conflict(table.optimize, refresh=refresh)
        appended = True
        have = _indexes(table)
        unindexed = max((_stats(table, cfg.name).num_unindexed_rows for cfg in have.values()), default=0)
    state = ann_state(table)
    vec = have.get(VECTOR)
    if vec is not None:
        deltas = int(getattr(_stats(table, vec.name), "num_indices", 1) or 1)
    return UpkeepReport(
        rows=rows,
        created=created,
        trained=trained,
        appended=appended,
        ann_index=state["config"] if vec is not None else f"none: flat scan until {policy.ann_min_rows:,} rows",
        ann_trained_rows=state["trained_rows"] if vec is not None else 0,
        ann_trained_at=state["trained_at"] if vec is not None else "",
        ann_trainings=state["trainings"],
        ann_deltas=deltas if vec is not None else 0,
        unindexed_rows=int(unindexed),
        seconds=round(time.perf_counter() - started, 3),
    )


def ensure_fts(table: Any, writing: contextlib.AbstractContextManager[object]) -> bool:
    """Create the full-text index on ``embedded_text`` if it is missing; True if created.
    ``writing`` is the table's write lock (a context manager): the index is made once, by one
    writer, and a search that finds it made never waits for the lock."""
    from lancedb.index import FTS

    def made() -> bool:
        return any("embedded_text" in (getattr(i, "columns", None) or []) for i in table.list_indices())

    if made():
        return False
    with writing:
        table.checkout_latest()
        if made():
            return False
        table.create_index("embedded_text", config=FTS(), replace=True)
    return True


def index_stats(table: Any) -> dict[str, IndexStats]:
    """LanceDB's statistics of each index of ``table``, by column."""
    out: dict[str, IndexStats] = {}
    for cfg in table.list_indices():
        st = table.index_stats(cfg.name)
        out[",".join(cfg.columns)] = {
            "name": cfg.name,
            "type": st.index_type,
            "indexed_rows": st.num_indexed_rows,
            "unindexed_rows": st.num_unindexed_rows,
            "parts": st.num_indices,
        }
    return out
