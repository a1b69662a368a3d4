"""Contextualization stage: global summaries, CC-RAG contexts and SWB-RAG contexts."""

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import dagster as dg

from ctxwin_dagster.core.budget.limits import get_model_limits
from ctxwin_dagster.core.text.documents import Document
from ctxwin_dagster.core.text.splitting import Chunk
from ctxwin_dagster.defs.accounting import call_metadata
from ctxwin_dagster.defs.batches import document_asset
from ctxwin_dagster.defs.model_resources import ChatModelResource, EmbeddingsResource
from ctxwin_dagster.defs.resources import PipelineSettings, build_tasks

if TYPE_CHECKING:
    from ctxwin_dagster.backends.base import CallRecord
    from ctxwin_dagster.backends.tasks.results import ContextResult, TaskEngine


def _limit_check(name: str, records, chat: ChatModelResource, pipeline: PipelineSettings) -> dg.AssetCheckResult:
    """No prompt exceeded the model's available prompt tokens (for the extractive engine: the
    reference model's, i.e. whether those prompts would fit the model the paper used)."""
    model = chat.model if chat.configured else pipeline.reference_model
    limit = get_model_limits(model).available_prompt_tokens(
        min(pipeline.max_output_tokens, get_model_limits(model).max_completion_tokens)
    )
    largest = max((r.input_tokens for r in records), default=0)
    over = sum(1 for r in records if r.input_tokens > limit)
    return dg.AssetCheckResult(
        check_name=name,
        passed=over == 0,
        severity=dg.AssetCheckSeverity.WARN if not chat.configured else dg.AssetCheckSeverity.ERROR,
        metadata={"model": model, "prompt_limit": limit, "largest_prompt_tokens": largest, "prompts_over_limit": over},
    )


def _contexts_result(contexts, chunks, records, tasks, chat, pipeline, started: float, **extra) -> dg.MaterializeResult:
    """The contexts with their checks and the metadata shown in the UI."""
    return dg.MaterializeResult(
        value=contexts,
        check_results=_context_checks(chunks, contexts, records, chat, pipeline),
        metadata={
            "engine": tasks.engine,
            "model": tasks.model,
            "n_contexts": len(contexts),
            **extra,
            "fallbacks": sum(1 for c in contexts if c.fallback),
            "errors": sum(1 for c in contexts if c.error),
            **call_metadata(records, time.perf_counter() - started),
            **_endpoint(chat),
        },
    )


def _endpoint(chat: ChatModelResource) -> dict[str, dg.MetadataValue]:
    """What the chat model's endpoint can do (asked once per home; none for the extractive engine)."""
    found = chat.capabilities() if chat.configured else {}
    return {"endpoint": dg.MetadataValue.json(found)} if found else {}


def _context_checks(chunks: list[Chunk], contexts, records, chat, pipeline) -> list[dg.AssetCheckResult]:
    by_id = {c.chunk_id: c for c in contexts}
    missing = [c.chunk_id for c in chunks if not (by_id.get(c.chunk_id) and by_id[c.chunk_id].context.strip())]
    return [
        dg.AssetCheckResult(
            check_name="every_chunk_has_context",
            passed=not missing,
            metadata={"chunks": len(chunks), "missing_or_empty": len(missing), "first_missing": str(missing[:5])},
        ),
        _limit_check("prompts_within_model_limit", records, chat, pipeline),
    ]


#: The checks of a contexts asset.
_CONTEXT_CHECKS = {
    "every_chunk_has_context": "every chunk got a non-empty context",
    "prompts_within_model_limit": "no prompt exceeded the model's available prompt tokens",
}


def _contexts_asset(description: str) -> Callable[[Callable[..., dg.MaterializeResult]], dg.AssetsDefinition]:
    """A contexts asset of the contextualize group, with the checks of :data:`_CONTEXT_CHECKS`."""
    return document_asset(group_name="contextualize", code_version="1", description=description, checks=_CONTEXT_CHECKS)


