"""The Dagster definitions loaded by ``workspace.yaml`` (``dg dev -w workspace.yaml``, ``ctxwin dev``).

The code location loads the experiment of its Dagster home (``$DAGSTER_HOME/ctxwin_experiment.json``,
the sample when there is none; see :mod:`ctxwin_dagster.core.experiment`): every process of
one home — the CLI, the daemon's sensors, the webserver, every run — gets the same
resources, so a run launched from the UI is the same run as one launched by ``ctxwin run``.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from ctxwin_dagster.core.experiment import DOC_IDS_FILE, Experiment, home_experiment
from ctxwin_dagster.defs.automation import stale_documents_sensor, with_stale_reruns
from ctxwin_dagster.defs.batches import DocumentsIOManager, documents_backfill_policy
from ctxwin_dagster.defs.command_runs import command_runs_sensor, requests_spec
from ctxwin_dagster.defs.contexts.assets import cc_rag_contexts, global_summaries, swb_rag_contexts
from ctxwin_dagster.defs.evaluation.answers import cc_rag_answers, swb_rag_answers, t_rag_answers
from ctxwin_dagster.defs.evaluation.comparison import experiment_comparison
from ctxwin_dagster.defs.evaluation.qa_sets import qa_sets
from ctxwin_dagster.defs.evaluation.scores import cc_rag_ragas_scores, swb_rag_ragas_scores, t_rag_ragas_scores
from ctxwin_dagster.defs.indexes.assets import cc_rag_index, swb_rag_index, t_rag_index
from ctxwin_dagster.defs.ingest.assets import chunks, raw_documents
from ctxwin_dagster.defs.jobs import EXECUTOR, REQUEST_JOBS, VARIANT_JOBS, all_assets_job
from ctxwin_dagster.defs.model_resources import (
    ChatModelResource,
    EmbeddingsResource,
    JudgeResource,
    QuestionWriterResource,
)
from ctxwin_dagster.defs.questions.assets import generated_questions
from ctxwin_dagster.defs.resources import (
    EvaluationSettings,
    LanceDBResource,
    PipelineSettings,
    ProjectResources,
    ProjectSettings,
)
from ctxwin_dagster.defs.sensors import documents_sensor
from ctxwin_dagster.defs.versions import with_settings_versions

#: The assets that build the three indexes of a document: text, chunks, summary, contexts, embeddings.
INDEXING_ASSETS = [
    raw_documents,
    chunks,
    global_summaries,
    cc_rag_contexts,
    swb_rag_contexts,
    t_rag_index,
    cc_rag_index,
    swb_rag_index,
]
#: The assets that answer a document's questions with each index, score them, and compare the experiment.
EVALUATION_ASSETS = [
    *(qa_sets, t_rag_answers, cc_rag_answers, swb_rag_answers),
    *(t_rag_ragas_scores, cc_rag_ragas_scores, swb_rag_ragas_scores, experiment_comparison),
]

#: Per-document assets run only when a person asks (not in all_assets_job): questions written by a model.
REQUEST_ASSETS = [generated_questions]


def default_resources(experiment: Experiment | None = None, home: str | Path | None = None) -> ProjectResources:
    """The resources of ``experiment`` (default: the sample's embedded defaults: no chat model,
    so the extractive engine; local embeddings; local LanceDB). With ``home``, the documents'
    ids are remembered in that Dagster home, so an id never changes because another file did."""
    config = (experiment or Experiment()).resource_config()
    if home is not None:
        config["settings"].setdefault("doc_ids_file", str(Path(home) / DOC_IDS_FILE))
    return {
        "settings": ProjectSettings(**config["settings"]),
        "pipeline": PipelineSettings(**config["pipeline"]),
        "contextualizer": ChatModelResource(**config["contextualizer"]),
        "answerer": ChatModelResource(**config["answerer"]),
        "evaluation": EvaluationSettings(**config["evaluation"]),
        "judge": JudgeResource(**config["judge"]),
        "embeddings": EmbeddingsResource(**config["embeddings"]),
        "lancedb": LanceDBResource(**config["lancedb"]),
        "question_writer": QuestionWriterResource(**config["question_writer"]),
        # Dagster's pickled files in the home's storage folder, also for runs of many documents.
        "io_manager": DocumentsIOManager(),
    }


def in_batches(assets: list[dg.AssetsDefinition]) -> list[dg.AssetsDefinition]:
    """``assets`` with the per-document ones backfilled (from the UI, by the automation) up to
    ``MAX_DOCUMENTS_PER_RUN`` documents a run (:mod:`ctxwin_dagster.defs.batches`)."""
    return [a.with_attributes(backfill_policy=documents_backfill_policy) if a.partitions_def else a for a in assets]


def build_definitions(
    executor: dg.ExecutorDefinition = EXECUTOR, *, experiment: Experiment | None = None, home: str | Path | None = None
) -> dg.Definitions:
    """The project's definitions for ``experiment`` (default: the sample); ``executor`` runs
    every job (default: each run in one process).

    A deployment that spreads steps over machines passes its executor (e.g. dagster-celery's
    ``celery_executor``, see ``deploy/celery/definitions.py``); nothing else changes.
    """
    resources = default_resources(experiment, home)
    return dg.Definitions(
        assets=with_stale_reruns(
            with_settings_versions(
                in_batches([*INDEXING_ASSETS, *EVALUATION_ASSETS, *REQUEST_ASSETS]),
                resources,
            ),
            resources,
        )
        + [requests_spec],
        jobs=[all_assets_job, *VARIANT_JOBS, *REQUEST_JOBS],
        sensors=[documents_sensor, command_runs_sensor, stale_documents_sensor],
        resources=resources,
        executor=executor,
    )


def home_definitions(home: str | Path | None = None, executor: dg.ExecutorDefinition = EXECUTOR) -> dg.Definitions:
    """The definitions of the experiment of the Dagster home ``home`` (default ``$DAGSTER_HOME``)."""
    folder = home if home is not None else os.environ.get("DAGSTER_HOME")
    return build_definitions(executor, experiment=home_experiment(folder), home=folder or None)


def home_resources(home: str | Path | None = None) -> ProjectResources:
    """The resources of the experiment of the Dagster home ``home`` (default ``$DAGSTER_HOME``)."""
    folder = home if home is not None else os.environ.get("DAGSTER_HOME")
    return default_resources(home_experiment(folder), folder or None)


defs = home_definitions()
