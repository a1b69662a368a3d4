"""The ``ctxwin`` command.

``ctxwin run`` adds one partition per new document file and submits one run per document whose
assets are out of date to the Dagster instance of the experiment's home (the sample's:
``$DAGSTER_HOME`` or ``.dagster_home``; another folder's: ``data/experiments/<name>/dagster_home``),
as the code location of ``workspace.yaml``, so the runs are the UI's own (``ctxwin dev`` opens it).
"""

from __future__ import annotations

import argparse

# One module per group of subcommands.
from ctxwin_dagster.cli.ask import add_ask_arguments, run_cli
from ctxwin_dagster.cli.pipeline import cmd_compare, cmd_evaluate, cmd_run
from ctxwin_dagster.cli.plan import cmd_plan
from ctxwin_dagster.cli.prune import cmd_prune
from ctxwin_dagster.cli.qa import add_qa_arguments
from ctxwin_dagster.cli.review import cmd_review
from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.runner.homes import cmd_dev

__all__ = ["build_parser", "main"]


def _add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="documents run at once (runs in the instance's queue; default: the machine's cores)",
    )
    parser.add_argument("--force", action="store_true", help="run every document again, even when nothing changed")
    parser.add_argument(
        "--workspace",
        help="the workspace.yaml whose code location the runs belong to (default ./workspace.yaml; see deploy/)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxwin", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
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
        "--job", default="all_assets_job", choices=["all_assets_job", "t_rag_job", "cc_rag_job", "swb_rag_job"]
    )
    run.add_argument("--model", help="contextualizer/summarizer chat model (default: none, the extractive engine)")
    run.add_argument(
        "--base-url", help="OpenAI-compatible server for --model (default OpenAI; key from OPENAI_API_KEY)"
    )
    _add_launch_arguments(run)
    run.set_defaults(func=cmd_run)

    plan = sub.add_parser("plan", help="calls, tokens, characters and cost per variant, without calling a model")
    plan.add_argument(
        "paths",
        nargs="*",
        help="document files or folders (default: the documents folder of $DAGSTER_HOME's experiment, the sample's data/documents)",
    )
    plan.add_argument(
        "--model",
        default=PAPER.contextualizer_model,
        help=f"contextualizer model (limits and prices; default {PAPER.contextualizer_model}, as in the paper)",
    )
    plan.add_argument("--chunk-size", type=int, default=PAPER.chunk_size)
    plan.add_argument("--chunk-overlap", type=int, default=PAPER.chunk_overlap)
    plan.add_argument("--batch-size", type=int, default=PAPER.swb_batch_size, help="SWB-RAG chunks per batch")
    plan.add_argument(
        "--window-chars", type=int, default=PAPER.swb_window_chars, help="SWB-RAG characters before and after a batch"
    )
    plan.add_argument(
        "--summary-tokens", type=int, default=PAPER.summary_max_tokens, help="global summary budget (tokens)"
    )
    plan.add_argument("--context-tokens", type=int, default=100, help="estimated tokens of one chunk context")
    plan.add_argument("--json", action="store_true", help="print the plans as JSON")
    plan.set_defaults(func=cmd_plan)
    ask = sub.add_parser(
        "ask",
        help="answer questions over the indexes (retrieval + context windows, or sliding windows over a document)",
        description="Answer a question (or every question read from standard input) over the indexes that `ctxwin run` built.",
    )
    add_ask_arguments(ask)
    ask.set_defaults(func=run_cli)

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
    ev.add_argument("--log-level", default="WARNING")
    _add_launch_arguments(ev)
    ev.set_defaults(func=cmd_evaluate)

    dev = sub.add_parser(
        "dev", help="the Dagster UI (and daemon) on an experiment's home: its runs, assets and comparison"
    )
    dev.add_argument("experiment", nargs="?", default="sample", help="experiment name (default: the sample)")
    dev.add_argument("--dagster-home", help="the Dagster home to open (default: the experiment's)")
    dev.add_argument("--port", type=int, default=3000)
    dev.add_argument("--host", default="127.0.0.1")
    dev.set_defaults(func=cmd_dev)

    prune = sub.add_parser(
        "prune", help="delete the index rows, results and partitions of documents whose file is gone (logged, undoable)"
    )
    prune.add_argument("experiment", nargs="?", default="sample", help="experiment name (default: the sample)")
    prune.add_argument("--dagster-home", help="the Dagster home (default: the experiment's)")
    prune.add_argument("--yes", action="store_true", help="delete (without it: only list what would be deleted)")
    prune.add_argument("--undo", action="store_true", help="put back what the last prune deleted")
    prune.set_defaults(func=cmd_prune)

    qa = sub.add_parser("qa", help="question sets: import SQuAD JSON, CUAD JSON or CSV/JSONL tables into the QA format")
    add_qa_arguments(qa)

    cmp_ = sub.add_parser("compare", help="compare two experiments' reports side by side")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    cmp_.add_argument("--reports-dir", default="evaluations/reports")
    cmp_.set_defaults(func=cmd_compare)

    review = sub.add_parser(
        "review", help="human review: export blinded answer pairs, or count the filled labels (Table 4)"
    )
    rsub = review.add_subparsers(dest="review_command", required=True)
    rex = rsub.add_parser("export", help="blinded pairs of two variants' answers as CSV and a static HTML form")
    rex.add_argument("experiment")
    rex.add_argument("--a", default="t_rag")
    rex.add_argument("--b", default="swb_rag")
    rex.add_argument("--seed", type=int, default=0)
    rex.add_argument("--out", help="default evaluations/reports/<experiment>/review_<a>_vs_<b>")
    rex.add_argument(
        "--results-dir", help="where the experiment's answers are (default: as its Dagster home records it)"
    )
    rex.add_argument("--reports-dir", default="evaluations/reports")
    rt4 = rsub.add_parser("table4", help="Table 4 counts from a filled review CSV and its key")
    rt4.add_argument("csv")
    rt4.add_argument("key")
    review.set_defaults(func=cmd_review)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))
