"""The indexed documents an asker reads: chunk rows from a variant's table, text from the files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ctxwin_dagster.ask.results import AskError, StaleIndexError
from ctxwin_dagster.core.retrieval.rows import chunks_from_rows
from ctxwin_dagster.core.text.documents import DocumentError, read_document
from ctxwin_dagster.core.text.folder import load_id_registry, scan_documents
from ctxwin_dagster.core.text.splitting import Chunk

if TYPE_CHECKING:
    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
    from ctxwin_dagster.core.text.folder import DocumentFolder

__all__ = ["CHUNK_COLUMNS", "IndexedDocuments"]

#: The index columns a :class:`~ctxwin_dagster.core.text.splitting.Chunk` is rebuilt from.
CHUNK_COLUMNS = ["chunk_id", "doc_id", "chunk_index", "start", "end", "text", "section", "doc_sha256"]


class IndexedDocuments:
    """Chunk rows of the index and the text of the document files they were cut from.

    Args:
        index: the :class:`~ctxwin_dagster.backends.index.vectorstore.ChunkIndex` (None: files only).
        documents_dir: the documents folder; None: text is rebuilt from the index rows.
    """

    def __init__(
        self, index: ChunkIndex | None, documents_dir: str | Path | None, *, doc_ids_file: str | Path | None = None
    ) -> None:
        self.index = index
        self.documents_dir = None if documents_dir is None else Path(documents_dir).expanduser()
        self.doc_ids_file = None if not doc_ids_file else Path(doc_ids_file)
        self._cache: dict[str, tuple[float, str, str]] = {}
        self._folder: tuple[int, DocumentFolder] | None = None

    def file(self, doc_id: str) -> Path | None:
        """The file of ``doc_id`` in the documents folder, or None."""
        if self.documents_dir is None or not self.documents_dir.is_dir():
            return None
        # The scan is kept while the folder's entries are the same (its mtime changes when a
        # file is added, removed or renamed), so asking many questions reads the folder once.
        return self._scan().path_of(doc_id)

    def _scan(self) -> DocumentFolder:
        assert self.documents_dir is not None
        stamp = self.documents_dir.stat().st_mtime_ns
        if self._folder is None or self._folder[0] != stamp:
            known = load_id_registry(self.doc_ids_file) if self.doc_ids_file is not None else None
            self._folder = (stamp, scan_documents(self.documents_dir, known=known))
        return self._folder[1]

    def present_ids(self) -> list[str] | None:
        """doc_ids of the documents whose file is in the folder now (None: no folder given, so
        every indexed document counts). A folder that is missing gives None too: asking falls
        back to the whole index rather than to nothing."""
        if self.documents_dir is None or not self.documents_dir.is_dir():
            return None
        return self._scan().ids()

    def resolve(self, ref: str) -> str:
        """The doc_id a user means by ``ref`` (a file name, its stem or the id); ``ref`` itself
        when the folder does not tell (no folder, or no such file: the index may still know it)."""
        if self.documents_dir is None or not self.documents_dir.is_dir():
            return ref
        self.file(ref)  # refreshes the folder scan
        assert self._folder is not None
        return self._folder[1].resolve(ref) or ref

    def text(self, doc_id: str, *, expected_sha256: str | None = None) -> str | None:
        """The text of ``doc_id`` from the documents folder (None when there is no file).

        Raises:
            StaleIndexError: ``expected_sha256`` (the indexed one) differs from the file's.
        """
        path = self.file(doc_id)
        if path is None:
            return None
        mtime = path.stat().st_mtime
        cached = self._cache.get(doc_id)
        if cached is None or cached[0] != mtime:
            try:
                doc = read_document(path, doc_id=doc_id)
            except DocumentError as exc:
                raise AskError(str(exc)) from None
            cached = (mtime, doc.sha256, doc.text)
            self._cache[doc_id] = cached
        _, sha, text = cached
        if expected_sha256 and sha != expected_sha256:
            raise StaleIndexError(
                f"{path} changed after it was indexed (sha256 {sha[:12]}… vs {expected_sha256[:12]}… in the index), so "
                f"the index's offsets no longer fit it; re-index it with `ctxwin run --doc {doc_id}`, or pass "
                "documents=None (--documents '') to answer from the indexed text"
            )
        return text

    def chunks(self, variant: str, doc_ids: Sequence[str]) -> tuple[list[Chunk], dict[str, str]]:
        """Every indexed chunk of ``doc_ids`` and their texts from the documents folder."""
        chunks: list[Chunk] = []
        texts: dict[str, str] = {}
        if self.index is None:
            raise AskError("there is no index to read chunks from; open the asker with Asker.open(lancedb=...)")
        for d in doc_ids:
            rows = self.index.rows(variant, doc_id=d, columns=CHUNK_COLUMNS)
            chunks.extend(chunks_from_rows(rows))
            shas = {r.get("doc_sha256") for r in rows if r.get("doc_sha256")}
            text = self.text(d, expected_sha256=next(iter(shas)) if len(shas) == 1 else None)
            if text is not None:
                texts[d] = text
        return chunks, texts
