"""Evaluation stage: QA sets, answers per variant, RAGAS scores, and the experiment comparison."""

import json
import time
from pathlib import Path

import dagster as dg

from ctxwin_dagster.core.documents import Document
from ctxwin_dagster.core.qa import load_qa_folder
from ctxwin_dagster.core.splitting import Chunk
from ctxwin_dagster.defs.partitions import documents_partitions
from ctxwin_dagster.defs.resources import (
    ChatModelResource,
    EmbeddingsResource,
    EvaluationSettings,
    LanceDBResource,
    PipelineSettings,
    ProjectSettings,
    build_tasks,
)

VARIANTS = ("t_rag", "cc_rag", "swb_rag")


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
    check_specs=[dg.AssetCheckSpec("reference_spans_valid", asset="qa_sets", description="every reference span lies inside the document")],
)
def qa_sets(context: dg.AssetExecutionContext, settings: ProjectSettings, raw_documents: Document, chunks: list[Chunk]):
    qa_dir = Path(settings.qa_dir)
    items = [q for q in load_qa_folder(qa_dir) if q.doc_id == raw_documents.doc_id] if qa_dir.is_dir() else []
    n = len(raw_documents.text)
    bad = [q.question_id for q in items if any(not (0 <= s < e <= n) for s, e in q.reference_spans)]
    rows = []
    for q in items:
        refs = sorted({c.chunk_id for c in chunks for s, e in q.reference_spans if c.start < e and s < c.end})
        rows.append({**q.to_dict(), "reference_chunk_ids": refs})
    return dg.MaterializeResult(
        value=rows,
        metadata={
            "n_questions": len(rows),
            "n_answerable": sum(1 for r in rows if not r["is_impossible"]),
            "qa_dir": str(qa_dir),
        },
        check_results=[dg.AssetCheckResult(check_name="reference_spans_valid", passed=not bad, metadata={"invalid": len(bad), "first_invalid": str(bad[:5])})],
    )


def _answers_asset(variant: str):
    name = f"{variant}_answers"

    @dg.asset(
        name=name,
        ins={"qa_sets": dg.AssetIn(), "raw_documents": dg.AssetIn(), "chunks": dg.AssetIn()},
        deps=[f"{variant}_index"],
        partitions_def=documents_partitions,
        group_name="evaluation",
        kinds={"python", "lancedb"},
        code_version="1",
        description=f"Every question of the document answered from the {variant} index (retrieval top-k, enhancement, citations).",
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
        raw_documents: Document,
        chunks: list[Chunk],
    ):
        from ctxwin_dagster.ask import Asker

        started = time.perf_counter()
        questions = qa_sets[: evaluation.max_questions_per_document] if evaluation.max_questions_per_document else qa_sets
        records = []
        by_id = {c.chunk_id: c for c in chunks}
        with build_tasks(answerer, embeddings, pipeline) as tasks:
            asker = Asker(index=lancedb.index(), embedder=embeddings.embedder(), tasks=tasks, documents_dir=settings.documents_dir)
            for q in questions:
                result = asker.ask(q["question"], variant=variant, doc_id=raw_documents.doc_id, k=evaluation.k, **evaluation.enhancement())
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
                    {"chunk_id": cid, "doc_id": by_id[cid].doc_id, "start": by_id[cid].start, "end": by_id[cid].end, "text": by_id[cid].text, "score": score}
                    for cid, score in hits
                    if cid in by_id
                ]
                records.append(rec)
        _write_jsonl(evaluation.results_path() / "answers" / variant / f"{raw_documents.doc_id}.jsonl", records)
        n = max(1, len(records))
        return dg.MaterializeResult(
            value=records,
            metadata={
                "n_questions": len(records),
                "not_found": sum(1 for r in records if r["not_found"]),
                "engine": getattr(tasks, "engine", ""),
                "mean_context_chars": round(sum(sum(len(c) for c in r["contexts"]) for r in records) / n, 1),
                "input_tokens": sum(r["input_tokens"] or 0 for r in records),
                "input_chars": sum(r["input_chars"] or 0 for r in records),
                "calls": sum(r["calls"] or 0 for r in records),
                "cache_hits": sum(r["cache_hits"] or 0 for r in records),
                "cost_usd": round(sum(r["cost_usd"] or 0 for r in records), 6),
                "runtime_s": round(time.perf_counter() - started, 3),
            },
        )

    return _asset


