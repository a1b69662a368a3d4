"""Retrieval quality of context window enhancement on the SQuAD and CUAD dev sets.

Does a question's reference span reach the model, and at how many characters? For every
answerable question, the chunks of the question's *own document* are searched with the
question (all-MiniLM-L6-v2, chunks 1,000/100 from the project's recursive splitter, top-4 unless
said otherwise), the hits are turned into context blocks by a technique, and we measure:

* **span hit** — a reference span lies wholly inside one block of the context (as in
  :func:`ctxwin_dagster.core.evaluation.metrics.scoring.score_record`);
* **span-character recall** — the share of the reference spans' characters inside the context;
* **characters per question** — the document characters given to the model (blocks merged
  per document, so no character counts twice; the unmerged baselines count each chunk, as the
  peers' table does).

Techniques are the project's own code: :func:`ctxwin_dagster.core.retrieval.enhance.enhance` for the
chunk modes (none, ±1/±2 neighbours, ``context_window_size`` budgets, top-8) and
:func:`ctxwin_dagster.core.retrieval.focus.focus_context` — the selection ``ctxwin ask`` runs — for
sentence focus under the named retrieval settings (``ask``, the default; ``focus-dense``, the
earlier default; and the ``ask`` setting with one signal changed at a time). A sentence-level
index (every sentence of the document searched) is reported for reference.

Protocol: every choice is made on the *tuning* split (the first 40 CUAD dev contracts in sorted
file order, the first 8 SQuAD articles in file order) and measured on the *report* split (the
other 111 contracts and 8 articles), which is never used for a decision; both are written, with
95 % bootstrap CIs. The peers are measured on the report split with their own code
(``../shared/tools/peer_retrieval.py``, folder form: ``--export-peer-folders`` writes the report
split in the project's QA format) and read back with ``--peers``.

Search is an in-memory numpy dot product over L2-normalized vectors (cosine, the same ranking as
a flat LanceDB ``metric("cosine")`` search). Vectors are cached in a
:class:`~ctxwin_dagster.backends.calls.cache.ResponseCache`, so a rerun embeds nothing (the first run
embeds about 13 K chunks, 3.5 K questions and 60 K sentences: over an hour on two shared cores).

Data (``../shared/corpus``): SQuAD 2.0 dev half — 16 articles, 2,910 answerable questions;
CUAD v1 dev — 151 contracts and their answerable questions (reference spans are the annotation
pieces, as :func:`ctxwin_dagster.core.evaluation.qa.corpora.cuad_to_qa` gives them).

Run::

    HF_HUB_OFFLINE=1 .venv/bin/python evaluations/retrieval_quality.py
    HF_HUB_OFFLINE=1 .venv/bin/python evaluations/retrieval_quality.py --split tune   # decide here
    HF_HUB_OFFLINE=1 .venv/bin/python evaluations/retrieval_quality.py --export-peer-folders data/peer_export
    HF_HUB_OFFLINE=1 .venv/bin/python evaluations/retrieval_quality.py --peers data/peer_outputs

Writes ``evaluations/reports/retrieval_quality.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # retrieval_report.py beside this script

import numpy as np  # noqa: E402
from retrieval_report import frontier_claims, load_peers, write_report  # noqa: E402

from ctxwin_dagster.backends.calls.cache import ResponseCache  # noqa: E402
from ctxwin_dagster.backends.embeddings.local import LocalEmbedder  # noqa: E402
from ctxwin_dagster.core.evaluation.metrics.aggregation import bootstrap_mean_ci  # noqa: E402
from ctxwin_dagster.core.evaluation.qa.corpora import cuad_to_qa, squad_to_qa  # noqa: E402
from ctxwin_dagster.core.evaluation.qa.items import QAItem  # noqa: E402
from ctxwin_dagster.core.retrieval.enhance import enhance  # noqa: E402
from ctxwin_dagster.core.retrieval.focus import focus_context  # noqa: E402
from ctxwin_dagster.core.retrieval.lexical import LexicalIndexes  # noqa: E402
from ctxwin_dagster.core.retrieval.question import dense_scorer, query_texts, query_weights  # noqa: E402
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings  # noqa: E402
from ctxwin_dagster.core.text.file_names import safe_doc_id  # noqa: E402
from ctxwin_dagster.core.text.sentences import split_sentences  # noqa: E402
from ctxwin_dagster.core.text.splitting import Chunk, RecursiveSplitter  # noqa: E402

CORPUS = Path(os.environ.get("CTXWIN_CORPUS", ROOT.parent / "shared" / "corpus"))


# --------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------


#: The protocol: decide on the tuning split, report on the other one (never used for a decision).
#: CUAD: the first 40 dev contracts in sorted file order tune, the other 111 report; SQuAD: the first
#: 8 articles in file order tune, the other 8 report.
TUNE_CUAD_CONTRACTS = 40
TUNE_SQUAD_ARTICLES = 8
SPLITS = ("tune", "report")


@dataclass
class Doc:
    doc_id: str
    dataset: str
    text: str
    chunks: list[Chunk]
    split: str = "tune"
    vectors: np.ndarray | None = None  # chunk vectors
    sent_spans: list[tuple[int, int]] | None = None
    sent_vectors: np.ndarray | None = None


def load(
    corpus: Path, *, cuad_contracts: int | None = None
) -> tuple[dict[str, Doc], list[QAItem], dict[str, list[tuple[int, int]]]]:
    """The documents (chunked, each tagged with its split), the answerable questions of both sets,
    and per CUAD question the answers' whole spans (``answer_start``/``answer_end``, not split
    into pieces). ``cuad_contracts`` keeps only the first N contracts (all 151 by default)."""
    squad_dir, cuad_dir = corpus / "squad_v2_dev_half", corpus / "cuad_dev"
    for p in (squad_dir / "squad_v2_dev_half_docs.jsonl", cuad_dir / "questions.jsonl"):
        if not p.is_file():
            raise SystemExit(f"missing {p}: pass --corpus (the folder with squad_v2_dev_half/ and cuad_dev/)")
    splitter = RecursiveSplitter(chunk_size=1000, chunk_overlap=100)
    docs: dict[str, Doc] = {}

    def add(doc_id: str, dataset: str, text: str, split: str) -> None:
        sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
        docs[doc_id] = Doc(doc_id, dataset, text, splitter.split(text, doc_id=doc_id, doc_sha256=sha), split)

    lines = [
        ln for ln in (squad_dir / "squad_v2_dev_half_docs.jsonl").read_text(encoding="utf-8").splitlines() if ln.strip()
    ]
    for i, line in enumerate(lines):
        d = json.loads(line)
        add("squad_" + safe_doc_id(d["doc_id"]), "squad", d["text"], "tune" if i < TUNE_SQUAD_ARTICLES else "report")
    files = sorted(p.name for p in (cuad_dir / "contracts").iterdir() if p.suffix == ".txt")[:cuad_contracts]
    for i, f in enumerate(files):
        path = cuad_dir / "contracts" / f
        # decoded as the project reads documents (UTF-8, BOM dropped, line ends kept); the corpus
        # file names are not valid doc_ids, so read_text_document() is not used here
        text = path.read_bytes().decode("utf-8-sig")
        add("cuad_" + safe_doc_id(Path(f).stem), "cuad", text, "tune" if i < TUNE_CUAD_CONTRACTS else "report")
    items = [q for q in squad_to_qa(squad_dir / "squad_v2_dev_half_questions.jsonl") if not q.is_impossible]
    items += [
        q
        for q in cuad_to_qa(cuad_dir / "questions.jsonl", contracts=files)
        if not q.is_impossible and q.reference_spans
    ]
    missing = {q.doc_id for q in items} - set(docs)
    if missing:
        raise SystemExit(f"questions name documents that were not loaded: {sorted(missing)[:3]}")
    whole: dict[str, list[tuple[int, int]]] = {}
    wanted = set(files)
    for line in (cuad_dir / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line) if line.strip() else None
        if r and r["doc"] in wanted and not r["is_impossible"]:
            qid = f"cuad_{safe_doc_id(Path(r['doc']).stem)}__{r['category']}"
            whole[qid] = [(a["answer_start"], a["answer_end"]) for a in r["answers"] if a.get("located", True)]
    return docs, items, whole


def export_split(docs: dict[str, Doc], items: list[QAItem], dataset: str, split: str, folder: Path) -> int:
    """Write one dataset's split in the project's QA format (``documents/<doc_id>.txt``,
    ``qa/questions.jsonl``), the folder form of ``../shared/tools/peer_retrieval.py``, so the
    peers are measured with their own code on exactly these documents and reference spans."""
    (folder / "documents").mkdir(parents=True, exist_ok=True)
    (folder / "qa").mkdir(parents=True, exist_ok=True)
    keep = {d.doc_id for d in docs.values() if d.dataset == dataset and d.split == split}
    for doc_id in sorted(keep):
        (folder / "documents" / f"{doc_id}.txt").write_text(docs[doc_id].text, encoding="utf-8", newline="")
    rows = [json.dumps(q.to_dict(), ensure_ascii=False) for q in items if q.doc_id in keep]
    (folder / "qa" / "questions.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return len(rows)


def embed(
    docs: dict[str, Doc],
    items: list[QAItem],
    embedder: LocalEmbedder,
    *,
    sentence_index_splits: Sequence[str] = ("tune",),
) -> np.ndarray:
    """Chunk, sentence and question vectors (the first two stored on the documents).

    Every sentence is embedded only for the documents of ``sentence_index_splits`` (the
    sentence-index reference row needs them); sentence focus embeds the sentences it scores on
    demand (cached), so the report split is measured from the chunk index as ``ctxwin ask`` is."""
    t0 = time.perf_counter()
    order = list(docs.values())
    vecs = embedder.embed([c.text for d in order for c in d.chunks])
    pos = 0
    for d in order:
        d.vectors = vecs[pos : pos + len(d.chunks)]
        pos += len(d.chunks)
    print(f"  {pos:,} chunks embedded ({time.perf_counter() - t0:.0f}s)", flush=True)
    order = [d for d in order if d.split in sentence_index_splits]
    for d in order:
        d.sent_spans = split_sentences(d.text)
    svecs = embedder.embed([d.text[s:e] for d in order for s, e in d.sent_spans])
    pos = 0
    for d in order:
        d.sent_vectors = svecs[pos : pos + len(d.sent_spans)]
        pos += len(d.sent_spans)
    print(f"  {pos:,} sentences embedded ({time.perf_counter() - t0:.0f}s)", flush=True)
    qv = embedder.embed([q.question for q in items])
    print(f"  {len(items):,} questions embedded ({time.perf_counter() - t0:.0f}s)", flush=True)
    return qv


# --------------------------------------------------------------------------------------
# Techniques: question -> context spans
# --------------------------------------------------------------------------------------

Spans = list[tuple[int, int]]


def top_hits(doc: Doc, q: np.ndarray, k: int) -> list[tuple[Chunk, float]]:
    """Top-``k`` chunks of the document by cosine similarity (numpy; LanceDB's ranking)."""
    sims = doc.vectors @ q
    order = np.argsort(-sims, kind="stable")[:k]
    return [(doc.chunks[i], float(sims[i])) for i in order]


class SentenceScorer:
    """``score_sentences`` for focus mode from precomputed vectors (the embedder for the rest)."""

    def __init__(self, docs: dict[str, Doc], embedder: LocalEmbedder) -> None:
        self.vectors: dict[str, np.ndarray] = {}
        for d in docs.values():
            if d.sent_spans is None or d.sent_vectors is None:
                continue
            for (s, e), v in zip(d.sent_spans, d.sent_vectors):
                self.vectors.setdefault(d.text[s:e], v)
        self.embedder = embedder
        self.misses = 0

    def vectors_of(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts`` (precomputed; the rare text not met before is embedded)."""
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            self.misses += len(missing)
            self.vectors.update(zip(missing, self.embedder.embed(missing)))
        return np.stack([self.vectors[t] for t in texts])


def _spans(ctx) -> Spans:
    return [(w.start, w.end) for w in ctx.windows]


@dataclass
class Technique:
    name: str
    group: str
    run: Callable[[Doc, QAItem, np.ndarray], Spans]
    merged: bool = True
    note: str = ""
    peer: bool = False  # also scored against CUAD's whole answer spans (the peers' reference)
    splits: tuple[str, ...] = SPLITS  # the splits it is measured on


def techniques(scorer: SentenceScorer, parts: dict[str, np.ndarray], lexical: LexicalIndexes) -> list[Technique]:
    """The techniques measured: the peers' baselines, the project's enhancement modes, and the
    sentence focus under named retrieval settings (the ``ask`` default and each of its signals
    switched off or changed, so every signal shows what it adds)."""
    texts = lambda d: {d.doc_id: d.text}  # noqa: E731

    def raw(k: int) -> Callable[[Doc, QAItem, np.ndarray], Spans]:
        return lambda d, q, v: [(c.start, c.end) for c, _ in top_hits(d, v, k)]

    def enhanced(k: int, mode: str, **opts: int) -> Callable[[Doc, QAItem, np.ndarray], Spans]:
        return lambda d, q, v: _spans(
            enhance(top_hits(d, v, k), d.chunks, RetrievalSettings(enhance_mode=mode, **opts), doc_texts=texts(d))
        )

    def focus(settings: RetrievalSettings) -> Callable[[Doc, QAItem, np.ndarray], Spans]:
        depth = 4 * settings.effective_k if settings.hybrid else settings.effective_k

        def run(d: Doc, q: QAItem, v: np.ndarray) -> Spans:
            qvecs = parts[q.question] if settings.question_parts else v[None, :]
            sims = d.vectors @ v
            ctx = focus_context(
                q.question,
                top_hits(d, v, depth),
                d.chunks,
                settings=settings,
                doc_texts=texts(d),
                score_sentences=dense_scorer(scorer.vectors_of, qvecs, query_weights(len(qvecs))),
                lexical_query=" ".join(query_texts(q.question, settings)),
                lexical=lexical,
                vector_score=lambda c: float(sims[c.chunk_index]),
            )
            return _spans(ctx)

        return run

    def sentence_index(n: int, window: int) -> Callable[[Doc, QAItem, np.ndarray], Spans]:
        from ctxwin_dagster.core.retrieval.sentence_focus import _grow  # the same sentence-aligned growth as focus

        def run(d: Doc, q: QAItem, v: np.ndarray) -> Spans:
            sims = d.sent_vectors @ v
            starts = [s for s, _ in d.sent_spans]
            ends = [e for _, e in d.sent_spans]
            spans = [_grow(starts, ends, int(i), window)[:2] for i in np.argsort(-sims, kind="stable")[:n]]
            return _merge(spans)

        return run

    ask = RetrievalSettings.named("ask")
    dense = RetrievalSettings.named("focus-dense")
    return [
        Technique(
            "top-4 chunks as retrieved (T-RAG)",
            "baseline",
            raw(4),
            merged=False,
            note="peer row 1; chunks counted one by one",
            peer=True,
        ),
        Technique(
            "top-4, ±1 neighbour (`neighbors`, 1)",
            "enhance",
            enhanced(4, "neighbors", num_neighbors=1),
            note="peer row 2",
            peer=True,
        ),
        Technique("top-4, ±2 neighbours (`neighbors`, 2)", "enhance", enhanced(4, "neighbors", num_neighbors=2)),
        Technique(
            "top-4, `context_window_size` 2,000 (`budget`)", "enhance", enhanced(4, "budget", context_window_size=2000)
        ),
        Technique("top-8 chunks as retrieved", "baseline", raw(8), merged=False, note="peer row 4", peer=True),
        Technique("top-8, merged (`none`)", "enhance", enhanced(8, "none")),
        Technique("`focus-dense`: vectors only, top-16, 4,000 (the earlier default)", "focus", focus(dense)),
        Technique(
            "vectors only, top-16, 6,000", "focus", focus(RetrievalSettings.named("focus-dense", focus_chars=6000))
        ),
        Technique(
            "vectors only, top-24, 6,000",
            "focus",
            focus(RetrievalSettings.named("focus-dense", k=24, focus_chars=6000)),
        ),
        Technique(
            "**`ask` (default)**: hybrid top-24, question parts, BM25 ×0.2, drop 0.23, ≤ 8,000, opening 500",
            "focus",
            focus(ask),
            note="the default",
        ),
        Technique(
            "`ask` without the document's opening", "ablation", focus(RetrievalSettings.named("ask", opening_chars=0))
        ),
        Technique(
            "`ask` as before: drop 0.3, no opening",
            "ablation",
            focus(RetrievalSettings.named("ask", opening_chars=0, score_drop=0.3)),
        ),
        Technique("`ask` without hybrid candidates", "ablation", focus(RetrievalSettings.named("ask", hybrid=False))),
        Technique(
            "`ask` without question parts", "ablation", focus(RetrievalSettings.named("ask", question_parts=False))
        ),
        Technique(
            "`ask` without BM25 sentence scores", "ablation", focus(RetrievalSettings.named("ask", lexical_weight=0.0))
        ),
        Technique("`ask` with a fixed budget of 4,000 (no drop)", "ablation", focus(_no_drop(ask, 4000))),
        Technique("`ask` with a fixed budget of 6,000 (no drop)", "ablation", focus(_no_drop(ask, 6000))),
        Technique(
            "`ask` with clause-following windows", "ablation", focus(RetrievalSettings.named("ask", structure=True))
        ),
        Technique(
            "sentence index: top-8 sentences, windows ≤700 (reference)",
            "reference",
            sentence_index(8, 700),
            note="needs every sentence embedded (a sentence-level index), not the chunk index; tuning split only",
            splits=("tune",),
        ),
    ]


def _no_drop(settings: RetrievalSettings, chars: int) -> RetrievalSettings:
    from dataclasses import replace

    return replace(settings, score_drop=None, focus_chars=chars, name="ask+")


def _merge(spans: Spans) -> Spans:
    out: list[list[int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def score(ref: Sequence[tuple[int, int]], blocks: Spans) -> tuple[float, float, int]:
    """(span hit, span-character recall, characters) of one question."""
    hit = float(any(cs <= s and e <= ce for s, e in ref for cs, ce in blocks))
    covered = _merge([(max(s, cs), min(e, ce)) for s, e in ref for cs, ce in blocks if max(s, cs) < min(e, ce)])
    total = sum(e - s for s, e in _merge(list(ref)))
    return hit, sum(e - s for s, e in covered) / total, sum(e - s for s, e in blocks)


# --------------------------------------------------------------------------------------
# Run and report
# --------------------------------------------------------------------------------------


def evaluate(
    docs: dict[str, Doc],
    items: list[QAItem],
    qv: np.ndarray,
    techs: list[Technique],
    whole: dict[str, list[tuple[int, int]]],
    *,
    splits: Sequence[str] = SPLITS,
) -> list[dict]:
    """Per technique, per dataset and split: span hit with its 95 % bootstrap CI, span-character
    recall, characters per question, and the selection time per question (median and p95)."""
    results = []
    for t in techs:
        row: dict = {"technique": t.name, "group": t.group, "merged": t.merged, "note": t.note}
        times: list[float] = []
        for dataset in ("squad", "cuad"):
            row[dataset] = {}
            for split in splits:
                if split not in t.splits:
                    continue
                hits, recalls, chars, whole_hits = [], [], [], []
                for q, vec in zip(items, qv):
                    d = docs[q.doc_id]
                    if d.dataset != dataset or d.split != split:
                        continue
                    t0 = time.perf_counter()
                    blocks = t.run(d, q, vec)
                    times.append(time.perf_counter() - t0)
                    h, r, c = score(q.reference_spans, blocks)
                    hits.append(h)
                    recalls.append(r)
                    chars.append(c)
                    if t.peer and dataset == "cuad" and whole.get(q.question_id):
                        whole_hits.append(score(whole[q.question_id], blocks)[0])
                if not hits:
                    continue
                lo, hi = bootstrap_mean_ci(hits, n_boot=2000, seed=0)
                m = row[dataset][split] = {
                    "n": len(hits),
                    "span_hit": float(np.mean(hits)),
                    "span_hit_ci95": [lo, hi],
                    "span_char_recall": float(np.mean(recalls)),
                    "chars_per_question": float(np.mean(chars)),
                    "chars_p95": float(np.percentile(chars, 95)),
                }
                if whole_hits:
                    m["span_hit_whole_answers"] = float(np.mean(whole_hits))
        row["ms_per_question"] = 1000 * float(np.median(times)) if times else 0.0
        row["ms_p95"] = 1000 * float(np.percentile(times, 95)) if times else 0.0
        results.append(row)
        cells = " | ".join(
            f"{ds} {sp} {100 * m['span_hit']:5.1f}% {m['chars_per_question']:6,.0f}"
            for ds in ("squad", "cuad")
            for sp, m in row[ds].items()
        )
        print(f"  {t.name:<58} {cells} | {row['ms_per_question']:.1f} ms", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus", type=Path, default=CORPUS, help="the shared corpus folder (default ../shared/corpus)"
    )
    parser.add_argument(
        "--cuad-contracts",
        type=int,
        default=None,
        help="first N CUAD dev contracts in sorted file order (default all 151)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=ROOT / "data" / "cache" / "retrieval_eval_embeddings.sqlite",
        help="embedding cache (SQLite)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "evaluations" / "reports", help="report folder")
    parser.add_argument(
        "--export-peer-folders",
        type=Path,
        default=None,
        help="write each dataset's report split in the project's QA format under this folder (for peer_retrieval.py) and stop",
    )
    parser.add_argument(
        "--split", choices=("tune", "report", "both"), default="both", help="the split(s) to measure (default both)"
    )
    parser.add_argument(
        "--peers",
        type=Path,
        default=None,
        help="folder with peer_retrieval.py outputs on the report split (peer_{squad,cuad}_report_top{4,8}.json)",
    )
    parser.add_argument(
        "--rewrite",
        action="store_true",
        help="rewrite the report from the JSON in --out with the peers of --peers (no measuring)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="300 questions per set (a smoke run; no report written unless --out is given)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.rewrite:
        saved = json.loads((args.out / "retrieval_quality.json").read_text(encoding="utf-8"))
        if args.peers:
            saved["meta"]["peers"] = load_peers(args.peers)
        md, js = write_report(saved["results"], saved["meta"], args.out)
        print("\n".join(frontier_claims(saved["results"], saved["meta"])))
        print(f"wrote {md} and {js}")
        return 0
    print("loading the corpus…", flush=True)
    docs, items, whole = load(args.corpus, cuad_contracts=args.cuad_contracts)
    if args.export_peer_folders is not None:
        for dataset in ("squad", "cuad"):
            folder = args.export_peer_folders / f"{dataset}_report"
            print(f"{folder}: {export_split(docs, items, dataset, 'report', folder)} questions")
        return 0
    splits = SPLITS if args.split == "both" else (args.split,)
    docs = {k: d for k, d in docs.items() if d.split in splits}
    items = [q for q in items if q.doc_id in docs]
    if args.quick:
        rng = np.random.default_rng(0)
        keep = []
        for ds in ("squad", "cuad"):
            idx = [i for i, q in enumerate(items) if docs[q.doc_id].dataset == ds]
            keep += sorted(rng.choice(idx, size=min(300, len(idx)), replace=False).tolist())
        items = [items[i] for i in sorted(keep)]
    embedder = LocalEmbedder(cache=ResponseCache(args.cache), batch_size=64)
    print(f"embedding (cache {args.cache})…", flush=True)
    qv = embed(docs, items, embedder)
    part_texts = {q.question: query_texts(q.question, RetrievalSettings.named("ask")) for q in items}
    unique_parts = sorted({p for ps in part_texts.values() for p in ps})
    part_vecs = dict(zip(unique_parts, embedder.embed(unique_parts)))
    parts = {question: np.stack([part_vecs[p] for p in ps]) for question, ps in part_texts.items()}
    scorer = SentenceScorer(docs, embedder)
    print("building the BM25 indexes (sentences and chunks of every document)…", flush=True)
    lexical = LexicalIndexes(max_docs=len(docs) + 1)
    build: dict[str, list[float]] = {"squad": [], "cuad": []}
    for d in docs.values():
        t0 = time.perf_counter()
        lexical.sentences(d.doc_id, d.text)
        lexical.chunks(d.doc_id, d.chunks)
        build[d.dataset].append(time.perf_counter() - t0)
    print("evaluating…", flush=True)
    t_eval = time.perf_counter()
    results = evaluate(docs, items, qv, techniques(scorer, parts, lexical), whole, splits=splits)
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "platform": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "embedding_model": embedder.model,
        "squad_docs": sum(1 for d in docs.values() if d.dataset == "squad"),
        "cuad_docs": sum(1 for d in docs.values() if d.dataset == "cuad"),
        "squad_questions": sum(1 for q in items if docs[q.doc_id].dataset == "squad"),
        "cuad_questions": sum(1 for q in items if docs[q.doc_id].dataset == "cuad"),
        "chunks": sum(len(d.chunks) for d in docs.values()),
        "sentences_embedded_upfront": sum(len(d.sent_spans or []) for d in docs.values()),
        "quick": args.quick,
        "runtime_s": time.perf_counter() - started,
        "evaluation_s": time.perf_counter() - t_eval,
        "embedder": embedder.stats.to_dict(),
        "scorer_misses": scorer.misses,
        "splits": list(splits),
        "split_sizes": {
            f"{ds}_{sp}": {
                "docs": sum(1 for d in docs.values() if d.dataset == ds and d.split == sp),
                "questions": sum(1 for q in items if docs[q.doc_id].dataset == ds and docs[q.doc_id].split == sp),
            }
            for ds in ("squad", "cuad")
            for sp in splits
        },
        "bm25_build_s": {
            ds: {
                "total": float(sum(v)),
                "per_doc_mean": float(np.mean(v)) if v else 0.0,
                "per_doc_max": float(max(v)) if v else 0.0,
                "doc_chars_mean": float(np.mean([len(d.text) for d in docs.values() if d.dataset == ds])),
            }
            for ds, v in build.items()
        },
        "peers": load_peers(args.peers) if args.peers else {},
    }
    if args.quick and "--out" not in (argv or sys.argv):
        print("quick run: no report written")
        return 0
    md, js = write_report(results, meta, args.out)
    print("\n".join(frontier_claims(results, meta, "report" if "report" in splits else "tune")))
    print(f"wrote {md} and {js}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
