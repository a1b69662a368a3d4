"""``<variant>_ragas_scores``: the RAGAS scores of one variant's answers, with span recall, hit@k and MRR."""

import time
from collections.abc import Mapping, Sequence

import dagster as dg

from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.core.text.splitting import Chunk
from ctxwin_dagster.defs.batches import document_asset
from ctxwin_dagster.defs.evaluation.result_files import write_jsonl
from ctxwin_dagster.defs.model_resources import EmbeddingsResource, JudgeResource
from ctxwin_dagster.defs.resources import EvaluationSettings


def _scores_asset(variant: str):
    name = f"{variant}_ragas_scores"

    @document_asset(
        name=name,
        ins={"answers": dg.AssetIn(key=f"{variant}_answers"), "chunks": dg.AssetIn()},
        group_name="evaluation",
        kinds={"python", "ragas"},
        code_version="2",  # 2: answer F1 and exact match leave citation markers out
        description=(
            f"RAGAS scores of the {variant} answers: non-LLM and ID-based context metrics always, the "
            f"paper's five LLM metrics with a judge; plus span recall, hit@k and MRR."
        ),
        checks={"few_nan_scores": "NaN or failed scores stay under the threshold for every metric"},
    )
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
        write_jsonl(evaluation.results_path() / "scores" / variant / f"{doc_id}.jsonl", result.rows)
        worst, bad_metrics = _failed_shares(result.summary, evaluation.max_failed_share)
        means = {s["metric"]: s["mean"] for s in result.summary if s.get("mean") is not None}
        return dg.MaterializeResult(
            value=result.rows,
            metadata={
                "n_rows": len(result.rows),
                "judge": result.judge or "none (non-LLM metrics only)",
                "string_distance": result.string_distance,
                "nan_or_failed": sum(_nan_or_failed(s) for s in result.summary),
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


def _count(metric: Mapping[str, object], key: str) -> float:
    """A count of one metric's summary (0 when it has none)."""
    value = metric.get(key)
    return value if isinstance(value, int | float) else 0


def _nan_or_failed(metric: Mapping[str, object]) -> float:
    """How many scores of one metric's summary are NaN or failed."""
    return _count(metric, "n_nan") + _count(metric, "n_failed")


def _failed_shares(summary: Sequence[Mapping[str, object]], threshold: float) -> tuple[float, dict[str, float]]:
    """The largest share of NaN or failed scores of any metric in ``summary``, and the metrics
    whose share is over ``threshold`` (with their shares, rounded)."""
    worst = 0.0
    bad_metrics: dict[str, float] = {}
    for s in summary:
        pop = _count(s, "n_population")
        if pop:
            share = _nan_or_failed(s) / pop
            worst = max(worst, share)
            if share > threshold:
                bad_metrics[str(s["metric"])] = round(share, 3)
    return worst, bad_metrics


t_rag_ragas_scores, cc_rag_ragas_scores, swb_rag_ragas_scores = (_scores_asset(v) for v in VARIANTS)