def _scores_asset(variant: str):
    name = f"{variant}_ragas_scores"

    @dg.asset(
        name=name,
        ins={"answers": dg.AssetIn(key=f"{variant}_answers"), "chunks": dg.AssetIn()},
        partitions_def=documents_partitions,
        group_name="evaluation",
        kinds={"python"},
        code_version="1",
        description=f"RAGAS scores of the {variant} answers: non-LLM and ID-based context metrics always, the paper's five LLM metrics with a judge; plus span recall, hit@k and MRR.",
        check_specs=[dg.AssetCheckSpec("few_nan_scores", asset=name, description="NaN or failed scores stay under the threshold for every metric")],
    )
    def _asset(context: dg.AssetExecutionContext, evaluation: EvaluationSettings, embeddings: EmbeddingsResource, answers: list, chunks: list[Chunk]):
        from ctxwin_dagster.models.ragas_eval import JudgeConfig, evaluate_records

        started = time.perf_counter()
        judge = JudgeConfig(model=evaluation.judge_model, base_url=evaluation.judge_base_url or None) if evaluation.judge_model else None
        catalog = [c.to_dict() for c in chunks]
        result = evaluate_records(answers, chunks=catalog, judge=judge, embedder=embeddings.embedder() if judge else None)
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
                "means": dg.MetadataValue.json({k: (None if v != v else round(float(v), 4)) for k, v in means.items()}),
                "runtime_s": round(time.perf_counter() - started, 3),
            },
            check_results=[
                dg.AssetCheckResult(
                    check_name="few_nan_scores",
                    passed=not bad_metrics,
                    metadata={"worst_share": round(worst, 3), "threshold": evaluation.max_failed_share, "metrics_over": dg.MetadataValue.json(bad_metrics)},
                )
            ],
        )

    return _asset


t_rag_answers, cc_rag_answers, swb_rag_answers = (_answers_asset(v) for v in VARIANTS)
t_rag_ragas_scores, cc_rag_ragas_scores, swb_rag_ragas_scores = (_scores_asset(v) for v in VARIANTS)


def _latest_metadata(instance: dg.DagsterInstance, asset: str, partition: str) -> dict:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1
    ).records
    if not records:
        return {}
    return {k: getattr(v, "value", v) for k, v in records[0].asset_materialization.metadata.items()}


def indexing_costs(instance: dg.DagsterInstance, doc_ids) -> dict[str, dict[str, float]]:
    """Per variant, the contextualization totals recorded by the assets for ``doc_ids``."""
    from ctxwin_dagster.core.experiment import INDEXING_FIELDS

    parts = {"t_rag": ("t_rag_index",), "cc_rag": ("cc_rag_contexts", "cc_rag_index"), "swb_rag": ("global_summaries", "swb_rag_contexts", "swb_rag_index")}
    out: dict[str, dict[str, float]] = {}
    for variant, assets in parts.items():
        agg = {f: 0.0 for f in INDEXING_FIELDS}
        for doc_id in doc_ids:
            for asset in assets:
                meta = _latest_metadata(instance, asset, doc_id)
                for f in INDEXING_FIELDS:
                    value = meta.get(f)
                    if isinstance(value, int | float):
                        agg[f] += float(value)
        out[variant] = agg
    return out


@dg.asset(
    deps=[f"{v}_ragas_scores" for v in VARIANTS],
    group_name="evaluation",
    kinds={"python", "pandas"},
    code_version="1",
    description="The experiment's comparison: quality per variant with paired tests (Shapiro-Wilk, t-test or Wilcoxon, Bonferroni), efficiency, plots; Markdown in the UI and an HTML report under evaluations/reports/<experiment>/.",
)
def experiment_comparison(context: dg.AssetExecutionContext, evaluation: EvaluationSettings):
    from ctxwin_dagster.core.experiment import compare_experiment

    started = time.perf_counter()
    root = evaluation.results_path()
    scores = [r for v in VARIANTS for r in read_jsonl_folder(root / "scores" / v)]
    answers = [r for v in VARIANTS for r in read_jsonl_folder(root / "answers" / v)]
    doc_ids = sorted({r["doc_id"] for r in answers if r.get("doc_id")})
    partitions = set(context.instance.get_dynamic_partitions(documents_partitions.name))
    missing = sorted(partitions - set(doc_ids))
    notes = [f"documents without scores (not evaluated or failed): {', '.join(missing)}"] if missing else []
    result = compare_experiment(
        scores, answers, indexing_costs(context.instance, doc_ids), evaluation.reports_path(), title=f"ctxwin experiment: {evaluation.experiment}", notes=notes
    )
    md = result["markdown"]
    return dg.MaterializeResult(
        metadata={
            "experiment": evaluation.experiment,
            "documents": len(doc_ids),
            "questions": len({(r["doc_id"], r["question_id"]) for r in answers}),
            "report_html": dg.MetadataValue.path(str(result["paths"]["html"])),
            "report": dg.MetadataValue.md(md if len(md) < 60_000 else md[:60_000] + "\n\n… (see the HTML report)"),
            "runtime_s": round(time.perf_counter() - started, 3),
        }
    )
