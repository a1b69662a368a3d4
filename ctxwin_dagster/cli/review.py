"""``ctxwin review``: blinded pairs of answers for people to judge, and the paper's Table 4."""

from __future__ import annotations

import argparse
from pathlib import Path


def _results_dir(name: str) -> str:
    """Where the experiment ``name`` keeps its answers: as its home records it, else the default."""
    from ctxwin_dagster.core.experiment import DEFAULT_RESULTS_DIR, EXPERIMENT_FILE, home_experiment
    from ctxwin_dagster.runner.homes import default_home

    home = default_home(name)
    if not (home / EXPERIMENT_FILE).is_file():
        return DEFAULT_RESULTS_DIR
    return str((home_experiment(home).sections.get("evaluation") or {}).get("results_dir") or DEFAULT_RESULTS_DIR)


def cmd_review(args: argparse.Namespace) -> int:
    from ctxwin_dagster.core.evaluation.review import export_review, import_review, table4

    if args.review_command == "export":
        root = Path(args.results_dir or _results_dir(args.experiment)) / args.experiment / "answers"
        from ctxwin_dagster.defs.evaluation.assets import read_jsonl_folder

        records = {v: read_jsonl_folder(root / v) for v in (args.a, args.b)}
        for v, recs in records.items():
            if not recs:
                raise SystemExit(
                    f"ctxwin review: no answers of {v} in {root / v}; run `ctxwin evaluate {args.experiment}` first"
                )
        out = Path(args.out or Path(args.reports_dir) / args.experiment / f"review_{args.a}_vs_{args.b}")
        result = export_review(
            records[args.a], records[args.b], variant_a=args.a, variant_b=args.b, out_dir=out, seed=args.seed
        )
        print(
            f"{result['n_questions']} blinded pairs: fill {result['csv']} (or open {result['html']}); keep {result['key']} away from reviewers"
        )
        return 0
    df = import_review(args.csv, args.key)
    t4 = table4(df)
    print(t4.to_markdown() if hasattr(t4, "to_markdown") else t4.to_string())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``review`` and its subcommands to the ``ctxwin`` command's subcommands (``sub``, from ``add_subparsers``)."""
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
