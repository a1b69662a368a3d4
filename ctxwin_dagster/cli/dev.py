"""``ctxwin dev``: the Dagster UI and daemon on an experiment's home."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ctxwin_dagster.cli.options import Subcommands
from ctxwin_dagster.core.experiment import EXPERIMENT_FILE, SAMPLE, default_home, home_experiment


def cmd_dev(args: argparse.Namespace) -> int:
    """``ctxwin dev [experiment]``: the Dagster UI and daemon (``dg dev``) on the
    experiment's home, so its runs, assets and comparison are the ones shown."""
    import sys

    from ctxwin_dagster.backends.embeddings.server import ENV_VAR, EmbeddingService, served_models
    from ctxwin_dagster.runner.home_setup import prepare_home, workspace_file

    home = Path(args.dagster_home) if args.dagster_home else default_home(args.experiment)
    if args.experiment != SAMPLE and not (home / EXPERIMENT_FILE).is_file():
        raise SystemExit(
            f"ctxwin dev: no experiment {args.experiment!r} in {home}; run it first (ctxwin evaluate / ctxwin run --documents)"
        )
    home = prepare_home(str(home))
    print(
        f"ctxwin dev: {home_experiment(home).describe()}; Dagster home {home}; http://{args.host}:{args.port}",
        flush=True,
    )
    # `dg dev` supersedes `dagster dev` (which now warns so); given the workspace file it serves
    # exactly that code location.
    dg = Path(sys.executable).with_name("dg")
    cmd = [
        str(dg) if dg.exists() else "dg",
        "dev",
        "-w",
        str(workspace_file(home)),
        "--host",
        args.host,
        "--port",
        str(args.port),
    ]
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    # One embedding model for every run the UI and the daemon launch (see backends/embeddings/server.py).
    models = served_models((home_experiment(home).sections or {}).get("embeddings"))
    with EmbeddingService(models, log=home / "ctxwin-embeddings.log") as service, _chat_servers(home, env):
        if models and not env.get(ENV_VAR, "").strip():
            try:
                env[ENV_VAR] = service.start()
                print(
                    f"ctxwin dev: the runs embed through one model server ({env[ENV_VAR]}, log {service.log})",
                    flush=True,
                )
            except RuntimeError as exc:
                print(f"ctxwin dev: {exc}", flush=True)
        return _run_forwarding_signals(cmd, env)


@contextlib.contextmanager
def _chat_servers(home: Path, env: dict[str, str]) -> Iterator[None]:
    """llama.cpp's server of each local chat model the experiment names, for every run the UI and
    the daemon launch (their address in ``env``); stopped with the command. (A run of the question
    writer's default model, on request, starts its own.)"""
    from ctxwin_dagster.backends.chat.llama_server import ENV_VAR, LOG_NAME, LlamaServer, available, env_value
    from ctxwin_dagster.backends.chat.local_model import is_local_model

    sections = home_experiment(home).sections or {}
    models = [
        str(sections.get(role, {}).get("model") or "").strip()
        for role in ("contextualizer", "answerer", "judge", "question_writer")
    ]
    servers = [LlamaServer(m, log=home / LOG_NAME) for m in dict.fromkeys(m for m in models if is_local_model(m))]
    try:
        if servers and not env.get(ENV_VAR, "").strip() and available():
            try:
                env[ENV_VAR] = env_value({s.model: s.start() for s in servers})
                print(f"ctxwin dev: the local chat model is served by llama.cpp ({env[ENV_VAR]})", flush=True)
            except RuntimeError as exc:
                print(f"ctxwin dev: {exc}", flush=True)
        yield
    finally:
        for server in servers:
            server.stop()


def _run_forwarding_signals(cmd: list[str], env: dict[str, str]) -> int:
    """Run ``cmd`` until it ends. SIGTERM or SIGINT sent to this command alone (a process
    manager, ``kill``) is passed on to it, so ``dg dev`` stops its UI, daemon and code server
    instead of being left running without the command that started it. ``cmd`` and every process
    it starts run in a process group that a watchdog ends when this command ends, however it
    ends: on ``kill -9`` too, and whatever ``cmd`` left running (:mod:`ctxwin_dagster.runner.processes`).

    Its output is passed on line by line, but for the daemon's lines of a sensor tick that found
    nothing to do (two a tick, every second for ``ctxwin_command_runs``; the UI keeps every tick).

    The handlers are in place before ``cmd`` starts, so it starts with both signals at their
    defaults even where this command was started with SIGINT ignored (a background job of a
    script, ``nohup``): ``dg dev`` maps SIGTERM to its SIGINT handler, and an ignored SIGINT
    would make it ignore SIGTERM too."""
    import signal
    import subprocess
    import sys

    from ctxwin_dagster.runner.processes import WatchedGroup, forward_output, is_idle_tick

    group = WatchedGroup()
    started: list[subprocess.Popen] = []
    pending: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if not started:
            pending.append(signum)  # sent once the command has started
        elif started[0].poll() is None:
            started[0].send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        child = group.start(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        started.append(child)
        forward_output(child.stdout, sys.stdout, drop=is_idle_tick)  # type: ignore[arg-type]
        for signum in pending:
            child.send_signal(signum)
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:  # pragma: no cover - the handler above takes SIGINT
                continue
    finally:
        group.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def register(sub: Subcommands) -> None:
    """Add ``dev`` to the ``ctxwin`` command's subcommands (``sub``)."""
    dev = sub.add_parser(
        "dev", help="the Dagster UI (and daemon) on an experiment's home: its runs, assets and comparison"
    )
    dev.add_argument("experiment", nargs="?", default="sample", help="experiment name (default: the sample)")
    dev.add_argument("--dagster-home", help="the Dagster home to open (default: the experiment's)")
    dev.add_argument("--port", type=int, default=3000, help="the UI's port")
    dev.add_argument("--host", default="127.0.0.1", help="the UI's address (0.0.0.0: every interface)")
    dev.set_defaults(func=cmd_dev)
