"""Jobs: everything, and one per variant (each with the ingest assets it needs)."""

import dagster as dg

all_assets_job = dg.define_asset_job(
    "all_assets_job",
    selection=dg.AssetSelection.all() - dg.AssetSelection.assets("experiment_comparison"),
    description="Materialize every per-document asset for a document partition.",
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
