"""The latest materialization of many partitions at once (staleness over a whole corpus)."""

from __future__ import annotations

import dagster as dg

from ctxwin_dagster.defs.materializations import latest_materialization, latest_materializations


def test_the_latest_of_each_partition_in_a_few_queries() -> None:
    instance = dg.DagsterInstance.ephemeral()
    key = dg.AssetKey("chunks")
    for partition, n in (("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)):
        instance.report_runless_asset_event(dg.AssetMaterialization(key, partition=partition, metadata={"n_chunks": n}))
    instance.report_runless_asset_event(dg.AssetMaterialization(dg.AssetKey("other"), partition="a"))
    found = latest_materializations(instance, key, ["a", "b", "d", "a"], batch=1)
    assert set(found) == {"a", "b"}  # d was never materialized; c was not asked for
    assert {p: r.asset_materialization.metadata["n_chunks"].value for p, r in found.items()} == {"a": 3, "b": 5}
    for p in ("a", "b"):  # the same records as the query of one partition
        assert found[p].storage_id == latest_materialization(instance, key, p).storage_id
