"""The asking tests' index: three sample documents with their T-RAG and SWB-RAG tables, built
once per module in a temporary folder with the real local embedder (no `ctxwin run`)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
from ctxwin_dagster.core.text.splitting import RecursiveSplitter

DOCS = Path(__file__).resolve().parents[2] / "data" / "documents"
WORKSPACE_DOCS = ("squad_Normans", "squad_1973_oil_crisis", "cuad_todos_medical_reseller")


def index_documents(index: ChunkIndex, docs: Path, doc_ids, embedder, variants=("t_rag", "swb_rag")) -> None:
    """Copy the sample documents ``doc_ids`` into ``docs`` and index their chunks in ``variants``."""
    splitter = RecursiveSplitter(chunk_size=1000, chunk_overlap=100)
    for doc_id in doc_ids:
        src = DOCS / f"{doc_id}.txt"
        shutil.copy(src, docs / src.name)
        data = src.read_bytes()
        text = data.decode("utf-8")
        sha = hashlib.sha256(data).hexdigest()
        chunks = splitter.split(text, doc_id=doc_id, doc_sha256=sha)
        rows = [
            {**c.to_dict(), "doc_sha256": sha, "context": "", "context_engine": "", "embedded_text": c.text}
            for c in chunks
        ]
        vectors = embedder.embed([r["embedded_text"] for r in rows])
        for variant in variants:
            index.replace_document(variant, doc_id, rows, vectors, doc_sha256=sha)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, embedder):
    """A documents folder with three sample documents and their T-RAG and SWB-RAG tables."""
    root = tmp_path_factory.mktemp("ask")
    docs = root / "documents"
    docs.mkdir()
    index = ChunkIndex(str(root / "lancedb"))
    index_documents(index, docs, WORKSPACE_DOCS, embedder)
    return {"root": root, "documents": docs, "lancedb": root / "lancedb", "index": index}


@pytest.fixture(scope="module")
def index_more(embedder):
    """``index_more(workspace, doc_ids)``: index more sample documents into a workspace."""
    return lambda ws, doc_ids: index_documents(ws["index"], ws["documents"], doc_ids, embedder)
