"""Schedules: rerun the documents whose assets are stale, by the same rules as ``ctxwin run``
(:func:`ctxwin_dagster.defs.staleness.stale_documents`): a changed or new file, changed code,
settings or questions, an unfinished graph, or index rows missing."""

import dagster as dg

from ctxwin_dagster.defs.jobs import all_assets_job
from ctxwin_dagster.defs.resources import LanceDBResource, ProjectSettings
from ctxwin_dagster.defs.staleness import REASON_TAG, StalenessChecker, stale_documents


@dg.schedule(cron_schedule="0 * * * *", job=all_assets_job, default_status=dg.DefaultScheduleStatus.STOPPED)
def stale_documents_schedule(context: dg.ScheduleEvaluationContext, settings: ProjectSettings, lancedb: LanceDBResource):
    """Hourly: one run per stale document of the experiment's folder, of its stale assets and
    what lies downstream of them."""
    graph = context.repository_def.asset_graph
    job_keys = set(context.repository_def.get_job(all_assets_job.name).asset_layer.executable_asset_keys)
    stale, _ = stale_documents(context.instance, graph, settings, lancedb.index(), job_keys, settings.document_folder().ids())
    checker = StalenessChecker(context.instance, graph)
    requests = []
    for doc_id, st in sorted(stale.items()):
        if st.stale:
            closure = checker.downstream_closure(st.reasons, job_keys)
            selection = None if closure == job_keys else sorted(closure, key=lambda k: k.to_user_string())
            requests.append(dg.RunRequest(run_key=None, partition_key=doc_id, asset_selection=selection, tags={REASON_TAG: st.summary()[:200]}))
    return requests or dg.SkipReason("every document is up to date")
