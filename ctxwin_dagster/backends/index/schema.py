"""A chunk table's schema and the record of what built it.

Every variant table has the same columns: the chunk's fields, how its row was embedded (nullable,
added as nulls to tables written before they existed) and the vector. The vector field's metadata
holds an :class:`IndexRecord` (``ctxwin:embedder:*``): the embedding model, its dimension, its
provider and the row strategy, so a table is never written or searched with another model than
the one that built it (:class:`EmbedderMismatchError`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, SupportsIndex, SupportsInt

import numpy as np
import pyarrow as pa

from ctxwin_dagster.backends.embeddings.identity import EmbedderIdentity
from ctxwin_dagster.backends.index.upkeep import PRIMARY_KEY, VECTOR, retry_on_conflict

__all__ = [
    "EmbedderMismatchError",
    "IndexError_",
    "IndexRecord",
    "check_search",
    "check_write",
    "document_batch",
    "prepare_for_write",
    "table_schema",
]

_STR_FIELDS = ("chunk_id", "doc_id", "doc_sha256", "section", "text", "context", "embedded_text", "context_engine")
_INT_FIELDS = ("chunk_index", "start", "end")
# How a row was embedded (core.embedding_window.RowPlan.to_dict): nullable, added to tables
# written before they existed.
_EMBED_STR_FIELDS = ("embed_strategy",)
_EMBED_INT_FIELDS = ("embed_pieces", "chunk_tokens", "context_tokens", "context_tokens_cut", "chunk_tokens_cut")


class IndexError_(RuntimeError):
    """An index operation failed; the message names the table and what to do."""


class EmbedderMismatchError(IndexError_):
    """A table is written or searched with another embedding model than the one that built it."""


_RECORD = "ctxwin:embedder:"


@dataclass(frozen=True)
class IndexRecord:
    """What built a table: the embedding model, its vector size, its provider (``local``,
    ``openai``) and the row strategy (how a contextualized row was fitted into the model's window;
    ``chunk only`` for a table of bare chunks, empty when the writer did not say)."""

    model: str
    dim: int
    provider: str = ""
    row_strategy: str = ""

    @property
    def embedder(self) -> EmbedderIdentity:
        return EmbedderIdentity(self.model, self.dim, self.provider)

    def describe(self) -> str:
        text = self.embedder.describe()
        return f"{text}, row strategy {self.row_strategy}" if self.row_strategy else text

    def to_metadata(self) -> dict[str, str]:
        return {
            _RECORD + "model": self.model,
            _RECORD + "dim": str(self.dim),
            _RECORD + "provider": self.provider,
            _RECORD + "row_strategy": self.row_strategy,
        }

    @classmethod
    def from_metadata(cls, meta: Mapping[bytes, bytes] | Mapping[str, str] | None) -> IndexRecord | None:
        """The record in a vector field's metadata; None for a table made before records."""
        text = {_text(k): _text(v) for k, v in (meta or {}).items()}
        model = text.get(_RECORD + "model", "")
        if not model:
            return None
        return cls(
            model,
            int(text.get(_RECORD + "dim") or 0),
            text.get(_RECORD + "provider", ""),
            text.get(_RECORD + "row_strategy", ""),
        )

    def to_dict(self) -> dict[str, str | int]:
        return {"model": self.model, "dim": self.dim, "provider": self.provider, "row_strategy": self.row_strategy}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def table_schema(dim: int, record: IndexRecord | None = None) -> pa.Schema:
    """The schema of a variant's table: ``dim``-wide vectors, ``record`` in the vector field's metadata."""
    vector_meta = record.to_metadata() if record is not None else None
    return pa.schema(
        [pa.field("chunk_id", pa.string(), nullable=False, metadata=PRIMARY_KEY), pa.field("doc_id", pa.string())]
        + [pa.field(f, pa.int64()) for f in _INT_FIELDS]
        + [pa.field(f, pa.string()) for f in _STR_FIELDS[2:]]
        + [pa.field(f, pa.string()) for f in _EMBED_STR_FIELDS]
        + [pa.field(f, pa.int64()) for f in _EMBED_INT_FIELDS]
        + [pa.field(VECTOR, pa.list_(pa.float32(), dim), metadata=vector_meta)]
    )


def _add_missing_fields(table: Any, schema: pa.Schema) -> None:
    """Add (as nulls) the columns of ``schema`` that a table written by an older version lacks."""
    have = set(table.schema.names)
    missing = [f for f in schema if f.name not in have]
    if missing:
        table.add_columns(missing)


def _whole(value: object) -> int:
    """``int(value)`` of a row's field, for the values ``int()`` takes."""
    if isinstance(value, str | bytes | SupportsInt | SupportsIndex):
        return int(value)
    raise TypeError(f"int() argument must be a string or a number, not {type(value).__name__!r}")


