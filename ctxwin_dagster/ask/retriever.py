"""Finding a question's context: :class:`Retriever`.

A retriever owns what retrieval needs and nothing else: the index, the embedder that built it,
the documents the context windows are cut from, and the BM25 indexes of the documents it has
searched (built on first use and kept, so a stream of questions builds each once). It is the
LanceDB index's side of :class:`~ctxwin_dagster.core.retrieval.trip.Source`: the way from the
search to the context windows is one trip through
:func:`~ctxwin_dagster.core.retrieval.trip.retrieve`, as one
:class:`~ctxwin_dagster.core.retrieval.settings.RetrievalSettings` says (the sentence focus the
retrieval evaluation measures: evaluations/reports/retrieval_quality.md).

A question asked of the whole folder (no ``doc_id``) is first routed to the ``route_to``
documents it most likely asks about (by the period it names, or the kind of document it points
at: "this agreement") when the settings say so
(:class:`~ctxwin_dagster.core.retrieval.routing.DocumentRouter`); each document's card (its file
name and opening) is read once and kept while its file is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxwin_dagster.ask.indexed_documents import CHUNK_COLUMNS, IndexedDocuments
from ctxwin_dagster.ask.results import AskError, normalize_variant
from ctxwin_dagster.core.retrieval.enhance import EnhancedContext
from ctxwin_dagster.core.retrieval.lexical import LexicalIndexes
from ctxwin_dagster.core.retrieval.routing import (
    CARD_CHARS,
    ROUTE_DEPTH,
    DocumentCard,
    DocumentRouter,
    question_kind,
    question_periods,
)
from ctxwin_dagster.core.retrieval.rows import chunks_from_rows, hits_from_rows
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings
from ctxwin_dagster.core.retrieval.trip import retrieve
from ctxwin_dagster.core.retrieval.window import span_text
from ctxwin_dagster.core.text.splitting import Chunk

if TYPE_CHECKING:
    from ctxwin_dagster.backends.base import Embedder
    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex

__all__ = ["Retriever"]


class Retriever:
    """Searches the index and assembles a question's context windows.

    Args:
        index: the :class:`~ctxwin_dagster.backends.index.vectorstore.ChunkIndex` (None: nothing to
            search; every method then raises :class:`AskError` saying so).
        embedder: the embedder the index was built with (it embeds the questions).
        documents: where chunk rows and document text come from.
    """

    def __init__(self, index: ChunkIndex | None, embedder: Embedder | None, documents: IndexedDocuments) -> None:
        if index is not None and embedder is None:
            raise ValueError(
                "an index needs the embedder it was built with; pass embedder=LocalEmbedder() (or the index's)"
            )
        # Duck-typed (a ChunkIndex, an embedder); require_index() says when one is missing.
        self.index = index
        self.embedder = embedder
        self.documents = documents
        self.lexical = LexicalIndexes()
        self._cards: dict[tuple[str, str], tuple[object, DocumentCard]] = {}

    # ----------------------------------------------------------------- checks and rows
    def require_index(self) -> ChunkIndex:
        """The index (a clear error when there is none, or no embedder for it)."""
        if self.index is None:
            raise AskError(
                "this asker has no index; open one with Asker.open(lancedb=...) or use mode='sliding' with doc_id="
            )
        if self.embedder is None:
            raise AskError("searching needs the embedder the index was built with; pass embedder=")
        return self.index

    def require_embedder(self) -> Embedder:
        """The embedder of the index (the same errors as :meth:`require_index`)."""
        self.require_index()
        assert self.embedder is not None  # require_index() raised otherwise
        return self.embedder

    def check_doc(self, variant: str, doc_id: str) -> None:
        """Raise :class:`AskError` naming the known documents when ``doc_id`` has no rows in ``variant``."""
        index = self.require_index()
        if index.count(variant, doc_id=doc_id) == 0:
            known = sorted({r["doc_id"] for r in index.rows(variant, columns=["doc_id"])})
            if not known:
                raise AskError(
                    f"the {variant} table in {index.uri} is empty or missing; materialize it with `ctxwin run` "
                    f"(or `ctxwin run --job {variant}_job`)"
                )
            raise AskError(f"document {doc_id!r} is not in the {variant} index; known documents: {', '.join(known)}")

    def chunks(self, variant: str, doc_ids: Sequence[str]) -> tuple[list[Chunk], dict[str, str]]:
        """The chunks of ``doc_ids`` as the ``variant`` table holds them, and their documents' text."""
        self.require_index()
        return self.documents.chunks(variant, doc_ids)

    # ----------------------------------------------------------------- search
    def embed(self, question: str) -> np.ndarray:
        """The question's vector, by the index's embedder."""
        _check_question(question)
        return self.require_embedder().embed([question])[0]

    def search(
        self,
        question: str,
        vector: np.ndarray,
        *,
        variant: str,
        doc_id: str | None,
        k: int,
        hybrid: bool,
        route_to: int = 0,
    ) -> tuple[list[dict[str, Any]], list[str] | None]:
        """The top-``k`` rows of ``variant`` for ``vector`` (fused with full-text search of
        ``question`` when ``hybrid``), within ``doc_id`` or every document whose file is there,
        and the documents the search was narrowed to (``route_to`` > 0 and the question names a
        period or a kind of document that tells them apart; else None)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise AskError(f"k must be an int >= 1; got {k!r}")
        variant = normalize_variant(variant)
        index = self.require_index()
        if doc_id:
            self.check_doc(variant, doc_id)
        elif index.count(variant) == 0:
            raise AskError(f"the {variant} table in {index.uri} is empty or missing; materialize it with `ctxwin run`")
        from ctxwin_dagster.backends.index.vectorstore import EmbedderMismatchError

        try:
            # Over every document: only those whose file is in the folder (a document whose file
            # is gone keeps its rows until `ctxwin prune`, but is not searched).
            present = None if doc_id else self.documents.present_ids()
            routed = (
                self.route(question, vector, variant=variant, among=present, m=route_to)
                if route_to and not doc_id
                else None
            )
            rows = index.search(
                variant,
                vector,
                k=k,
                doc_id=doc_id or None,
                query_text=question,
                hybrid=hybrid,
                embedder=self.embedder,
                doc_ids=routed if routed is not None else present,
            )
            return rows, routed
        except EmbedderMismatchError as exc:
            raise AskError(str(exc)) from exc

    def route(
        self, question: str, vector: np.ndarray, *, variant: str, among: list[str] | None, m: int
    ) -> list[str] | None:
        """The ``m`` documents of ``among`` (None: every indexed one) that ``question`` most likely
        asks about, best first (every document of the kind it points at, when only "this agreement"
        or the like tells them apart); None (search them all) when there are ``m`` or fewer, or
        when the question names no period and no kind that tells them apart."""
        if not any(question_periods(question)) and question_kind(question) is None:
            return None
        index = self.require_index()
        ids = (
            list(among) if among is not None else sorted({r["doc_id"] for r in index.rows(variant, columns=["doc_id"])})
        )
        if len(ids) <= m:
            return None
        best: dict[str, float] = {}
        for row in index.search(variant, vector, k=ROUTE_DEPTH, embedder=self.embedder, doc_ids=ids):
            best.setdefault(row["doc_id"], float(row["score"]))
        return DocumentRouter([self._card(variant, d) for d in ids]).route(question, best, m)

    def _card(self, variant: str, doc_id: str) -> DocumentCard:
        """``doc_id``'s card: its file's name and opening (or, with no file, its first chunks)."""
        path = self.documents.file(doc_id)
        stamp: object = path.stat().st_mtime_ns if path is not None else None
        cached = self._cards.get((variant, doc_id))
        if cached is not None and cached[0] == stamp:
            return cached[1]
        opening = None
        if path is not None:
            try:
                opening = self.documents.text(doc_id)
            except AskError:  # an unreadable file: its indexed chunks still tell what it is
                opening = None
        if opening is None:
            chunks = chunks_from_rows(self.require_index().rows(variant, doc_id=doc_id, columns=CHUNK_COLUMNS))
            opening = span_text(chunks, 0, min(CARD_CHARS, max((c.end for c in chunks), default=0)))
        card = DocumentCard.of(doc_id, opening, name=path.name if path is not None else doc_id)
        self._cards[(variant, doc_id)] = (stamp, card)
        return card

    def top_rows(
        self, question: str, settings: RetrievalSettings, *, variant: str, doc_id: str | None
    ) -> list[dict[str, Any]]:
        """The settings' top-``k`` rows for ``question``, best first, before any enhancement."""
        return self.search(
            question,
            self.embed(question),
            variant=variant,
            doc_id=doc_id,
            k=settings.effective_k,
            hybrid=settings.hybrid,
            route_to=settings.route_to,
        )[0]

    # ----------------------------------------------------------------- context
    def context(
        self, question: str, settings: RetrievalSettings, *, variant: str, doc_id: str | None
    ) -> EnhancedContext:
        """The merged context windows of ``question``, best first, as ``settings`` say
        (:func:`~ctxwin_dagster.core.retrieval.trip.retrieve` over this index)."""
        _check_question(question)
        return retrieve(
            question, settings, _IndexSource(self, normalize_variant(variant), doc_id), lexical=self.lexical
        )


