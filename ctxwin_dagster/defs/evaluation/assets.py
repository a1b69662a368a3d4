"""Evaluation stage: QA sets, answers per variant, RAGAS scores, and the experiment comparison."""

import json
import time
from pathlib import Path
from typing import cast

import dagster as dg

from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.core.evaluation.qa.items import load_qa_folder
from ctxwin_dagster.core.evaluation.qa.resolve import ResolvedQuestions, check_reference_spans, resolve_questions
from ctxwin_dagster.core.text.documents import Document
from ctxwin_dagster.core.text.splitting import Chunk
from ctxwin_dagster.defs.batches import per_document
from ctxwin_dagster.defs.materializations import latest_metadata
from ctxwin_dagster.defs.partitions import documents_partitions
from ctxwin_dagster.defs.resources import (
    ChatModelResource,
    EmbeddingsResource,
    EvaluationSettings,
    JudgeResource,
    LanceDBResource,
    PipelineSettings,
    ProjectSettings,
    build_tasks,
)
from ctxwin_dagster.defs.staleness import qa_version


def _write_jsonl(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    tmp.replace(path)


def read_jsonl_folder(folder: Path) -> list[dict]:
    rows: list[dict] = []
    for path in sorted(folder.glob("*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return rows


@dg.asset(
    partitions_def=documents_partitions,
    group_name="evaluation",
    kinds={"python"},
    code_version="1",
    description="The document's questions from the QA folder (JSONL), with reference spans checked and reference chunk ids.",
    check_specs=[
        dg.AssetCheckSpec(
            "reference_spans_valid",
            asset="qa_sets",
            description="every reference span lies inside the document (one outside it fails the asset, "
            "naming the QA file, the question and the fix)",
        )
    ],
)
@per_document
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


def _answers_asset(variant: str):
    name = f"{variant}_answers"

    @dg.asset(
        name=name,
        ins={"qa_sets": dg.AssetIn()},
        deps=[f"{variant}_index"],
        partitions_def=documents_partitions,
        group_name="evaluation",
        kinds={"python", "lancedb"},
        code_version="4",  # 4: the extractive answer ranks sentences with a model (backends/tasks/answering.py)
        description=(
            f"Every question of the document answered from the {variant} index with ctxwin ask's "
            f"retrieval and enhancement (or the experiment's), with citations."
        ),
        check_specs=[
            dg.AssetCheckSpec(
                "questions_within_embedding_window",
                asset=name,
                description="no token of any question was cut by the embedding model's window (counted with its own tokenizer)",
            )
        ],
    )
    @per_document
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
        records = []
        with build_tasks(answerer, embeddings, pipeline) as tasks:
            asker = Asker(
                index=lancedb.index(),
                embedder=embedder,
                tasks=tasks,
                documents_dir=settings.documents_dir,
                doc_ids_file=settings.doc_ids_file or None,  # the ids the runs gave the files, not a new scan's
            )
            # The chunks as the index holds them (the asset's upstream is the index, not the chunks asset).
            by_id = {c.chunk_id: c for c in asker.indexed_chunks(variant, doc_id)}
            for q in questions:
                result = asker.ask(q["question"], variant=variant, doc_id=doc_id, retrieval=retrieval)
                rec = result.to_record(
                    question_id=q["question_id"],
                    reference_answer=q["reference_answer"],
                    reference_spans=q["reference_spans"],
                    is_impossible=q["is_impossible"],
                )
                rec["variant"] = variant
                rec["reference_chunk_ids"] = q["reference_chunk_ids"]
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
                records.append(rec)
        _write_jsonl(evaluation.results_path() / "answers" / variant / f"{doc_id}.jsonl", records)
        n = max(1, len(records))
        return dg.MaterializeResult(
            value=records,
            metadata={
                "n_questions": len(records),
                "retrieval": retrieval.describe(),
                "embedding_model": embedder.model,
                "questions_over_window": question_fit["over_window"],
                "question_tokens_cut": question_fit["tokens_cut"],
                "not_found": sum(1 for r in records if r["not_found"]),
                "engine": tasks.engine,
                # how the extractive engine picks an answer's sentences (a chat model answers as it reads)
                "answer_rule": rule.describe() if (rule := getattr(tasks, "answer_rule", None)) else "the chat model's",
                "mean_context_chars": round(sum(sum(len(c) for c in r["contexts"]) for r in records) / n, 1),
                "input_tokens": sum(r["input_tokens"] or 0 for r in records),
                "input_chars": sum(r["input_chars"] or 0 for r in records),
                "calls": sum(r["calls"] or 0 for r in records),
                "cache_hits": sum(r["cache_hits"] or 0 for r in records),
                "cost_usd": round(sum(r["cost_usd"] or 0 for r in records), 6),
                "paid_usd": round(sum(r["paid_usd"] or 0 for r in records), 6),
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


def _scores_asset(variant: str):
    name = f"{variant}_ragas_scores"

    @dg.asset(
        name=name,
        ins={"answers": dg.AssetIn(key=f"{variant}_answers"), "chunks": dg.AssetIn()},
        partitions_def=documents_partitions,
        group_name="evaluation",
        kinds={"python", "ragas"},
        code_version="2",  # 2: answer F1 and exact match leave citation markers out
        description=(
            f"RAGAS scores of the {variant} answers: non-LLM and ID-based context metrics always, the "
            f"paper's five LLM metrics with a judge; plus span recall, hit@k and MRR."
        ),
        check_specs=[
            dg.AssetCheckSpec(
                "few_nan_scores",
                asset=name,
                description="NaN or failed scores stay under the threshold for every metric",
            )
        ],
    )
    @per_document
    def _asset(
        context: dg.AssetExecutionContext,
        evaluation: EvaluationSettings,
        judge: JudgeResource,
        embeddings: EmbeddingsResource,
        answers: list,
        chunks: list[Chunk],
    ):
        from ctxwin_dagster.backends.ragas import evaluate_records

        started = time.perf_counter()
        config = judge.config()
        catalog = [c.to_dict() for c in chunks]
        result = evaluate_records(
            answers, chunks=catalog, judge=config, embedder=embeddings.embedder() if config else None
        )
        doc_id = context.partition_key
        _write_jsonl(evaluation.results_path() / "scores" / variant / f"{doc_id}.jsonl", result.rows)
        worst = 0.0
        bad_metrics = {}
        for s in result.summary:
            pop = s.get("n_population") or 0
            if pop:
                share = ((s.get("n_nan") or 0) + (s.get("n_failed") or 0)) / pop
                worst = max(worst, share)
                if share > evaluation.max_failed_share:
                    bad_metrics[s["metric"]] = round(share, 3)
        means = {s["metric"]: s["mean"] for s in result.summary if s.get("mean") is not None}
        return dg.MaterializeResult(
            value=result.rows,
            metadata={
                "n_rows": len(result.rows),
                "judge": result.judge or "none (non-LLM metrics only)",
                "string_distance": result.string_distance,
                "nan_or_failed": sum((s.get("n_nan") or 0) + (s.get("n_failed") or 0) for s in result.summary),
                # one number per metric: the UI's Plots tab draws each as a series over the documents
                **{f"mean {k}": round(float(v), 4) for k, v in means.items() if v == v},
                "runtime_s": round(time.perf_counter() - started, 3),
            },
            check_results=[
                dg.AssetCheckResult(
                    check_name="few_nan_scores",
                    passed=not bad_metrics,
                    metadata={
                        "worst_share": round(worst, 3),
                        "threshold": evaluation.max_failed_share,
                        "metrics_over": dg.MetadataValue.json(bad_metrics),
                    },
                )
            ],
        )

    return _asset


t_rag_answers, cc_rag_answers, swb_rag_answers = (_answers_asset(v) for v in VARIANTS)
t_rag_ragas_scores, cc_rag_ragas_scores, swb_rag_ragas_scores = (_scores_asset(v) for v in VARIANTS)


#: The assets whose materializations carry each variant's indexing costs (contextualization
#: calls, tokens, cost; embedding) and the index's window counts. The comparison depends on
#: them (every partition), so they are edges of the graph and rerun it when they change; it
#: reads their latest materializations' metadata for the documents it compares.
COST_ASSETS = {
    "t_rag": ("t_rag_index",),
    "cc_rag": ("cc_rag_contexts", "cc_rag_index"),
    "swb_rag": ("global_summaries", "swb_rag_contexts", "swb_rag_index"),
}


def indexing_costs(instance: dg.DagsterInstance, doc_ids) -> dict[str, dict[str, float]]:
    """Per variant, the contextualization totals recorded by the latest materializations of the
    assets for ``doc_ids`` (the documents whose results came into the comparison)."""
    from ctxwin_dagster.core.evaluation.comparison import INDEXING_FIELDS

    out: dict[str, dict[str, float]] = {}
    for variant, assets in COST_ASSETS.items():
        agg = {f: 0.0 for f in INDEXING_FIELDS}
        for doc_id in doc_ids:
            for asset in assets:
                meta = latest_metadata(instance, asset, doc_id)
                # Recorded before these fields existed: cost_usd was what was paid, and nothing was
                # counted as read from a prompt cache.
                for older in ("paid_usd", "uncached_cost_usd"):
                    if older not in meta and "cost_usd" in meta:
                        meta[older] = meta["cost_usd"]
                for f in INDEXING_FIELDS:
                    value = meta.get(f)
                    if isinstance(value, int | float):
                        agg[f] += float(value)
        out[variant] = agg
    return out


#: Index metadata summed per variant for the report's embedding-window line.
WINDOW_FIELDS = ("rows_over_window", "rows_pooled", "chunk_tokens_cut", "context_tokens_cut")

#: ``swb_rag_contexts`` metadata summed for the report's line on the SWB replies.
SWB_REPLY_FIELDS = (
    "batches",
    "n_contexts",
    "fallbacks",
    "replies_swb_schema_enforced",
    "replies_swb_invalid",
    "replies_swb_repaired",
)

#: The largest Markdown report stored in the materialization's metadata (plots included).
MAX_REPORT_CHARS = 600_000


def experiment_setup(instance, doc_ids, evaluation, contextualizer, answerer, judge, embeddings, answers):
    """What made the comparison's numbers: engines and models per role, the embedding model and
    its window counts from the latest index materializations, the retrieval setting."""
    from ctxwin_dagster.core.evaluation.verdict import ExperimentSetup

    window: dict[str, dict[str, float]] = {}
    emb_window = strategy = ""
    for v in VARIANTS:
        agg = {f: 0.0 for f in WINDOW_FIELDS}
        for doc_id in doc_ids:
            meta = latest_metadata(instance, f"{v}_index", doc_id)
            emb_window = emb_window or str(meta.get("embedding_window") or "")
            if v != "t_rag":
                strategy = strategy or str(meta.get("embed_strategy") or "")
            for f in WINDOW_FIELDS:
                value = meta.get(f)
                if isinstance(value, int | float):
                    agg[f] += float(value)
        window[v] = agg
    engine = "extractive" if not contextualizer.configured else "llm"
    swb_replies = {f: 0.0 for f in SWB_REPLY_FIELDS}
    for doc_id in doc_ids:
        meta = latest_metadata(instance, "swb_rag_contexts", doc_id)
        for f in SWB_REPLY_FIELDS:
            value = meta.get(f)
            if isinstance(value, int | float):
                swb_replies[f] += float(value)
    return ExperimentSetup(
        contextualizer=contextualizer.describe(),
        contextualizer_engine=engine,
        answerer=answerer.describe(),
        judge=judge.describe(),
        embedding_model=embeddings.model if embeddings.provider == "openai" else "all-MiniLM-L6-v2 (local)",
        embedding_window=emb_window,
        embed_strategy=strategy,
        window=window,
        retrieval=evaluation.retrieval_settings().describe(),
        documents=len(doc_ids),
        questions=len({(r["doc_id"], r["question_id"]) for r in answers}),
        swb_replies=swb_replies,
    )


def _fit_markdown(inline: str, linked: str) -> str:
    """The report for the UI: plots embedded, unless that is too large for the metadata."""
    if len(inline) <= MAX_REPORT_CHARS:
        return inline
    if len(linked) <= MAX_REPORT_CHARS:
        return linked + "\n\n(The plots are in the HTML report; they were too large to embed here.)\n"
    return linked[:MAX_REPORT_CHARS] + "\n\n… (see the HTML report)"


def _all_documents(asset: str) -> dg.AssetIn:
    """Every document partition of ``asset`` that was materialized, as ``{doc_id: value}``
    (the default UPath IO manager skips partitions never materialized, e.g. a failed document)."""
    return dg.AssetIn(
        key=asset, partition_mapping=dg.AllPartitionMapping(), metadata={"allow_missing_partitions": True}
    )


def _by_document(context: dg.AssetExecutionContext, name: str, value) -> dict[str, list]:
    """The input ``name`` loaded with :func:`_all_documents` as ``{doc_id: rows}``.

    The UPath IO manager returns a dict ``{partition key: value}`` when it loads several
    partitions, the value itself when it loads one, and None when there is none (or the one
    partition was never materialized).
    """
    keys = list(context.asset_partition_keys_for_input(name))
    if value is None or not keys:
        return {}
    if len(keys) == 1:
        return {keys[0]: list(value)}
    if not isinstance(value, dict):
        raise TypeError(
            f"expected {{partition key: rows}} for input {name!r} ({len(keys)} partitions), got {type(value).__name__}; "
            "the IO manager must load several partitions as a dict (Dagster's default filesystem IO manager does)"
        )
    return {str(k): list(v or []) for k, v in value.items()}


@dg.asset(
    ins={f"{v}_ragas_scores": _all_documents(f"{v}_ragas_scores") for v in VARIANTS},
    deps=[
        dg.AssetDep(a, partition_mapping=dg.AllPartitionMapping())
        for a in sorted({a for assets in COST_ASSETS.values() for a in assets})
    ],
    group_name="evaluation",
    kinds={"python", "pandas"},
    code_version="2",
    description=(
        "The experiment's comparison over the scores of the documents that exist now (its inputs): "
        "quality per variant with paired tests (Shapiro-Wilk, t-test or Wilcoxon, Bonferroni), efficiency, plots; "
        "Markdown in the UI and an HTML report in the experiment's folder under evaluations/reports."
    ),
)
def experiment_comparison(
    context: dg.AssetExecutionContext,
    settings: ProjectSettings,
    evaluation: EvaluationSettings,
    contextualizer: ChatModelResource,
    answerer: ChatModelResource,
    judge: JudgeResource,
    embeddings: EmbeddingsResource,
    t_rag_ragas_scores,
    cc_rag_ragas_scores,
    swb_rag_ragas_scores,
):
    from ctxwin_dagster.core.evaluation.comparison import compare_experiment
    from ctxwin_dagster.core.evaluation.verdict import verdict_headline

    started = time.perf_counter()
    from ctxwin_dagster.defs.automation import tag_run_reason

    tag_run_reason(context)  # launched from the UI: the reason ctxwin run gives the comparison
    # Only the documents whose file is in the folder now: a document whose file is gone keeps
    # its partition and stored outputs until `ctxwin prune`, but leaves the comparison at once.
    partitions = set(context.instance.get_dynamic_partitions(documents_partitions.name)) & set(
        settings.document_folder().ids()
    )
    scores_in = {"t_rag": t_rag_ragas_scores, "cc_rag": cc_rag_ragas_scores, "swb_rag": swb_rag_ragas_scores}
    scores_by = {
        v: {d: rows for d, rows in _by_document(context, f"{v}_ragas_scores", scores_in[v]).items() if d in partitions}
        for v in VARIANTS
    }
    doc_ids = sorted(set().union(*(set(scores_by[v]) for v in VARIANTS)))
    scores = [r for v in VARIANTS for d in doc_ids for r in scores_by[v].get(d, [])]
    # A score row carries its answer's efficiency fields (tokens, characters, calls, cost, latency).
    answers = scores
    missing = sorted(partitions - set(doc_ids))
    notes = [f"documents without scores (not evaluated or failed): {', '.join(missing)}"] if missing else []
    gaps = [
        f"{v}: {', '.join(d for d in doc_ids if d not in scores_by[v])}"
        for v in VARIANTS
        if any(d not in scores_by[v] for d in doc_ids)
    ]
    if gaps:
        notes.append(
            f"documents scored for some variants only (the missing ones are left out of that variant): {'; '.join(gaps)}"
        )
    setup = experiment_setup(
        context.instance, doc_ids, evaluation, contextualizer, answerer, judge, embeddings, answers
    )
    result = compare_experiment(
        scores,
        answers,
        indexing_costs(context.instance, doc_ids),
        evaluation.reports_path(),
        title=f"ctxwin experiment: {evaluation.experiment}",
        notes=notes,
        setup=setup,
    )
    md = _fit_markdown(result["markdown_inline"], result["markdown"])
    # The UI lists metadata in this order: the verdict first, in place (plain text), then the
    # report with its plots (Markdown, one click), then the figures. The figures are one JSON
    # entry, not numbers: the Plots tab would draw each number of this one report as a chart of
    # a point per rerun; the per-document series are on the scores' and answers' own pages.
    return dg.MaterializeResult(
        metadata={
            "verdict": dg.MetadataValue.text(verdict_headline(result["verdict"])),
            "report": dg.MetadataValue.md(md),
            "experiment": evaluation.experiment,
            "report_html": dg.MetadataValue.path(str(result["paths"]["html"])),
            "retrieval": setup.retrieval,
            "figures": dg.MetadataValue.json(
                {
                    "documents": len(doc_ids),
                    "documents_without_scores": len(missing),
                    "questions": len({(r["doc_id"], r["question_id"]) for r in answers}),
                    "runtime_s": round(time.perf_counter() - started, 3),
                }
            ),
            "doc_ids": dg.MetadataValue.json(doc_ids),
        }
    )
