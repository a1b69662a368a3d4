"""The embedding server's resident memory as a corpus goes through it, under allocator settings.

A ``ctxwin run`` of a corpus sends the command's embedding server (``backends/embeddings/server.py``)
thousands of requests: batches of chunks for the three indexes, a few sentences at a time for the
extractive contexts. At 1,000 documents its peak resident memory was 3.9 GB (stop 43), growing
with the corpus though nothing is kept between requests. This replays such a stream against the
real server, started as a command starts it (:class:`~ctxwin_dagster.backends.embeddings.server.EmbeddingService`),
and logs its resident memory (``VmRSS``) and peak (``VmHWM``) every ``--every`` requests, for each
setting of glibc's allocator given with ``--variant NAME=VAR=VALUE,VAR=VALUE`` (``default``: the
server's own environment).

The texts are paragraphs of ``../shared/corpus`` (CUAD contracts, FinanceBench filings) cut to
200-1,200 characters, sent by ``--clients`` threads at once (a command's runs in parallel), in
requests of 64 texts (the indexes') and of 1-10 texts (the contexts'), one small after every
big one.

Run::

    .venv/bin/python benchmarks/bench_embedding_memory.py [--requests 600] [--clients 2]
        [--variant default=] [--variant mmap=MALLOC_MMAP_THRESHOLD_=131072]

Nothing is asserted; the figures go in the issue notes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CORPUS = ROOT.parent / "shared" / "corpus"


def paragraphs(n: int, seed: int = 0) -> list[str]:
    """``n`` pieces of 200-1,200 characters from the corpus's contracts and filings."""
    sources = sorted((CORPUS / "cuad_dev" / "contracts").glob("*.txt"))
    sources += sorted((CORPUS / "financebench_dev" / "documents").rglob("*.txt"))
    rng = random.Random(seed)
    out: list[str] = []
    for path in sources:
        text = path.read_text(encoding="utf-8", errors="replace")
        start = 0
        while start < len(text) and len(out) < n:
            size = rng.randint(200, 1200)
            out.append(text[start : start + size])
            start += size
        if len(out) >= n:
            break
    return out


def memory_mib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) // 1024
    return fields["VmRSS"], fields["VmHWM"]


def replay(variant: str, env: dict[str, str], requests: int, clients: int, every: int) -> dict:
    import httpx

    from ctxwin_dagster.backends.embeddings.local import LOCAL_MODEL_NAME
    from ctxwin_dagster.backends.embeddings.server import EmbeddingService

    with mock.patch.dict(os.environ, env):  # the server's environment is this process's, taken at start
        log = Path(tempfile.mkdtemp(prefix="ctxwin-embmem-")) / "server.log"
        service = EmbeddingService([LOCAL_MODEL_NAME], log=log)
        url = service.start()
    assert service.process is not None
    pid = service.process.pid
    texts = paragraphs(4000)
    done = [0]
    lock = threading.Lock()
    samples: list[tuple[int, float, int, int]] = []
    started = time.perf_counter()

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=url, timeout=900) as http:
            while True:
                with lock:
                    if done[0] >= requests:
                        return
                    done[0] += 2
                    n = done[0]
                for size in (64, rng.randint(1, 10)):
                    batch = rng.sample(texts, size)
                    body = {"model": LOCAL_MODEL_NAME, "input": batch, "encoding_format": "base64", "batch_size": 64}
                    body["truncate"] = True
                    reply = http.post("/v1/embeddings", json=body)
                    reply.raise_for_status()
                if n % every == 0:
                    rss, hwm = memory_mib(pid)
                    samples.append((n, time.perf_counter() - started, rss, hwm))
                    print(
                        f"  {variant}: {n} requests, {time.perf_counter() - started:.0f} s, RSS {rss} MiB, peak {hwm} MiB",
                        flush=True,
                    )

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - started
    rss, hwm = memory_mib(pid)
    service.stop()
    return {
        "variant": variant,
        "env": env,
        "requests": requests,
        "seconds": round(took, 1),
        "rss_mib": rss,
        "peak_mib": hwm,
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument(
        "--variant", action="append", default=[], help="NAME=VAR=VALUE,VAR=VALUE (default=: as shipped)"
    )
    args = parser.parse_args()
    variants = args.variant or ["default="]
    results = []
    for spec in variants:
        name, _, rest = spec.partition("=")
        env = dict(item.split("=", 1) for item in rest.split(",") if item)
        print(f"{name}: {env or 'as shipped'}", flush=True)
        results.append(replay(name, env, args.requests, args.clients, args.every))
    for r in results:
        print(json.dumps({k: v for k, v in r.items() if k != "samples"}))


if __name__ == "__main__":
    main()
