"""``generated_questions``: evaluation questions written from each document by a chat model.

Each document's questions are written to the ``question_writer`` resource's QA folder as
``<doc_id>.jsonl`` (the previous file kept as ``<doc_id>.jsonl.previous``), in the project's QA
format, so ``ctxwin evaluate --qa <folder>`` takes them as they are. How they are made and
verified: :mod:`ctxwin_dagster.backends.tasks.question_writer`.

The asset is not in ``all_assets_job``: writing questions costs model calls and a person decides
when. Launch it from the UI (``questions_job``, or the asset's Materialize button) or run
``ctxwin qa generate``. Once a document has questions, they are refreshed when the document
changes: the asset's automation condition is true for a partition whose ``raw_documents`` was
updated since the questions were written, evaluated by the ``ctxwin_stale_documents`` sensor
(off until it is turned on). A document that never had questions gets none automatically.
"""

import time

import dagster as dg

from ctxwin_dagster.core.json_types import JSONValue
from ctxwin_dagster.core.text.documents import Document
from ctxwin_dagster.defs.accounting import call_metadata
from ctxwin_dagster.defs.batches import document_asset
from ctxwin_dagster.defs.model_resources import QuestionWriterResource

#: True for a document whose questions exist and whose text was updated since they were written.
REFRESH_WHEN_THE_DOCUMENT_CHANGES = (
    dg.AutomationCondition.any_deps_updated().since_last_handled()
    & ~dg.AutomationCondition.missing()
    & ~dg.AutomationCondition.any_deps_in_progress()
    & ~dg.AutomationCondition.in_progress()
).with_label("its document changed since its questions were written")


def _counts(value: JSONValue) -> dg.MetadataValue:
    """Counts of the generation report (per kind) as a JSON metadata entry."""
    return dg.MetadataValue.json(value if isinstance(value, dict) else {})


@document_asset(
    group_name="questions",
    code_version="1",
    automation_condition=REFRESH_WHEN_THE_DOCUMENT_CHANGES,
    description="Questions written from the document by a chat model, each reference span found in the document "
    "(single fact, two passages far apart, unanswerable), in the QA format ctxwin evaluate reads.",
    checks={
        "reference_spans_in_document": "every question's reference spans lie inside its document, and a single-fact "
        "answer is its span's text"
    },
)
def generated_questions(
    context: dg.AssetExecutionContext, question_writer: QuestionWriterResource, raw_documents: Document
):
    from ctxwin_dagster.backends.tasks.question_writer import STAGE, QuestionWriter
    from ctxwin_dagster.core.evaluation.qa.items import QAFormatError, validate_spans, write_qa_jsonl

    started = time.perf_counter()
    doc = raw_documents
    chat = question_writer.backend()
    if chat is None:
        raise dg.Failure("generated_questions needs a chat model: set question_writer.model in the experiment")
    writer = QuestionWriter(chat, closed_book=question_writer.closed_book)
    result = writer.generate(
        doc.doc_id,
        doc.text,
        count=question_writer.count,
        kinds=question_writer.kinds,
        title=doc.title,
        progress=context.log.info,
    )
    problems = []
    try:
        validate_spans(result.items, {doc.doc_id: doc.text})
    except QAFormatError as exc:
        problems.append(str(exc))
    problems += [
        f"{i.question_id}: answer {i.reference_answer!r} is not its span's text"
        for i in result.items
        if i.meta.get("kind") == "single" and doc.text[slice(*i.reference_spans[0])] != i.reference_answer
    ]
    folder = question_writer.folder()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{doc.doc_id}.jsonl"
    if target.exists():
        target.replace(target.with_name(target.name + ".previous"))
        context.log.info(f"the previous questions of {doc.doc_id} are kept in {target.name}.previous")
    if result.items:  # an empty QA file would stop `ctxwin evaluate`
        write_qa_jsonl(result.items, target)
    else:
        context.log.warning(f"no question of {doc.doc_id} was kept; no QA file written")
    records = [r for r in chat.ledger.records if r.tags.stage == STAGE and r.tags.doc_id == doc.doc_id]
    report = result.report.to_dict()
    rate = report["span_found_rate"]
    return dg.MaterializeResult(
        value=[item.to_dict() for item in result.items],
        metadata={
            "qa_file": dg.MetadataValue.path(str(target) if result.items else ""),
            "n_questions": len(result.items),
            **{key: _counts(report[key]) for key in ("kept", "wanted", "drafted", "rejected")},
            "span_found_rate": float(rate) if isinstance(rate, int | float) else None,
            "model": writer.model,
            "report": dg.MetadataValue.md("\n".join(f"- {line}" for line in result.report.lines())),
            **call_metadata(records, time.perf_counter() - started),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="reference_spans_in_document",
                passed=not problems,
                metadata={"questions": len(result.items), "problems": len(problems), "first": "; ".join(problems[:3])},
            )
        ],
    )
