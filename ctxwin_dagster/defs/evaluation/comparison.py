"""``experiment_comparison``: the experiment's report over the scores of the documents that exist now."""

import time

import dagster as dg

from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.defs.evaluation.metadata_totals import (
    COST_ASSETS,
    SWB_REPLY_FIELDS,
    WINDOW_FIELDS,
    indexing_costs,
    latest_metadatas,
    sum_fields,
)
from ctxwin_dagster.defs.model_resources import ChatModelResource, EmbeddingsResource, JudgeResource
from ctxwin_dagster.defs.partitions import documents_partitions
from ctxwin_dagster.defs.resources import EvaluationSettings, ProjectSettings

#: The largest Markdown report stored in the materialization's metadata (plots included).
MAX_REPORT_CHARS = 600_000


def experiment_setup(instance, doc_ids, evaluation, contextualizer, answerer, judge, embeddings, answers):
    """What made the comparison's numbers: engines and models per role, the embedding model and
    its window counts from the latest index materializations, the retrieval setting."""
    from ctxwin_dagster.core.evaluation.verdict import ExperimentSetup

    window: dict[str, dict[str, float]] = {}
    emb_window = strategy = ""
    for v in VARIANTS:
        metadatas = list(latest_metadatas(instance, [f"{v}_index"], doc_ids))
        for meta in metadatas:
            emb_window = emb_window or str(meta.get("embedding_window") or "")
            if v != "t_rag":
                strategy = strategy or str(meta.get("embed_strategy") or "")
        window[v] = sum_fields(metadatas, WINDOW_FIELDS)
    engine = "extractive" if not contextualizer.configured else "llm"
    swb_replies = sum_fields(latest_metadatas(instance, ["swb_rag_contexts"], doc_ids), SWB_REPLY_FIELDS)
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


def _coverage_notes(missing: list[str], doc_ids: list[str], scores_by: dict[str, dict[str, list]]) -> list[str]:
    """The report's notes on the documents left out: those without scores, and those scored for
    some variants only."""
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
    return notes


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
    setup = experiment_setup(
        context.instance, doc_ids, evaluation, contextualizer, answerer, judge, embeddings, answers
    )
    result = compare_experiment(
        scores,
        answers,
        indexing_costs(context.instance, doc_ids),
        evaluation.reports_path(),
        title=f"ctxwin experiment: {evaluation.experiment}",
        notes=_coverage_notes(missing, doc_ids, scores_by),
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
