"""The Dagster definitions loaded by ``workspace.yaml`` (``dagster dev -w workspace.yaml``)."""

import dagster as dg

from ctxwin_dagster.defs.contexts.assets import cc_rag_contexts, global_summaries, swb_rag_contexts
from ctxwin_dagster.defs.evaluation.assets import (
    cc_rag_answers,
    cc_rag_ragas_scores,
    experiment_comparison,
    qa_sets,
    swb_rag_answers,
    swb_rag_ragas_scores,
    t_rag_answers,
    t_rag_ragas_scores,
)
from ctxwin_dagster.defs.indexes.assets import cc_rag_index, swb_rag_index, t_rag_index
from ctxwin_dagster.defs.ingest.assets import chunks, raw_documents
from ctxwin_dagster.defs.jobs import EXECUTOR, VARIANT_JOBS, all_assets_job
from ctxwin_dagster.defs.resources import (
    ChatModelResource,
    EmbeddingsResource,
    EvaluationSettings,
    LanceDBResource,
    PipelineSettings,
    ProjectSettings,
)
from ctxwin_dagster.defs.schedules import stale_documents_schedule
from ctxwin_dagster.defs.sensors import documents_sensor


def default_resources() -> dict[str, object]:
    """The embedded defaults: no chat model (extractive engine), local embeddings, local LanceDB."""
    return {
        "settings": ProjectSettings(),
        "pipeline": PipelineSettings(),
        "contextualizer": ChatModelResource(),
        "answerer": ChatModelResource(),
        "evaluation": EvaluationSettings(),
        "embeddings": EmbeddingsResource(),
        "lancedb": LanceDBResource(),
    }


def build_definitions(executor: dg.ExecutorDefinition = EXECUTOR) -> dg.Definitions:
    """The project's definitions; ``executor`` runs every job (default: each run in one process).

    A deployment that spreads steps over machines passes its executor (e.g. dagster-celery's
    ``celery_executor``, see ``deploy/celery/definitions.py``); nothing else changes.
    """
    return dg.Definitions(
        assets=[
            raw_documents,
            chunks,
            global_summaries,
            cc_rag_contexts,
            swb_rag_contexts,
            t_rag_index,
            cc_rag_index,
            swb_rag_index,
            qa_sets,
            t_rag_answers,
            cc_rag_answers,
            swb_rag_answers,
            t_rag_ragas_scores,
            cc_rag_ragas_scores,
            swb_rag_ragas_scores,
            experiment_comparison,
        ],
        jobs=[all_assets_job, *VARIANT_JOBS],
        schedules=[stale_documents_schedule],
        sensors=[documents_sensor],
        resources=default_resources(),
        executor=executor,
    )


defs = build_definitions()
