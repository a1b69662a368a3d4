"""Index stage: one LanceDB table per variant (T-RAG, CC-RAG, SWB-RAG)."""

import time
from typing import TYPE_CHECKING

import dagster as dg

from ctxwin_dagster.core.budget.embedding_rows import plan_rows, window_report
from ctxwin_dagster.core.text.splitting import Chunk
from ctxwin_dagster.defs.batches import document_asset
from ctxwin_dagster.defs.model_resources import EmbeddingsResource
from ctxwin_dagster.defs.resources import LanceDBResource

if TYPE_CHECKING:
    from ctxwin_dagster.backends.embeddings.cached import CachedEmbedder


def index_rows(chunks: list[Chunk], contexts, embedder, embeddings: EmbeddingsResource) -> tuple[list[dict], list]:
    """The table rows of ``chunks`` and the plans of what each row embeds (exact counts with
    the embedder's own tokenizer; see :mod:`ctxwin_dagster.core.budget.embedding_window`)."""
    by_id = {c.chunk_id: c for c in contexts or []}
    texts = [by_id[c.chunk_id].context if c.chunk_id in by_id else "" for c in chunks]
    plans = plan_rows(
        [(c.text, t) for c, t in zip(chunks, texts, strict=True)],
        tokenizer=embedder.tokenizer,
        limits=embedder.limits,
        strategy=embeddings.row_strategy,
        oversize=embeddings.oversize,
        context_weight=embeddings.context_weight,
    )
    rows = []
    for chunk, text, plan in zip(chunks, texts, plans, strict=True):
        ctx = by_id.get(chunk.chunk_id)
        rows.append(
            {
                **chunk.to_dict(),
                "context": text,
                "context_engine": ctx.engine if ctx is not None else "",
                "embedded_text": plan.embedded_text,
                **plan.to_dict(),
            }
        )
    return rows, plans


