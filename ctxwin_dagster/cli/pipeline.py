"""``ctxwin run``, ``ctxwin evaluate`` and ``ctxwin compare``: the asset graph run per document in a
persistent Dagster home, experiments, and two experiments side by side."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

def _chat_config(model: str | None, base_url: str | None) -> dict[str, Any]:
    chat: dict[str, Any] = {"model": model}
    if base_url:
        chat["base_url"] = base_url
    return {"config": chat}


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
    """Load the questions once before any run (a bad QA file stops here, naming the line), check
    every reference span against its document's text (one outside it stops here too, naming
    the file and line), and print the questions whose document name matches no document, or
    several."""
    from ctxwin_dagster.core.documents import read_document
    from ctxwin_dagster.core.qa.items import QAFormatError, load_qa_folder
    from ctxwin_dagster.core.qa.resolve import check_reference_spans, resolve_questions

    def read_text(doc_id: str) -> str:
        path = folder.path_of(doc_id)
        if path is None:
            raise FileNotFoundError(doc_id)
        return read_document(path, doc_id=doc_id).text

    try:
        resolved = resolve_questions(load_qa_folder(qa_dir), folder)
        check_reference_spans(resolved, read_text)
    except QAFormatError as exc:
        raise SystemExit(f"ctxwin: {exc}") from None
    n = sum(len(v) for v in resolved.by_doc.values())
    print(f"questions: {n} for {len(resolved.by_doc)} of {len(folder.files)} documents")
    for line in resolved.report_lines():
        print(line)


def cmd_run(args: argparse.Namespace) -> int:
    resources: dict[str, Any] = {}
    if args.model:
        resources["contextualizer"] = _chat_config(args.model, args.base_url)
    if args.documents:
        resources["settings"] = {"config": {"documents_dir": args.documents}}
    if not args.model:
        where = "extractive engine (no chat model; offline)"
    elif args.model.startswith("local:"):
        where = f"{args.model} (in process, offline)"
    else:
        where = f"{args.model} @ {args.base_url or 'OpenAI'}"
    print(f"contextualizer: {where}")
    return run_pipeline(
        documents=args.documents,
        dagster_home=args.dagster_home,
        job_name=args.job,
        log_level=args.log_level,
        resources=resources,
        doc_filter=args.doc,
        workers=args.workers,
        force=args.force,
        workspace=args.workspace,
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
    workers: int | None = None,
    force: bool = False,
    workspace: str | None = None,
) -> int:
    """Sync the document partitions, then launch a run of ``job_name`` for every document whose
    assets are stale (all with ``force``) and the comparison, on the Dagster instance; follow
    them and print a summary."""
    from dagster import DagsterInstance

    from ctxwin_dagster.defs.partitions import documents_partitions
    from ctxwin_dagster.defs.resources import EvaluationSettings, LanceDBResource, ProjectSettings
    from ctxwin_dagster.defs.sensors import partition_changes, remove_from_indexes, remove_results

    from .launch import prepare_home
    from .runs import RunPlanner

    home = prepare_home(dagster_home)
    instance = DagsterInstance.get()
    from ctxwin_dagster.definitions import defs

    # 1. The document list, resolved before anything is launched.
    resources = dict(resources or {})
    settings = ProjectSettings(**resources.get("settings", {}).get("config", {}))
    folder = document_listing(settings, quiet=not print_listing)
    settings.remember_ids(folder)
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

    # 2. Launch what is stale, follow the runs, summarize.
    run_config: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": log_level}}}}
    if resources:
        run_config["resources"] = resources
    planner = RunPlanner(
        instance, defs, home=home, settings=settings, run_config=run_config, workers=workers or os.cpu_count() or 1,
        workspace=Path(workspace).resolve() if workspace else None,
    )
    return planner.run(job_name, keys, force=force)


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

    # The experiment's own settings (its doc_ids_file too), so the listing shows the ids the run uses.
    question_listing(qa, document_listing(ProjectSettings(**resources["settings"]["config"])))
    return run_pipeline(
        documents=documents,
        dagster_home=args.dagster_home or str(work / "dagster_home"),
        log_level=args.log_level,
        resources=resources,
        print_listing=False,
        workers=args.workers,
        force=args.force,
        workspace=args.workspace,
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
