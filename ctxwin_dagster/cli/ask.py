"""``ctxwin ask``: one question from the arguments, or every question read from standard input."""

from __future__ import annotations

import argparse
import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from ctxwin_dagster.ask import ASK_MODES, Asker, AskError, AskResult, normalize_variant
from ctxwin_dagster.core.methods.prompts import NOT_IN_DOCUMENTS
from ctxwin_dagster.core.methods.sliding_qa import DEFAULT_OVERLAP_TOKENS
from ctxwin_dagster.core.retrieval.settings import RETRIEVAL_PRESETS, RetrievalSettings


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``ctxwin ask`` (an ``argparse`` parser)."""
    parser.add_argument(
        "question",
        nargs="?",
        help="the question; without it, questions are read from standard input until EOF or 'quit'",
    )
    parser.add_argument("--variant", default="swb", help="index to search: t, cc or swb (default swb)")
    parser.add_argument("--doc", help="only this document (its doc_id, file name or stem); needed for --mode sliding")
    parser.add_argument(
        "--mode",
        default="retrieve",
        choices=ASK_MODES,
        help="retrieve (default), sliding (read the whole document) or auto",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--focus-chars",
        type=int,
        help="sentence focus (the default): windows around the best sentences of the hits, at most N characters in all (default 8000)",
    )
    group.add_argument("--neighbors", type=int, help="add N chunks on each side of every hit")
    group.add_argument("--window-chars", type=int, help="grow every hit with adjacent chunks up to N characters")
    group.add_argument("--no-enhance", action="store_true", help="give the retrieved chunks only")
    parser.add_argument(
        "--retrieval",
        choices=sorted(RETRIEVAL_PRESETS),
        help="named retrieval setting (default ask: hybrid sentence focus; "
        "focus-dense: the earlier vectors-only focus; paper: top-4 chunks as they are), changed by the options given",
    )
    parser.add_argument("--k", type=int, help="chunks to retrieve (default 24 for sentence focus, else 4)")
    parser.add_argument(
        "--hybrid",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fuse vector search with full-text search (default: on for sentence focus, off otherwise)",
    )
    parser.add_argument(
        "--window-tokens", type=int, help="sliding-window size in tokens (default 4000, capped by the model)"
    )
    parser.add_argument(
        "--overlap-tokens",
        type=int,
        default=DEFAULT_OVERLAP_TOKENS,
        help="sliding-window overlap in tokens (default 200)",
    )
    parser.add_argument(
        "--early-stop", type=float, help="stop sliding after a window answers with at least this confidence (0-1)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--experiment",
        default="sample",
        help="ask the experiment of this name: its index, documents, models and caches "
        "(default: the sample; another one lives in data/experiments/<name>/dagster_home)",
    )
    parser.add_argument("--dagster-home", help="ask the experiment of this Dagster home (default: the experiment's)")
    parser.add_argument("--lancedb", help="index folder (default: the experiment's, the sample's data/lancedb)")
    parser.add_argument(
        "--documents",
        help="documents folder (default: the experiment's, the sample's data/documents; '' to use the indexed text)",
    )
    parser.add_argument("--cache-dir", help="response and embedding caches (default: the experiment's, data/cache)")
    parser.add_argument(
        "--model",
        help="answer chat model (default: none, the extractive engine, offline; local:smollm2 runs a GGUF model in process)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        help="most tokens of an answer from --model (default 2,048; a local model's replies at most 512)",
    )
    parser.add_argument(
        "--base-url", help="OpenAI-compatible server for --model (default OpenAI; key from OPENAI_API_KEY)"
    )


def experiment_home(args: argparse.Namespace) -> Path:
    from ctxwin_dagster.runner.homes import default_home

    return (
        Path(args.dagster_home)
        if getattr(args, "dagster_home", None)
        else default_home(getattr(args, "experiment", None) or "sample")
    )


def experiment_of(args: argparse.Namespace):
    """The experiment ``ctxwin ask`` asks: the one kept in the Dagster home of ``--experiment``
    (or ``--dagster-home``), the sample by default: the same settings its runs used."""
    from ctxwin_dagster.core.experiment import EXPERIMENT_FILE, home_experiment

    name = getattr(args, "experiment", None) or "sample"
    home = experiment_home(args)
    if name != "sample" and not (home / EXPERIMENT_FILE).is_file():
        raise AskError(
            f"no experiment {name!r} in {home}; build it first (ctxwin evaluate / ctxwin run --documents), or pass --lancedb"
        )
    return home_experiment(home)


def format_result(result: AskResult, *, width: int = 100) -> str:
    """A human-readable rendering: the answer, the cited spans with excerpts, the cost."""
    import textwrap

    lines = [f"Answer ({result.variant or '-'} · {result.mode_used} · {result.engine}: {result.model}):"]
    body = (
        result.answer
        if not result.not_found
        else f"{NOT_IN_DOCUMENTS} — the documents given to the model do not hold the answer"
    )
    for para in body.splitlines() or [""]:
        lines.extend(textwrap.wrap(para, width=width, initial_indent="  ", subsequent_indent="  ") or ["  "])
    if result.citations:
        lines.append("Cited spans:")
        for i, c in enumerate(result.citations, 1):
            chunk = f" [chunk {c.chunk_id[:12]}]" if c.chunk_id else ""
            lines.append(f"  [{c.marker or i}] {c.doc_id}:{c.start}-{c.end}{chunk}")
            if c.excerpt:
                lines.append(f'      "{c.excerpt}"')
    if result.fit is not None:
        f = result.fit
        lines.append(
            f"Fit: {f.prompt_tokens:,} prompt tokens of {f.limit:,} available for {f.model} ({'fits' if f.fits else f'over by {f.overflow:,}'})"
        )
    if result.mode_used == "sliding" and result.sliding is not None:
        s = result.sliding
        lines.append(
            f"Windows: {s.n_read} of {s.n_windows} read, {s.n_found} held an answer{' (stopped early)' if s.stopped_early else ''}"
        )
    else:
        lines.append(f"Context: {len(result.windows)} windows, {result.context_chars:,} characters")
    t = result.totals
    cost, paid = result.cost_usd, result.paid_usd
    if cost is None:
        cost_text = "cost unknown (no price for the model)"
    elif paid is not None and abs(cost - paid) > 5e-7:
        cost_text = f"cost of the work ${cost:.4f}, paid ${paid:.4f}"
    else:
        cost_text = f"${cost:.4f}"
    if result.engine == "extractive":
        cost_text += " (extractive engine, offline)"
    lines.append(
        f"Cost: {cost_text} · {t['calls']} call{'' if t['calls'] == 1 else 's'}, {t['cache_hits']} cached · {t['input_tokens']:,} input / "
        f"{t['output_tokens']:,} output tokens · {result.latency_s:.2f} s"
    )
    for note in result.notes:
        lines.append(f"Note: {note}")
    return "\n".join(lines)


def _ask_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """:meth:`Asker.ask`'s arguments from the command's: the retrieval options become one
    :class:`RetrievalSettings` (the named ``--retrieval``, default ``ask``, changed by them)."""
    retrieval = RetrievalSettings.named(
        getattr(args, "retrieval", None) or "ask",
        enhance_mode="none" if args.no_enhance else None,
        num_neighbors=args.neighbors,
        context_window_size=args.window_chars,
        focus_chars=args.focus_chars,
        k=args.k,
        hybrid=args.hybrid,
    )
    return {
        "variant": args.variant,
        "doc_id": args.doc or None,
        "mode": args.mode,
        "retrieval": retrieval,
        "window_tokens": args.window_tokens,
        "overlap_tokens": args.overlap_tokens,
        "early_stop": args.early_stop,
    }


class SlowSteps:
    """Says on ``stream`` what a step is doing once it has taken longer than ``after`` seconds,
    so a slow start (loading the embedding model) is never a silent wait."""

    def __init__(self, stream: TextIO, *, after: float = 1.0) -> None:
        self.stream, self.after = stream, after

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        def say() -> None:
            print(f"ctxwin ask: {text}…", file=self.stream, flush=True)

        timer = threading.Timer(self.after, say)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()


def run_cli(
    args: argparse.Namespace,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """``ctxwin ask``: answer one question, or every question read from ``stdin``."""
    import json
    import sys

    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    steps = SlowSteps(stderr)
    try:
        kwargs = _ask_kwargs(args)
        normalize_variant(kwargs["variant"])
        exp = experiment_of(args)
        answerer = dict(exp.sections.get("answerer") or {})
        model = args.model if args.model is not None else (answerer.get("model") or None)
        with steps.step(f"opening the index ({args.lancedb or exp.lancedb_uri}) and loading the models"):
            asker = Asker.open(
                lancedb=args.lancedb or exp.lancedb_uri,
                documents=(exp.documents_dir if args.documents is None else args.documents) or None,
                model=model,
                base_url=args.base_url if args.model is not None else (answerer.get("base_url") or None),
                cache_dir=(exp.cache_dir if args.cache_dir is None else args.cache_dir) or None,
                max_tokens=getattr(args, "max_tokens", None),
                embeddings={
                    **(exp.sections.get("embeddings") or {}),
                    "cache_dir": (exp.cache_dir if args.cache_dir is None else args.cache_dir) or None,
                },
                doc_ids_file=home / "ctxwin_doc_ids.json" if (home := experiment_home(args)).is_dir() else None,
            )
    except (AskError, ValueError) as exc:
        print(f"ctxwin ask: {exc}", file=stderr)
        return 2
    if kwargs["doc_id"]:
        kwargs["doc_id"] = asker.documents.resolve(kwargs["doc_id"])

    def progress(done: int, total: int) -> None:
        print(f"\r  reading windows {done}/{total}…", end="" if done < total else "\n", file=stderr, flush=True)

    def one(question: str) -> bool:
        try:
            with steps.step("searching and answering"):
                result = asker.ask(question, progress=progress, **kwargs)
        except (AskError, ValueError) as exc:
            print(f"ctxwin ask: {exc}", file=stderr)
            return False
        if args.json:
            print(json.dumps(result.to_dict(), ensure_ascii=False), file=stdout, flush=True)
        else:
            print(format_result(result), file=stdout, flush=True)
        return True

    with asker:
        try:
            return _loop(args, one, stdin, stdout, stderr)
        except BrokenPipeError:  # e.g. `ctxwin ask … | head`: the reader went away
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0


def _loop(args: argparse.Namespace, one: Callable[[str], bool], stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """One question from the arguments, or every question read from ``stdin``."""
    if args.question:
        return 0 if one(args.question) else 1
    interactive = hasattr(stdin, "isatty") and stdin.isatty()
    if interactive:
        print("Ask about the documents (empty line skips; 'quit' or Ctrl-D ends).", file=stderr)
    failures = 0
    while True:
        if interactive:
            print("ask> ", end="", file=stderr, flush=True)
        line = stdin.readline()
        if not line:
            break
        question = line.strip()
        if not question:
            continue
        if question.lower() in ("quit", "exit", ":q"):
            break
        failures += 0 if one(question) else 1
        if not args.json:
            print("", file=stdout, flush=True)
    return 1 if failures else 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``ask`` to the ``ctxwin`` command's subcommands (``sub``, from ``add_subparsers``)."""
    ask = sub.add_parser(
        "ask",
        help="answer questions over the indexes (retrieval + context windows, or sliding windows over a document)",
        description="Answer a question (or every question read from standard input) over the indexes that `ctxwin run` built.",
    )
    _add_arguments(ask)
    ask.set_defaults(func=run_cli)
