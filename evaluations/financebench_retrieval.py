"""Retrieval on long SEC filings: FinanceBench dev, own filing and whole folder.

``../shared/corpus/financebench_dev/``: 41 filings (10-K, 10-Q, 8-K, earnings releases) of 15
companies, 19.4 M characters, and 77 questions as an analyst writes them. The evidence of a
question is one or more whole *pages* (their character ranges), not the answer's words, so:

* **page hit** — the context overlaps an evidence page;
* **all pages** — the context overlaps every evidence page (the stricter metric);
* **page-character recall** — the share of the evidence pages' characters inside the context
  (a page is 2,000–6,000 characters, so a focused context holds only part of one);
* **characters** per question (blocks merged, no character twice; *unmerged* rows count each
  chunk as the peers do).

**Scopes.** *Own filing*: the question's own document is searched, as ``ctxwin ask --doc``
does. *Whole folder*: every filing's chunks are searched together, as ``ctxwin ask`` without
``--doc`` does over an experiment's index; the context may then come from other filings, and
only the question's own filing's evidence counts.

**Split by company** (no company on both sides): the companies in sorted order (upper case,
so PFIZER and Pfizer are one), alternately *tune* (1st, 3rd, …) and *report* (2nd, 4th, …).
Choices are made on tune; the report rows are measured once.

The techniques are the project's own code (:func:`~ctxwin_dagster.core.retrieval.enhance.enhance`
and :func:`~ctxwin_dagster.core.retrieval.focus.focus_context`, what ``ctxwin ask`` runs), with
all-MiniLM-L6-v2 and 1,000/100 chunks. The peers are measured with their own code by
``../shared/tools/peer_retrieval.py`` on the report companies (``--export`` writes that folder;
``--peers FILE`` adds the result to the report).

Run::

    HF_HUB_OFFLINE=1 .venv/bin/python evaluations/financebench_retrieval.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import retrieval_quality as rq  # noqa: E402

from ctxwin_dagster.backends.calls.cache import ResponseCache  # noqa: E402
from ctxwin_dagster.backends.embeddings.local import LocalEmbedder  # noqa: E402
from ctxwin_dagster.core.evaluation.metrics.aggregation import bootstrap_mean_ci  # noqa: E402
from ctxwin_dagster.core.evaluation.qa.items import QAItem  # noqa: E402
from ctxwin_dagster.core.retrieval.enhance import enhance  # noqa: E402
from ctxwin_dagster.core.retrieval.focus import focus_context  # noqa: E402
from ctxwin_dagster.core.retrieval.lexical import LexicalIndexes  # noqa: E402
from ctxwin_dagster.core.retrieval.question import dense_scorer, query_texts, query_weights  # noqa: E402
from ctxwin_dagster.core.retrieval.routing import ROUTE_DEPTH, DocumentCard, DocumentRouter  # noqa: E402
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings  # noqa: E402
from ctxwin_dagster.core.text.splitting import Chunk, RecursiveSplitter  # noqa: E402

Spans = list[tuple[str, int, int]]  # (doc_id, start, end)
SCOPES = ("own", "folder")


def company(doc_id: str) -> str:
    return doc_id.split("_", 1)[0].upper()


def load(corpus: Path) -> tuple[dict[str, rq.Doc], list[QAItem], dict[str, str]]:
    """Every filing (chunked), every question, and each company's split."""
    folder = corpus / "financebench_dev"
    if not (folder / "qa.jsonl").is_file():
        raise SystemExit(f"missing {folder}/qa.jsonl: pass --corpus (the folder holding financebench_dev/)")
    splitter = RecursiveSplitter(chunk_size=1000, chunk_overlap=100)
    docs: dict[str, rq.Doc] = {}
    for path in sorted((folder / "documents").glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        chunks = splitter.split(text, doc_id=path.stem, doc_sha256=path.stem)
        docs[path.stem] = rq.Doc(path.stem, "financebench", text, chunks)
    companies = sorted({company(d) for d in docs})
    splits = {c: ("tune" if i % 2 == 0 else "report") for i, c in enumerate(companies)}
    for d in docs.values():
        d.split = splits[company(d.doc_id)]
    items = [
        QAItem.from_dict(json.loads(x)) for x in (folder / "qa.jsonl").read_text(encoding="utf-8").splitlines() if x
    ]
    return docs, items, splits


class Folder:
    """Every filing's chunk vectors in one matrix: the whole-folder search, and the folder routing
    of ``ctxwin ask`` (:class:`~ctxwin_dagster.core.retrieval.routing.DocumentRouter`: each
    document's best chunk among the folder's top :data:`ROUTE_DEPTH`, its card (file name and
    opening) by BM25, and the periods the question names, fused by reciprocal rank)."""

    def __init__(self, docs: dict[str, rq.Doc]) -> None:
        self.chunks: list[Chunk] = [c for d in docs.values() for c in d.chunks]
        self.vectors = np.vstack([d.vectors for d in docs.values()])
        self.doc_ids = list(docs)
        self.owner = np.array([i for i, d in enumerate(docs.values()) for _ in d.chunks])
        self.router = DocumentRouter([DocumentCard.of(d.doc_id, d.text, name=f"{d.doc_id}.txt") for d in docs.values()])

    def top(self, v: np.ndarray, k: int, *, among: Sequence[str] | None = None) -> list[tuple[Chunk, float]]:
        sims = self.vectors @ v
        if among is not None:
            sims = np.where(np.isin(self.owner, [self.doc_ids.index(d) for d in among]), sims, -np.inf)
        order = np.argsort(-sims, kind="stable")[:k]
        return [(self.chunks[i], float(sims[i])) for i in order if np.isfinite(sims[i])]

    def route(self, question: str, v: np.ndarray, m: int) -> list[str] | None:
        """The ``m`` documents a question most likely asks about, as ``ctxwin ask`` routes it
        (None: the question names no period that tells the documents apart; search them all)."""
        best: dict[str, float] = {}
        for chunk, score in self.top(v, ROUTE_DEPTH):
            best.setdefault(chunk.doc_id, score)
        return self.router.route(question, best, m)


Run = Callable[[str, QAItem, np.ndarray], Spans]


def techniques(
    docs: dict[str, rq.Doc], folder: Folder, scorer: rq.SentenceScorer, parts: dict[str, np.ndarray]
) -> list[tuple[str, bool, Run]]:
    """(name, merged, run(scope, question, vector) -> blocks)."""
    lexical = LexicalIndexes(max_docs=len(docs) + 1)
    texts = {d.doc_id: d.text for d in docs.values()}

    def hits(scope: str, q: QAItem, v: np.ndarray, k: int, route: int = 0) -> list[tuple[Chunk, float]]:
        if scope == "own":
            return rq.top_hits(docs[q.doc_id], v, k)
        return folder.top(v, k, among=folder.route(q.question, v, route) if route else None)

    def chunks_of(found: Sequence[tuple[Chunk, float]]) -> list[Chunk]:
        return [c for d in dict.fromkeys(c.doc_id for c, _ in found) for c in docs[d].chunks]

    def raw(k: int) -> Run:
        return lambda scope, q, v: [(c.doc_id, c.start, c.end) for c, _ in hits(scope, q, v, k)]

    def enhanced(k: int, mode: str, **opts: int) -> Run:
        def run(scope: str, q: QAItem, v: np.ndarray) -> Spans:
            found = hits(scope, q, v, k)
            ctx = enhance(found, chunks_of(found), RetrievalSettings(enhance_mode=mode, **opts), doc_texts=texts)
            return [(w.doc_id, w.start, w.end) for w in ctx.windows]

        return run

    def focus(settings: RetrievalSettings) -> Run:
        depth = 4 * settings.effective_k if settings.hybrid else settings.effective_k

        def run(scope: str, q: QAItem, v: np.ndarray) -> Spans:
            found = hits(scope, q, v, depth, settings.route_to)
            qv = parts[q.question] if settings.question_parts else v[None, :]
            by_id = {c.chunk_id: s for c, s in found}
            ctx = focus_context(
                q.question,
                found,
                chunks_of(found),
                settings=settings,
                score_sentences=dense_scorer(scorer.vectors_of, qv, query_weights(len(qv))),
                lexical_query=" ".join(query_texts(q.question, settings)),
                doc_texts=texts,
                lexical=lexical,
                vector_score=lambda c: by_id.get(c.chunk_id) or float(docs[c.doc_id].vectors[c.chunk_index] @ v),
            )
            return [(w.doc_id, w.start, w.end) for w in ctx.windows]

        return run

    ask = RetrievalSettings.named("ask")
    return [
        ("top-4 chunks as retrieved (T-RAG) *(unmerged)*", False, raw(4)),
        ("top-4, ±1 neighbour (`neighbors`, 1)", True, enhanced(4, "neighbors", num_neighbors=1)),
        ("top-8 chunks as retrieved *(unmerged)*", False, raw(8)),
        ("`focus-dense`: vectors only, top-16, ≤ 4,000", True, focus(RetrievalSettings.named("focus-dense"))),
        (
            "**`ask` (default)**: hybrid top-24, question parts, BM25 ×0.2, drop 0.23, ≤ 8,000, opening 500, statements by "
            f"title, folder routed to {ask.route_to} when dated",
            True,
            focus(ask),
        ),
        ("`ask` without the document's opening", True, focus(RetrievalSettings.named("ask", opening_chars=0))),
        (
            "`ask` as before: drop 0.3, no opening",
            True,
            focus(RetrievalSettings.named("ask", opening_chars=0, score_drop=0.3)),
        ),
        ("`ask` without hybrid candidates", True, focus(RetrievalSettings.named("ask", hybrid=False))),
        (
            "`ask` without financial statements by title",
            True,
            focus(RetrievalSettings.named("ask", statements=False)),
        ),
        ("`ask` without BM25 sentence scores", True, focus(RetrievalSettings.named("ask", lexical_weight=0.0))),
        ("`ask`, fixed budget 8,000 (no drop)", True, focus(rq._no_drop(ask, 8000))),
        *[
            (
                f"`ask`, folder routed to {m} document{'s' * (m > 1)}" if m else "`ask` without folder routing",
                True,
                focus(RetrievalSettings.named("ask", route_to=m)),
            )
            for m in (0, 1, 2, 3, 5)
            if m != ask.route_to
        ],
    ]


def question_vectors(items: list[QAItem], qv: np.ndarray, embedder: LocalEmbedder) -> dict[str, np.ndarray]:
    """Per question, its vector and then its parts' (the ``ask`` setting's question parts), the
    rows that sentence focus weighs."""
    part_texts = {q.question: query_texts(q.question, RetrievalSettings.named("ask")) for q in items}
    extra = sorted({p for ps in part_texts.values() for p in ps[1:]})
    pvecs = dict(zip(extra, embedder.embed(extra))) if extra else {}
    return {
        q.question: np.vstack([v[None, :], *[pvecs[p][None, :] for p in part_texts[q.question][1:]]])
        for q, v in zip(items, qv)
    }


def print_row(row: dict, metric: str) -> None:
    """One technique's line: its hit rate and characters per scope and split."""
    cells = [f"{k} {100 * row[k][metric]:5.1f}% {row[k]['chars']:6,.0f}" for k in row if k.split("_")[0] in SCOPES]
    print(f"  {row['technique'][:60]:<60} " + " ".join(cells), flush=True)


def routing_accuracy(docs: dict[str, rq.Doc], items: list[QAItem], qv: np.ndarray, folder: Folder) -> dict:
    """Per split: how many questions the folder routing narrows (they name a period that tells
    the filings apart), and how often the question's own filing is first and among the first three."""
    out: dict[str, dict[str, float]] = {}
    for split in ("tune", "report"):
        routed = [
            (q, r)
            for q, v in zip(items, qv)
            if docs[q.doc_id].split == split and (r := folder.route(q.question, v, 3)) is not None
        ]
        out[split] = {
            "questions": sum(1 for q in items if docs[q.doc_id].split == split),
            "routed": len(routed),
            "own_first": float(np.mean([r[0] == q.doc_id for q, r in routed])) if routed else 0.0,
            "own_in_first_3": float(np.mean([q.doc_id in r for q, r in routed])) if routed else 0.0,
        }
    return out


def measure(q: QAItem, blocks: Spans) -> dict[str, float]:
    """Page hit, all pages, page-character recall and characters of one question's context."""
    own = rq._merge([(s, e) for d, s, e in blocks if d == q.doc_id])
    pages = [tuple(p) for p in q.reference_spans]
    covered = [sum(max(0, min(e, ce) - max(s, cs)) for cs, ce in own) for s, e in pages]
    merged: dict[str, list[tuple[int, int]]] = {}
    for d, s, e in blocks:
        merged.setdefault(d, []).append((s, e))
    return {
        "hit": float(any(covered)),
        "all": float(all(covered)),
        "recall": sum(covered) / sum(e - s for s, e in pages),
        "chars": float(sum(e - s for spans in merged.values() for s, e in rq._merge(spans))),
        "sent": float(sum(e - s for _, s, e in blocks)),
        "own_share": float(sum(e - s for s, e in own) / max(1, sum(e - s for _, s, e in blocks))),
    }


def export(docs: dict[str, rq.Doc], items: list[QAItem], split: str, out: Path) -> int:
    """The split's filings and questions in the project's QA format, for peer_retrieval.py."""
    (out / "documents").mkdir(parents=True, exist_ok=True)
    (out / "qa").mkdir(parents=True, exist_ok=True)
    keep = {d.doc_id for d in docs.values() if d.split == split}
    for doc_id in sorted(keep):
        (out / "documents" / f"{doc_id}.txt").write_text(docs[doc_id].text, encoding="utf-8", newline="")
    rows = [json.dumps(q.to_dict(), ensure_ascii=False) for q in items if q.doc_id in keep]
    (out / "qa" / "questions.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=rq.CORPUS)
    parser.add_argument(
        "--cache", type=Path, default=ROOT / "data" / "cache" / "financebench_embeddings.sqlite", help="vector cache"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "evaluations" / "reports")
    parser.add_argument("--export", type=Path, help="write the report companies' folder for peer_retrieval.py and stop")
    parser.add_argument("--peers", type=Path, help="peer_retrieval.py's JSON on the report companies (with page hits)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    docs, items, splits = load(args.corpus)
    if args.export:
        print(f"{export(docs, items, 'report', args.export)} questions written to {args.export}")
        return 0
    embedder = LocalEmbedder(cache=ResponseCache(args.cache), batch_size=64, show_progress=True)
    n_chars = sum(len(d.text) for d in docs.values())
    print(
        f"{len(docs)} filings ({n_chars:,} chars, {sum(len(d.chunks) for d in docs.values()):,} chunks), "
        f"{len(items)} questions; embedding ({embedder.precision})…",
        flush=True,
    )
    t0 = time.perf_counter()
    qv = rq.embed(docs, items, embedder, sentence_index_splits=())
    embed_s = time.perf_counter() - t0
    parts = question_vectors(items, qv, embedder)
    folder = Folder(docs)
    scorer = rq.SentenceScorer(docs, embedder)
    results = []
    for name, merged, run in techniques(docs, folder, scorer, parts):
        row: dict = {"technique": name, "merged": merged}
        t1 = time.perf_counter()
        for scope in SCOPES:
            for split in ("tune", "report"):
                rows = [measure(q, run(scope, q, v)) for q, v in zip(items, qv) if docs[q.doc_id].split == split]
                hits = [r["hit"] for r in rows]
                lo, hi = bootstrap_mean_ci(hits, n_boot=2000, seed=0)
                row[f"{scope}_{split}"] = {
                    "n": len(rows),
                    "page_hit": float(np.mean(hits)),
                    "page_hit_ci95": [lo, hi],
                    "all_pages": float(np.mean([r["all"] for r in rows])),
                    "page_char_recall": float(np.mean([r["recall"] for r in rows])),
                    "chars": float(np.mean([r["chars" if merged else "sent"] for r in rows])),
                    "own_filing_share": float(np.mean([r["own_share"] for r in rows])),
                }
        row["seconds"] = round(time.perf_counter() - t1, 1)
        results.append(row)
        print_row(row, "page_hit")
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "platform": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "embedding": f"{embedder.model} ({embedder.precision})",
        "filings": len(docs),
        "chars": n_chars,
        "chunks": sum(len(d.chunks) for d in docs.values()),
        "questions": {s: sum(1 for q in items if docs[q.doc_id].split == s) for s in ("tune", "report")},
        "companies": {s: sorted(c for c, sp in splits.items() if sp == s) for s in ("tune", "report")},
        "embed_s": round(embed_s, 1),
        "embedder": embedder.stats.to_dict(),
        "runtime_s": round(time.perf_counter() - started, 1),
    }
    # The whole folder's embedding time, from the last run that embedded every chunk afresh.
    saved = args.out / "financebench_retrieval.json"
    if embedder.stats.texts_encoded >= meta["chunks"]:
        meta["full_embedding"] = {"date": meta["date"], "texts": meta["chunks"], "seconds": meta["embed_s"]}
    elif saved.is_file():
        meta["full_embedding"] = json.loads(saved.read_text(encoding="utf-8"))["meta"].get("full_embedding")
    meta["routing"] = routing_accuracy(docs, items, qv, folder)
    if args.peers:
        meta["peers"] = json.loads(args.peers.read_text(encoding="utf-8"))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "financebench_retrieval.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2) + "\n", encoding="utf-8"
    )
    print(f"wrote {args.out / 'financebench_retrieval.json'} ({meta['runtime_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
