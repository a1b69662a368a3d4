"""The ``ctxwin`` command.

``ctxwin run`` syncs one partition per document file and materializes every asset for every
document in a persistent Dagster home (``$DAGSTER_HOME``, default ``.dagster_home``), so the
runs are visible in the Dagster UI afterwards.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any


def _instance(dagster_home: str | None):
    from dagster import DagsterInstance

    home = Path(dagster_home or os.environ.get("DAGSTER_HOME") or ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    os.environ["DAGSTER_HOME"] = str(home)
    return DagsterInstance.get(), home


def _materialization_metadata(instance: Any, run_id: str) -> dict[str, dict[str, Any]]:
    """asset key -> metadata of its materialization in ``run_id``."""
    from dagster import DagsterEventType

    out: dict[str, dict[str, Any]] = {}
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    for rec in records:
        mat = rec.event_log_entry.asset_materialization
        if mat is None:
            continue
        out[mat.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from ctxwin_dagster.defs.partitions import documents_partitions
    from ctxwin_dagster.defs.resources import ProjectSettings
    from ctxwin_dagster.defs.sensors import partition_changes

    instance, home = _instance(args.dagster_home)
    from ctxwin_dagster.definitions import defs

    settings = ProjectSettings(documents_dir=args.documents) if args.documents else ProjectSettings()
    existing = list(instance.get_dynamic_partitions(documents_partitions.name))
    added, removed = partition_changes(settings, existing)
    if added:
        instance.add_dynamic_partitions(documents_partitions.name, added)
    for key in removed:
        instance.delete_dynamic_partition(documents_partitions.name, key)
    keys = settings.document_ids()
    if args.doc:
        keys = [k for k in keys if k in set(args.doc)]
    print(f"ctxwin: {len(keys)} documents in {settings.documents_path()} (+{len(added)} -{len(removed)} partitions); Dagster home {home}")
    job = defs.resolve_job_def("all_assets_job")
    failed: list[str] = []
    started_all = time.perf_counter()
    totals: dict[str, dict[str, float]] = {}
    for i, key in enumerate(keys, 1):
        started = time.perf_counter()
        result = job.execute_in_process(
            instance=instance,
            partition_key=key,
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": args.log_level}}}},
        )
        took = time.perf_counter() - started
        status = "ok" if result.success else "FAILED"
        print(f"[{i}/{len(keys)}] {key}: {status} in {took:.1f}s", flush=True)
        if not result.success:
            failed.append(key)
            for event in result.all_events:
                if event.is_failure and event.event_specific_data is not None:
                    err = getattr(event.event_specific_data, "error", None)
                    while err is not None and err.cause is not None:
                        err = err.cause  # the user's exception, under Dagster's wrapper
                    if err is not None:
                        print(f"    {err.message.strip()}")
            continue
        for asset, meta in _materialization_metadata(instance, result.run_id).items():
            agg = totals.setdefault(asset, {})
            for field in ("n_chunks", "n_rows", "n_chars", "n_tokens", "input_tokens", "input_chars", "calls", "cache_hits", "cost_usd", "runtime_s"):
                value = meta.get(field)
                if isinstance(value, int | float):
                    agg[field] = agg.get(field, 0) + value
    print(f"\nSummary ({time.perf_counter() - started_all:.1f}s, {len(keys) - len(failed)} ok, {len(failed)} failed):")
    for asset, agg in totals.items():
        shown = ", ".join(f"{k}={v:,.3f}" if isinstance(v, float) and not v.is_integer() else f"{k}={int(v):,}" for k, v in agg.items())
        print(f"  {asset:<22} {shown}")
    if failed:
        print(f"failed documents: {', '.join(failed)} (see the messages above, or the runs in the Dagster UI)")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxwin", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="materialize every asset for every document (the main job)")
    run.add_argument("--documents", help="documents folder (default data/documents)")
    run.add_argument("--doc", action="append", help="only this doc_id (repeatable)")
    run.add_argument("--dagster-home", help="Dagster home (default $DAGSTER_HOME or .dagster_home)")
    run.add_argument("--log-level", default="WARNING", help="Dagster console log level (default WARNING)")
    run.set_defaults(func=cmd_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
