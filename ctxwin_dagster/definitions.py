"""The Dagster definitions loaded by ``workspace.yaml`` (``dagster dev -w workspace.yaml``)."""

from __future__ import annotations

import dagster as dg

from ctxwin_dagster.defs.ingest.assets import chunks, raw_documents
from ctxwin_dagster.defs.jobs import all_assets_job
from ctxwin_dagster.defs.resources import ProjectSettings
from ctxwin_dagster.defs.sensors import documents_sensor

defs = dg.Definitions(
    assets=[raw_documents, chunks],
    jobs=[all_assets_job],
    sensors=[documents_sensor],
    resources={"settings": ProjectSettings()},
)
