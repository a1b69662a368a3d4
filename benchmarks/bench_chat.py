"""Throughput of OpenAIChatBackend against FakeOpenAIServer (nothing leaves 127.0.0.1).

200 chat calls at 200 ms server latency with ``max_concurrency`` 16. The ideal wall time is
200 / 16 × 0.2 s = 2.5 s (with a hard cap of 16 in flight, 13 full rounds = 2.6 s is the real
floor); efficiency = ideal / wall, goal ≥ 90 %. A second run with the same response cache must
make 0 server calls.

By default the fake server runs in its own process, as a real server would, so the figures are
the client's. ``--in-process`` runs it in a thread of this process instead; its request handling
then competes with the client for the GIL (a pessimistic setting). A warm-up batch (one-time
import and connection costs) is timed and reported apart. No timed assertions: it prints.

Run::

    .venv/bin/python benchmarks/bench_chat.py [--calls 200] [--latency 0.2] [--concurrency 16] [--in-process]
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ctxwin_dagster.backends.base import CallTags, ChatRequest, Ledger
from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
from ctxwin_dagster.testing import FakeOpenAIServer

MODEL = "llama3.1:8b"


class _InProcess:
    """FakeOpenAIServer in a thread of this process."""

    def __init__(self, latency_s: float) -> None:
        self.server = FakeOpenAIServer(latency_s=latency_s).start()
        self.base_url = self.server.base_url

    def stats(self) -> dict[str, int]:
        return {"requests": self.server.request_count, "max_in_flight": self.server.max_in_flight}

    def reset(self) -> None:
        self.server.reset()

    def stop(self) -> None:
        self.server.stop()


def _serve(conn: Connection, latency_s: float) -> None:
    server = FakeOpenAIServer(latency_s=latency_s).start()
    conn.send(server.base_url)
    while True:
        cmd = conn.recv()
        if cmd == "stats":
            conn.send({"requests": server.request_count, "max_in_flight": server.max_in_flight})
        elif cmd == "reset":
            server.reset()
            conn.send(None)
        else:
            server.stop()
            conn.send(None)
            return


class _OtherProcess:
    """FakeOpenAIServer in a spawned process, driven over a pipe."""

    def __init__(self, latency_s: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, latency_s), daemon=True)
        self.proc.start()
        self.base_url = self.conn.recv()

    def _ask(self, cmd: str) -> Any:
        self.conn.send(cmd)
        return self.conn.recv()

    def stats(self) -> dict[str, int]:
        return self._ask("stats")

    def reset(self) -> None:
        self._ask("reset")

    def stop(self) -> None:
        self._ask("stop")
        self.proc.join(timeout=10)


def make_requests(n: int, prefix: str = "Chunk") -> list[ChatRequest]:
    system = {"role": "system", "content": "Situate the chunk within the document in one sentence."}
    return [
        ChatRequest(
            messages=(system, {"role": "user", "content": f"{prefix} {i}: " + "Article text about obligations. " * 30}),
            tags=CallTags("contextualize", "bench-doc", "swb"),
            prompt_version="bench-v1",
        )
        for i in range(n)
    ]


def timed_run(
    base_url: str, cache_path: Path | None, reqs: list[ChatRequest], concurrency: int
) -> tuple[float, Ledger, float]:
    """Wall time of one complete_many with a new backend; also client CPU seconds."""
    ledger = Ledger()
    with OpenAIChatBackend(
        model=MODEL,
        base_url=base_url,
        cache=ResponseCache(cache_path) if cache_path else None,
        max_concurrency=concurrency,
        ledger=ledger,
        price_overrides={MODEL: (0.0, 0.0)},
    ) as chat:
        cpu0, t0 = time.process_time(), time.perf_counter()
        results = chat.complete_many(reqs)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert len(results) == len(reqs) and all(r.text for r in results)
    return wall, ledger, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description="OpenAIChatBackend throughput against FakeOpenAIServer")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--latency", type=float, default=0.2, help="server latency per call, seconds")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--in-process", action="store_true", help="run the fake server in this process")
    args = ap.parse_args()
    n, conc, lat = args.calls, args.concurrency, args.latency

    ideal = n / conc * lat
    floor = -(-n // conc) * lat
    server = _InProcess(lat) if args.in_process else _OtherProcess(lat)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            warm_wall, _, _ = timed_run(server.base_url, None, make_requests(2 * conc, "Warm-up"), conc)
            server.reset()
            cache_path = Path(tmp) / "responses.sqlite"
            reqs = make_requests(n)
            cold_wall, cold_ledger, cold_cpu = timed_run(server.base_url, cache_path, reqs, conc)
            cold_stats = server.stats()
            server.reset()
            hot_wall, hot_ledger, _ = timed_run(server.base_url, cache_path, reqs, conc)
            hot_stats = server.stats()
    finally:
        server.stop()

    cold, hot = cold_ledger.totals(), hot_ledger.totals()
    where = "in this process" if args.in_process else "in its own process"
    print(f"{n} calls, server latency {lat * 1000:.0f} ms, max_concurrency {conc}, fake server {where}")
    print(f"warm-up ({2 * conc} calls, first use in this process): {warm_wall:.3f} s")
    print(
        f"cache cold: wall {cold_wall:.3f} s vs ideal {ideal:.3f} s -> efficiency {ideal / cold_wall:.1%} "
        f"({floor / cold_wall:.1%} of the {floor:.1f} s floor of {-(-n // conc)} full rounds)"
    )
    print(
        f"            server calls {cold_stats['requests']}, peak in flight {cold_stats['max_in_flight']}, "
        f"attempts {sum(r.attempts for r in cold_ledger.records)}, client CPU {cold_cpu / n * 1000:.2f} ms/call, "
        f"mean call latency {cold['latency_s'] / n * 1000:.0f} ms"
    )
    print(
        f"            tokens in/out {cold['input_tokens']}/{cold['output_tokens']}, chars in {cold['input_chars']}, "
        f"cost ${cold['cost_usd']:.4f}"
    )
    print(
        f"cache warm: wall {hot_wall:.3f} s, server calls {hot_stats['requests']}, cache hits {hot['cache_hits']}, "
        f"input tokens reported from the cache {hot['input_tokens']}"
    )


if __name__ == "__main__":
    main()
