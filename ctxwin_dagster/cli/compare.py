"""``ctxwin compare``: two experiments' reports side by side, as a Markdown table of their quality
per variant and metric and of their efficiency."""

from __future__ import annotations

import argparse
from pathlib import Path

from ctxwin_dagster.cli.options import Subcommands


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
    lines = [
        f"# {args.a} vs {args.b}",
        "",
        f"| variant | metric | {args.a} | {args.b} | Δ |",
        "| --- | --- | --- | --- | --- |",
    ]
    for variant, metric in keys:
        a, b = means[0][(variant, metric)], means[1][(variant, metric)]
        delta = "—" if a is None or b is None else f"{b - a:+.3f}"
        fa = "—" if a is None else f"{a:.3f}"
        fb = "—" if b is None else f"{b:.3f}"
        lines.append(f"| {variant} | {metric} | {fa} | {fb} | {delta} |")
    eff = [{e["variant"]: e for e in p["efficiency"]} for p in payloads]
    lines += [
        "",
        f"| variant | index input chars ({args.a}) | ({args.b}) | context chars/question ({args.a}) | ({args.b}) |",
        "| --- | --- | --- | --- | --- |",
    ]
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


def register(sub: Subcommands) -> None:
    """Add ``compare`` to the ``ctxwin`` command's subcommands (``sub``)."""
    cmp_ = sub.add_parser("compare", help="compare two experiments' reports side by side")
    cmp_.add_argument("a", help="the first experiment's name (its report folder under --reports-dir)")
    cmp_.add_argument("b", help="the second experiment's name")
    cmp_.add_argument("--reports-dir", default="evaluations/reports", help="where `ctxwin evaluate` wrote the reports")
    cmp_.set_defaults(func=cmd_compare)