def _contextualized(
    contextualizer: ChatModelResource,
    embeddings: EmbeddingsResource,
    pipeline: PipelineSettings,
    contextualize: "Callable[[TaskEngine], list[ContextResult]]",
) -> "tuple[list[ContextResult], list[CallRecord], TaskEngine]":
    """The contexts ``contextualize`` makes with the role's task engine, the records of its calls,
    and the engine."""
    with build_tasks(contextualizer, embeddings, pipeline) as tasks:
        ledger = tasks.ledger
        mark = len(ledger)
        contexts = contextualize(tasks)
        records = ledger.since(mark)
    return contexts, records, tasks


@document_asset(
    group_name="contextualize",
    code_version="1",
    description="Global summary (SWB-RAG): segments of ≤ 1,000,000 chars summarized, then one overview of ≤ 4,000 tokens.",
)
def global_summaries(
    context: dg.AssetExecutionContext,
    raw_documents: Document,
    contextualizer: ChatModelResource,
    embeddings: EmbeddingsResource,
    pipeline: PipelineSettings,
):
    started = time.perf_counter()
    with build_tasks(contextualizer, embeddings, pipeline) as tasks:
        result = tasks.summarize(
            raw_documents.text,
            doc_id=raw_documents.doc_id,
            max_tokens=pipeline.summary_max_tokens,
            segment_chars=pipeline.summary_segment_chars,
            language=pipeline.language or None,
        )
    for note in result.notes:
        context.log.warning(note)
    return dg.MaterializeResult(
        value=result,
        metadata={
            "engine": result.engine,
            "model": result.model,
            "language": result.language,
            "segments": len(result.segments),
            "summary_tokens": result.n_tokens,
            "notes": len(result.notes),
            "preview": dg.MetadataValue.md(result.text[:1500] + (" …" if len(result.text) > 1500 else "")),
            **call_metadata(result.records, time.perf_counter() - started),
            **_endpoint(contextualizer),
        },
    )


@_contexts_asset("CC-RAG: every chunk situated with the whole document (one call per chunk).")
def cc_rag_contexts(
    context: dg.AssetExecutionContext,
    raw_documents: Document,
    chunks: list[Chunk],
    contextualizer: ChatModelResource,
    embeddings: EmbeddingsResource,
    pipeline: PipelineSettings,
):
    started = time.perf_counter()
    contexts, records, tasks = _contextualized(
        contextualizer,
        embeddings,
        pipeline,
        lambda tasks: tasks.contextualize_cc(raw_documents.text, chunks, doc_id=raw_documents.doc_id),
    )
    return _contexts_result(contexts, chunks, records, tasks, contextualizer, pipeline, started)


@_contexts_asset(
    "SWB-RAG: batches of 5 chunks situated with the global summary and +/-20,000 characters around the batch."
)
def swb_rag_contexts(
    context: dg.AssetExecutionContext,
    raw_documents: Document,
    chunks: list[Chunk],
    global_summaries,
    contextualizer: ChatModelResource,
    embeddings: EmbeddingsResource,
    pipeline: PipelineSettings,
):
    started = time.perf_counter()
    contexts, records, tasks = _contextualized(
        contextualizer,
        embeddings,
        pipeline,
        lambda tasks: tasks.contextualize_swb(
            raw_documents.text,
            chunks,
            global_summaries.text,
            doc_id=raw_documents.doc_id,
            batch_size=pipeline.swb_batch_size,
            window_chars=pipeline.swb_window_chars,
        ),
    )
    fallbacks = sum(1 for c in contexts if c.fallback)
    if fallbacks:
        context.log.warning(f"{fallbacks} chunks of {raw_documents.doc_id} fell back to single-chunk calls")
    # How the model's replies fared (LLM engine): unusable first replies, repairs, retries, windows cut to fit.
    replies = {f"replies_{k}": int(tasks.stats[k]) for k in _SWB_STATS}
    return _contexts_result(
        contexts,
        chunks,
        records,
        tasks,
        contextualizer,
        pipeline,
        started,
        batches=-(-len(chunks) // pipeline.swb_batch_size),
        **replies,
    )


_SWB_STATS = (
    "swb_schema_enforced",
    "swb_schema_ignored",
    "swb_invalid",
    "swb_repaired",
    "swb_retried",
    "swb_retry_invalid",
    "swb_fallback_chunks",
    "swb_fallback_failed",
    "swb_windows_shrunk",
)
