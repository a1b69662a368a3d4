"""Retrieval over a folder of different kinds: one contract beside articles and a law.

A user's folder is seldom one kind of document. The sample folder holds contracts, SQuAD
articles and the EU AI Act; asked of the whole folder, "Which country's law governs this
agreement?" found the AI Act's clause on "the law of a third country with which the Union has
concluded an agreement" before the contract's governing-law clause. ``ctxwin ask`` now routes a
question that points at a kind of document ("this agreement", "this contract", "this
regulation") to the folder's documents of that kind
(:class:`~ctxwin_dagster.core.retrieval.routing.DocumentRouter`).

Here each CUAD contract is put in a folder with the 16 SQuAD articles and the EU AI Act (the
sample's text), and its answerable questions (all of the form "… of this contract …") are asked
of the whole folder, with the project's own code (all-MiniLM-L6-v2, 1,000/100 chunks):

* the ``ask`` default (folder routing by period and by kind);
* the ``ask`` default routing by period only (as before the kind);
* top-4 chunks of the whole folder (T-RAG).

**Span hit** counts a CUAD reference span inside the context, within the contract (the other
documents' characters count in *chars*, never as a hit). Contracts are split as in
``retrieval_quality.py``: the first 40 *tune* (where the kind rule was decided), the other 111
*report*.

Run::

    HF_HUB_OFFLINE=1 .venv/bin/python evaluations/kind_folder.py
"""

from __future__ import annotations

import argparse
import hashlib
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
from ctxwin_dagster.core.retrieval.routing import DocumentRouter, question_kind  # noqa: E402
from ctxwin_dagster.core.text.splitting import RecursiveSplitter  # noqa: E402

AI_ACT = ROOT / "data" / "documents" / "eu_ai_act_2024_1689_EN.txt"
ASK = "**`ask` (default)**"
TECHNIQUES = {
    "`ask` (default): folder routed by period and by kind": ASK,
    "`ask` routed by period only (before the kind)": ASK,
    "top-4 chunks of the whole folder (T-RAG) *(unmerged)*": "top-4 chunks as retrieved",
}


class PeriodsOnly(DocumentRouter):
    """The router as it was before the kind: a question's "this agreement" narrows nothing."""

    def of_kind(self, question: str) -> list[str] | None:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=rq.CORPUS)
    parser.add_argument(
        "--cache", type=Path, default=ROOT / "data" / "cache" / "retrieval_eval_embeddings.sqlite", help="vector cache"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "evaluations" / "reports")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    docs, items, _ = rq.load(args.corpus)
    text = AI_ACT.read_text(encoding="utf-8")
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    chunks = RecursiveSplitter(chunk_size=1000, chunk_overlap=100).split(text, doc_id=AI_ACT.stem, doc_sha256=sha)
    docs[AI_ACT.stem] = rq.Doc(AI_ACT.stem, "law", text, chunks, "none")
    embedder = LocalEmbedder(cache=ResponseCache(args.cache), batch_size=64)
    qv = rq.embed(docs, items, embedder, sentence_index_splits=())
    parts = fb.question_vectors(items, qv, embedder)
    scorer = rq.SentenceScorer(docs, embedder)
    others = {d: x for d, x in docs.items() if x.dataset != "cuad"}
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for contract in (d for d, x in docs.items() if x.dataset == "cuad"):
        folder_docs = {contract: docs[contract], **others}
        asked = [(q, v) for q, v in zip(items, qv) if q.doc_id == contract]
        for name, prefix in TECHNIQUES.items():
            folder = fb.Folder(folder_docs)
            if "period only" in name:
                folder.router = PeriodsOnly(folder.router.cards)
            run = next(r for n, _, r in fb.techniques(folder_docs, folder, scorer, parts) if n.startswith(prefix))
            for q, v in asked:
                blocks = run("folder", q, v)
                mine = [(s, e) for d, s, e in blocks if d == contract]
                hit = rq.score(q.reference_spans, mine)[0]
                rows.setdefault((name, docs[contract].split), []).append((hit, sum(e - s for _, s, e in blocks)))
    results = []
    for name in TECHNIQUES:
        row: dict = {"technique": name}
        for split in rq.SPLITS:
            hits = [h for h, _ in rows[(name, split)]]
            lo, hi = bootstrap_mean_ci(hits, n_boot=2000, seed=0)
            row[split] = {
                "n": len(hits),
                "span_hit": float(np.mean(hits)),
                "span_hit_ci95": [lo, hi],
                "chars": float(np.mean([c for _, c in rows[(name, split)]])),
            }
        results.append(row)
        print(
            f"  {name:<60} "
            + " ".join(f"{s} {100 * row[s]['span_hit']:5.1f}% {row[s]['chars']:6,.0f}" for s in rq.SPLITS)
        )
    squad_kind = [q.question for q in items if docs[q.doc_id].dataset == "squad" and question_kind(q.question)]
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "embedding": f"{embedder.model} ({embedder.precision})",
        "contracts": {s: sum(1 for x in docs.values() if x.dataset == "cuad" and x.split == s) for s in rq.SPLITS},
        "others": sorted(others),
        "squad_questions": sum(1 for q in items if docs[q.doc_id].dataset == "squad"),
        "squad_pointing_at_a_kind": squad_kind,
        "runtime_s": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "kind_folder.json"
    out.write_text(
        json.dumps({"meta": meta, "results": results}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"wrote {out} ({meta['runtime_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
