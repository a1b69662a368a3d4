"""Embedding throughput: all-MiniLM-L6-v2 in float32 and in bfloat16, on real chunks.

Chunks are 1,000/100-character recursive chunks of real documents (the EU AI Act in English and
German, then CUAD contracts until ``--n`` chunks). Each round encodes the same texts:

* ``raw float32``    ``SentenceTransformer.encode(texts, batch_size=B)``: the model as loaded by default;
* ``local float32``  ``LocalEmbedder(precision="float32").embed(texts)``: the embedder before bfloat16;
* ``local bfloat16`` ``LocalEmbedder(precision="bfloat16").embed(texts)``: the default on a CPU with
  native bfloat16;
* ``bfloat16+cache`` the same with a new, empty (cold) ``ResponseCache``: every vector is
  encoded and written to SQLite;
* ``warm cache``     the same texts again from that cache (nothing encoded).

The variants alternate within each round (so load changes on a shared machine hit all of
them) and the best round of each is reported, with the cosine between each text's float32 and
bfloat16 vectors. Goals: bfloat16 at least 2x float32's texts per second, every cosine >= 0.99.

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

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxwin_dagster.backends.calls.cache import ResponseCache  # noqa: E402
from ctxwin_dagster.backends.embeddings.local import LocalEmbedder, native_bfloat16  # noqa: E402
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
    f32 = LocalEmbedder(batch_size=args.batch_size, precision="float32").load()
    b16 = LocalEmbedder(batch_size=args.batch_size, precision="bfloat16").load()
    st = f32.sentence_transformer
    print(
        f"models loaded in {time.perf_counter() - t0:.1f}s; torch threads {__import__('torch').get_num_threads()}; "
        f"native bfloat16: {native_bfloat16()}; precision auto = {LocalEmbedder().precision}"
    )
    st.encode(texts[:64], batch_size=args.batch_size)  # warm-up
    b16.sentence_transformer.encode(texts[:64], batch_size=args.batch_size)

    best: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench_emb_"))
    vectors: dict[str, np.ndarray] = {}
    for r in range(args.rounds):
        runs = {}
        t = time.perf_counter()
        raw = st.encode(texts, batch_size=args.batch_size, convert_to_numpy=True, show_progress_bar=False)
        runs["raw float32"] = time.perf_counter() - t

        for name, precision in (("local float32", "float32"), ("local bfloat16", "bfloat16")):
            t = time.perf_counter()
            vectors[precision] = LocalEmbedder(batch_size=args.batch_size, precision=precision).embed(texts)
            runs[name] = time.perf_counter() - t

        cache = ResponseCache(tmp / f"round{r}.sqlite")
        cached_embedder = LocalEmbedder(batch_size=args.batch_size, cache=cache, precision="bfloat16")
        t = time.perf_counter()
        cold = cached_embedder.embed(texts)
        runs["bfloat16+cache"] = time.perf_counter() - t
        assert cached_embedder.stats.cache_hits == 0 and cached_embedder.stats.texts_encoded >= len(set(texts))

        warm_embedder = LocalEmbedder(
            batch_size=args.batch_size, cache=ResponseCache(tmp / f"round{r}.sqlite"), precision="bfloat16"
        )
        t = time.perf_counter()
        warm = warm_embedder.embed(texts)
        runs["warm cache"] = time.perf_counter() - t
        assert warm_embedder.stats.texts_encoded == 0

        diff = max(float(abs(raw - vectors["float32"]).max()), float(abs(cold - warm).max()))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.1f}s" for k, v in runs.items()) + f"; max |Δ| {diff:.1e}")
        for k, v in runs.items():
            best[k] = min(best.get(k, float("inf")), v)

    n = len(texts)
    cosine = (vectors["float32"] * vectors["bfloat16"]).sum(axis=1)
    print()
    print(f"{'variant':<16} {'best s':>8} {'texts/s':>9} {'vs local float32':>17}")
    figures = {}
    for k, v in best.items():
        speedup = best["local float32"] / v
        figures[k] = {"seconds": round(v, 3), "texts_per_s": round(n / v, 1), "speedup": round(speedup, 2)}
        print(f"{k:<16} {v:8.2f} {n / v:9.1f} {speedup:16.2f}x")
    print(
        f"bfloat16 vs float32 cosine: min {cosine.min():.4f}, 1st percentile {np.percentile(cosine, 1):.4f}, "
        f"mean {cosine.mean():.5f} (goal ≥ 0.99)"
    )
    print(f"bfloat16 speed-up {figures['local bfloat16']['speedup']:.2f}x (goal ≥ 2x)")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "n": n,
                    "batch_size": args.batch_size,
                    "native_bfloat16": native_bfloat16(),
                    "figures": figures,
                    "cosine": {
                        "min": round(float(cosine.min()), 5),
                        "p1": round(float(np.percentile(cosine, 1)), 5),
                        "mean": round(float(cosine.mean()), 6),
                    },
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
