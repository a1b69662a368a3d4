"""Retrieval over SQuAD's whole folder: the question's own article against all 16 articles.

``ctxwin ask`` without ``--doc`` searches the experiment's whole index. Here the 16 articles of
``../shared/corpus/squad_v2_dev_half/`` are one folder, and each answerable question is asked of
its own article (``--doc``) and of the whole folder, with the same techniques as
``financebench_retrieval.py`` (the project's own code, all-MiniLM-L6-v2, 1,000/100 chunks).

**Span hit**: an annotated answer span lies inside the context, within the question's own
article (context taken from other articles counts in the characters, never as a hit). The
articles are split as in ``retrieval_quality.py``: the first 8 *tune*, the other 8 *report*;
the folder always holds all 16, as a user's folder would.

Run::

    HF_HUB_OFFLINE=1 .venv/bin/python evaluations/squad_folder.py
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import financebench_retrieval as fb  # noqa: E402
import numpy as np  # noqa: E402
import retrieval_quality as rq  # noqa: E402

from ctxwin_dagster.backends.calls.cache import ResponseCache  # noqa: E402
from ctxwin_dagster.backends.embeddings.local import LocalEmbedder  # noqa: E402
from ctxwin_dagster.core.evaluation.metrics.aggregation import bootstrap_mean_ci  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=rq.CORPUS)
    parser.add_argument(
        "--cache", type=Path, default=ROOT / "data" / "cache" / "retrieval_eval_embeddings.sqlite", help="vector cache"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "evaluations" / "reports")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    docs, items, _ = rq.load(args.corpus, cuad_contracts=0)
    embedder = LocalEmbedder(cache=ResponseCache(args.cache), batch_size=64)
    qv = rq.embed(docs, items, embedder, sentence_index_splits=())
    parts = fb.question_vectors(items, qv, embedder)
    folder = fb.Folder(docs)
    scorer = rq.SentenceScorer(docs, embedder)
    results = []
    for name, merged, run in fb.techniques(docs, folder, scorer, parts):
        row: dict = {"technique": name, "merged": merged}
        for scope in fb.SCOPES:
            for split in rq.SPLITS:
                hits, chars, own = [], [], []
                for q, v in zip(items, qv):
                    if docs[q.doc_id].split != split:
                        continue
                    blocks = run(scope, q, v)
                    mine = [(s, e) for d, s, e in blocks if d == q.doc_id]
                    hits.append(rq.score(q.reference_spans, mine)[0])
                    total = sum(e - s for _, s, e in blocks)
                    chars.append(total)
                    own.append(sum(e - s for s, e in mine) / max(1, total))
                lo, hi = bootstrap_mean_ci(hits, n_boot=2000, seed=0)
                row[f"{scope}_{split}"] = {
                    "n": len(hits),
                    "span_hit": float(np.mean(hits)),
                    "span_hit_ci95": [lo, hi],
                    "chars": float(np.mean(chars)),
                    "own_article_share": float(np.mean(own)),
                }
        results.append(row)
        fb.print_row(row, "span_hit")
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "embedding": f"{embedder.model} ({embedder.precision})",
        "articles": len(docs),
        "chunks": sum(len(d.chunks) for d in docs.values()),
        "questions": {s: sum(1 for q in items if docs[q.doc_id].split == s) for s in rq.SPLITS},
        "runtime_s": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "squad_folder.json"
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out} ({meta['runtime_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
