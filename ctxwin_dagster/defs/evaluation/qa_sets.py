"""``qa_sets``: each document's questions from the QA folder, reference spans checked."""

from pathlib import Path

import dagster as dg

from ctxwin_dagster.core.evaluation.qa.items import load_qa_folder
from ctxwin_dagster.core.evaluation.qa.resolve import ResolvedQuestions, check_reference_spans, resolve_questions
from ctxwin_dagster.core.text.documents import Document
from ctxwin_dagster.core.text.splitting import Chunk
from ctxwin_dagster.defs.batches import document_asset
from ctxwin_dagster.defs.resources import ProjectSettings
from ctxwin_dagster.defs.versions import qa_version


@document_asset(
    group_name="evaluation",
    code_version="1",
    description="The document's questions from the QA folder (JSONL), with reference spans checked and reference chunk ids.",
    checks={
        "reference_spans_valid": "every reference span lies inside the document (one outside it fails the asset, "
        "naming the QA file, the question and the fix)"
    },
)
def qa_sets(context: dg.AssetExecutionContext, settings: ProjectSettings, raw_documents: Document, chunks: list[Chunk]):
    qa_dir = Path(settings.qa_dir)
    items: list = []
    if qa_dir.is_dir():
        resolved = resolve_questions(load_qa_folder(qa_dir), settings.document_folder())
        items = resolved.by_doc.get(raw_documents.doc_id, [])
    # The check `ctxwin evaluate` and `ctxwin run --qa` make before any run: a span outside the
    # document stops here with the same message (QAFormatError), never scored as a miss.
    check_reference_spans(ResolvedQuestions(by_doc={raw_documents.doc_id: items}), lambda _doc_id: raw_documents.text)
    rows = []
    for q in items:
        refs = sorted({c.chunk_id for c in chunks for s, e in q.reference_spans if c.start < e and s < c.end})
        rows.append({**q.to_dict(), "reference_chunk_ids": refs})
    return dg.MaterializeResult(
        value=rows,
        metadata={
            "n_questions": len(rows),
            "n_answerable": sum(1 for r in rows if not r["is_impossible"]),
            "n_named_by_file": sum(1 for q in items if "doc_ref" in q.meta),
            "qa_dir": str(qa_dir),
            # what `ctxwin run` compares to tell a changed question set (defs/staleness.py)
            "qa_version": qa_version([q.to_dict() for q in items]),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="reference_spans_valid",
                passed=True,
                metadata={"spans_checked": sum(len(q.reference_spans) for q in items)},
            )
        ],
    )
