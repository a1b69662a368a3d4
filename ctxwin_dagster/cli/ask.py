"""``ctxwin ask``: one question from the arguments, or every question read from standard input."""

from __future__ import annotations

import argparse
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TextIO

from ctxwin_dagster.ask.modes import ASK_MODES
from ctxwin_dagster.ask.session import AskerSpec, ask_kwargs, format_result, question_options
from ctxwin_dagster.cli.options import Subcommands
from ctxwin_dagster.cli.options import variant as variant_name
from ctxwin_dagster.core.methods.sliding_qa import DEFAULT_OVERLAP_TOKENS
from ctxwin_dagster.core.retrieval.options import RETRIEVAL_NAMES, RETRIEVAL_OPTIONS, RetrievalOption


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``ctxwin ask`` (an ``argparse`` parser)."""
    parser.add_argument(
        "question",
        nargs="?",
        help="the question; without it, questions are read from standard input until EOF or 'quit'",
    )
    parser.add_argument(
        "--variant", default="swb_rag", type=variant_name, help="index to search: t, cc or swb (or t_rag…; default swb)"
    )
    parser.add_argument("--doc", help="only this document (its doc_id, file name or stem); needed for --mode sliding")
    parser.add_argument(
        "--mode",
        default="retrieve",
        choices=ASK_MODES,
        help="retrieve (default), sliding (read the whole document) or auto",
    )
    group = parser.add_mutually_exclusive_group()
    for option in RETRIEVAL_OPTIONS:
        if option.exclusive:
            _add_retrieval_option(group.add_argument, option)
    group.add_argument("--no-enhance", action="store_true", help="give the retrieved chunks only")
    parser.add_argument(
        "--retrieval",
        choices=RETRIEVAL_NAMES,
        help="named retrieval setting (default ask: hybrid sentence focus; "
        "focus-dense: the earlier vectors-only focus; paper: top-4 chunks as they are), changed by the options given",
    )
    for option in RETRIEVAL_OPTIONS:
        if not option.exclusive:
            _add_retrieval_option(parser.add_argument, option)
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
    _add_output_and_experiment(parser)


def _add_retrieval_option(add_argument: Callable[..., argparse.Action], option: RetrievalOption) -> None:
    """One retrieval option as a flag, by a parser's or a group's ``add_argument`` (a bool with its
    ``--no-`` form; unset: the named setting's)."""
    if option.kind is bool:
        add_argument(option.flag, action=argparse.BooleanOptionalAction, default=None, help=option.help)
    else:
        add_argument(option.flag, type=option.kind, metavar="N" if option.kind is int else "X", help=option.help)


def _add_output_and_experiment(parser: argparse.ArgumentParser) -> None:
    """The options of ``ctxwin ask`` that say how to print, which experiment to ask and where
    its index, caches, model and ask server are."""
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
    server = parser.add_mutually_exclusive_group()
    server.add_argument(
        "--no-server",
        action="store_true",
        help="open the index and the models in this process instead of asking the experiment's ask server "
        "(also: CTXWIN_ASK_SERVER=off)",
    )
    server.add_argument(
        "--stop-server",
        action="store_true",
        help="stop the experiment's ask server (it stops by itself after 15 idle minutes)",
    )


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
    """``ctxwin ask``: answer one question, or every question read from ``stdin``.

    The questions go to the experiment's ask server (:mod:`ctxwin_dagster.ask.server`), started
    on first use, unless ``--no-server`` or ``CTXWIN_ASK_SERVER=off``; then this process opens
    the index and the models itself."""
    import sys

    from ctxwin_dagster.ask import server
    from ctxwin_dagster.ask.results import AskError

    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    steps = SlowSteps(stderr)
    try:
        options = question_options(args)
        ask_kwargs(options)  # contradicting options fail here, before anything is opened
        spec = AskerSpec.from_args(args)
    except (AskError, ValueError) as exc:
        print(f"ctxwin ask: {exc}", file=stderr)
        return 2
    if vars(args).get("stop_server"):
        pid = server.stop(spec)
        print(
            f"ctxwin ask: stopped the ask server (pid {pid})" if pid else "ctxwin ask: no ask server runs", file=stderr
        )
        return 0
    client = None
    if not vars(args).get("no_server") and server.enabled() and server.state_file(spec) is not None:
        client = server.find(spec)
        if client is None:
            with steps.step("starting the ask server, which keeps the index and the models loaded"):
                client = server.start(spec, log=stderr)
    if client is not None:
        return _ask_server(args, client, options, stdin, stdout, stderr, steps)
    return _ask_here(args, spec, options, stdin, stdout, stderr, steps)


def _ask_server(args, client, options, stdin, stdout, stderr, steps: SlowSteps) -> int:
    """Every question to the ask server; its reply printed as it is."""

    def one(question: str) -> bool:
        with steps.step(f"the ask server (pid {client.pid}) is answering (it loads the models on its first question)"):
            reply = client.ask(question, options, as_json=bool(args.json))
        if reply.err:
            print(reply.err, file=stderr, flush=True)
        if reply.out:
            print(reply.out, file=stdout, flush=True)
        if reply.status == 2:
            raise _OpenFailed
        return reply.status == 0

    try:
        return _loop(args, one, stdin, stdout, stderr)
    except _OpenFailed:
        return 2
    except BrokenPipeError:
        return _broken_pipe()


class _OpenFailed(Exception):
    """The index or the models could not be opened (already said)."""


def _broken_pipe() -> int:
    """``ctxwin ask … | head``: the reader went away; exit quietly."""
    import os
    import sys

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _ask_here(args, spec: AskerSpec, options, stdin, stdout, stderr, steps: SlowSteps) -> int:
    """Every question answered in this process (the index and the models opened here)."""
    import json

    from ctxwin_dagster.ask.results import AskError

    kwargs = ask_kwargs(options)
    try:
        with steps.step(f"opening the index ({spec.lancedb}) and loading the models"):
            asker = spec.open()
    except (AskError, ValueError) as exc:
        print(f"ctxwin ask: {exc}", file=stderr)
        return 2
    if kwargs["doc_id"]:
        try:
            kwargs["doc_id"] = asker.documents.resolve(kwargs["doc_id"])
        except AskError as exc:
            print(f"ctxwin ask: {exc}", file=stderr)
            return 2

    def progress(done: int, total: int) -> None:
        print(f"\r  reading windows {done}/{total}…", end="" if done < total else "\n", file=stderr, flush=True)

    from ctxwin_dagster.backends.chat.errors import ChatBackendError

    def one(question: str) -> bool:
        try:
            with steps.step("searching and answering"):
                result = asker.ask(question, progress=progress, **kwargs)
        except (AskError, ValueError, ChatBackendError) as exc:  # a model server that failed says why
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
        except BrokenPipeError:
            return _broken_pipe()


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


def register(sub: Subcommands) -> None:
    """Add ``ask`` to the ``ctxwin`` command's subcommands (``sub``)."""
    ask = sub.add_parser(
        "ask",
        help="answer questions over the indexes (retrieval + context windows, or sliding windows over a document)",
        description="Answer a question (or every question read from standard input) over the indexes that `ctxwin run` built.",
    )
    _add_arguments(ask)
    ask.set_defaults(func=run_cli)
