"""``ctxwin run`` and ``ctxwin evaluate``: the asset graph run per document in a persistent Dagster
home, and experiments (``ctxwin compare``, in :mod:`.compare`, sets two of them side by side)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from ctxwin_dagster.cli.options import Subcommands
from ctxwin_dagster.cli.options import variant as variant_name

if TYPE_CHECKING:
    from ctxwin_dagster.core.experiment import Experiment
    from ctxwin_dagster.core.json_types import JSONObject
    from ctxwin_dagster.core.text.folder import DocumentFolder
    from ctxwin_dagster.defs.resources import ProjectSettings


def document_listing(settings: ProjectSettings, *, quiet: bool = False) -> DocumentFolder:
    """Scan the documents folder; print the ids that differ from the file names and the files
    not taken; stop with the reason when the folder holds no usable document."""
    from ctxwin_dagster.core.text.documents import DocumentError

    try:
        folder = settings.document_folder()
        for line in [] if quiet else folder.report_lines():
            print(line)
        folder.require_documents()
    except DocumentError as exc:
        raise SystemExit(f"ctxwin: {exc}") from None
    return folder


def question_listing(qa_dir: str, folder: DocumentFolder) -> None:
    """Load the questions once before any run (a bad QA file stops here, naming the line), check
    every reference span against its document's text (one outside it stops here too, naming
    the file and line), and print the questions whose document name matches no document, or
    several."""
    from ctxwin_dagster.core.evaluation.qa.items import QAFormatError, load_qa_folder
    from ctxwin_dagster.core.evaluation.qa.resolve import check_reference_spans, resolve_questions
    from ctxwin_dagster.core.text.documents import read_document

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


def check_questions(exp: Experiment, home: Path, *, quiet: bool = False) -> None:
    """The documents and questions of ``exp`` checked before anything is written (the home
    included): a bad QA line or a reference span outside its document stops the command here,
    naming the QA file, the line, the question and the fix, as the ``qa_sets`` asset would stop
    its run. ``quiet``: the document listing is left to the run."""
    from ctxwin_dagster.definitions import default_resources

    settings = default_resources(exp.resolved(Path.cwd()), home)["settings"]
    question_listing(settings.qa_dir, document_listing(settings, quiet=quiet))


def _experiment_for_run(args: argparse.Namespace) -> tuple[Experiment, Path]:
    """(experiment, Dagster home) of ``ctxwin run``: the home's own experiment, or with
    ``--documents`` the experiment of that folder (its own home and index, named after it)."""
    from ctxwin_dagster.core.experiment import (
        DEFAULT_QA_DIR,
        Experiment,
        default_home,
        experiment_name_for,
        home_experiment,
    )

    if args.experiment:
        exp = _load_named_experiment(args.experiment)
        if args.documents:
            exp = _replace_folder(exp, documents_dir=args.documents)
    elif args.documents:
        name = args.name or experiment_name_for(args.documents)
        # Another folder is another experiment, with its own index (data/experiments/<name>/lancedb).
        exp = Experiment.from_dict({"name": name, "documents_dir": args.documents, "qa_dir": args.qa or DEFAULT_QA_DIR})
        if args.dagster_home and (Path(args.dagster_home) / "ctxwin_experiment.json").is_file():
            held = home_experiment(args.dagster_home)
            if Path(held.documents_dir) == Path(args.documents).resolve() and not args.name:
                exp = held  # the folder this home already runs
    else:
        home = Path(args.dagster_home) if args.dagster_home else default_home("sample")
        return _with_models(home_experiment(home), args), home
    home = Path(args.dagster_home) if args.dagster_home else default_home(exp.name)
    return _with_models(exp, args), home


def _with_models(exp: Experiment, args: argparse.Namespace) -> Experiment:
    if args.model is None:
        return exp
    return exp.with_changes("contextualizer", model=args.model, base_url=args.base_url or "")


def _replace_folder(exp: Experiment, *, documents_dir: str = "", qa_dir: str = "") -> Experiment:
    """``exp`` with the folders given (an empty one: the experiment's own)."""
    from dataclasses import replace

    return replace(exp, documents_dir=documents_dir or exp.documents_dir, qa_dir=qa_dir or exp.qa_dir)


def _load_named_experiment(ref: str) -> Experiment:
    from ctxwin_dagster.core.experiment import load_experiment_file

    path = Path(ref)
    if not path.suffix:
        path = Path("evaluations/experiments") / f"{ref}.json"
    try:
        return load_experiment_file(path)
    except ValueError as exc:
        raise SystemExit(f"ctxwin: {exc}; or pass --documents and --qa") from None


def _describe_model(exp: Experiment) -> str:
    chat = dict(exp.sections.get("contextualizer") or {})
    model = (chat.get("model") or "").strip()
    if not model:
        return "extractive engine (no chat model; offline)"
    if model.startswith("local:"):
        return f"{model} (in process, offline)"
    return f"{model} @ {chat.get('base_url') or 'OpenAI'}"


def _rebuild_variants(args: argparse.Namespace) -> list[str]:
    """The variants of ``--rebuild-index`` (t, cc, swb or their table names), each once."""
    from ctxwin_dagster.core.defaults import normalize_variant

    given = args.rebuild_index or []
    if given and args.doc:
        raise SystemExit("ctxwin: --rebuild-index builds the index of every document again; leave out --doc")
    try:
        return list(dict.fromkeys(normalize_variant(v) for v in given))
    except ValueError as exc:
        raise SystemExit(f"ctxwin: --rebuild-index: {exc}") from None


def cmd_run(args: argparse.Namespace) -> int:
    rebuild = _rebuild_variants(args)
    exp, home = _experiment_for_run(args)
    print(f"contextualizer: {_describe_model(exp)}")
    if args.documents and args.qa:
        check_questions(exp, home, quiet=True)  # as `ctxwin evaluate` does; the run lists the documents
    return run_pipeline(
        exp, home, job_name=args.job, doc_filter=args.doc, rebuild_index=rebuild, **_launch_options(args)
    )


def run_pipeline(
    experiment: Experiment,
    home: str | Path,
    *,
    job_name: str = "all_assets_job",
    log_level: str = "WARNING",
    doc_filter: list[str] | None = None,
    print_listing: bool = True,
    workers: int | None = None,
    batch_size: int | None = None,
    storage: str | None = None,
    force: bool = False,
    workspace: str | None = None,
    rebuild_index: list[str] | None = None,
) -> int:
    """Bind ``experiment`` to the Dagster home ``home`` (the code location loads it from there),
    add a partition for every new document, then launch a run of ``job_name`` for every
    document whose assets or index rows are stale (all with ``force``) and the comparison, on
    the Dagster instance; follow them and print a summary. One command per home at a time.

    ``rebuild_index`` (variants) first moves those tables into the home's ``ctxwin_trash/``, so
    every document's index of them is built again. A damaged table of the job stops the command
    before any run, naming the table and that fix."""
    from dagster import DagsterInstance

    from ctxwin_dagster.core.experiment import ExperimentConflict
    from ctxwin_dagster.definitions import home_definitions
    from ctxwin_dagster.defs.sensors import sync_partitions
    from ctxwin_dagster.runner.code_server import remove_orphaned_folders
    from ctxwin_dagster.runner.home_setup import prepare_home
    from ctxwin_dagster.runner.homes import HomeLock, bind_experiment, fail_orphaned_runs
    from ctxwin_dagster.runner.runs import RunPlanner

    home = prepare_home(str(home), storage)
    with HomeLock(home, out=sys.stdout):
        try:
            experiment = bind_experiment(home, experiment)
        except ExperimentConflict as exc:
            raise SystemExit(f"ctxwin: {exc}") from None
        instance = DagsterInstance.get()
        orphans = fail_orphaned_runs(instance, say=lambda line: print(line, flush=True))
        remove_orphaned_folders()  # the code server sockets of killed commands
        if orphans:
            print(
                f"ended {len(orphans)} run(s) that a killed ctxwin command left unfinished: {', '.join(o[:8] for o in orphans)}"
            )
        defs = home_definitions(home)
        settings: ProjectSettings = (defs.resources or {})["settings"]

        # 1. The document list, resolved before anything is launched.
        folder = document_listing(settings, quiet=not print_listing)
        added, gone = sync_partitions(instance, settings, folder)
        keys = folder.ids()
        if doc_filter:
            wanted = {folder.resolve(ref) or ref for ref in doc_filter}
            keys = [k for k in keys if k in wanted]
        print(f"ctxwin: {experiment.describe()}; Dagster home {home}")
        print(f"ctxwin: {len(keys)} documents (+{len(added)} partitions)")
        if gone:
            print(
                f"ctxwin: {len(gone)} document(s) have no file any more ({', '.join(gone[:5])}{' …' if len(gone) > 5 else ''}): "
                "left out of retrieval and the comparison, nothing deleted; `ctxwin prune` deletes their rows and results (undoable)"
            )

        # 2. Launch what is stale, follow the runs, summarize.
        run_config: JSONObject = {"loggers": {"console": {"config": {"log_level": log_level}}}}
        planner = RunPlanner(
            instance,
            defs,
            home=home,
            settings=settings,
            run_config=run_config,
            workers=workers or os.cpu_count() or 1,
            workspace=Path(workspace).resolve() if workspace else None,
            batch_size=batch_size,
        )
        if rebuild_index:
            planner.rebuild_indexes(job_name, rebuild_index)
        return planner.run(job_name, keys, force=force)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ctxwin_dagster.core.experiment import Experiment, default_home

    if args.experiment_file:
        exp = _load_named_experiment(args.experiment_file)
    elif args.documents and args.qa and args.name:
        try:
            exp = Experiment.from_dict({"name": args.name, "documents_dir": args.documents, "qa_dir": args.qa})
        except ValueError as exc:
            raise SystemExit(f"ctxwin evaluate: {exc}") from None
    else:
        raise SystemExit("ctxwin evaluate: give an experiment (file or name), or --documents, --qa and --name")
    exp = _replace_folder(exp, documents_dir=args.documents or "", qa_dir=args.qa or "")
    if exp.name == "sample" and not args.experiment_file:
        raise SystemExit("ctxwin evaluate: 'sample' is the default experiment's name; choose another --name")
    print(f"experiment {exp.name}: documents {exp.documents_dir}, questions {exp.qa_dir}")
    home = Path(args.dagster_home) if args.dagster_home else default_home(exp.name)
    check_questions(exp, home)
    return run_pipeline(exp, home, print_listing=False, **_launch_options(args))


class _LaunchOptions(TypedDict):
    """The options of :func:`_add_launch_arguments` and ``--log-level``, as :func:`run_pipeline` takes them."""

    log_level: str
    workers: int | None
    batch_size: int | None
    storage: str | None
    force: bool
    workspace: str | None


def _launch_options(args: argparse.Namespace) -> _LaunchOptions:
    """The launch options given to ``ctxwin run`` or ``ctxwin evaluate``."""
    return {
        "log_level": args.log_level,
        "workers": args.workers,
        "batch_size": args.batch_size,
        "storage": args.storage,
        "force": args.force,
        "workspace": args.workspace,
    }


def _add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="runs in flight at once (in the instance's queue; default: the machine's cores)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="documents per run: each run is a process that starts Dagster and the models once for its documents "
        "(default: at most 20, each run about 1/(2 x workers) of the bytes to run, so a long document runs alone "
        "and the largest runs start first; 1: a run per document)",
    )
    parser.add_argument(
        "--storage",
        help="keep a new home's runs and event log in PostgreSQL instead of SQLite files: postgresql://user@host:5432/db, "
        "or env:VAR for a URL with its password (postgresql+psycopg2://user:password@host:5432/db) kept in the "
        "environment variable VAR",
    )
    parser.add_argument("--force", action="store_true", help="run every document again, even when nothing changed")
    parser.add_argument(
        "--workspace",
        help="the workspace.yaml whose code location the runs belong to (default ./workspace.yaml; see deploy/)",
    )


