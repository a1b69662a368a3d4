"""Embedding throughput: LocalEmbedder vs raw ``SentenceTransformer.encode`` on real chunks.

Chunks are 1,000/100-character recursive chunks of real documents (the EU AI Act in English and
German, then CUAD contracts until ``--n`` chunks). Each round encodes the same texts:

* ``raw``          ``SentenceTransformer.encode(texts, batch_size=B)`` — the floor;
* ``local``        ``LocalEmbedder(batch_size=B).embed(texts)`` — no cache;
* ``local+cache``  the same with a new, empty (cold) ``ResponseCache``: every vector is
  encoded and written to SQLite;
* ``warm cache``   the same texts again from that cache (nothing encoded).

The variants alternate within each round (so load changes on a shared machine hit all of
them) and the best round of each is reported. Goal: ``local`` and ``local+cache`` within 10 %
of ``raw``.

Run::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_embeddings.py --n 2000 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxwin_dagster.backends.calls.cache import ResponseCache  # noqa: E402
from ctxwin_dagster.backends.embeddings.local import LocalEmbedder  # noqa: E402
from ctxwin_dagster.core.text.splitting import RecursiveSplitter  # noqa: E402

CORPUS = Path(os.environ.get("CTXWIN_CORPUS", ROOT.parent / "shared" / "corpus"))
if not CORPUS.exists():
    CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"  # ../shared beside the clone


def real_chunks(n: int) -> list[str]:
    """``n`` distinct 1,000/100-char chunks of real documents."""
    splitter = RecursiveSplitter(chunk_size=1000, chunk_overlap=100)
    files = [
        CORPUS / "eu_ai_act" / "eu_ai_act_2024_1689_EN.txt",
        CORPUS / "eu_ai_act" / "eu_ai_act_2024_1689_DE.txt",
        *sorted((CORPUS / "cuad_dev" / "contracts").glob("*.txt")),
    ]
    out: list[str] = []
    seen: set[str] = set()
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for chunk in splitter.split(text, doc_id=path.stem[:40] or "doc", doc_sha256=path.name):
            if chunk.text not in seen:
                seen.add(chunk.text)
                out.append(chunk.text)
            if len(out) == n:
                return out
    if len(out) < n:
        print(f"only {len(out)} chunks available", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000, help="number of chunks (default 2000)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    texts = real_chunks(args.n)
    mean_chars = sum(map(len, texts)) / len(texts)
    print(f"{len(texts)} chunks, mean {mean_chars:.0f} chars, batch_size {args.batch_size}, {args.rounds} rounds")

    t0 = time.perf_counter()
    embedder = LocalEmbedder(batch_size=args.batch_size).load()
    st = embedder.sentence_transformer
    print(f"model load {time.perf_counter() - t0:.1f}s; torch threads {__import__('torch').get_num_threads()}")
    st.encode(texts[:64], batch_size=args.batch_size)  # warm-up

    best: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench_emb_"))
    for r in range(args.rounds):
        runs = {}
        t = time.perf_counter()
        raw = st.encode(texts, batch_size=args.batch_size, convert_to_numpy=True, show_progress_bar=False)
        runs["raw"] = time.perf_counter() - t

        t = time.perf_counter()
        local = LocalEmbedder(batch_size=args.batch_size).embed(texts)
        runs["local"] = time.perf_counter() - t

        cache = ResponseCache(tmp / f"round{r}.sqlite")
        cached_embedder = LocalEmbedder(batch_size=args.batch_size, cache=cache)
        t = time.perf_counter()
        cold = cached_embedder.embed(texts)
        runs["local+cache"] = time.perf_counter() - t
        assert cached_embedder.stats.texts_encoded == len(texts)

        warm_embedder = LocalEmbedder(batch_size=args.batch_size, cache=ResponseCache(tmp / f"round{r}.sqlite"))
        t = time.perf_counter()
        warm = warm_embedder.embed(texts)
        runs["warm cache"] = time.perf_counter() - t
        assert warm_embedder.stats.texts_encoded == 0

        diff = max(float(abs(raw - local).max()), float(abs(raw - cold).max()), float(abs(cold - warm).max()))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.1f}s" for k, v in runs.items()) + f"; max |Δ| {diff:.1e}")
        for k, v in runs.items():
            best[k] = min(best.get(k, float("inf")), v)

    n = len(texts)
    print()
    print(f"{'variant':<12} {'best s':>8} {'texts/s':>9} {'vs raw':>8}")
    figures = {}
    for k, v in best.items():
        overhead = (v / best["raw"] - 1) * 100
        figures[k] = {"seconds": round(v, 3), "texts_per_s": round(n / v, 1), "overhead_pct": round(overhead, 1)}
        print(f"{k:<12} {v:8.2f} {n / v:9.1f} {overhead:+7.1f}%")
    for k in ("local", "local+cache"):
        verdict = "OK" if figures[k]["overhead_pct"] <= 10 else "OVER"
        print(f"{k}: overhead {figures[k]['overhead_pct']:+.1f}% (goal ≤ 10 %) {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"n": n, "batch_size": args.batch_size, "figures": figures}, indent=2))


if __name__ == "__main__":
    main()
