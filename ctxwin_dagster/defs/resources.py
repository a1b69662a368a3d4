"""Resources: project settings (paths, chunking, token model).

Backends (chat, embeddings, LanceDB) join here as ``ConfigurableResource``s with an offline
implementation beside the live one; secrets only ever come from ``EnvVar``.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from ctxwin_dagster.core.documents import DocumentError, doc_id_from_path, list_documents
from ctxwin_dagster.core.splitting import RecursiveSplitter
from ctxwin_dagster.core.tokens import TokenCounter, get_token_counter


class ProjectSettings(dg.ConfigurableResource):
    """Where the documents live and how they are chunked (the paper's defaults).

    Relative paths are taken from the folder Dagster runs in (the repository root with
    ``workspace.yaml``).
    """

    documents_dir: str = "data/documents"
    qa_dir: str = "data/qa"
    cache_dir: str = "data/cache"
    chunk_size: int = 1000
    chunk_overlap: int = 100
    token_model: str = "gpt-4o"

    def documents_path(self) -> Path:
        return Path(self.documents_dir).expanduser()

    def document_ids(self) -> list[str]:
        """doc_ids of the files in the documents folder (files with bad names are skipped here
        and reported by their own partition when materialized)."""
        ids = []
        for path in list_documents(self.documents_path()):
            try:
                ids.append(doc_id_from_path(path))
            except DocumentError:
                continue
        return ids

    def document_file(self, doc_id: str) -> Path:
        """The file behind ``doc_id``; a clear error if it is gone."""
        for path in list_documents(self.documents_path()):
            if path.stem == doc_id:
                return path
        raise DocumentError(
            f"document {doc_id!r} has no file in {str(self.documents_path())!r} any more; "
            "restore the file, or let the documents sensor remove its partition"
        )

    def splitter(self) -> RecursiveSplitter:
        return RecursiveSplitter(chunk_size=self.chunk_size, chunk_overlap=self.chunk_overlap)

    def token_counter(self) -> TokenCounter:
        return get_token_counter(self.token_model)
