"""``ctxwin run``, ``ctxwin evaluate`` and ``ctxwin compare``: the asset graph run per document in a
persistent Dagster home, experiments, and two experiments side by side."""

from __future__ import annotations

import argparse
import os
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


def document_listing(settings: Any, *, quiet: bool = False):
    """Scan the documents folder; print the ids that differ from the file names and the files
    not taken; stop with the reason when the folder holds no usable document."""
    from ctxwin_dagster.core.documents import DocumentError

    try:
        folder = settings.document_folder()
        for line in [] if quiet else folder.report_lines():
            print(line)
        folder.require_documents()
    except DocumentError as exc:
        raise SystemExit(f"ctxwin: {exc}") from None
    return folder


def question_listing(qa_dir: str, folder: Any) -> None:
    """Load the questions once before any run (a bad QA file stops here, naming the line) and
    print the questions whose document name matches no document, or several."""
    from ctxwin_dagster.core.qa.items import QAFormatError, load_qa_folder
    from ctxwin_dagster.core.qa.resolve import resolve_questions

    try:
        resolved = resolve_questions(load_qa_folder(qa_dir), folder)
    except QAFormatError as exc:
        raise SystemExit(f"ctxwin: {exc}") from None
    n = sum(len(v) for v in resolved.by_doc.values())
    print(f"questions: {n} for {len(resolved.by_doc)} of {len(folder.files)} documents")
    for line in resolved.report_lines():
        print(line)


def cmd_run(args: argparse.Namespace) -> int:
    resources: dict[str, Any] = {}
    if args.model:
        chat = {"model": args.model}
        if args.base_url:
            chat["base_url"] = args.base_url
        resources["contextualizer"] = {"config": chat}
    if args.documents:
        resources["settings"] = {"config": {"documents_dir": args.documents}}
    print(f"contextualizer: {args.model + ' @ ' + (args.base_url or 'OpenAI') if args.model else 'extractive engine (no chat model; offline)'}")
    return run_pipeline(
        documents=args.documents,
        dagster_home=args.dagster_home,
        job_name=args.job,
        log_level=args.log_level,
        resources=resources,
        doc_filter=args.doc,
    )


def run_pipeline(
    *,
    documents: str | None,
    dagster_home: str | None,
    job_name: str = "all_assets_job",
    log_level: str = "WARNING",
    resources: dict[str, Any] | None = None,
    doc_filter: list[str] | None = None,
    print_listing: bool = True,
) -> int:
    """Sync the document partitions, run ``job_name`` for each, then the comparison; print a summary."""
    from ctxwin_dagster.defs.partitions import documents_partitions
    from ctxwin_dagster.defs.resources import EvaluationSettings, LanceDBResource, ProjectSettings
    from ctxwin_dagster.defs.sensors import partition_changes, remove_from_indexes, remove_results

    instance, home = _instance(dagster_home)
    from ctxwin_dagster.definitions import defs

    resources = dict(resources or {})
    settings = ProjectSettings(**resources.get("settings", {}).get("config", {}))
    folder = document_listing(settings, quiet=not print_listing)
    existing = list(instance.get_dynamic_partitions(documents_partitions.name))
    added, removed = partition_changes(settings, existing, folder)
    if added:
        instance.add_dynamic_partitions(documents_partitions.name, added)
    if removed:
        remove_from_indexes(LanceDBResource(**resources.get("lancedb", {}).get("config", {})), removed)
        remove_results(EvaluationSettings(**resources.get("evaluation", {}).get("config", {})), removed)
    for key in removed:
        instance.delete_dynamic_partition(documents_partitions.name, key)
    keys = folder.ids()
    if doc_filter:
        wanted = {folder.resolve(ref) or ref for ref in doc_filter}
        keys = [k for k in keys if k in wanted]
    print(f"ctxwin: {len(keys)} documents in {settings.documents_path()} (+{len(added)} -{len(removed)} partitions); Dagster home {home}")
    job = defs.resolve_job_def(job_name)
    run_config: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": log_level}}}}
    if resources:
        run_config["resources"] = resources
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
            for field in ("n_chunks", "n_rows", "n_chars", "n_tokens", "input_tokens", "input_chars", "calls", "cache_hits", "cost_usd", "paid_usd", "runtime_s"):
                value = meta.get(field)
                if isinstance(value, int | float):
                    agg[field] = agg.get(field, 0) + value
    if job_name == "all_assets_job" and len(keys) > len(failed):
        comparison_config = {"loggers": run_config["loggers"]}
        # The resources the comparison reads (its report names the engines and models).
        used = {k: v for k, v in run_config.get("resources", {}).items() if k in ("evaluation", "contextualizer", "answerer", "embeddings")}
        if used:
            comparison_config["resources"] = used
        comparison = defs.resolve_job_def("comparison_job").execute_in_process(
            instance=instance, raise_on_error=False, run_config=comparison_config
        )
        print(f"experiment_comparison: {'ok' if comparison.success else 'FAILED'}")
        if not comparison.success:
            failed.append("experiment_comparison")
    print(f"\nSummary ({time.perf_counter() - started_all:.1f}s, {len(keys) - len(failed)} ok, {len(failed)} failed):")
    for asset, agg in totals.items():
        shown = ", ".join(f"{k}={v:,.3f}" if isinstance(v, float) and not v.is_integer() else f"{k}={int(v):,}" for k, v in agg.items())
        print(f"  {asset:<22} {shown}")
    if failed:
        print(f"failed documents: {', '.join(failed)} (see the messages above, or the runs in the Dagster UI)")
    return 1 if failed else 0


