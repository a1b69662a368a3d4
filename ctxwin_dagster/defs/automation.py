"""Scheduled reruns by declarative automation: every hour, the stale assets of each document.

Each per-document asset carries the automation condition

    cron_tick_passed("0 * * * *") & stale by the project's rules & not in progress

evaluated by the sensor ``ctxwin_stale_documents`` (an ``AutomationConditionSensorDefinition``;
off until it is turned on in the UI, under Automation, as the schedule it replaces was). Dagster
then requests, per document, the asset partitions that are true, in one run per document, and
shows every evaluation — which partitions, and why — in the UI.

"Stale by the project's rules" is :class:`StaleByProjectRules`: the one staleness algorithm
that ``ctxwin run`` uses too (:func:`ctxwin_dagster.defs.staleness.stale_documents`: the file's
SHA-256, code and settings versions, the questions' hash, the event log's order, index rows
missing), with everything downstream of a stale asset. Dagster's built-in conditions cannot say
all of it (a document file, a question file or an index row is not an asset Dagster observes),
so this one condition is ours, in this module; it is evaluated on the code server
(``use_user_code_server=True``), where the experiment's resources are, and computed once per
evaluation for every document and asset.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import dagster as dg

from ctxwin_dagster.defs.jobs import ON_REQUEST_ASSETS
from ctxwin_dagster.defs.run_reasons import (
    DOCUMENTS_TAG,
    ON_REQUEST,
    REASON_TAG,
    combined_reason,
    documents_label,
    short_reason,
)
from ctxwin_dagster.defs.staleness import AssetGraph, StalenessChecker, stale_documents

if TYPE_CHECKING:
    from ctxwin_dagster.defs.resources import LanceDBResource, ProjectResources, ProjectSettings

#: When stale documents are rerun (hourly, on the hour, UTC).
CRON = "0 * * * *"
SENSOR_NAME = "ctxwin_stale_documents"


class StaleByProjectRules(dg.AutomationCondition):
    """True for the partitions of an asset that the project's staleness rules find stale, or
    that lie downstream (in ``all_assets_job``) of a stale asset of the same document.

    Args:
        settings: the experiment's ``ProjectSettings`` resource (documents and questions folders).
        lancedb: its ``LanceDBResource`` (index rows).
    """

    def __init__(self, settings: ProjectSettings, lancedb: LanceDBResource) -> None:
        self.settings = settings
        self.lancedb = lancedb
        self._computed: tuple[int, dict[dg.AssetKey, set[str]]] | None = None

    @property
    def name(self) -> str:
        return "stale_by_project_rules"

    @property
    def description(self) -> str:
        return "stale by ctxwin's rules (file, code, settings, questions, upstream, index rows), or downstream of a stale asset"

    @property
    def requires_cursor(self) -> bool:
        return False

    def stale_partitions(self, instance: dg.DagsterInstance, graph: AssetGraph) -> dict[dg.AssetKey, set[str]]:
        """asset key -> the documents for which it needs a run now."""
        job_keys = {
            k
            for k in graph.get_all_asset_keys()
            if graph.get(k).is_partitioned and k.to_user_string() not in ON_REQUEST_ASSETS
        }
        doc_ids = self.settings.document_folder().ids()
        stale, _ = stale_documents(instance, graph, self.settings, self.lancedb.index(), job_keys, doc_ids)
        checker = StalenessChecker(instance, graph)
        out: dict[dg.AssetKey, set[str]] = {}
        for doc_id, st in stale.items():
            if st.stale:
                for key in checker.downstream_closure(st.reasons, job_keys):
                    out.setdefault(key, set()).add(doc_id)
        return out

    def run_reason(
        self, instance: dg.DagsterInstance, graph: AssetGraph, keys: set[dg.AssetKey], doc_ids: list[str]
    ) -> str:
        """Why a run of the assets ``keys`` over ``doc_ids`` runs now, worded as ``ctxwin run``
        words its own runs' reasons (``ctxwin_dagster.runner.runs``), or :data:`ON_REQUEST`."""
        stale, _ = stale_documents(instance, graph, self.settings, self.lancedb.index(), keys, doc_ids)
        return combined_reason(stale[d].label() for d in doc_ids)

    def evaluate(self, context: dg.AutomationContext) -> dg.AutomationResult:
        if context.candidate_subset.is_empty:  # off the tick: nothing to compute
            return dg.AutomationResult(context, true_subset=context.candidate_subset)
        # One computation per evaluation of the sensor, shared by the conditions of every asset.
        if self._computed is None or self._computed[0] != context.evaluation_id:
            self._computed = (
                context.evaluation_id,
                self.stale_partitions(context.asset_graph_view.instance, context.asset_graph),
            )
        wanted = self._computed[1].get(context.key, set())
        candidates = set(context.candidate_subset.expensively_compute_partition_keys()) if wanted else set()
        true = context.candidate_subset.compute_intersection_with_partition_keys(wanted & candidates)
        return dg.AutomationResult(context, true_subset=true)


