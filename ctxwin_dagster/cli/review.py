"""``ctxwin review``: blinded pairs of answers for people to judge, and the paper's Table 4."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from pathlib import Path

from ctxwin_dagster.cli.options import Subcommands
from ctxwin_dagster.cli.options import variant as variant_name


def _results_dir(name: str) -> str:
    """Where the experiment ``name`` keeps its answers: as its home records it, else the default."""
    from ctxwin_dagster.core.experiment import DEFAULT_RESULTS_DIR, EXPERIMENT_FILE, default_home, home_experiment

    home = default_home(name)
    if not (home / EXPERIMENT_FILE).is_file():
        return DEFAULT_RESULTS_DIR
    return str((home_experiment(home).sections.get("evaluation") or {}).get("results_dir") or DEFAULT_RESULTS_DIR)


def _document_text(name: str) -> Callable[[str], str | None]:
    """doc_id -> the text of that document of the experiment ``name``, as its runs read it (None
    when its file is gone or unreadable): the review form shows where the reference answer is."""
    from ctxwin_dagster.core.experiment import default_home
    from ctxwin_dagster.core.text.documents import DocumentError, read_document
    from ctxwin_dagster.definitions import home_resources

    folder = home_resources(default_home(name))["settings"].document_folder()

    @functools.lru_cache(maxsize=8)
    def text(doc_id: str) -> str | None:
        path = folder.path_of(doc_id)
        try:
            return read_document(path, doc_id=doc_id).text if path is not None else None
        except (OSError, DocumentError):
            return None

    return text


def cmd_review(args: argparse.Namespace) -> int:
    from ctxwin_dagster.core.evaluation.review import export_review, import_review, table4

    if args.review_command == "export":
        root = Path(args.results_dir or _results_dir(args.experiment)) / args.experiment / "answers"
        from ctxwin_dagster.defs.evaluation.result_files import read_jsonl_folder

        records = {v: read_jsonl_folder(root / v) for v in (args.a, args.b)}
        for v, recs in records.items():
            if not recs:
                raise SystemExit(
                    f"ctxwin review: no answers of {v} in {root / v}; run `ctxwin evaluate {args.experiment}` first"
                )
        out = Path(args.out or Path(args.reports_dir) / args.experiment / f"review_{args.a}_vs_{args.b}")
        result = export_review(
            records[args.a],
            records[args.b],
            variant_a=args.a,
            variant_b=args.b,
            out_dir=out,
            seed=args.seed,
            document_text=_document_text(args.experiment),
        )
        print(
            f"{result['n_questions']} blinded pairs: fill {result['csv']} (or open {result['html']}); keep {result['key']} away from reviewers"
        )
        if result["identical"]:
            print(f"{result['identical']} pairs of identical answers are recorded as ties without asking anyone")
        return 0
    if args.review_command == "table4":
        print(table4(import_review(args.csv, args.key)).to_markdown())
        return 0
    return _import(args.key, args.csv)


def _import(key: str, csvs: list[str]) -> int:
    """``ctxwin review import KEY CSV…``: Table 4 of each reviewer's filled CSV and, with two or
    more, how far they agree (raw and Cohen's kappa per pair of reviewers)."""
    from ctxwin_dagster.core.evaluation.review import agreement, import_review, table4

    frames = {}
    for path in csvs:
        df = import_review(path, key)
        frames[path] = df
        asked = len(df) - df.attrs["n_identical"]
        print(f"## {path}: {asked} judged, {df.attrs['n_identical']} identical pairs counted as ties\n")
        print(table4(df).to_markdown() + "\n")
    if len(frames) > 1:
        print("## Agreement (questions both reviewers judged)\n")
        print(agreement(frames).to_markdown(index=False, floatfmt=".3f"))
    return 0


def register(sub: Subcommands) -> None:
    """Add ``review`` and its subcommands to the ``ctxwin`` command's subcommands (``sub``)."""
    review = sub.add_parser(
        "review",
        help="human review: export blinded answer pairs, import the judgments (Table 4 and the reviewers' agreement)",
    )
    rsub = Subcommands(review, dest="review_command", required=True)
    rex = rsub.add_parser("export", help="blinded pairs of two variants' answers as CSV and a static HTML form")
    rex.add_argument("experiment", help="the experiment whose answers are judged (as `ctxwin evaluate` names it)")
    rex.add_argument("--a", default="t_rag", type=variant_name, help="one variant: t, cc or swb (or t_rag…)")
    rex.add_argument("--b", default="swb_rag", type=variant_name, help="the other variant")
    rex.add_argument("--seed", type=int, default=0, help="seed of the pairs' order and of which side is which")
    rex.add_argument("--out", help="default evaluations/reports/<experiment>/review_<a>_vs_<b>")
    rex.add_argument(
        "--results-dir", help="where the experiment's answers are (default: as its Dagster home records it)"
    )
    rex.add_argument("--reports-dir", default="evaluations/reports", help="where the review folder is written")
    rt4 = rsub.add_parser("table4", help="Table 4 counts from a filled review CSV and its key")
    rt4.add_argument("csv", help="the review CSV a reviewer filled")
    rt4.add_argument("key", help="the key.json written by `ctxwin review export`")
    rim = rsub.add_parser(
        "import",
        help="the judgments of one or more reviewers: Table 4 of each, and their agreement (Cohen's kappa)",
    )
    rim.add_argument("key", help="the key.json written by `ctxwin review export`")
    rim.add_argument("csv", nargs="+", help="filled review CSVs, one per reviewer")
    review.set_defaults(func=cmd_review)