def register(sub: Subcommands) -> None:
    """Add ``run`` and ``evaluate`` to the ``ctxwin`` command's subcommands (``sub``)."""
    run = sub.add_parser("run", help="materialize every asset for every document (the main job)")
    run.add_argument(
        "--documents",
        help="documents folder (default: the home's experiment, the sample's data/documents); another folder is "
        "another experiment, with its own Dagster home and index in data/experiments/<name>/",
    )
    run.add_argument("--name", help="experiment name for --documents (default: from the folder's name)")
    run.add_argument("--qa", help="QA folder for --documents (default data/qa)")
    run.add_argument("--experiment", help="experiment JSON file, or a name in evaluations/experiments/")
    run.add_argument("--doc", action="append", help="only this doc_id (repeatable)")
    run.add_argument(
        "--dagster-home",
        help="Dagster home (default: the experiment's; the sample's is $DAGSTER_HOME or .dagster_home)",
    )
    run.add_argument("--log-level", default="WARNING", help="Dagster console log level (default WARNING)")
    run.add_argument(
        "--job",
        default="all_assets_job",
        choices=["all_assets_job", "t_rag_job", "cc_rag_job", "swb_rag_job"],
        help="the job to run: every asset, or one variant's assets only",
    )
    run.add_argument(
        "--rebuild-index",
        action="append",
        metavar="VARIANT",
        type=variant_name,
        help="move the VARIANT table (t, cc or swb; e.g. a damaged one) into the home's ctxwin_trash/ and build that "
        "index of every document again (repeatable)",
    )
    run.add_argument("--model", help="contextualizer/summarizer chat model (default: none, the extractive engine)")
    run.add_argument(
        "--base-url", help="OpenAI-compatible server for --model (default OpenAI; key from OPENAI_API_KEY)"
    )
    _add_launch_arguments(run)
    run.set_defaults(func=cmd_run)

    ev = sub.add_parser(
        "evaluate", help="run an experiment: index, answer and score every document, then the comparison report"
    )
    ev.add_argument("experiment_file", nargs="?", help="experiment JSON file, or a name in evaluations/experiments/")
    ev.add_argument("--documents", help="documents folder (overrides the experiment's)")
    ev.add_argument("--qa", help="QA folder of JSONL files (overrides the experiment's)")
    ev.add_argument("--name", help="experiment name when no experiment file is given")
    ev.add_argument(
        "--dagster-home",
        help="the experiment's Dagster home (default data/experiments/<name>/dagster_home; `ctxwin dev <name>` opens its UI)",
    )
    ev.add_argument("--log-level", default="WARNING", help="Dagster console log level")
    _add_launch_arguments(ev)
    ev.set_defaults(func=cmd_evaluate)
