"""Jobs: everything, and one per variant (each with the ingest assets it needs)."""

import dagster as dg

all_assets_job = dg.define_asset_job(
    "all_assets_job",
    selection=dg.AssetSelection.all(),
    description="Materialize every asset for a document partition.",
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

VARIANT_JOBS = (t_rag_job, cc_rag_job, swb_rag_job)
