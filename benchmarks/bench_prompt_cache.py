"""CC-RAG's cost with prompt caching, beside SWB-RAG's, through a real server: llama.cpp's.

The SWB-RAG paper prices CC-RAG as if every chunk's call paid for the whole document again.
Servers with prompt caching (OpenAI, Anthropic, Gemini, vLLM, llama.cpp) serve a prompt's
repeated prefix from cache, and CC-RAG's prompts all start with the same document (ctxwin puts it
first and the chunk last). This measures what that changes, on one document, with the project's
own task engine (:class:`~ctxwin_dagster.backends.tasks.llm.LLMTasks`) and its chunker:

1. starts llama.cpp's server for ``local:smollm2`` on loopback (:mod:`ctxwin_dagster.backends.chat.llama_server`);
2. CC-RAG: one call per chunk with the whole document; SWB-RAG: the global summary, then one
   call per batch of 5 chunks with the summary and ±20,000 characters. No response cache: every
   call goes to the server;
3. reads each reply's usage: prompt tokens, and the prompt tokens the server took from the
   context it kept (``usage.prompt_tokens_details.cached_tokens``);
4. prices the same token counts at a priced model's rates (``--price-model``, default the paper's
   Gemini 1.5 Flash, from genai-prices), with every input token at the input price and with the
   cached ones at the provider's cache-read price.

Run::

    .venv/bin/python benchmarks/bench_prompt_cache.py [--doc data/documents/cuad_todos_medical_reseller.txt]

It writes ``prompt_cache.md`` and ``prompt_cache.json`` in ``--out`` (default
``evaluations/reports/prompt_cache``). Nothing is asserted; the figures go in the issue notes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL = "local:smollm2"


def _sums(records: list[Any]) -> dict[str, Any]:
    return {
        "calls": len(records),
        "input_tokens": sum(r.input_tokens for r in records),
        "cached_tokens": sum(r.cached_tokens for r in records),
        "output_tokens": sum(r.output_tokens for r in records),
        "model_seconds": round(sum(r.latency_s for r in records), 2),
        "failures": sum(not r.ok for r in records),
    }


def _priced(row: dict[str, Any], model: str) -> dict[str, Any]:
    from ctxwin_dagster.backends.planning.pricing import estimate_cost

    full = estimate_cost(model, input_tokens=row["input_tokens"], output_tokens=row["output_tokens"])
    cached = estimate_cost(
        model, input_tokens=row["input_tokens"], output_tokens=row["output_tokens"], cached_tokens=row["cached_tokens"]
    )
    return {**row, "usd_without_caching": full, "usd_with_caching": cached}


def _peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident memory (Linux's VmHWM), in MB; None where /proc has no such line."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--doc",
        default=str(ROOT / "data" / "documents" / "cuad_todos_medical_reseller.txt"),
        help="the document (default: the sample's Todos contract)",
    )
    parser.add_argument("--max-tokens", type=int, default=128, help="most tokens of a context reply (default 128)")
    parser.add_argument("--summary-tokens", type=int, default=300, help="the global summary's length (default 300)")
    parser.add_argument(
        "--price-model", default="gemini-1.5-flash", help="whose prices (default: gemini-1.5-flash, the paper's)"
    )
    parser.add_argument("--out", default=str(ROOT / "evaluations" / "reports" / "prompt_cache"), help="report folder")
    args = parser.parse_args()

    from ctxwin_dagster.backends.chat.factory import make_chat_backend
    from ctxwin_dagster.backends.chat.llama_server import ENV_VAR, LlamaServer
    from ctxwin_dagster.backends.tasks.llm import LLMTasks
    from ctxwin_dagster.core.defaults import PAPER
    from ctxwin_dagster.core.text.splitting import RecursiveSplitter

    doc = Path(args.doc)
    text = doc.read_text(encoding="utf-8")
    chunks = RecursiveSplitter(chunk_size=PAPER.chunk_size, chunk_overlap=PAPER.chunk_overlap).split(
        text, doc_id=doc.stem, doc_sha256="-"
    )
    log = Path(tempfile.mkdtemp(prefix="ctxwin-cache-")) / "server.log"
    with LlamaServer(MODEL, log=log) as server:
        started = time.perf_counter()
        url = server.start()
        start_s = time.perf_counter() - started
        os.environ[ENV_VAR] = f"{MODEL}={url}"
        chat = make_chat_backend(MODEL, max_new_tokens=2048)  # the requests set their own limits
        tasks = LLMTasks(chat, max_tokens=args.max_tokens)
        rows: dict[str, dict[str, Any]] = {}
        with chat:
            t = time.perf_counter()
            tasks.contextualize_cc(text, chunks, doc_id=doc.stem)
            cc = list(chat.ledger.records)
            rows["CC-RAG"] = {**_sums(cc), "wall_s": round(time.perf_counter() - t, 1)}
            t = time.perf_counter()
            summary = tasks.summarize(text, doc_id=doc.stem, max_tokens=args.summary_tokens)
            tasks.contextualize_swb(text, chunks, summary.text, doc_id=doc.stem)
            swb = list(chat.ledger.records)[len(cc) :]
            rows["SWB-RAG (summary and batches)"] = {**_sums(swb), "wall_s": round(time.perf_counter() - t, 1)}
        peak_mb = _peak_rss_mb(server.process.pid) if server.process is not None else None
    from ctxwin_dagster.backends.planning.plan import plan_document

    # What `ctxwin plan` estimates for the same document without calling a model (OpenAI's caching rule).
    plan = plan_document(text, doc_id=doc.stem, model=args.price_model)
    priced = {name: _priced(row, args.price_model) for name, row in rows.items()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    facts = {
        "document": str(doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc),
        "characters": len(text),
        "chunks": len(chunks),
        "model": MODEL,
        "server": "llama-cpp-python[server] 0.3.36 (llama.cpp), started on loopback",
        "server_start_s": round(start_s, 2),
        "server_peak_rss_mb": peak_mb,
        "max_tokens": args.max_tokens,
        "price_model": args.price_model,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end",
        "rows": priced,
        "plan": {v: plan[v] for v in ("cc_rag", "swb_rag")},
    }
    (out / "prompt_cache.json").write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    lines = [
        "# CC-RAG with prompt caching, beside SWB-RAG, through llama.cpp's server",
        "",
        f"Document `{facts['document']}`: {len(text):,} characters, {len(chunks)} chunks "
        f"({PAPER.chunk_size}/{PAPER.chunk_overlap}). Model {MODEL} served by {facts['server']} "
        f"(ready in {start_s:.1f} s, peak memory {peak_mb} MB); context replies of at most {args.max_tokens} tokens, a summary of at most "
        f"{args.summary_tokens}; no response cache. "
        f"Prices: {args.price_model}'s input, cache-read and output rates (genai-prices). "
        f"Machine: {facts['machine']}.",
        "",
        "| | calls | input tokens | of them from the server's cache | share | output tokens | wall s | "
        "USD without caching | USD with caching |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in priced.items():
        share = r["cached_tokens"] / r["input_tokens"] if r["input_tokens"] else 0.0
        lines.append(
            f"| {name} | {r['calls']} | {r['input_tokens']:,} | {r['cached_tokens']:,} | {share:.1%} | "
            f"{r['output_tokens']:,} | {r['wall_s']} | {r['usd_without_caching']:.6f} | {r['usd_with_caching']:.6f} |"
        )
    cc_row, swb_row = priced["CC-RAG"], priced["SWB-RAG (summary and batches)"]
    if cc_row["usd_with_caching"] and swb_row["usd_with_caching"]:
        lines += [
            "",
            f"SWB-RAG costs {swb_row['usd_without_caching'] / cc_row['usd_without_caching']:.1%} of CC-RAG "
            f"when CC-RAG pays for every token (the paper's comparison), and "
            f"{swb_row['usd_with_caching'] / cc_row['usd_with_caching']:.1%} of CC-RAG when both are served "
            "with caching.",
        ]
    p_cc, p_swb = plan["cc_rag"], plan["swb_rag"]
    if p_cc["cost_usd_est"] and p_cc["cost_usd_est_cached"]:
        lines += [
            "",
            f"`ctxwin plan` estimates, for the same document and prices without calling a model (with its own "
            f"output lengths, and OpenAI's caching rule: prompts of 1,024 tokens or more, blocks of 128): CC-RAG "
            f"{p_cc['input_tokens']:,} input tokens, {p_cc['cached_tokens_est']:,} of them cached, "
            f"${p_cc['cost_usd_est']:.4f} without caching and ${p_cc['cost_usd_est_cached']:.4f} with it; SWB-RAG "
            f"{p_swb['input_tokens']:,}, {p_swb['cached_tokens_est']:,} cached, ${p_swb['cost_usd_est']:.4f} and "
            f"${p_swb['cost_usd_est_cached']:.4f}: SWB-RAG at {p_swb['cost_usd_est'] / p_cc['cost_usd_est']:.1%} "
            f"of CC-RAG without caching and {p_swb['cost_usd_est_cached'] / p_cc['cost_usd_est_cached']:.1%} with it.",
        ]
    (out / "prompt_cache.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