def document_batch(
    rows: Sequence[Mapping[str, object]], vectors: np.ndarray, *, doc_id: str, doc_sha256: str = ""
) -> pa.Table:
    """One document's rows and their vectors as an Arrow table of the index's schema.

    Raises:
        ValueError: rows and vectors differ in number, a ``chunk_id`` repeats, or a row belongs
            to another document.
    """
    if len(rows) != len(vectors):
        raise ValueError(f"{len(rows)} rows but {len(vectors)} vectors for {doc_id!r}; they must match")
    ids = [r["chunk_id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate chunk_id in the rows of {doc_id!r}; chunk ids must be unique")
    bad_doc = {r["doc_id"] for r in rows} - {doc_id}
    if bad_doc:
        raise ValueError(f"rows for {doc_id!r} carry other doc_ids {sorted(bad_doc, key=str)}")
    vectors = np.asarray(vectors, dtype=np.float32)
    dim = int(vectors.shape[1])
    data: dict[str, list[str | int | None]] = {
        f: [None if r.get(f) is None else str(r.get(f)) for r in rows] for f in _STR_FIELDS
    }
    data["doc_sha256"] = [str(r.get("doc_sha256") or doc_sha256) for r in rows]
    for f in _INT_FIELDS:
        data[f] = [_whole(r[f]) for r in rows]
    for f in _EMBED_STR_FIELDS:
        data[f] = [None if r.get(f) is None else str(r[f]) for r in rows]
    for f in _EMBED_INT_FIELDS:
        data[f] = [None if r.get(f) is None else _whole(r[f]) for r in rows]
    schema = table_schema(dim)
    arrays = [
        pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), dim)
        if field.name == VECTOR
        else pa.array(data[field.name], field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def prepare_for_write(
    table: Any,
    schema: pa.Schema,
    record: IndexRecord | None,
    *,
    table_name: str,
    uri: str,
    variant: str,
    retries: int = 8,
) -> None:
    """Make ``table`` ready for rows of ``schema`` written by the embedder ``record`` names:
    refuse another model, row strategy or vector size; record the embedder in a table made
    before records; add the columns an older table lacks.

    Raises:
        EmbedderMismatchError: the table was built with another model or row strategy.
        IndexError_: the table holds vectors of another size.
    """
    have = IndexRecord.from_metadata(table.schema.field(VECTOR).metadata)
    if record is not None and have is not None:
        check_write(have, record, table=table_name, uri=uri, variant=variant)
    existing_dim = table.schema.field(VECTOR).type.list_size
    dim = schema.field(VECTOR).type.list_size
    if existing_dim != dim:
        raise IndexError_(
            f"table {table_name!r} in {uri} holds {existing_dim}-dim vectors but the embedder "
            f"gives {dim}; use the same embedding model, or build into another LanceDB folder, or delete the table "
            f"explicitly (ChunkIndex({uri!r}).drop_table({variant!r})) and re-index"
        )
    if record is not None and have is None:
        # A table made before records: the first writer that names its embedder records it.
        retry_on_conflict(
            lambda: table.update_field_metadata({"path": VECTOR, "metadata": record.to_metadata()}),
            retries=retries,
            refresh=table.checkout_latest,
        )
    _add_missing_fields(table, schema)


def check_search(have: IndexRecord, asking: EmbedderIdentity, *, table: str, uri: str) -> None:
    """Refuse a search of the table ``table`` (built as ``have`` records) whose question was
    embedded by another model (``asking``)."""
    if not have.embedder.same_model(asking):
        raise EmbedderMismatchError(
            f"the index {table!r} in {uri} was built with {have.embedder.describe()}, but this "
            f"search embeds the question with {asking.describe()}; vectors of different models cannot be compared. "
            f"Search with {have.model} (embeddings provider={have.provider or 'local'!r}, model={have.model!r}: the "
            f"experiment's embeddings settings, or Asker.open(embeddings={{'provider': {have.provider or 'local'!r}, "
            f"'model': {have.model!r}}})), or build an index with {asking.model} into another LanceDB folder"
        )


def check_write(have: IndexRecord, writing: IndexRecord, *, table: str, uri: str, variant: str) -> None:
    """Refuse to write rows of another model, or fitted by another row strategy, into a table
    whose record is ``have``."""
    fix = (
        f"build into another LanceDB folder (the lancedb resource's uri), or delete the table explicitly "
        f"(ChunkIndex({uri!r}).drop_table({variant!r})) and rebuild it"
    )
    if not have.embedder.same_model(writing.embedder):
        raise EmbedderMismatchError(
            f"table {table!r} in {uri} was built with {have.embedder.describe()}; refusing to write vectors of "
            f"{writing.embedder.describe()} into it (a table holds one model's vectors). Use the recorded embedder "
            f"(embeddings provider={have.provider or 'local'!r}, model={have.model!r}), or {fix}"
        )
    if have.row_strategy and writing.row_strategy and have.row_strategy != writing.row_strategy:
        raise EmbedderMismatchError(
            f"table {table!r} in {uri} holds rows fitted to {have.model}'s window with row strategy "
            f"{have.row_strategy!r}; refusing to write rows fitted with {writing.row_strategy!r} into it. Use the "
            f"recorded row strategy (embeddings row_strategy={have.row_strategy!r}), or {fix}"
        )
