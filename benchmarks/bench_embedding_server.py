"""Small requests to the command's embedding server against the same texts encoded in process.

The answer stages ask the embedding server (``backends/embeddings/server.py``) for each question's
few new sentences, so a run sends it hundreds of requests of 1 to 10 texts per document: their
fixed cost is what this measures. Each figure is the mean of ``--n`` requests after one warm-up.

Measured 2026-11-27 on the project's 2-core machine: one text 60.3 ms through the server before
the server's replies were sent with Nagle's algorithm off, 14.2 ms after (11.6 ms in process);
five texts 67.8 ms before, 19.3 ms after (15.5 ms in process).

Run::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_embedding_server.py [--n 20]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _mean_ms(call, n: int) -> float:
    call()
    started = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - started) / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20, help="requests per figure (default 20)")
    args = parser.parse_args()

    import httpx

    from ctxwin_dagster.backends.embeddings.local import LOCAL_MODEL_NAME, LocalEmbedder
    from ctxwin_dagster.backends.embeddings.server import ENV_VAR, EmbeddingService

    service = EmbeddingService([LOCAL_MODEL_NAME], log=Path(tempfile.mkdtemp()) / "embeddings.log")
    url = service.start()
    try:
        client = httpx.Client(base_url=url, timeout=600)
        os.environ[ENV_VAR] = "off"
        model = LocalEmbedder().load().sentence_transformer
        for k in (1, 5):
            texts = [f"A short sentence number {i} about the Normans and their castles." for i in range(k)]
            body = {"model": LOCAL_MODEL_NAME, "input": texts, "encoding_format": "base64", "batch_size": 64}
            served = _mean_ms(lambda body=body: client.post("/v1/embeddings", json=body).raise_for_status(), args.n)
            here = _mean_ms(
                lambda texts=texts: model.encode(texts, batch_size=64, convert_to_numpy=True, show_progress_bar=False),
                args.n,
            )
            print(f"{k} text(s): {served:.1f} ms a request through the server, {here:.1f} ms in process")
    finally:
        service.stop()


if __name__ == "__main__":
    main()
