"""Jobs: everything, and one per variant (each with the ingest assets it needs).

Every job runs its steps in one process (``in_process_executor``): a run covers one document or a
batch of them (:mod:`ctxwin_dagster.defs.batches`), its steps take from milliseconds to seconds,
and a process per step (the multiprocess executor) costs a Python start, an import of the project
and a load of the embedding model each time — measured on the sample, one document: see
``benchmarks/bench_runs.py``. Runs go in parallel (``ctxwin run --workers N``, the instance's run
queue). A deployment
that wants steps spread over machines passes another executor to
:func:`ctxwin_dagster.definitions.build_definitions` (``deploy/celery``).
"""

import dagster as dg

#: The executor of every job of the project (one process per run; see above), set on the
#: Definitions so a deployment can swap it without touching the jobs.
EXECUTOR = dg.in_process_executor

#: Per-document assets that only run when asked for (they cost model calls a person decides on):
#: not in ``all_assets_job``, not rerun as stale; ``questions_job`` runs them.
ON_REQUEST_ASSETS = ("generated_questions",)

all_assets_job = dg.define_asset_job(
    "all_assets_job",
    selection=dg.AssetSelection.all() - dg.AssetSelection.assets("experiment_comparison", *ON_REQUEST_ASSETS),
    description="Materialize every per-document asset for a document partition.",
)

questions_job = dg.define_asset_job(
    "questions_job",
    selection=dg.AssetSelection.assets(*ON_REQUEST_ASSETS),
    description="Generate evaluation questions from a document with the question_writer model (ctxwin qa generate).",
)

comparison_job = dg.define_asset_job(
    "comparison_job",
    selection=dg.AssetSelection.assets("experiment_comparison"),
    description="The experiment's comparison report over every evaluated document.",
)

t_rag_job = dg.define_asset_job(
    "t_rag_job",
    selection=dg.AssetSelection.assets("t_rag_index").upstream(),
    description="T-RAG: documents, chunks and the plain-chunk index.",
)

cc_rag_job = dg.define_asset_job(
    "cc_rag_job",
    selection=dg.AssetSelection.assets("cc_rag_index").upstream(),
    description="CC-RAG: documents, chunks, whole-document contexts and their index.",
)

swb_rag_job = dg.define_asset_job(
    "swb_rag_job",
    selection=dg.AssetSelection.assets("swb_rag_index").upstream(),
    description="SWB-RAG: documents, chunks, global summary, batch contexts and their index.",
)

VARIANT_JOBS = (t_rag_job, cc_rag_job, swb_rag_job, comparison_job)
#: Jobs a person launches from the UI for one document.
REQUEST_JOBS = (questions_job,)
