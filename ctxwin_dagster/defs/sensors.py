"""Sensors: keep one dynamic partition per document file in the documents folder."""


import dagster as dg

from ctxwin_dagster.defs.partitions import documents_partitions
from ctxwin_dagster.defs.resources import LanceDBResource, ProjectSettings
from ctxwin_dagster.models.vectorstore import VARIANTS


def partition_changes(settings: ProjectSettings, existing: list[str]) -> tuple[list[str], list[str]]:
    """(to add, to remove) so that the partitions match the files in the documents folder."""
    on_disk = settings.document_ids()
    have = set(existing)
    want = set(on_disk)
    return [d for d in on_disk if d not in have], sorted(have - want)


def remove_from_indexes(lancedb: LanceDBResource, doc_ids: list[str]) -> int:
    """Delete the rows of ``doc_ids`` from every variant's table; returns how many."""
    index = lancedb.index()
    return sum(index.delete_document(variant, doc_id) for variant in VARIANTS for doc_id in doc_ids)


@dg.sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def documents_sensor(
    context: dg.SensorEvaluationContext, settings: ProjectSettings, lancedb: LanceDBResource
) -> dg.SensorResult:
    """Adds a partition for every new document file; removes the partitions (and index rows)
    of documents whose file is gone."""
    existing = list(context.instance.get_dynamic_partitions(documents_partitions.name))
    added, removed = partition_changes(settings, existing)
    if removed:
        deleted = remove_from_indexes(lancedb, removed)
        context.log.info(f"removed documents {removed}: deleted {deleted} index rows")
    requests = []
    if added:
        requests.append(documents_partitions.build_add_request(added))
    if removed:
        requests.append(documents_partitions.build_delete_request(removed))
    context.update_cursor(f"{len(existing) + len(added) - len(removed)} documents")
    return dg.SensorResult(dynamic_partitions_requests=requests)