def stale_rerun_condition(settings: ProjectSettings, lancedb: LanceDBResource) -> dg.AutomationCondition:
    """The condition of every per-document asset: on the hourly tick, stale, not running now."""
    return (
        dg.AutomationCondition.cron_tick_passed(CRON, "UTC")
        & StaleByProjectRules(settings, lancedb)
        & ~dg.AutomationCondition.in_progress()
    ).with_label(f"stale on the hourly tick ({CRON})")


def _project_rules(assets_def: dg.AssetsDefinition) -> StaleByProjectRules | None:
    """The :class:`StaleByProjectRules` in the automation condition of ``assets_def``, if any."""
    found = [spec.automation_condition for spec in assets_def.specs if spec.automation_condition is not None]
    while found:
        condition = found.pop()
        if isinstance(condition, StaleByProjectRules):
            return condition
        found.extend(condition.children)
    return None


def tag_run_reason(context: dg.AssetExecutionContext) -> None:
    """Tag a run that ``ctxwin run`` did not launch (the UI's asset page or backfill, the
    automation, ``dagster asset materialize``) with the reason ``ctxwin run`` would give it, by
    the same rules, before its first step writes anything; called at the start of every
    per-document step and of the comparison, it works once per run. A run already tagged, or a
    per-document asset without the project's rules (defined outside :func:`with_stale_reruns`),
    is left as it is. The reason is a label: when it cannot be worked out, the run says so in
    its log and goes on."""
    try:
        if REASON_TAG in context.run.tags:
            return
    except dg.DagsterError:  # an asset body called directly (a test) has no run
        return
    run = context.instance.get_run_by_id(context.run_id)  # an earlier step of this run may have tagged it
    rules = _project_rules(context.assets_def)
    partitioned = context.assets_def.partitions_def is not None
    if run is None or REASON_TAG in run.tags or (partitioned and rules is None):
        return
    documents = list(context.partition_keys) if partitioned else []
    try:
        # a job run without its repository (``dg.materialize`` in a test) has no graph to judge by
        graph = context.repository_def.asset_graph
        if rules is not None:
            selected = run.asset_selection or context.job_def.asset_layer.executable_asset_keys
            keys = {k for k in selected if graph.has(k) and graph.get(k).is_partitioned}
            reason = rules.run_reason(context.instance, graph, keys, documents)
        else:  # the comparison: its own reason, as ctxwin run gives it (code, settings, an input since)
            own = StalenessChecker(context.instance, graph).check(list(context.assets_def.keys), None)
            key, why = next(iter(own.reasons.items()), (None, ""))
            reason = short_reason(key.to_user_string(), why) if key is not None else ON_REQUEST
    except Exception as exc:  # noqa: BLE001 - a label must never fail the run
        context.log.warning(f"ctxwin: the run's reason could not be worked out: {type(exc).__name__}: {exc}")
        return
    tags = {REASON_TAG: reason[:200]}
    if len(documents) > 1:  # a backfill's run: its documents, as ctxwin run names those of its own
        tags[DOCUMENTS_TAG] = documents_label(documents)[:200]
    context.instance.add_run_tags(context.run_id, tags)


def with_stale_reruns(assets: list[dg.AssetsDefinition], resources: ProjectResources) -> list[dg.AssetsDefinition]:
    """``assets`` with :func:`stale_rerun_condition` on the per-document ones (not on those run
    on request, which keep their own condition)."""
    condition = stale_rerun_condition(resources["settings"], resources["lancedb"])
    return [
        a.map_asset_specs(lambda spec: spec.replace_attributes(automation_condition=condition))
        if a.partitions_def is not None and not set(k.to_user_string() for k in a.keys) & set(ON_REQUEST_ASSETS)
        else a
        for a in assets
    ]


# ``use_user_code_server`` is marked beta by Dagster (it runs the condition where the code is);
# its warning would be printed by every process that loads the definitions.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.BetaWarning)
    stale_documents_sensor = dg.AutomationConditionSensorDefinition(
        SENSOR_NAME,
        target=dg.AssetSelection.all(),  # the per-document assets carry the condition; the others none
        use_user_code_server=True,
        default_status=dg.DefaultSensorStatus.STOPPED,
        minimum_interval_seconds=60,
        description=f"Reruns, on the hourly tick ({CRON}), each document's stale assets and what lies downstream of them, by the "
        "rules of `ctxwin run`. Off until turned on here.",
    )
