"""How long a `ctxwin ask` takes, as a user runs it: a new process each time, wall clock.

Three cases on an index that ``ctxwin run`` built (the sample's ``data/lancedb`` by default):

``in process``
    ``ctxwin ask --no-server``: the command opens the index and loads the models itself.
``first``
    no ask server runs yet: the command starts one and waits for its answer (the server opens
    the index and loads the models; it then stays).
``server``
    the server runs: the command only sends the question (the target: at most 2 s).

Each case is run ``--repeat`` times (the first case and ``first`` stop the server before each
run); the median and the range are printed. Nothing is asserted.

Run::

    .venv/bin/python benchmarks/bench_ask.py [--doc eu_ai_act_2024_1689_EN] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = (
    "Which AI practices are prohibited?",
    "Who is responsible for the conformity assessment of high-risk AI systems?",
    "What are the penalties for supplying incorrect information to authorities?",
)


def ctxwin(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ctxwin_dagster.cli", "ask", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"ctxwin ask {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doc", default="eu_ai_act_2024_1689_EN")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("CTXWIN_ASK_SERVER", None)
    stop = lambda: ctxwin(["--stop-server"], env)  # noqa: E731
    times: dict[str, list[float]] = {"in process": [], "first": [], "server": []}
    stop()
    for i in range(args.repeat):
        q = QUESTIONS[i % len(QUESTIONS)]
        times["in process"].append(ctxwin([q, "--doc", args.doc, "--no-server"], env))
        stop()
        times["first"].append(ctxwin([q, "--doc", args.doc], env))
    for i in range(args.repeat):
        times["server"].append(ctxwin([QUESTIONS[i % len(QUESTIONS)], "--doc", args.doc], env))
    stop()
    print(f"ctxwin ask on {args.doc}, {args.repeat} runs each, wall seconds ({os.cpu_count()} CPUs):")
    for name, values in times.items():
        print(f"  {name:<11} median {statistics.median(values):6.2f}  range {min(values):.2f}–{max(values):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
