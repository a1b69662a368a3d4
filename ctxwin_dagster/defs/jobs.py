"""Jobs: everything, and one per stage/variant as the graph grows."""

from __future__ import annotations

import dagster as dg


all_assets_job = dg.define_asset_job(
    "all_assets_job",
    selection=dg.AssetSelection.all(),
    description="Materialize every asset for a document partition.",
)
