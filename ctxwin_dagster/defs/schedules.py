"""Schedules: rerun the partitions whose document changed, or whose graph is incomplete."""

import hashlib
from collections.abc import Iterable
from pathlib import Path

import dagster as dg

from ctxwin_dagster.defs.jobs import all_assets_job
from ctxwin_dagster.defs.partitions import documents_partitions
from ctxwin_dagster.defs.resources import ProjectSettings
from ctxwin_dagster.defs.staleness import REASON_TAG, config_tags, qa_versions, resource_versions


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str):
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1).records
    return records[0] if records else None


def stale_partitions(
    instance: dg.DagsterInstance, settings: ProjectSettings, asset_keys: Iterable[dg.AssetKey]
) -> dict[str, str]:
    """doc_id -> why it is stale, for every document partition that needs a run.

    A partition is stale when ``raw_documents`` was never materialized for it, when the file's
    SHA-256 differs from the one recorded at its last materialization, or when any other asset
    has no materialization since that one (a run that failed half-way).
    """
    raw_key = dg.AssetKey("raw_documents")
    others = [k for k in asset_keys if k != raw_key]
    stale: dict[str, str] = {}
    folder = settings.document_folder()
    for doc_id in instance.get_dynamic_partitions(documents_partitions.name):
        path = folder.path_of(doc_id)
        if path is None:
            continue  # the documents sensor removes partitions whose file is gone
        raw = _latest(instance, raw_key, doc_id)
        if raw is None:
            stale[doc_id] = "never materialized"
            continue
        recorded = raw.asset_materialization.metadata.get("sha256")
        current = hashlib.sha256(path.read_bytes()).hexdigest()
        if recorded is None or recorded.value != current:
            stale[doc_id] = "document changed"
            continue
        for key in others:
            rec = _latest(instance, key, doc_id)
            if rec is None or rec.storage_id < raw.storage_id:
                stale[doc_id] = f"{key.to_user_string()} not materialized since the document was read"
                break
    return stale


@dg.schedule(cron_schedule="0 * * * *", job=all_assets_job, default_status=dg.DefaultScheduleStatus.STOPPED)
def stale_documents_schedule(context: dg.ScheduleEvaluationContext, settings: ProjectSettings):
    """Hourly: one run per stale document partition (changed file, new file, or unfinished graph)."""
    graph = context.repository_def.asset_graph
    keys = [k for k in graph.materializable_asset_keys if graph.get(k).partitions_def == documents_partitions]
    stale = stale_partitions(context.instance, settings, keys)
    if not stale:
        return dg.SkipReason("every document partition is up to date")
    # The settings the runs use, recorded as ``ctxwin run`` records them (see staleness.py), so
    # ``ctxwin run`` does not run these documents again.
    versions = resource_versions(context.repository_def.get_top_level_resources())
    qa, _ = qa_versions(Path(settings.qa_dir), stale, settings.document_folder())
    return [
        dg.RunRequest(run_key=None, partition_key=doc_id, tags={REASON_TAG: why, **config_tags({**versions, "qa": qa[doc_id]})})
        for doc_id, why in sorted(stale.items())
    ]
