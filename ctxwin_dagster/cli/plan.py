"""``ctxwin plan``: calls, tokens, characters and cost per variant, without calling a model."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

from ctxwin_dagster.cli.options import Subcommands
from ctxwin_dagster.core.defaults import PAPER, VARIANTS
from ctxwin_dagster.core.experiment import home_experiment


def plan_model(given: str | None) -> tuple[str, str]:
    """(the model a plan prices, why that one): ``--model``, else the contextualizer of the
    experiment of ``$DAGSTER_HOME``, else the paper's model, said plainly, since an experiment
    without a chat model makes its contexts offline at no cost."""
    if given:
        return given, "given with --model"
    chat = dict(home_experiment().sections.get("contextualizer") or {})
    configured = str(chat.get("model") or "").strip()
    if configured:
        return configured, "the experiment's contextualizer"
    return PAPER.contextualizer_model, (
        "the paper's model: this experiment has no chat model, so its contexts are made offline at no cost; "
        "pass --model to price another"
    )


def _usd(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def _row(v: Mapping[str, float | None], out_tokens: int | None) -> str:
    """The numbers of one line of the plan's table (``out_tokens`` None: left blank)."""
    out = "" if out_tokens is None else f"{out_tokens:,}"
    calls, tokens, cached, chars = (
        int(v[k] or 0) for k in ("calls", "input_tokens", "cached_tokens_est", "input_chars")
    )
    return (
        f"{calls:>7,} {tokens:>14,} {cached:>12,} "
        f"{chars:>14,} {out:>11} {_usd(v['cost_usd_est']):>10} {_usd(v['cost_usd_est_cached']):>10}"
    )


def cmd_plan(args: argparse.Namespace) -> int:
    import json

    from ctxwin_dagster.backends.chat.local_model import is_local_model, register_local_model
    from ctxwin_dagster.backends.planning.plan import plan_document
    from ctxwin_dagster.core.text.documents import DocumentError, read_document
    from ctxwin_dagster.core.text.file_names import doc_id_from_path
    from ctxwin_dagster.core.text.folder import scan_documents

    model, why = plan_model(args.model)
    if is_local_model(model):
        register_local_model(model)  # its own tokenizer and window, without loading the weights

    paths: list[tuple[Path, str]] = []
    for item in args.paths or [home_experiment().documents_dir]:
        p = Path(item)
        if p.is_dir():
            folder = scan_documents(p)
            for line in folder.report_lines():
                print(line, file=sys.stderr)
            paths.extend((f.path, f.doc_id) for f in folder.files)
        else:
            paths.append((p, doc_id_from_path(p)))
    plans, failed = [], []
    for path, doc_id in paths:
        try:
            doc = read_document(path, doc_id=doc_id)
        except (DocumentError, FileNotFoundError) as exc:
            print(f"skipped {path}: {exc}", file=sys.stderr)
            failed.append(str(path))
            continue
        plans.append(
            plan_document(
                doc.text,
                doc_id=doc.doc_id,
                model=model,
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
    print(
        f"Plan for {len(plans)} documents with contextualizer {model} ({why}; no model is called; outputs and cost are estimates)"
    )
    for enc, exact in sorted({(p["encoding"], p["tokens_exact"]) for p in plans}):
        print(
            f"Input tokens counted with {enc}: {'exact for the model' if exact else 'an estimate (not the model’s own tokenizer)'}"
        )
    print(
        "Prompt caching: 'cached' counts the input tokens a server that caches prompt prefixes would read "
        "from its cache (OpenAI's rule: prompts of 1,024 tokens or more, blocks of 128), and 'USD cached' "
        "prices them at the cache-read price"
    )
    header = (
        f"{'document':<40} {'variant':<8} {'calls':>7} {'input tokens':>14} {'cached':>12} {'input chars':>14} "
        f"{'out tokens':>11} {'cost USD':>10} {'USD cached':>10}  note"
    )
    print(header)
    print("-" * len(header))
    fields = ("calls", "input_tokens", "cached_tokens_est", "input_chars", "cost_usd_est", "cost_usd_est_cached")
    totals: dict[str, dict[str, float]] = {}
    for plan in plans:
        for variant in VARIANTS:
            v = plan[variant]
            note = "" if v["fits"] else "does not fit the model"
            print(f"{plan['doc_id'][:40]:<40} {variant:<8} {_row(v, v['output_tokens_est'])}  {note}")
            agg = totals.setdefault(variant, dict.fromkeys(fields, 0.0))
            for f in fields:
                agg[f] += v[f] or 0.0
    if len(plans) > 1:
        for variant, agg in totals.items():
            print(f"{'TOTAL':<40} {variant:<8} {_row(agg, None)}")
    cc = totals.get("cc_rag", {})
    swb = totals.get("swb_rag", {})
    if cc.get("input_chars"):
        line = f"SWB-RAG input is {100 * swb['input_chars'] / cc['input_chars']:.2f} % of CC-RAG's"
        if cc.get("cost_usd_est") and cc.get("cost_usd_est_cached"):
            line += (
                f"; its cost {100 * swb['cost_usd_est'] / cc['cost_usd_est']:.1f} % of CC-RAG's without prompt caching, "
                f"{100 * swb['cost_usd_est_cached'] / cc['cost_usd_est_cached']:.1f} % with it"
            )
        print(line)
    return 1 if failed else 0


def register(sub: Subcommands) -> None:
    """Add ``plan`` to the ``ctxwin`` command's subcommands (``sub``)."""
    plan = sub.add_parser("plan", help="calls, tokens, characters and cost per variant, without calling a model")
    plan.add_argument(
        "paths",
        nargs="*",
        help="document files or folders (default: the documents folder of $DAGSTER_HOME's experiment, the sample's data/documents)",
    )
    plan.add_argument(
        "--model",
        help="contextualizer model whose limits and prices the plan uses (default: the experiment's contextualizer; "
        f"with none configured, the paper's {PAPER.contextualizer_model}, and the plan says so)",
    )
    plan.add_argument("--chunk-size", type=int, default=PAPER.chunk_size, help="characters per chunk")
    plan.add_argument(
        "--chunk-overlap", type=int, default=PAPER.chunk_overlap, help="characters shared by neighbouring chunks"
    )
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
