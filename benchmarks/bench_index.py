"""Index upkeep and search at 10 K-100 K rows: is the cost of one more document flat?

For each table size the script builds a ``ChunkIndex`` table of synthetic 384-d rows (250
chunks per document), brings its indexes up to date as the index assets do
(``ChunkIndex.maintain``), then measures with ``ChunkIndex`` itself:

* **write + index one more document**: ``replace_document`` (merge on ``chunk_id``) followed by
  ``maintain`` for ``--docs`` more documents one after another (p50, p90, max; excluding
  embedding). Every ``append_rows`` rows one of them also runs ``optimize()`` (the new rows are
  appended to every index); those are reported on their own too;
* **ANN training** at that size (done once per ``retrain_growth`` of growth, so amortized over
  ``size * retrain_growth / 250`` documents);
* **per-document search** p50 (``k=4``, prefiltered on ``doc_id`` through its BTREE index, exact);
* **whole-table search** p50 (``k=10``) and **recall@10** against exact search (numpy over every
  stored vector), for questions near a random chunk.

The rows are built in bulk (20 documents per ``add``) to reach the size quickly; the timed
documents then go through the same path as the index assets. Search is measured after them,
so the table holds appended index parts and unindexed rows as it would in use.

Synthetic vectors: 64 topics; a document mixes three, plus its own direction; its chunks
come from ten sections plus noise; a question is a chunk plus noise (cosine ≈ 0.65 to it).
Settings were chosen on one set of questions (``--split tune``; ``--sweep`` prints recall and
latency for several ``nprobes`` and ``refine_factor``) and are reported on another
(``--split report``, the default).

Run::

    nice -n 10 .venv/bin/python benchmarks/bench_index.py --sizes 10000 30000 100000
    nice -n 10 .venv/bin/python benchmarks/bench_index.py --sizes 100000 --split tune --sweep
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
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxwin_dagster.backends.index.schema import table_schema  # noqa: E402
from ctxwin_dagster.backends.index.upkeep import IndexPolicy  # noqa: E402
from ctxwin_dagster.backends.index.vectorstore import ChunkIndex  # noqa: E402

DIM = 384
PER_DOC = 250
TOPICS = np.random.default_rng(0).normal(size=(64, DIM)).astype("float32")


def doc_vectors(i: int) -> np.ndarray:
    rng = np.random.default_rng(1000 + i)
    centre = TOPICS[rng.integers(0, 64, size=3)].mean(0) + 0.6 * rng.normal(size=DIM)
    sections = centre + 0.5 * rng.normal(size=(10, DIM))
    v = sections[rng.integers(0, 10, size=PER_DOC)] + 0.7 * rng.normal(size=(PER_DOC, DIM))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype("float32")


def doc_rows(i: int) -> list[dict]:
    d = f"doc{i:05d}"
    return [
        {
            "chunk_id": f"{d}-{j}",
            "doc_id": d,
            "chunk_index": j,
            "start": j * 900,
            "end": j * 900 + 1000,
            "text": f"chunk {j} of {d}",
            "section": None,
            "context": "",
            "embedded_text": f"chunk {j} of {d} term{(i * 7 + j) % 997}",
        }
        for j in range(PER_DOC)
    ]


def bulk_load(idx: ChunkIndex, n_docs: int, batch: int = 20) -> None:
    idx.replace_document("t_rag", "doc00000", doc_rows(0), doc_vectors(0))
    table = idx.lance_table("t_rag")
    schema = table_schema(DIM)
    for first in range(1, n_docs, batch):
        ids = range(first, min(n_docs, first + batch))
        rows = [r for i in ids for r in doc_rows(i)]
        vecs = np.vstack([doc_vectors(i) for i in ids])
        arrays = [
            pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), DIM)
            if f.name == "vector"
            else pa.array([r.get(f.name) for r in rows], f.type)
            for f in schema
        ]
        table.add(pa.Table.from_arrays(arrays, schema=schema))


def questions(all_vectors: np.ndarray, doc_ids: np.ndarray, n: int, split: str):
    rng = np.random.default_rng({"tune": 5, "report": 11}[split])
    picks = rng.choice(len(all_vectors), n, replace=False)
    q = all_vectors[picks] + 0.06 * rng.normal(size=(n, DIM)).astype("float32")
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype("float32"), doc_ids[picks]


def table_arrays(idx: ChunkIndex):
    t = idx._table("t_rag").to_arrow().select(["chunk_id", "doc_id", "vector"])
    vecs = t.column("vector").combine_chunks().flatten().to_numpy().reshape(t.num_rows, DIM)
    return np.asarray(t.column("chunk_id").to_pylist()), np.asarray(t.column("doc_id").to_pylist()), vecs


def pct(values, p) -> float:
    return round(float(np.percentile(values, p)) * 1000, 1)


def search_figures(idx: ChunkIndex, q: np.ndarray, q_docs: np.ndarray, ids: np.ndarray, vecs: np.ndarray) -> dict:
    truth = [set(ids[np.argpartition(-(vecs @ v), 10)[:10]]) for v in q]
    whole, recall, per_doc = [], [], []
    for v, t, d in zip(q, truth, q_docs, strict=True):
        s = time.perf_counter()
        hits = idx.search("t_rag", v, k=10)
        whole.append(time.perf_counter() - s)
        recall.append(len({h["chunk_id"] for h in hits} & t) / 10)
        s = time.perf_counter()
        idx.search("t_rag", v, k=4, doc_id=str(d))
        per_doc.append(time.perf_counter() - s)
    return {
        "whole_p50_ms": pct(whole, 50),
        "whole_p90_ms": pct(whole, 90),
        "recall_at_10": round(float(np.mean(recall)), 4),
        "per_doc_p50_ms": pct(per_doc, 50),
        "per_doc_p90_ms": pct(per_doc, 90),
    }


def run_size(size: int, args, policy: IndexPolicy) -> dict:
    n_docs = size // PER_DOC
    with tempfile.TemporaryDirectory(prefix="bench_index_") as folder:
        idx = ChunkIndex(folder, policy=policy)
        s = time.perf_counter()
        bulk_load(idx, n_docs)
        load_s = time.perf_counter() - s
        first = idx.maintain("t_rag")  # indexes made, ANN trained if the table is large enough
        out: dict = {
            "rows": size,
            "bulk_load_s": round(load_s, 1),
            "first_upkeep_s": first.seconds,
            "ann_index": first.ann_index,
            "ann_trained": first.trained,
        }
        train_s = first.seconds if first.trained else 0.0
        write, upkeep, total, appends = [], [], [], []
        for i in range(n_docs, n_docs + args.docs):
            s = time.perf_counter()
            idx.replace_document("t_rag", f"doc{i:05d}", doc_rows(i), doc_vectors(i))
            w = time.perf_counter() - s
            report = idx.maintain("t_rag")
            u = time.perf_counter() - s - w
            write.append(w)
            upkeep.append(u)
            total.append(w + u)
            if report.trained:
                raise SystemExit(
                    f"retrained after {i - n_docs + 1} documents at {report.rows} rows: the policy is not what the benchmark assumes"
                )
            if report.appended:
                appends.append(round(w + u, 3))
        docs_per_training = size * policy.retrain_growth / PER_DOC
        out.update(
            {
                "docs_timed": args.docs,
                "write_p50_ms": pct(write, 50),
                "upkeep_p50_ms": pct(upkeep, 50),
                "doc_total_p50_ms": pct(total, 50),
                "doc_total_p90_ms": pct(total, 90),
                "doc_total_max_ms": pct(total, 100),
                "docs_with_append_s": appends,
                "train_s": round(train_s, 2),
                "train_amortized_ms_per_doc": round(train_s / docs_per_training * 1000, 1) if train_s else 0.0,
            }
        )
        stats = idx.index_stats("t_rag")
        out["index_parts"] = {c: st["parts"] for c, st in stats.items()}
        out["unindexed_rows"] = max(st["unindexed_rows"] for st in stats.values())
        out["fragments"] = idx._table("t_rag").stats()["fragment_stats"]["num_fragments"]
        ids, docs, vecs = table_arrays(idx)
        q, q_docs = questions(vecs, docs, args.queries, args.split)
        idx.search("t_rag", q[0], k=10)  # warm the index cache
        out.update(search_figures(idx, q, q_docs, ids, vecs))
        if args.sweep:
            sweep = []
            for nprobes in (5, 10, 20, 40):
                for refine in (1, 2, 5, 10):
                    tuned = ChunkIndex(
                        folder, policy=IndexPolicy(**{**policy.__dict__, "nprobes": nprobes, "refine_factor": refine})
                    )
                    fig = search_figures(tuned, q, q_docs, ids, vecs)
                    sweep.append(
                        {
                            "nprobes": nprobes,
                            "refine_factor": refine,
                            "whole_p50_ms": fig["whole_p50_ms"],
                            "recall_at_10": fig["recall_at_10"],
                        }
                    )
                    print(
                        f"    sweep nprobes={nprobes:3d} refine={refine:3d}: p50 {fig['whole_p50_ms']:6.1f} ms  recall@10 {fig['recall_at_10']:.3f}",
                        flush=True,
                    )
            out["sweep"] = sweep
        return out


CORPUS = Path(os.environ.get("CTXWIN_CORPUS", ROOT.parent / "shared" / "corpus"))
if not CORPUS.exists():
    CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"  # ../shared beside the clone


def run_real(args, policy: IndexPolicy) -> dict:
    """Real all-MiniLM-L6-v2 vectors: the 1,000/100 chunks of the CUAD dev contracts, the SQuAD
    articles and the EU AI Act (EN, DE), written document by document as the index assets do;
    real questions (SQuAD and CUAD, answerable), half to tune on, half to report."""
    from ctxwin_dagster.backends.calls.cache import ResponseCache
    from ctxwin_dagster.backends.embeddings.local import LocalEmbedder
    from ctxwin_dagster.core.text.splitting import RecursiveSplitter

    cache_dir = ROOT / "data" / "cache"
    cache_dir.mkdir(parents=True, exist_ok=True)
    embedder = LocalEmbedder(cache=ResponseCache(cache_dir / "bench_index_embeddings.sqlite"))
    splitter = RecursiveSplitter(chunk_size=1000, chunk_overlap=100)
    texts: dict[str, str] = {}
    for path in sorted((CORPUS / "cuad_dev" / "contracts").glob("*.txt")):
        texts[f"cuad{len(texts):03d}"] = path.read_text(encoding="utf-8", errors="replace")
    for line in (
        (CORPUS / "squad_v2_dev_half" / "squad_v2_dev_half_docs.jsonl").read_text(encoding="utf-8").splitlines()
    ):
        d = json.loads(line)
        texts[f"squad{len(texts):03d}"] = d["text"]
    for lang in ("EN", "DE"):
        texts[f"aiact_{lang}"] = (CORPUS / "eu_ai_act" / f"eu_ai_act_2024_1689_{lang}.txt").read_text(encoding="utf-8")
    qs = []
    for name in ("squad_v2_dev_half/squad_v2_dev_half_questions.jsonl", "cuad_dev/questions.jsonl"):
        items = [json.loads(x) for x in (CORPUS / name).read_text(encoding="utf-8").splitlines()]
        qs += [x["question"] for x in items if not x.get("is_impossible")]
    rng = np.random.default_rng(3)
    picked = [qs[i] for i in rng.choice(len(qs), 2 * args.queries, replace=False)]
    questions_ = picked[: args.queries] if args.split == "tune" else picked[args.queries :]
    with tempfile.TemporaryDirectory(prefix="bench_index_real_") as folder:
        idx = ChunkIndex(folder, policy=policy)
        total, trained_at = [], []
        started = time.perf_counter()
        for doc_id, text in texts.items():
            chunks = splitter.split(text, doc_id=doc_id, doc_sha256=doc_id)
            rows = [{**c.to_dict(), "context": "", "embedded_text": c.text} for c in chunks]
            vectors = embedder.embed([r["text"] for r in rows])
            s = time.perf_counter()
            idx.replace_document("t_rag", doc_id, rows, vectors)
            report = idx.maintain("t_rag")
            total.append(time.perf_counter() - s)
            if report.trained:
                trained_at.append(report.rows)
        ids, docs, vecs = table_arrays(idx)
        q = embedder.embed(questions_)
        truth = [set(ids[np.argpartition(-(vecs @ v), 10)[:10]]) for v in q]
        out = {
            "rows": len(ids),
            "documents": len(texts),
            "build_s": round(time.perf_counter() - started, 1),
            "doc_total_p50_ms": pct(total, 50),
            "doc_total_max_ms": pct(total, 100),
            "trainings_at_rows": trained_at,
            "split": args.split,
            "queries": len(q),
        }
        sweep = []
        for nprobes, refine in (
            [(n, r) for n in (5, 10, 20, 40) for r in (1, 2, 5, 10)]
            if args.sweep
            else [(policy.nprobes, policy.refine_factor)]
        ):
            tuned = ChunkIndex(
                folder, policy=IndexPolicy(**{**policy.__dict__, "nprobes": nprobes, "refine_factor": refine})
            )
            lat, rec = [], []
            for v, t in zip(q, truth, strict=True):
                s = time.perf_counter()
                hits = tuned.search("t_rag", v, k=10)
                lat.append(time.perf_counter() - s)
                rec.append(len({h["chunk_id"] for h in hits} & t) / 10)
            sweep.append(
                {
                    "nprobes": nprobes,
                    "refine_factor": refine,
                    "whole_p50_ms": pct(lat, 50),
                    "recall_at_10": round(float(np.mean(rec)), 4),
                }
            )
            print(
                f"    real nprobes={nprobes:3d} refine={refine:3d}: p50 {pct(lat, 50):6.1f} ms  recall@10 {np.mean(rec):.3f}",
                flush=True,
            )
        out["search"] = sweep
        out["index_stats"] = idx.index_stats("t_rag")
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument(
        "--docs", type=int, default=24, help="documents written and indexed one after another per size (timed)"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--split",
        choices=("tune", "report"),
        default="report",
        help="which set of questions (settings were tuned on 'tune')",
    )
    parser.add_argument(
        "--sweep", action="store_true", help="also print recall and latency for several nprobes / refine_factor"
    )
    parser.add_argument(
        "--ann-min-rows", type=int, default=IndexPolicy().ann_min_rows, help="train the ANN index from this many rows"
    )
    parser.add_argument(
        "--real",
        action="store_true",
        help="real MiniLM vectors of ../shared/corpus and real questions instead of synthetic rows",
    )
    parser.add_argument("--out", default="", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    policy = IndexPolicy(ann_min_rows=args.ann_min_rows)
    print(f"policy: {policy}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    if args.real:
        real = run_real(args, policy)
        real["load_avg_after"] = round(os.getloadavg()[0], 1)
        print(json.dumps(real, default=str))
        if args.out:
            Path(args.out).write_text(json.dumps({"policy": policy.__dict__, "real": real}, indent=2, default=str))
        return 0
    results = []
    for size in args.sizes:
        r = run_size(size, args, policy)
        r["load_avg_after"] = round(os.getloadavg()[0], 1)
        results.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "sweep"}), flush=True)
    print(
        "\n| rows | write+index one doc p50 / p90 / max | of which upkeep p50 | docs with optimize() | ANN training (amortized per doc) "
        "| per-doc search p50 | whole-table search p50 | recall@10 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['rows']:,} | {r['doc_total_p50_ms']:.0f} / {r['doc_total_p90_ms']:.0f} / {r['doc_total_max_ms']:.0f} ms | {r['upkeep_p50_ms']:.0f} ms "
            f"| {', '.join(f'{a:.2f} s' for a in r['docs_with_append_s']) or 'none'} "
            f"| {r['train_s']:.1f} s ({r['train_amortized_ms_per_doc']:.0f} ms) | {r['per_doc_p50_ms']:.1f} "
            f"ms | {r['whole_p50_ms']:.1f} ms | {r['recall_at_10']:.3f} |"
        )
    if args.out:
        Path(args.out).write_text(
            json.dumps({"policy": policy.__dict__, "split": args.split, "results": results}, indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
