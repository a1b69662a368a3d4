"""Requests in flight against llama.cpp's server of the local model: what more of them buys.

llama-cpp-python's server answers one request at a time (one llama.cpp context behind a lock;
it has no parallel slots, unlike llama.cpp's own ``llama-server --parallel N``), so requests
beyond the first only wait there. This sends the same 8 short questions over different passages
with 1, 2 and 4 in flight and reports the wall time, so that ctxwin's setting (2 in flight: one
answered, one ready) rests on a figure. No response cache.

Run::

    .venv/bin/python benchmarks/bench_llama_concurrency.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL = "local:smollm2"


def main() -> None:
    from ctxwin_dagster.backends.base import ChatRequest
    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
    from ctxwin_dagster.backends.chat.llama_server import LlamaServer
    from ctxwin_dagster.backends.chat.local_model import register_local_model

    text = (ROOT / "data" / "documents" / "squad_Normans.txt").read_text(encoding="utf-8")
    passages = [p for p in text.split("\n\n") if len(p) > 400][:8]
    limits = register_local_model(MODEL)[1]
    log = Path(tempfile.mkdtemp(prefix="ctxwin-conc-")) / "server.log"
    rows = []
    with LlamaServer(MODEL, log=log) as server:
        url = server.start()
        for in_flight in (1, 2, 4):
            requests = [
                ChatRequest(
                    messages=({"role": "user", "content": f"({in_flight}) {p}\n\nWho is this passage about?"},),
                    max_tokens=32,
                    temperature=0.0,
                )
                for p in passages
            ]
            with OpenAIChatBackend(
                model=MODEL, base_url=url, api_key="local", limits=limits, max_concurrency=in_flight, timeout_s=600
            ) as chat:
                started = time.perf_counter()
                chat.complete_many(requests)
                rows.append((in_flight, time.perf_counter() - started))
    print(f"{len(passages)} requests, replies of at most 32 tokens; load {os.getloadavg()[0]:.1f}")
    print("| in flight | wall s | s per request |")
    print("|---:|---:|---:|")
    for in_flight, wall in rows:
        print(f"| {in_flight} | {wall:.1f} | {wall / len(passages):.2f} |")


if __name__ == "__main__":
    main()
