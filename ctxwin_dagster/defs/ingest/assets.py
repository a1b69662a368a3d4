"""Ingest stage: document files -> ``raw_documents`` -> ``chunks``."""

import time

import dagster as dg

from ctxwin_dagster.core.text.documents import Document, read_document
from ctxwin_dagster.core.text.splitting import Chunk, with_pages
from ctxwin_dagster.defs.batches import document_asset
from ctxwin_dagster.defs.resources import ProjectSettings


@document_asset(
    group_name="ingest",
    code_version="1",
    description="The text of one document file, with its hash, title and character and token counts.",
)
def raw_documents(context: dg.AssetExecutionContext, settings: ProjectSettings):
    started = time.perf_counter()
    path = settings.document_file(context.partition_key)
    counter = settings.token_counter()
    doc = read_document(path, count_tokens=counter.count, doc_id=context.partition_key)
    warning = doc.encoding_warning()
    if warning:
        context.log.warning(warning)
    return dg.MaterializeResult(
        value=doc,
        data_version=dg.DataVersion(doc.sha256),
        metadata={
            "doc_id": doc.doc_id,
            "title": doc.title,
            "source_path": dg.MetadataValue.path(doc.source_path),
            "sha256": doc.sha256,
            "n_chars": doc.n_chars,
            "n_tokens": doc.n_tokens,
            "token_encoding": counter.info.name,
            "file_encoding": doc.encoding,
            "replaced_bytes": doc.replaced_bytes,
            "n_pages": len(doc.pages) if doc.pages else None,
            "runtime_s": round(time.perf_counter() - started, 3),
        },
    )


@document_asset(
    group_name="ingest",
    code_version="2",  # 2: a chunk's id includes its document's id (two files with the same text keep their own rows)
    description="Recursive 1,000/100-character chunks with exact character offsets and section paths.",
    checks={"offsets_exact": "text == document[start:end] for every chunk, in order"},
)
def chunks(context: dg.AssetExecutionContext, settings: ProjectSettings, raw_documents: Document):
    started = time.perf_counter()
    result: list[Chunk] = settings.splitter().split(
        raw_documents.text, doc_id=raw_documents.doc_id, doc_sha256=raw_documents.sha256
    )
    if raw_documents.pages:
        result = with_pages(result, raw_documents)
    sizes = [c.end - c.start for c in result]
    with_section = sum(1 for c in result if c.section)
    mismatched = [c.chunk_index for c in result if raw_documents.text[c.start : c.end] != c.text]
    out_of_order = sum(1 for a, b in zip(result, result[1:]) if b.start <= a.start)
    return dg.MaterializeResult(
        value=result,
        check_results=[
            dg.AssetCheckResult(
                check_name="offsets_exact",
                passed=not mismatched and not out_of_order,
                metadata={
                    "mismatched": len(mismatched),
                    "first_mismatched": str(mismatched[:10]),
                    "out_of_order": out_of_order,
                },
            )
        ],
        metadata={
            "n_chunks": len(result),
            "chunk_size": settings.chunk_size,
            "chunk_overlap": settings.chunk_overlap,
            "mean_chunk_chars": round(sum(sizes) / len(sizes), 1) if sizes else 0.0,
            "max_chunk_chars": max(sizes, default=0),
            "chunks_with_section": with_section,
            "runtime_s": round(time.perf_counter() - started, 3),
        },
    )
