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
    job = defs.resolve_job_def(args.job)
    run_config: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": args.log_level}}}}
    if args.model:
        chat = {"model": args.model}
        if args.base_url:
            chat["base_url"] = args.base_url
        run_config.setdefault("resources", {})["contextualizer"] = {"config": chat}
    if args.documents:
        run_config.setdefault("resources", {})["settings"] = {"config": {"documents_dir": args.documents}}
    print(f"contextualizer: {args.model + ' @ ' + (args.base_url or 'OpenAI') if args.model else 'extractive engine (no chat model; offline)'}")
    failed: list[str] = []
    started_all = time.perf_counter()
    totals: dict[str, dict[str, float]] = {}
    for i, key in enumerate(keys, 1):
        started = time.perf_counter()
        result = job.execute_in_process(
            instance=instance,
            partition_key=key,
            raise_on_error=False,
            run_config=run_config,
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


def cmd_plan(args: argparse.Namespace) -> int:
    import json

    from ctxwin_dagster.core.documents import DocumentError, list_documents, read_document
    from ctxwin_dagster.models.planning import plan_document

    paths: list[Path] = []
    for item in args.paths or ["data/documents"]:
        p = Path(item)
        paths.extend(list_documents(p) if p.is_dir() else [p])
    plans, failed = [], []
    for path in paths:
        try:
            doc = read_document(path)
        except (DocumentError, FileNotFoundError) as exc:
            print(f"skipped {path}: {exc}", file=sys.stderr)
            failed.append(str(path))
            continue
        plans.append(
            plan_document(
                doc.text,
                doc_id=doc.doc_id,
                model=args.model,
                chunk_size=args.chunk_size,
                chunk_overlap=args.chunk_overlap,
                batch_size=args.batch_size,
                window_chars=args.window_chars,
                summary_max_tokens=args.summary_tokens,
                context_tokens=args.context_tokens,
            )
        )
    if args.json:
        print(json.dumps(plans, indent=2))
        return 1 if failed else 0
    print(f"Plan for {len(plans)} documents with contextualizer {args.model} (no model is called; outputs and cost are estimates)")
    header = f"{'document':<40} {'variant':<8} {'calls':>7} {'input tokens':>14} {'input chars':>14} {'out tokens':>11} {'cost USD':>10}  note"
    print(header)
    print("-" * len(header))
    totals: dict[str, dict[str, float]] = {}
    for plan in plans:
        for variant in ("t_rag", "cc_rag", "swb_rag"):
            v = plan[variant]
            cost = "n/a" if v["cost_usd_est"] is None else f"{v['cost_usd_est']:.4f}"
            note = "" if v["fits"] else "does not fit the model"
            print(f"{plan['doc_id'][:40]:<40} {variant:<8} {v['calls']:>7,} {v['input_tokens']:>14,} {v['input_chars']:>14,} {v['output_tokens_est']:>11,} {cost:>10}  {note}")
            agg = totals.setdefault(variant, {"calls": 0, "input_tokens": 0, "input_chars": 0, "cost": 0.0})
            agg["calls"] += v["calls"]
            agg["input_tokens"] += v["input_tokens"]
            agg["input_chars"] += v["input_chars"]
            agg["cost"] += v["cost_usd_est"] or 0.0
    if len(plans) > 1:
        for variant, agg in totals.items():
            print(f"{'TOTAL':<40} {variant:<8} {int(agg['calls']):>7,} {int(agg['input_tokens']):>14,} {int(agg['input_chars']):>14,} {'':>11} {agg['cost']:>10.4f}")
    cc = totals.get("cc_rag", {}).get("input_chars", 0)
    if cc:
        print(f"SWB-RAG input is {100 * totals['swb_rag']['input_chars'] / cc:.2f} % of CC-RAG's")
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxwin", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="materialize every asset for every document (the main job)")
    run.add_argument("--documents", help="documents folder (default data/documents)")
    run.add_argument("--doc", action="append", help="only this doc_id (repeatable)")
    run.add_argument("--dagster-home", help="Dagster home (default $DAGSTER_HOME or .dagster_home)")
    run.add_argument("--log-level", default="WARNING", help="Dagster console log level (default WARNING)")
    run.add_argument("--job", default="all_assets_job", choices=["all_assets_job", "t_rag_job", "cc_rag_job", "swb_rag_job"])
    run.add_argument("--model", help="contextualizer/summarizer chat model (default: none, the extractive engine)")
    run.add_argument("--base-url", help="OpenAI-compatible server for --model (default OpenAI; key from OPENAI_API_KEY)")
    run.set_defaults(func=cmd_run)

    plan = sub.add_parser("plan", help="calls, tokens, characters and cost per variant, without calling a model")
    plan.add_argument("paths", nargs="*", help="document files or folders (default data/documents)")
    plan.add_argument("--model", default="gemini-1.5-flash", help="contextualizer model (limits and prices; default gemini-1.5-flash, as in the paper)")
    plan.add_argument("--chunk-size", type=int, default=1000)
    plan.add_argument("--chunk-overlap", type=int, default=100)
    plan.add_argument("--batch-size", type=int, default=5, help="SWB-RAG chunks per batch")
    plan.add_argument("--window-chars", type=int, default=20_000, help="SWB-RAG characters before and after a batch")
    plan.add_argument("--summary-tokens", type=int, default=4000, help="global summary budget (tokens)")
    plan.add_argument("--context-tokens", type=int, default=100, help="estimated tokens of one chunk context")
    plan.add_argument("--json", action="store_true", help="print the plans as JSON")
    plan.set_defaults(func=cmd_plan)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