def write_index(
    context, variant: str, chunks: list[Chunk], contexts, embeddings: EmbeddingsResource, lancedb: LanceDBResource
):
    started = time.perf_counter()
    doc_id = context.partition_key
    if any(c.doc_id != doc_id for c in chunks):
        raise ValueError(f"the chunks of partition {doc_id!r} name other documents; re-materialize its chunks")
    embedder = embeddings.embedder()
    rows, plans = index_rows(chunks, contexts, embedder, embeddings)
    window = window_report(plans)
    if window["chunk_tokens_cut"]:
        context.log.error(
            f"{window['rows_with_chunk_cut']} rows of {doc_id} lose {window['chunk_tokens_cut']} tokens of chunk text to "
            f"{embedder.model}'s window ({embedder.limits.max_tokens} tokens) because oversize='truncate'; "
            "set the embeddings resource's oversize to 'pool'"
        )
    encoded_before, seconds_before = embedder.stats.texts_encoded, embedder.stats.encode_seconds
    vectors = embedder.embed_plans(plans)
    index = lancedb.index()
    # The table records (or, if it has a record, checks) the embedder and the row strategy.
    row_strategy = embeddings.row_strategy if contexts is not None else "chunk only"
    stats = index.replace_document(variant, doc_id, rows, vectors, embedder=embedder, row_strategy=row_strategy)
    record = index.record(variant)
    upkeep = index.maintain(variant)
    stored = index.count(variant, doc_id=doc_id)
    duplicates = index.duplicate_ids(variant, doc_id=doc_id)
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
            "embedding_precision": embedder.precision,
            "embedding_dim": int(vectors.shape[1]) if len(vectors) else int(embedder.identity.dim),
            "embedding_window": embedder.limits.describe(),
            "embed_strategy": row_strategy,
            "table_built_with": record.describe() if record is not None else "no record (no rows written yet)",
            "rows_over_window": window["rows_over_window"],
            "rows_pooled": window["rows_pooled"],
            "chunk_tokens_cut": window["chunk_tokens_cut"],
            "context_tokens_cut": window["context_tokens_cut"],
            "rows_with_context_cut": window["rows_with_context_cut"],
            "texts_embedded": embedder.stats.texts_encoded - encoded_before,
            # Throughput inside the pipeline: texts encoded per second of encoding (model or server).
            "embedding_texts_per_s": round(
                (embedder.stats.texts_encoded - encoded_before)
                / max(1e-9, embedder.stats.encode_seconds - seconds_before),
                1,
            )
            if embedder.stats.texts_encoded > encoded_before
            else None,
            # Where the vectors were computed: the command's embedding server, or this run's process.
            "embedded_by": _served_by(embedder)
            or ("this run's process" if embedder.provider == "local" else embedder.provider),
            "ann_index": upkeep.ann_index,
            "ann_trained_rows": upkeep.ann_trained_rows,
            "ann_trained_at": upkeep.ann_trained_at,
            "ann_trainings": upkeep.ann_trainings,
            "ann_trained_now": upkeep.trained,
            "indexes_appended_now": upkeep.appended,
            "indexes_created_now": ", ".join(upkeep.created) or "none",
            "unindexed_rows": upkeep.unindexed_rows,
            "index_upkeep_s": upkeep.seconds,
            "runtime_s": round(time.perf_counter() - started, 3),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="rows_match_chunks",
                passed=stored == len(chunks) and duplicates == 0,
                metadata={"chunks": len(chunks), "rows": stored, "duplicate_ids_in_document": duplicates},
            ),
            dg.AssetCheckResult(
                check_name="chunk_text_within_embedding_window",
                passed=window["chunk_tokens_cut"] == 0,
                metadata={
                    "embedding_window": embedder.limits.describe(),
                    "rows_over_window": window["rows_over_window"],
                    "rows_pooled": window["rows_pooled"],
                    "rows_with_chunk_cut": window["rows_with_chunk_cut"],
                    "chunk_tokens_cut": window["chunk_tokens_cut"],
                    "context_tokens_cut": window["context_tokens_cut"],
                },
            ),
        ],
    )


def _served_by(embedder: "CachedEmbedder") -> str:
    """The embedding server a local embedder sends its texts to ("" when it encodes in this process,
    and for a served model's own client)."""
    from ctxwin_dagster.backends.embeddings.local import LocalEmbedder

    return embedder.served_by if isinstance(embedder, LocalEmbedder) else ""


def _index_asset(variant: str, contexts_asset: str | None):
    name = f"{variant}_index"
    ins = {"chunks": dg.AssetIn()}
    if contexts_asset:
        ins["contexts"] = dg.AssetIn(key=contexts_asset)
    label = {
        "t_rag": "T-RAG: chunks embedded as they are",
        "cc_rag": "CC-RAG: chunks embedded with their whole-document context",
        "swb_rag": "SWB-RAG: chunks embedded with their summary-and-window context",
    }[variant]

    @document_asset(
        name=name,
        ins=ins,
        group_name="index",
        kinds={"lancedb"},
        code_version="3",
        description=f"{label}; one LanceDB table, rows merged on chunk_id per document.",
        checks={
            "rows_match_chunks": "one row per chunk, no duplicate chunk ids among the document's rows",
            "chunk_text_within_embedding_window": "no token of any chunk's text was cut by the embedding model's window "
            "(counted with its own tokenizer)",
        },
    )
    def _asset(context: dg.AssetExecutionContext, embeddings: EmbeddingsResource, lancedb: LanceDBResource, **inputs):
        return write_index(context, variant, inputs["chunks"], inputs.get("contexts"), embeddings, lancedb)

    return _asset


t_rag_index = _index_asset("t_rag", None)
cc_rag_index = _index_asset("cc_rag", "cc_rag_contexts")
swb_rag_index = _index_asset("swb_rag", "swb_rag_contexts")
