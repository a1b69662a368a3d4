"""The one query for "the latest materialization of an asset (for a partition)".

Staleness (:mod:`ctxwin_dagster.defs.staleness`), the comparison's costs and setup, and the
CLI's plan all ask the instance this same question; it is answered here, through Dagster's
public ``fetch_materializations``.
"""

from __future__ import annotations

from typing import Any

import dagster as dg


def latest_materialization(
    instance: dg.DagsterInstance, key: dg.AssetKey | str, partition: str | None = None
) -> dg.EventLogRecord | None:
    """The latest materialization record of ``key`` (in ``partition``, when given), or None."""
    asset_key = dg.AssetKey(key) if isinstance(key, str) else key
    flt = dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition] if partition is not None else None)
    records = instance.fetch_materializations(flt, limit=1).records
    return records[0] if records else None


def latest_metadata(
    instance: dg.DagsterInstance, key: dg.AssetKey | str, partition: str | None = None
) -> dict[str, Any]:
    """The plain values of that materialization's metadata (empty if there is none)."""
    record = latest_materialization(instance, key, partition)
    materialization = record.asset_materialization if record is not None else None
    if materialization is None:
        return {}
    return {k: getattr(v, "value", v) for k, v in (materialization.metadata or {}).items()}
