"""Sensors: keep one dynamic partition per document file in the documents folder."""


import dagster as dg

from ctxwin_dagster.defs.partitions import documents_partitions
from ctxwin_dagster.defs.resources import ProjectSettings


def partition_changes(settings: ProjectSettings, existing: list[str]) -> tuple[list[str], list[str]]:
    """(to add, to remove) so that the partitions match the files in the documents folder."""
    on_disk = settings.document_ids()
    have = set(existing)
    want = set(on_disk)
    return [d for d in on_disk if d not in have], sorted(have - want)


@dg.sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def documents_sensor(context: dg.SensorEvaluationContext, settings: ProjectSettings) -> dg.SensorResult:
    """Adds a partition for every new document file and removes those whose file is gone."""
    existing = list(context.instance.get_dynamic_partitions(documents_partitions.name))
    added, removed = partition_changes(settings, existing)
    requests = []
    if added:
        requests.append(documents_partitions.build_add_request(added))
    if removed:
        requests.append(documents_partitions.build_delete_request(removed))
    context.update_cursor(f"{len(existing) + len(added) - len(removed)} documents")
    return dg.SensorResult(dynamic_partitions_requests=requests)
