"""Index stage: one LanceDB table per variant (T-RAG, CC-RAG, SWB-RAG)."""

import time

import dagster as dg

from ctxwin_dagster.core.documents import Document
from ctxwin_dagster.core.splitting import Chunk
from ctxwin_dagster.defs.partitions import documents_partitions
from ctxwin_dagster.defs.resources import EmbeddingsResource, LanceDBResource


def embedded_text(chunk: Chunk, context: str) -> str:
    """What is embedded: the situating context, a blank line, then the chunk (as in contextual retrieval)."""
    return f"{context.strip()}\n\n{chunk.text}" if context and context.strip() else chunk.text


def index_rows(doc: Document, chunks: list[Chunk], contexts) -> list[dict]:
    by_id = {c.chunk_id: c for c in contexts or []}
    rows = []
    for chunk in chunks:
        ctx = by_id.get(chunk.chunk_id)
        text = ctx.context if ctx is not None else ""
        rows.append(
            {
                **chunk.to_dict(),
                "doc_sha256": doc.sha256,
                "context": text,
                "context_engine": ctx.engine if ctx is not None else "",
                "embedded_text": embedded_text(chunk, text),
            }
        )
    return rows


def write_index(context, variant: str, doc: Document, chunks: list[Chunk], contexts, embeddings: EmbeddingsResource, lancedb: LanceDBResource):
    started = time.perf_counter()
    rows = index_rows(doc, chunks, contexts)
    embedder = embeddings.embedder()
    encoded_before = embedder.stats.texts_encoded
    vectors = embedder.embed([r["embedded_text"] for r in rows])
    index = lancedb.index()
    stats = index.replace_document(variant, doc.doc_id, rows, vectors, doc_sha256=doc.sha256)
    indexes = index.ensure_indexes(variant)
    stored = index.count(variant, doc_id=doc.doc_id)
    duplicates = index.duplicate_ids(variant)
    return dg.MaterializeResult(
        metadata={
            "table": index.table_name(variant),
            "uri": lancedb.uri,
            "n_rows": stored,
            "table_rows": index.count(variant),
            "inserted": stats["inserted"],
            "updated": stats["updated"],
            "deleted": stats["deleted"],
            "embedded_chars": sum(len(r["embedded_text"]) for r in rows),
            "embedding_model": embedder.model,
            "texts_embedded": embedder.stats.texts_encoded - encoded_before,
            "fts_index": indexes["fts"],
            "ann_index": indexes["ann"],
            "runtime_s": round(time.perf_counter() - started, 3),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="rows_match_chunks",
                passed=stored == len(chunks) and duplicates == 0,
                metadata={"chunks": len(chunks), "rows": stored, "duplicate_ids_in_table": duplicates},
            )
        ],
    )


def _index_asset(variant: str, contexts_asset: str | None):
    name = f"{variant}_index"
    ins = {"raw_documents": dg.AssetIn(), "chunks": dg.AssetIn()}
    if contexts_asset:
        ins["contexts"] = dg.AssetIn(key=contexts_asset)
    label = {"t_rag": "T-RAG: chunks embedded as they are", "cc_rag": "CC-RAG: chunks embedded with their whole-document context",
             "swb_rag": "SWB-RAG: chunks embedded with their summary-and-window context"}[variant]

    @dg.asset(
        name=name,
        ins=ins,
        partitions_def=documents_partitions,
        group_name="index",
        kinds={"lancedb"},
        code_version="1",
        description=f"{label}; one LanceDB table, rows merged on chunk_id per document.",
        check_specs=[dg.AssetCheckSpec("rows_match_chunks", asset=name, description="one row per chunk, no duplicate chunk ids")],
    )
    def _asset(context: dg.AssetExecutionContext, embeddings: EmbeddingsResource, lancedb: LanceDBResource, **inputs):
        return write_index(context, variant, inputs["raw_documents"], inputs["chunks"], inputs.get("contexts"), embeddings, lancedb)

    return _asset


t_rag_index = _index_asset("t_rag", None)
cc_rag_index = _index_asset("cc_rag", "cc_rag_contexts")
swb_rag_index = _index_asset("swb_rag", "swb_rag_contexts")
