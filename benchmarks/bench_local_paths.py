"""The local model's two paths on the same prompts: transformers in process, and llama.cpp's server.

The prompts are CC-RAG's (the whole excerpt, then one chunk) for the chunks of the first ~5,500
characters of the sample's 1973 oil crisis document, as ``make run-llm`` sends them, with
replies of at most ``--max-tokens`` tokens at temperature 0. Each path answers every prompt once,
one at a time, with no response cache: :class:`~ctxwin_dagster.backends.chat.local.LocalChatBackend`
(the weights de-quantized by transformers, one torch thread) and the llama.cpp server that
ctxwin starts (:mod:`ctxwin_dagster.backends.chat.llama_server`; its start is timed apart).

Run::

    .venv/bin/python benchmarks/bench_local_paths.py [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=64, help="most tokens of a reply (default 64)")
    args = parser.parse_args()

    from ctxwin_dagster.backends.base import ChatRequest
    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
    from ctxwin_dagster.backends.chat.llama_server import LlamaServer
    from ctxwin_dagster.backends.chat.local import LocalChatBackend
    from ctxwin_dagster.backends.chat.local_model import register_local_model
    from ctxwin_dagster.core.methods.prompts import get_template
    from ctxwin_dagster.core.text.splitting import RecursiveSplitter

    text = (ROOT / "data" / "documents" / "squad_1973_oil_crisis.txt").read_text(encoding="utf-8")
    excerpt = ""
    for paragraph in text.split("\n\n"):
        if len(excerpt) + len(paragraph) > 5_500:
            break
        excerpt += paragraph + "\n\n"
    chunks = RecursiveSplitter(chunk_size=1000, chunk_overlap=100).split(excerpt, doc_id="x", doc_sha256="-")
    tpl = get_template("cc_context", "en")
    requests = [
        ChatRequest(
            messages=tuple(tpl.render(document=excerpt, chunk=c.text)), max_tokens=args.max_tokens, temperature=0.0
        )
        for c in chunks
    ]
    limits = register_local_model(MODEL)[1]
    times: dict[str, list[float]] = {}
    tokens: dict[str, int] = {}

    local = LocalChatBackend(model=MODEL, max_new_tokens=args.max_tokens, batch_size=1)
    t = time.perf_counter()
    local.complete(ChatRequest(messages=({"role": "user", "content": "Hi"},), max_tokens=1))  # loads the weights
    load_local = time.perf_counter() - t
    times["in process (transformers)"] = []
    for r in requests:
        t = time.perf_counter()
        local.complete(r)
        times["in process (transformers)"].append(time.perf_counter() - t)
    tokens["in process (transformers)"] = sum(rec.output_tokens for rec in local.ledger.records[1:])

    log = Path(tempfile.mkdtemp(prefix="ctxwin-paths-")) / "server.log"
    with LlamaServer(MODEL, log=log) as server:
        t = time.perf_counter()
        url = server.start()
        load_server = time.perf_counter() - t
        with OpenAIChatBackend(model=MODEL, base_url=url, api_key="local", limits=limits, max_concurrency=1) as chat:
            name = "llama.cpp server"
            times[name] = []
            for r in requests:
                t = time.perf_counter()
                chat.complete(r)
                times[name].append(time.perf_counter() - t)
            tokens[name] = sum(rec.output_tokens for rec in chat.ledger.records)
            cached = sum(rec.cached_tokens for rec in chat.ledger.records)
            prompt = sum(rec.input_tokens for rec in chat.ledger.records)
    print(
        f"{len(requests)} CC-RAG prompts over a {len(excerpt):,}-character excerpt, replies ≤ {args.max_tokens} tokens; "
        f"load {os.getloadavg()[0]:.1f}; model load: in process {load_local:.1f} s, server start {load_server:.1f} s; "
        f"server: {cached:,} of {prompt:,} prompt tokens from its cache"
    )
    print("| path | calls | total s | mean s per call | median s | output tokens |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, values in times.items():
        print(
            f"| {name} | {len(values)} | {sum(values):.1f} | {statistics.fmean(values):.2f} | "
            f"{statistics.median(values):.2f} | {tokens[name]} |"
        )
    a, b = (sum(v) for v in times.values())
    print(f"speed-up: {a / b:.1f}x")


if __name__ == "__main__":
    main()
