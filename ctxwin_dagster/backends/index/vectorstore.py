"""LanceDB indexes: one table per variant, rows keyed by ``chunk_id``.

Rewriting a document replaces exactly its rows: one ``merge_insert`` on ``chunk_id`` (update
matches, insert new ones), then one delete of that document's rows that are no longer produced,
so a re-run never duplicates rows. Each is one atomic LanceDB commit and neither reads more than
the document's rows (through the ``chunk_id`` and ``doc_id`` indexes), so a write costs the same
at any table size. A failure between the two leaves that document with extra rows (the old
ones not produced any more), which the index asset's ``rows_match_chunks`` check reports and a
re-run removes; other documents are never touched. Concurrent writers (Dagster's multiprocess
executor) are retried on commit conflicts. The URI is a local folder by default; an ``s3://``
URI works the same (endpoint and credentials from the environment: ``AWS_ENDPOINT``,
``AWS_ACCESS_KEY_ID``...).

Writers of one table take turns under its write lock, and damage is found and named with its fix
(:mod:`~ctxwin_dagster.backends.index.tables`: the connection and its tables, which
:class:`ChunkIndex` extends with the rows written and read in them).

Indexes are kept up to date by :meth:`ChunkIndex.maintain` at a cost that does not grow with
the table (see :mod:`ctxwin_dagster.backends.index.upkeep`). Search within one document is exact
(a flat scan of its rows, held per table version: :mod:`~ctxwin_dagster.backends.index.reads`);
search over the whole table uses the ANN index once there is one, and finds rows written since.

Each table records what built it, in its vector column's metadata (``ctxwin:embedder:*``, beside
the ANN record): the embedding model, its dimension, its provider and the row strategy (how a
contextualized row was fitted into the model's window); see :class:`IndexRecord`. A table made
by a writer that names its embedder carries the record from its creation; a write with another
model (or another row strategy) is refused, and so is a search whose question was embedded by
another model (:class:`EmbedderMismatchError`, naming the table, both models and the fix).
LanceDB keeps field metadata through ``merge_insert``, ``add``, ``add_columns``, index builds and
reopening, and (unlike table-wide schema metadata) lets it be added to an existing table. Tables
made before the record existed carry none: the first writer that names its embedder writes it,
and until then a search is accepted as before, without a warning (nothing tells which model built
such a table; a question vector of another size is still refused).

Example::

    >>> import numpy as np, tempfile
    >>> idx = ChunkIndex(tempfile.mkdtemp())
    >>> rows = [{"chunk_id": "c1", "doc_id": "d", "chunk_index": 0, "start": 0, "end": 5,
    ...          "text": "hello", "section": None, "context": "", "embedded_text": "hello"}]
    >>> idx.replace_document("t_rag", "d", rows, np.ones((1, 4), dtype="float32") / 2)["rows"]
    1
    >>> idx.count("t_rag", doc_id="d")
    1
    >>> idx.replace_document("cc_rag", "d", rows, np.ones((1, 4), dtype="float32") / 2,
    ...                      embedder=EmbedderIdentity("toy-embedder", 4, "local"), row_strategy="context_budget")["rows"]
    1
    >>> idx.record("cc_rag").describe()
    'toy-embedder (4 dimensions, local), row strategy context_budget'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc

from ctxwin_dagster.backends.embeddings.identity import EmbedderIdentity, identity_of
from ctxwin_dagster.backends.index.health import DamagedIndexError
from ctxwin_dagster.backends.index.reads import fuse_rankings
from ctxwin_dagster.backends.index.schema import (
    EmbedderMismatchError,
    IndexError_,
    IndexRecord,
    check_search,
    document_batch,
    prepare_for_write,
)
from ctxwin_dagster.backends.index.tables import LanceTables, sql_string
from ctxwin_dagster.backends.index.upkeep import (
    VECTOR,
    AnnState,
    IndexPolicy,
    IndexStats,
    UpkeepReport,
    ann_state,
    ensure_fts,
    ensure_primary_key,
    index_stats,
    maintain,
    retry_on_conflict,
)

if TYPE_CHECKING:
    from ctxwin_dagster.backends.base import Embedder

__all__ = [
    "ChunkIndex",
    "DamagedIndexError",
    "EmbedderIdentity",
    "EmbedderMismatchError",
    "IndexError_",
    "IndexPolicy",
    "IndexRecord",
]


class ChunkIndex(LanceTables):
    """The per-variant LanceDB tables of chunk rows and vectors.

    Args:
        uri: a local folder or an object-store URI (``s3://bucket/prefix``).
        storage_options: passed to LanceDB for object stores (credentials come from the
            environment, never from code).
        table_suffix: table name = ``{variant}{table_suffix}`` (default ``_chunks``).
        policy: when indexes are made, appended to and retrained, and how the ANN index is
            searched (:class:`~ctxwin_dagster.backends.index.upkeep.IndexPolicy`).
        run_command: the command that runs this index's experiment, which the fix of a
            :class:`DamagedIndexError` names (``ctxwin run``; another experiment's adds its home).
    """

    def replace_document(
        self,
        variant: str,
        doc_id: str,
        rows: Sequence[Mapping[str, object]],
        vectors: np.ndarray,
        *,
        doc_sha256: str = "",
        retries: int = 8,
        embedder: Embedder | EmbedderIdentity | str | None = None,
        row_strategy: str | None = None,
    ) -> dict[str, int]:
        """Make the table's rows for ``doc_id`` exactly ``rows`` (merge on ``chunk_id``).

        ``embedder`` (the embedder that made ``vectors``, its
        :class:`~ctxwin_dagster.backends.embeddings.identity.EmbedderIdentity` or its model name)
        and ``row_strategy`` are recorded in a new table, or in an older one without a record,
        and checked against the record of a table that has one. Without ``embedder`` nothing is
        recorded or checked but the vector size.

        Returns counts: ``rows`` now stored for the document, ``inserted``, ``updated`` and
        ``deleted`` (rows of the document that are no longer produced).

        Raises:
            EmbedderMismatchError: the table was built with another model or row strategy.
        """
        if not rows:
            if len(vectors):
                raise ValueError(f"0 rows but {len(vectors)} vectors for {doc_id!r}; they must match")
            deleted = self.delete_document(variant, doc_id)
            return {"rows": 0, "inserted": 0, "updated": 0, "deleted": deleted}
        batch = document_batch(rows, vectors, doc_id=doc_id, doc_sha256=doc_sha256)
        ids = batch.column("chunk_id").to_pylist()
        dim = batch.schema.field(VECTOR).type.list_size
        record = None
        if embedder is not None:
            ident = identity_of(embedder, dim=dim)
            record = IndexRecord(ident.model, dim, ident.provider, row_strategy or "")
        with self.writing(variant):
            table = self.lance_table(variant, dim, create=True, record=record)
            prepare_for_write(
                table,
                batch.schema,
                record,
                table_name=self.table_name(variant),
                uri=self.uri,
                variant=variant,
                retries=retries,
            )
            ensure_primary_key(table, retries=retries)
            holder = [table]

            def upsert() -> Any:
                return (
                    holder[0]
                    .merge_insert("chunk_id")
                    .when_matched_update_all()
                    .when_not_matched_insert_all()
                    .execute(batch)
                )

            def reopen() -> None:
                holder[0] = self.lance_table(variant, dim, create=True)

            with self.reading(variant, table):  # a merge that fails on a damaged table names the damage
                result = retry_on_conflict(upsert, retries=retries, refresh=reopen)
            # The document's rows that are no longer produced (found through the doc_id index). A
            # merge that deletes "not matched by source" would read the whole table's keys instead.
            stale = f"doc_id = {sql_string(doc_id)} AND chunk_id NOT IN ({', '.join(sql_string(i) for i in ids)})"
            deleted = holder[0].count_rows(stale)
            if deleted:
                retry_on_conflict(lambda: holder[0].delete(stale), retries=retries, refresh=reopen)
            stats = {
                "rows": len(rows),
                "inserted": int(getattr(result, "num_inserted_rows", 0) or 0),
                "updated": int(getattr(result, "num_updated_rows", 0) or 0),
                "deleted": deleted,
            }
            return stats

    def delete_document(self, variant: str, doc_id: str) -> int:
        """Delete every row of ``doc_id``; returns how many were deleted."""
        table = self.lance_table(variant)
        if table is None:
            return 0
        where = f"doc_id = {sql_string(doc_id)}"
        with self.writing(variant):
            table.checkout_latest()
            before = int(table.count_rows(where))
            if before:
                retry_on_conflict(lambda: table.delete(where), refresh=table.checkout_latest)
        return before

    def count(self, variant: str, *, doc_id: str | None = None) -> int:
        table = self.lance_table(variant)
        if table is None:
            return 0
        where = f"doc_id = {sql_string(doc_id)}" if doc_id else None
        return self._reads.get(table, ("count", table.name, where), lambda: int(table.count_rows(where)))

    def counts_by_document(self, variant: str) -> dict[str, int]:
        """Rows per document, from one read of the table's ``doc_id`` column (checking every
        document of a corpus costs one read instead of a query per document)."""
        table = self.lance_table(variant)
        if table is None:
            return {}

        def read() -> dict[str, int]:
            import pyarrow.compute as pc

            ids = table.search().select(["doc_id"]).limit(10**9).to_arrow().column("doc_id")
            return {str(c["values"]): int(c["counts"]) for c in pc.value_counts(ids).to_pylist()}

        return self._reads.get(table, ("counts_by_document", table.name), read)

    def duplicate_ids(self, variant: str, *, doc_id: str | None = None) -> int:
        """How many rows share a ``chunk_id`` with another row (0 in a healthy index).

        With ``doc_id`` only that document's rows are read (through the ``doc_id`` index), so
        the check after writing a document costs the same at any table size; without it the
        whole table's ``chunk_id`` column is read (an audit).
        """
        table = self.lance_table(variant)
        if table is None:
            return 0
        if doc_id is None:
            ids = table.to_arrow().column("chunk_id")
        else:
            where = f"doc_id = {sql_string(doc_id)}"
            ids = (
                table.search()
                .where(where, prefilter=True)
                .select(["chunk_id"])
                .limit(10**9)
                .to_arrow()
                .column("chunk_id")
            )
        return len(ids) - int(pc.count_distinct(ids).as_py())

    def rows(
        self, variant: str, *, doc_id: str | None = None, columns: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """The rows of ``doc_id`` (None: of the whole table) with ``columns`` (None: all).
        One document's rows are read once per version of the table (each call gets its own copies)."""
        table = self.lance_table(variant)
        if table is None:
            return []

        def read() -> list[dict[str, Any]]:
            query = table.search().where(f"doc_id = {sql_string(doc_id)}", prefilter=True) if doc_id else table.search()
            if columns:
                query = query.select(list(columns))
            found: list[dict[str, Any]] = query.limit(None if not hasattr(query, "limit") else 10**9).to_list()
            return found

        with self.reading(variant, table):
            if doc_id is None:
                return read()
            key = ("rows", table.name, doc_id, tuple(columns) if columns else None)
            return [dict(r) for r in self._reads.get(table, key, read)]

    def search(
        self,
        variant: str,
        vector: np.ndarray,
        *,
        k: int = 4,
        doc_id: str | None = None,
        query_text: str | None = None,
        hybrid: bool = False,
        rrf_k: int = 60,
        embedder: Embedder | EmbedderIdentity | str | None = None,
        doc_ids: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Top-``k`` rows by cosine similarity (``score`` = similarity), optionally fused with
        full-text search by reciprocal rank fusion (``hybrid=True`` with ``query_text``).

        ``doc_id`` searches one document; ``doc_ids`` (when ``doc_id`` is not given) only these
        documents — e.g. those whose file is still in the folder.

        ``embedder`` (the one that embedded ``vector``) is checked against the table's record
        (see :meth:`check_embedder`); a vector of another size than the table's is refused.

        Raises:
            EmbedderMismatchError: the table was built with another embedding model.
            DamagedIndexError: the table is damaged (the search failed on it, or it lost versions).
        """
        if k < 1:
            raise ValueError(f"k must be >= 1; got {k}")
        table = self.lance_table(variant)
        if table is None:
            raise IndexError_(
                f"no table {self.table_name(variant)!r} in {self.uri}; materialize the {variant}_index asset first"
            )
        with self.reading(variant, table):
            width = int(np.asarray(vector).reshape(-1).shape[0])
            if embedder is not None:
                self._check_search(variant, table, identity_of(embedder, dim=width))
            table_dim = table.schema.field(VECTOR).type.list_size
            if width != table_dim:
                raise IndexError_(
                    f"the index {self.table_name(variant)!r} in {self.uri} holds {table_dim}-dim vectors but the question vector "
                    f"has {width}; search it with the embedding model that built it"
                )
            where = f"doc_id = {sql_string(doc_id)}" if doc_id else None
            among = (
                None
                if doc_id or doc_ids is None
                else f"doc_id IN ({', '.join(sql_string(d) for d in doc_ids) or sql_string('')})"
            )
            depth = k * 4 if hybrid else k
            if doc_id:
                # One document's rows (a few hundred): an exact scan of them, held per table version.
                hits = self._reads.scan(table, where or "", VECTOR, np.asarray(vector, dtype=np.float32), depth)
            else:
                q = (
                    table.search(np.asarray(vector, dtype=np.float32), vector_column_name="vector")
                    .metric("cosine")
                    .limit(depth)
                )
                q = q.where(among, prefilter=True) if among else q
                hits = q.nprobes(self.policy.nprobes).refine_factor(self.policy.refine_factor).to_list()
                for h in hits:
                    h["score"] = 1.0 - float(h.pop("_distance"))
            if not (hybrid and query_text):
                return hits[:k]
            self.ensure_fts(variant)
            fq = table.search(query_text, query_type="fts", fts_columns="embedded_text").limit(depth)
            if where or among:
                fq = fq.where(where or among, prefilter=True)
            return fuse_rankings((hits, fq.to_list()), k=k, rrf_k=rrf_k)

    def check_embedder(
        self, variant: str, embedder: Embedder | EmbedderIdentity | str, *, dim: int | None = None
    ) -> IndexRecord | None:
        """Refuse to search the table with another model than the one that built it; returns
        the table's record (None for a table without one, which is accepted: see the module's
        docstring). ``dim`` is the width of the question vectors when the embedder does not know
        its own yet.

        Raises:
            EmbedderMismatchError: the table was built with another embedding model.
        """
        table = self.lance_table(variant)
        return None if table is None else self._check_search(variant, table, identity_of(embedder, dim=dim))

    def _check_search(self, variant: str, table: Any, asking: EmbedderIdentity) -> IndexRecord | None:
        have = IndexRecord.from_metadata(table.schema.field(VECTOR).metadata)
        if have is not None:
            check_search(have, asking, table=self.table_name(variant), uri=self.uri)
        return have

    def ensure_fts(self, variant: str) -> bool:
        """Create the full-text index on ``embedded_text`` if it is missing; True if created."""
        table = self.lance_table(variant)
        if table is None:
            return False
        return ensure_fts(table, self.writing(variant))

    def maintain(self, variant: str) -> UpkeepReport:
        """Bring the table's indexes up to date after a write, at a cost that does not grow
        with the table: scalar and full-text indexes made once, new rows appended to every index
        by ``optimize()`` in batches, the ANN index (re)trained only when the table has grown
        by the policy's fraction."""
        table = self.lance_table(variant)
        if table is None:
            return UpkeepReport(0, [], False, False, "none: no table yet", 0, "", 0, 0, 0, 0.0)
        with self.writing(variant):
            table.checkout_latest()
            return maintain(table, self.policy)

    def ann_state(self, variant: str) -> AnnState:
        """When the ANN index was last trained, on how many rows, and how many trainings."""
        table = self.lance_table(variant)
        return (
            ann_state(table)
            if table is not None
            else {"trained_rows": 0, "trained_at": "", "trainings": 0, "config": ""}
        )

    def index_stats(self, variant: str) -> dict[str, IndexStats]:
        """LanceDB's statistics of each index of the table, by column."""
        table = self.lance_table(variant)
        return {} if table is None else index_stats(table)
