"""The one query for "the latest materialization of an asset (for a partition)".

Staleness (:mod:`ctxwin_dagster.defs.staleness`), the comparison's costs and setup, and the
CLI's plan all ask the instance this same question; it is answered here, through Dagster's
public ``fetch_materializations``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import dagster as dg


def latest_materialization(
    instance: dg.DagsterInstance, key: dg.AssetKey | str, partition: str | None = None
) -> dg.EventLogRecord | None:
    """The latest materialization record of ``key`` (in ``partition``, when given), or None."""
    asset_key = dg.AssetKey(key) if isinstance(key, str) else key
    flt = dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition] if partition is not None else None)
    records = instance.fetch_materializations(flt, limit=1).records
    return records[0] if records else None


def latest_materializations(
    instance: dg.DagsterInstance, key: dg.AssetKey, partitions: Iterable[str], *, batch: int = 500
) -> dict[str, dg.EventLogRecord]:
    """The latest materialization record of each of ``partitions`` of ``key`` that has one, in
    two queries per ``batch`` partitions instead of one per partition: the latest storage ids by
    partition (``DagsterInstance.get_latest_storage_id_by_partition``), then those records."""
    wanted = list(dict.fromkeys(partitions))
    out: dict[str, dg.EventLogRecord] = {}
    for start in range(0, len(wanted), batch):
        ids = instance.get_latest_storage_id_by_partition(
            key, dg.DagsterEventType.ASSET_MATERIALIZATION, set(wanted[start : start + batch])
        )
        if not ids:
            continue
        flt = dg.AssetRecordsFilter(asset_key=key, storage_ids=list(ids.values()))
        for record in instance.fetch_materializations(flt, limit=len(ids)).records:
            partition = record.partition_key
            if partition is not None and ids.get(partition) == record.storage_id:
                out[partition] = record
    return out


def plain_metadata(metadata: Mapping[str, object]) -> dict[str, object]:
    """The plain values of Dagster metadata entries (a ``MetadataValue``'s ``value``; any other
    entry as it is).

    >>> plain_metadata({"n": dg.MetadataValue.int(3), "by_doc": dg.MetadataValue.json({"a": 1}), "raw": "x"})
    {'n': 3, 'by_doc': {'a': 1}, 'raw': 'x'}
    """
    return {k: v.value if isinstance(v, dg.MetadataValue) else v for k, v in metadata.items()}


def metadata_entry(record: dg.EventLogRecord | None, name: str) -> object:
    """The plain value of the metadata entry ``name`` of a materialization record (None when the
    record, or the entry, is missing)."""
    materialization = record.asset_materialization if record is not None else None
    return plain_metadata(materialization.metadata or {}).get(name) if materialization is not None else None


def latest_metadata(
    instance: dg.DagsterInstance, key: dg.AssetKey | str, partition: str | None = None
) -> dict[str, object]:
    """The plain values of that materialization's metadata (empty if there is none)."""
    record = latest_materialization(instance, key, partition)
    materialization = record.asset_materialization if record is not None else None
    if materialization is None:
        return {}
    return plain_metadata(materialization.metadata or {})
