"""``<variant>_answers``: every question of a document answered from one variant's index, as ``ctxwin ask`` answers."""

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import dagster as dg

from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings
from ctxwin_dagster.core.text.splitting import Chunk
from ctxwin_dagster.defs.batches import document_asset
from ctxwin_dagster.defs.evaluation.result_files import write_jsonl
from ctxwin_dagster.defs.model_resources import ChatModelResource, EmbeddingsResource
from ctxwin_dagster.defs.resources import (
    EvaluationSettings,
    LanceDBResource,
    PipelineSettings,
    ProjectSettings,
    build_tasks,
)

if TYPE_CHECKING:
    from ctxwin_dagster.ask import Asker
    from ctxwin_dagster.ask.results import AskResult
    from ctxwin_dagster.backends.tasks.results import TaskEngine

#: Answer record fields summed over a document's answers as they are (counts of calls, tokens, characters).
COUNTED_FIELDS = ("input_tokens", "input_chars", "calls", "cache_hits")
#: Answer record fields summed over a document's answers and rounded to a millionth of a dollar.
PRICED_FIELDS = ("cost_usd", "paid_usd")


def _answers_asset(variant: str):
    name = f"{variant}_answers"

    @document_asset(
        name=name,
        ins={"qa_sets": dg.AssetIn()},
        deps=[f"{variant}_index"],
        group_name="evaluation",
        kinds={"python", "lancedb"},
        code_version="4",  # 4: the extractive answer ranks sentences with a model (backends/tasks/answering.py)
        description=(
            f"Every question of the document answered from the {variant} index with ctxwin ask's "
            f"retrieval and enhancement (or the experiment's), with citations."
        ),
        checks={
            "questions_within_embedding_window": "no token of any question was cut by the embedding model's window "
            "(counted with its own tokenizer)"
        },
    )
    def _asset(
        context: dg.AssetExecutionContext,
        settings: ProjectSettings,
        evaluation: EvaluationSettings,
        answerer: ChatModelResource,
        embeddings: EmbeddingsResource,
        lancedb: LanceDBResource,
        pipeline: PipelineSettings,
        qa_sets: list,
    ):
        from ctxwin_dagster.ask import Asker

        doc_id = context.partition_key
        started = time.perf_counter()
        questions = (
            qa_sets[: evaluation.max_questions_per_document] if evaluation.max_questions_per_document else qa_sets
        )
        retrieval = evaluation.retrieval_settings()
        embedder = embeddings.embedder()
        # Refused before any question is answered when the index was built with another model.
        lancedb.index().check_embedder(variant, embedder)
        question_fit = _question_window(embedder, [q["question"] for q in questions], embeddings.oversize)
        with build_tasks(answerer, embeddings, pipeline) as tasks:
            asker = Asker(
                index=lancedb.index(),
                embedder=embedder,
                tasks=tasks,
                documents_dir=settings.documents_dir,
                doc_ids_file=settings.doc_ids_file or None,  # the ids the runs gave the files, not a new scan's
            )
            records = _answer_questions(asker, variant, doc_id, questions, retrieval)
        write_jsonl(evaluation.results_path() / "answers" / variant / f"{doc_id}.jsonl", records)
        return dg.MaterializeResult(
            value=records,
            metadata={
                "n_questions": len(records),
                "retrieval": retrieval.describe(),
                "embedding_model": embedder.model,
                "questions_over_window": question_fit["over_window"],
                "question_tokens_cut": question_fit["tokens_cut"],
                **_answers_metadata(records, tasks),
                "runtime_s": round(time.perf_counter() - started, 3),
            },
            check_results=[
                dg.AssetCheckResult(
                    check_name="questions_within_embedding_window",
                    passed=question_fit["tokens_cut"] == 0,
                    metadata={"embedding_window": embedder.limits.describe(), **question_fit},
                )
            ],
        )

    return _asset


def _answer_questions(
    asker: "Asker", variant: str, doc_id: str, questions: list[dict], retrieval: RetrievalSettings
) -> list[JSONObject]:
    """The answer record of each of ``questions``, asked of the ``variant`` index within ``doc_id``."""
    # The chunks as the index holds them (the asset's upstream is the index, not the chunks asset).
    by_id = {c.chunk_id: c for c in asker.indexed_chunks(variant, doc_id)}
    records = []
    for q in questions:
        result = asker.ask(q["question"], variant=variant, doc_id=doc_id, retrieval=retrieval)
        records.append(_answer_record(variant, q, result, by_id))
    return records


def _answer_record(variant: str, question: dict, result: "AskResult", by_id: dict[str, Chunk]) -> JSONObject:
    """One answer as the results file and the scores take it: the ask's record with the question's
    references, the variant, and the retrieved chunks (with their spans, text and scores)."""
    rec = result.to_record(
        question_id=question["question_id"],
        reference_answer=question["reference_answer"],
        reference_spans=question["reference_spans"],
        is_impossible=question["is_impossible"],
    )
    rec["variant"] = variant
    rec["reference_chunk_ids"] = question["reference_chunk_ids"]
    hits = result.context.hits if result.context is not None else []
    rec["retrieved"] = [
        {
            "chunk_id": cid,
            "doc_id": by_id[cid].doc_id,
            "start": by_id[cid].start,
            "end": by_id[cid].end,
            "text": by_id[cid].text,
            "score": score,
        }
        for cid, score in hits
        if cid in by_id
    ]
    return rec


def _number(value: object) -> float:
    """A record's count or cost (0 when it has none)."""
    return value if isinstance(value, int | float) else 0


def _context_chars(contexts: object) -> int:
    """Characters of a record's contexts."""
    return sum(len(c) for c in contexts) if isinstance(contexts, list) else 0


def _answers_metadata(records: Sequence[Mapping[str, object]], tasks: "TaskEngine") -> dict[str, str | float]:
    """The metadata read from the answer records and the answer engine: misses, the engine and its
    answer rule, the context's mean size, and the sums of calls, tokens, characters and costs."""
    from ctxwin_dagster.backends.tasks.answers import ExtractiveAnswers

    n = max(1, len(records))
    return {
        "not_found": sum(1 for r in records if r["not_found"]),
        "engine": tasks.engine,
        # how the extractive engine picks an answer's sentences (a chat model answers as it reads)
        "answer_rule": tasks.answer_rule.describe() if isinstance(tasks, ExtractiveAnswers) else "the chat model's",
        "mean_context_chars": round(sum(_context_chars(r["contexts"]) for r in records) / n, 1),
        **{f: sum(_number(r[f]) for r in records) for f in COUNTED_FIELDS},
        **{f: round(sum(_number(r[f]) for r in records), 6) for f in PRICED_FIELDS},
    }


def _question_window(embedder, questions: list[str], oversize: str) -> dict[str, int]:
    """Questions over the embedding model's window, pooled from pieces or (``oversize="truncate"``)
    cut by the model, counted with the model's own tokenizer."""
    from ctxwin_dagster.core.budget.embedding_window import Oversize, fit_text

    fits = [
        fit_text(q, embedder.tokenizer, embedder.limits, oversize=cast(Oversize, oversize), offsets=o)
        for q, o in zip(questions, embedder.tokenizer.offsets_many(questions), strict=True)
    ]
    return {
        "questions": len(fits),
        "over_window": sum(1 for f in fits if f.over_window),
        "pooled": sum(1 for f in fits if len(f.pieces) > 1),
        "tokens_cut": sum(f.tokens_cut for f in fits),
    }


t_rag_answers, cc_rag_answers, swb_rag_answers = (_answers_asset(v) for v in VARIANTS)