EXPERIMENT_SECTIONS = ("settings", "pipeline", "contextualizer", "answerer", "embeddings", "evaluation", "lancedb")


def load_experiment(ref: str) -> dict[str, Any]:
    """An experiment definition from a JSON file, or by name from ``evaluations/experiments/``."""
    import json

    path = Path(ref)
    if not path.suffix:
        path = Path("evaluations/experiments") / f"{ref}.json"
    if not path.is_file():
        raise SystemExit(f"ctxwin: no experiment file {path}; write one (see evaluations/experiments/README.md) or pass --documents and --qa")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SystemExit(f"ctxwin: {path} is not valid JSON ({exc}); fix the file") from None
    unknown = set(data) - {"name", "description", "documents_dir", "qa_dir", "prepare", *EXPERIMENT_SECTIONS}
    if unknown:
        raise SystemExit(f"ctxwin: {path} has unknown keys {sorted(unknown)}; allowed: name, description, documents_dir, qa_dir, prepare, {', '.join(EXPERIMENT_SECTIONS)}")
    data.setdefault("name", path.stem)
    return data


def cmd_evaluate(args: argparse.Namespace) -> int:
    if args.experiment_file:
        exp = load_experiment(args.experiment_file)
    elif args.documents and args.qa and args.name:
        exp = {"name": args.name}
    else:
        raise SystemExit("ctxwin evaluate: give an experiment (file or name), or --documents, --qa and --name")
    name = exp["name"]
    documents = args.documents or exp.get("documents_dir")
    qa = args.qa or exp.get("qa_dir")
    if not documents or not qa:
        raise SystemExit(f"ctxwin evaluate: experiment {name!r} needs documents_dir and qa_dir (or --documents and --qa)")
    work = Path("data/experiments") / name
    resources: dict[str, Any] = {section: {"config": dict(exp.get(section) or {})} for section in EXPERIMENT_SECTIONS}
    resources["settings"]["config"].update(documents_dir=documents, qa_dir=qa)
    resources["lancedb"]["config"].setdefault("uri", str(work / "lancedb"))
    resources["evaluation"]["config"]["experiment"] = name
    resources = {k: v for k, v in resources.items() if v["config"]}
    print(f"experiment {name}: documents {documents}, questions {qa}")
    from ctxwin_dagster.defs.resources import ProjectSettings

    question_listing(qa, document_listing(ProjectSettings(documents_dir=documents, qa_dir=qa)))
    return run_pipeline(
        documents=documents,
        dagster_home=args.dagster_home or str(work / "dagster_home"),
        log_level=args.log_level,
        resources=resources,
        print_listing=False,
    )


def cmd_compare(args: argparse.Namespace) -> int:
    import json

    reports = Path(args.reports_dir)
    payloads = []
    for name in (args.a, args.b):
        path = reports / name / "comparison.json"
        if not path.is_file():
            raise SystemExit(f"ctxwin compare: {path} is missing; run `ctxwin evaluate {name}` first")
        payloads.append(json.loads(path.read_text(encoding="utf-8")))
    means = [{(q["variant"], q["metric"]): q["mean"] for q in p["quality"]} for p in payloads]
    keys = sorted(set(means[0]) & set(means[1]))
    lines = [f"# {args.a} vs {args.b}", "", f"| variant | metric | {args.a} | {args.b} | Δ |", "| --- | --- | --- | --- | --- |"]
    for variant, metric in keys:
        a, b = means[0][(variant, metric)], means[1][(variant, metric)]
        delta = "—" if a is None or b is None else f"{b - a:+.3f}"
        fa = "—" if a is None else f"{a:.3f}"
        fb = "—" if b is None else f"{b:.3f}"
        lines.append(f"| {variant} | {metric} | {fa} | {fb} | {delta} |")
    eff = [{e["variant"]: e for e in p["efficiency"]} for p in payloads]
    lines += ["", f"| variant | index input chars ({args.a}) | ({args.b}) | context chars/question ({args.a}) | ({args.b}) |", "| --- | --- | --- | --- | --- |"]
    for variant in sorted(set(eff[0]) & set(eff[1])):
        e0, e1 = eff[0][variant], eff[1][variant]
        lines.append(
            f"| {variant} | {e0.get('index_input_chars') or 0:,.0f} | {e1.get('index_input_chars') or 0:,.0f} | "
            f"{e0.get('context_chars_per_question') or 0:,.0f} | {e1.get('context_chars_per_question') or 0:,.0f} |"
        )
    text = "\n".join(lines) + "\n"
    out = reports / f"{args.a}_vs_{args.b}.md"
    out.write_text(text, encoding="utf-8")
    print(text)
    print(f"written to {out}")
    return 0