def _check_question(question: str) -> None:
    if not isinstance(question, str) or not question.strip():
        raise AskError("question is empty; pass the question to answer")


class _IndexSource:
    """One variant of the retriever's index, within ``doc_id`` or across the folder, as
    :class:`~ctxwin_dagster.core.retrieval.trip.Source`."""

    def __init__(self, retriever: Retriever, variant: str, doc_id: str | None) -> None:
        self.retriever, self.variant, self.doc_id = retriever, variant, doc_id

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.retriever.require_embedder().embed(list(texts))

    def search(
        self, question: str, vector: np.ndarray, *, k: int, hybrid: bool, route_to: int
    ) -> tuple[list[tuple[Chunk, float]], list[str] | None]:
        rows, routed = self.retriever.search(
            question, vector, variant=self.variant, doc_id=self.doc_id, k=k, hybrid=hybrid, route_to=route_to
        )
        # the fused score when every row has one (the index falls back to the vector search alone)
        fused = hybrid and bool(rows) and all("rrf_score" in r for r in rows)
        return hits_from_rows(rows, score_key="rrf_score" if fused else "score"), routed

    def chunks(self, doc_ids: Sequence[str]) -> tuple[list[Chunk], dict[str, str]]:
        return self.retriever.chunks(self.variant, doc_ids)

    def vectors(self, doc_id: str) -> dict[str, np.ndarray]:
        got = self.retriever.require_index().rows(self.variant, doc_id=doc_id, columns=["chunk_id", "vector"])
        return {r["chunk_id"]: np.asarray(r["vector"], dtype=np.float32) for r in got}
