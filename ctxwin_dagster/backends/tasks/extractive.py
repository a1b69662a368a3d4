"""The extractive engine: the tasks done by selecting sentences with an embedding model.

:class:`ExtractiveTasks` is the offline default: deterministic, no network, cost 0, and
labelled ``engine="extractive"`` everywhere. It still renders and counts the exact prompts the
LLM engine would send — the SWB batch prompts come from
:func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts`, the function the LLM engine sends — so
input volumes (tokens, characters) are reported the same way offline.

Example (offline)::

    from ctxwin_dagster.backends.embeddings.local import LocalEmbedder
    tasks = ExtractiveTasks(LocalEmbedder())
    summary = tasks.summarize(text, doc_id="ai_act", max_tokens=500)
    ctx = tasks.contextualize_swb(text, chunks, summary.text, doc_id="ai_act")
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxwin_dagster.backends.base import CallRecord, CallTags, Embedder, Ledger
from ctxwin_dagster.backends.tasks.answering import NOT_FOUND_MODEL, AnswerRule, answer_from_passages
from ctxwin_dagster.backends.tasks.memo import (
    TaskMemo,
    chunk_parts,
    extractive_record,
    record_from_dict,
    record_to_dict,
)
from ctxwin_dagster.backends.tasks.results import (
    STAGE_ANSWER,
    STAGE_CONTEXT,
    STAGE_SUMMARY,
    AnswerResult,
    ContextResult,
    SummaryResult,
)
from ctxwin_dagster.backends.tasks.selection import (
    SentenceIndex,
    central_rows,
    top_rows,
)
from ctxwin_dagster.core.budget.tokens import PromptMeter, TokenCounter, get_token_counter
from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.methods.prompts import (
    detect_language,
    format_passages,
    format_summaries,
    get_template,
)
from ctxwin_dagster.core.methods.swb import ChunkLike, batch_shares, check_chunks, split_segments, swb_batch_prompts
from ctxwin_dagster.core.text.sentences import split_sentences

if TYPE_CHECKING:
    from ctxwin_dagster.backends.calls.cache import NullCache, ResponseCache

__all__ = ["DEFAULT_ANSWER_THRESHOLD", "ExtractiveTasks", "extractive_record"]

log = logging.getLogger(__name__)

#: Cosine similarity (all-MiniLM-L6-v2) between a question and the best sentence of the
#: passages below which :class:`ExtractiveTasks` answers "not in the documents". Calibrated on
#: 2,000 SQuAD 2.0 dev questions (random sample, seed 0: 951 answerable, 1,049 unanswerable),
#: passages = the top-4 chunks (1,000/100) of the question's own article: at 0.40, 97.9 % of the
#: answerable questions are answered, and the same questions asked against another article's
#: top-4 chunks (unrelated passages) are rejected 98.0 % of the time — about the equal-error
#: point (0.35: 99.1 % / 93.3 %; 0.45: 96.8 % / 99.8 %). SQuAD's adversarial unanswerable
#: questions, written to resemble their paragraph, are rejected only 5.3 % of the time:
#: similarity cannot tell those apart; that needs a reader model (the LLM engine).
DEFAULT_ANSWER_THRESHOLD = 0.40


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_LABELS = {
    "en": {"document": "Document", "section": "Section"},
    "de": {"document": "Dokument", "section": "Abschnitt"},
}


class ExtractiveTasks:
    """The tasks done by selecting sentences with an embedding model (offline, deterministic).

    * **summarize** — sentences split and embedded once per document; per segment the
      sentences closest to the segment's centroid are picked with MMR (diversity) until the
      token budget is reached, and given in document order; with several segments the
      overview is picked the same way from the segment summaries' sentences.
    * **contextualize_cc** — per chunk, up to ``context_sentences`` sentences (≤
      ``context_tokens`` tokens) of the *whole document* most similar to the chunk, excluding
      the chunk's own sentences, prefixed with the document title (when passed) and the chunk's
      section (when known).
    * **contextualize_swb** — the same, drawing only from the summary and the batch's
      before/after window (and the batch's other chunks) — what the SWB prompt shows the model.
    * **answer** — the passage sentences that answer the question, each group citing its chunk id
      in brackets, with the list a picked sentence introduces;
      :data:`~ctxwin_dagster.core.methods.prompts.NOT_IN_DOCUMENTS` when the passages do not hold
      the answer (:mod:`.answering` says how both are decided, on a tuning split).

    Every task also renders the prompt the LLM engine would send and records a
    :class:`CallRecord` (``backend="extractive"``, cost 0) with its counted input tokens and
    characters, and output tokens counted from the extractive output, in :attr:`ledger`.

    ``answer_threshold`` default (:data:`DEFAULT_ANSWER_THRESHOLD` = 0.40) is the floor of the
    answer rule: on 2,000 SQuAD 2.0 dev questions with the top-4 chunks (1,000/100) of their own
    article as passages, the best question–sentence cosine is ≥ 0.40 for 97.9 % of the answerable
    questions, while the same questions against another article's chunks (unrelated passages)
    fall below it 98.0 % of the time. Above it, the rule's not-found model decides (SQuAD's
    unanswerable questions are adversarial, written against the paragraph, and 95 % of them
    pass the floor).

    Args:
        embedder: an :class:`~ctxwin_dagster.backends.base.Embedder` (e.g. ``LocalEmbedder``).
        counter: the token counter for prompts, budgets and outputs; default
            ``cl100k_base`` (the offline encoding).
        model_label: the ``model`` of results and records.
        answer_threshold: see above (the rule's ``floor``).
        answer_sentences: at most this many sentences answer (the rule's ``sentences``).
        answer_rule: the whole :class:`~.answering.AnswerRule`; its ``floor`` and ``sentences``
            are ``answer_threshold`` and ``answer_sentences``.
        context_sentences / context_tokens: the size of a context.
        mmr_lambda: relevance vs. diversity in MMR (1 = relevance only).
        ledger: where records go; a new :class:`Ledger` when None.
        cache: a :class:`~ctxwin_dagster.backends.calls.cache.ResponseCache` keeping every task's
            result by content (see :mod:`.memo`); a rerun on the same content reuses it and
            records the work as cache hits. None: nothing kept.
    """

    engine = "extractive"
    #: No chat model, so no window and no replies of one (see :class:`~.results.TaskEngine`).
    chat = None
    limits = None
    max_tokens = None

    def __init__(
        self,
        embedder: Embedder,
        *,
        counter: TokenCounter | None = None,
        model_label: str = "extractive/all-MiniLM-L6-v2",
        answer_threshold: float = DEFAULT_ANSWER_THRESHOLD,
        context_sentences: int = 3,
        context_tokens: int = 100,
        answer_sentences: int = 3,
        answer_rule: AnswerRule | None = None,
        mmr_lambda: float = 0.7,
        ledger: Ledger | None = None,
        max_cached_documents: int = 4,
        max_cached_vectors: int = 50_000,
        cache: ResponseCache | NullCache | None = None,
    ) -> None:
        if not -1 <= answer_threshold <= 1:
            raise ValueError(f"answer_threshold is a cosine similarity in [-1, 1]; got {answer_threshold}")
        if context_sentences < 1 or context_tokens < 1 or answer_sentences < 1:
            raise ValueError("context_sentences, context_tokens and answer_sentences must be >= 1")
        if not 0 <= mmr_lambda <= 1:
            raise ValueError(f"mmr_lambda must be in [0, 1]; got {mmr_lambda}")
        self.embedder = embedder
        self.counter = counter or get_token_counter(None)
        self.meter = PromptMeter(self.counter)
        self.model = model_label
        self.model_label = model_label
        self.answer_threshold = answer_threshold
        self.context_sentences = context_sentences
        self.context_tokens = context_tokens
        self.answer_sentences = answer_sentences
        self.answer_rule = replace(answer_rule or AnswerRule(), floor=answer_threshold, sentences=answer_sentences)
        self.mmr_lambda = mmr_lambda
        self.ledger = ledger if ledger is not None else Ledger()
        self.max_cached_documents = max(1, max_cached_documents)
        self._docs: OrderedDict[str, SentenceIndex] = OrderedDict()
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self.max_cached_vectors = max(0, max_cached_vectors)
        self._lock = threading.Lock()
        self.stats: Counter[str] = Counter()
        # Results by content, in the project's response cache (see memo.py); None: not kept.
        self.memo = TaskMemo(
            cache,
            [
                model_label,
                answer_threshold,
                context_sentences,
                context_tokens,
                answer_sentences,
                repr(self.answer_rule),
                NOT_FOUND_MODEL,
                mmr_lambda,
                self.counter.info.name,
                getattr(embedder, "model", type(embedder).__name__),
            ],
        )

    def __repr__(self) -> str:
        return f"ExtractiveTasks(model={self.model!r}, answer_threshold={self.answer_threshold})"

    # ----------------------------------------------------------------- indexes
    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts``, remembered in memory so a text is embedded once per process
        (chunks are embedded for CC and again for SWB; the embedder's own cache, when set,
        also keeps them across runs)."""
        texts = list(texts)
        dim = self.embedder.dim
        out = np.empty((len(texts), dim), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        with self._lock:
            for i, t in enumerate(texts):
                vec = self._vectors.get(t)
                if vec is None:
                    missing.setdefault(t, []).append(i)
                else:
                    out[i] = vec
        if missing:
            new = self.embedder.embed(list(missing))
            with self._lock:
                for (t, rows), vec in zip(missing.items(), new, strict=True):
                    out[rows] = vec
                    if self.max_cached_vectors:
                        self._vectors[t] = vec
                while len(self._vectors) > self.max_cached_vectors:
                    self._vectors.popitem(last=False)
        return out

    def _index_text(self, text: str) -> SentenceIndex:
        """Sentences of ``text`` with embeddings, memoized per text (a few documents are kept)."""
        key = _sha(text)
        with self._lock:
            found = self._docs.get(key)
            if found is not None:
                self._docs.move_to_end(key)
                self.stats["document_index_hits"] += 1
                return found
        spans = split_sentences(text)
        texts = [text[s:e] for s, e in spans]
        idx = SentenceIndex.build(spans, texts, self._embed(texts), self.counter.count_many(texts) if texts else [])
        with self._lock:
            self._docs[key] = idx
            self.stats["document_indexes_built"] += 1
            self.stats["sentences_indexed"] += len(texts)
            while len(self._docs) > self.max_cached_documents:
                self._docs.popitem(last=False)
        return idx

    def _record(
        self,
        stage: str,
        doc_id: str,
        variant: str,
        tpl_id: str,
        messages: Sequence[Mapping[str, Any]],
        output: str,
        latency: float,
    ) -> CallRecord:
        rec = extractive_record(
            self.meter, self.model, CallTags(stage, doc_id, variant), tpl_id, messages, output, latency
        )
        self.ledger.add(rec)
        return rec

    def _replay(self, stored: Sequence[dict[str, Any]], doc_id: str) -> list[CallRecord]:
        """Stored records as this call's cache hits, in the ledger."""
        out = []
        for data in stored:
            rec = record_from_dict(data)
            rec = dataclasses.replace(rec, tags=CallTags(rec.tags.stage, doc_id, rec.tags.variant))
            self.ledger.add(rec)
            out.append(rec)
        self.stats["cache_hits"] += len(out)
        return out

    # ----------------------------------------------------------------- summary
    def summarize(
        self,
        text: str,
        *,
        doc_id: str,
        max_tokens: int = PAPER.summary_max_tokens,
        segment_chars: int = PAPER.summary_segment_chars,
        language: str | None = None,
    ) -> SummaryResult:
        """Central, diverse document sentences within ``max_tokens``, in document order."""
        lang = language or detect_language(text)
        tpl_ids = [get_template(n, lang).id for n in ("summarize_segment", "summarize_overview")]
        key = self.memo.key("summarize", _sha(text), max_tokens, segment_chars, lang, tpl_ids)
        hit = self.memo.get(key)
        if hit is not None:
            records = self._replay(hit["records"], doc_id)
            return SummaryResult(
                hit["text"], hit["segments"], records, lang, self.engine, self.model, hit["n_tokens"], []
            )
        result = self._summarize(text, doc_id=doc_id, max_tokens=max_tokens, segment_chars=segment_chars, language=lang)
        self.memo.put(
            key,
            {
                "text": result.text,
                "segments": result.segments,
                "n_tokens": result.n_tokens,
                "records": [record_to_dict(r) for r in result.records],
            },
        )
        return result

    def _summarize(
        self, text: str, *, doc_id: str, max_tokens: int, segment_chars: int, language: str | None
    ) -> SummaryResult:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1; got {max_tokens}")
        if not text.strip():
            raise ValueError(f"document {doc_id!r} is empty; there is nothing to summarize")
        t0 = time.perf_counter()
        lang = language or detect_language(text)
        idx = self._index_text(text)
        spans = split_segments(text, segment_chars)
        seg_tpl = get_template("summarize_segment", lang)
        records: list[CallRecord] = []
        segments: list[str] = []
        seg_rows: list[list[int]] = []
        for i, (s, e) in enumerate(spans, start=1):
            ts = time.perf_counter()
            rows = central_rows(idx, idx.in_range(s, e), max_tokens, self.mmr_lambda)
            seg_rows.append(rows)
            summary = self._join(idx, rows, max_tokens)
            segments.append(summary)
            msgs = seg_tpl.render(part=i, parts=len(spans), text=text[s:e], max_tokens=max_tokens)
            records.append(self._record(STAGE_SUMMARY, doc_id, "", seg_tpl.id, msgs, summary, time.perf_counter() - ts))
        if len(spans) == 1:
            overview = segments[0]
        else:
            ts = time.perf_counter()
            ov_tpl = get_template("summarize_overview", lang)
            pool = np.asarray(sorted({r for rows in seg_rows for r in rows}), dtype=np.int64)
            overview = self._join(idx, central_rows(idx, pool, max_tokens, self.mmr_lambda), max_tokens)
            msgs = ov_tpl.render(parts=len(segments), summaries=format_summaries(segments), max_tokens=max_tokens)
            records.append(self._record(STAGE_SUMMARY, doc_id, "", ov_tpl.id, msgs, overview, time.perf_counter() - ts))
        n_tokens = self.counter.count(overview)
        log.info("extractive summary of %s: %d tokens in %.1fs", doc_id, n_tokens, time.perf_counter() - t0)
        return SummaryResult(overview, segments, records, lang, self.engine, self.model, n_tokens, [])

    def _join(self, idx: SentenceIndex, rows: Sequence[int], budget: int) -> str:
        """Sentences joined by spaces; the rare join that exceeds the budget drops the last ones."""
        parts = [idx.texts[r] for r in rows]
        text = " ".join(parts)
        while parts and self.counter.count(text) > budget:
            parts.pop()
            text = " ".join(parts)
        return text

    # ----------------------------------------------------------------- contexts
    def _prefix(self, lang: str, title: str | None, section: str | None) -> str:
        labels = _LABELS.get(lang, _LABELS["en"])
        parts = []
        if title:
            parts.append(f"{labels['document']}: {title.strip()}.")
        if section:
            parts.append(f"{labels['section']}: {section.strip()}.")
        return " ".join(parts)

    def _pick_context(self, vectors: np.ndarray, relevance: np.ndarray, tokens: np.ndarray, prefix: str) -> list[int]:
        """Rows of a context: MMR over the most relevant candidates (``-inf`` = excluded)."""
        budget = max(1, self.context_tokens - (self.counter.count(prefix) + 1 if prefix else 0))
        return top_rows(vectors, relevance, tokens, budget, self.context_sentences, self.mmr_lambda)

    @staticmethod
    def _with_prefix(prefix: str, body: str) -> str:
        return f"{prefix} {body}".strip() if prefix else body

    def _memo_contexts(self, key: str | None, doc_id: str, compute) -> list[ContextResult]:
        """Contexts from the memo (as cache hits), or computed and stored."""
        hit = self.memo.get(key)
        if hit is not None:
            self._replay(hit["records"], doc_id)
            return [ContextResult(**{**c, "cached": True}) for c in hit["contexts"]]
        mark = len(self.ledger)
        results = compute()
        self.memo.put(
            key,
            {
                "contexts": [c.to_dict() for c in results],
                "records": [record_to_dict(r) for r in self.ledger.since(mark)],
            },
        )
        return results

    def contextualize_cc(
        self, document_text: str, chunks: Sequence[ChunkLike], *, doc_id: str, title: str | None = None
    ) -> list[ContextResult]:
        """Per chunk: the most related sentences of the whole document (not the chunk's own)."""
        chunks = list(chunks)
        check_chunks(document_text, chunks)
        if not chunks:
            return []
        lang = detect_language(document_text)
        tpl = get_template("cc_context", lang)
        key = self.memo.key("cc", _sha(document_text), chunk_parts(chunks), title, tpl.id)
        return self._memo_contexts(
            key, doc_id, lambda: self._contextualize_cc(document_text, chunks, doc_id, title, lang, tpl)
        )

    def _contextualize_cc(self, document_text, chunks, doc_id, title, lang, tpl) -> list[ContextResult]:
        t0 = time.perf_counter()
        idx = self._index_text(document_text)
        queries = self._embed([c.text for c in chunks])
        base_rel = np.where(idx.usable, 0.0, -np.inf).astype(np.float32)
        results: list[ContextResult] = []
        per_chunk_latency = (time.perf_counter() - t0) / len(chunks)
        for c, q in zip(chunks, queries, strict=True):
            ts = time.perf_counter()
            relevance = idx.vectors @ q + base_rel
            relevance[idx.overlapping(c.start, c.end)] = -np.inf  # never the chunk's own sentences
            prefix = self._prefix(lang, title, getattr(c, "section", None))
            rows = sorted(self._pick_context(idx.vectors, relevance, idx.tokens, prefix))  # document order
            ctx = self._with_prefix(prefix, " ".join(idx.texts[r] for r in rows))
            msgs = tpl.render(document=document_text, chunk=c.text)
            rec = self._record(
                STAGE_CONTEXT, doc_id, "cc", tpl.id, msgs, ctx, per_chunk_latency + time.perf_counter() - ts
            )
            if not ctx:
                self.stats["empty_contexts"] += 1
            results.append(
                ContextResult(
                    c.chunk_id,
                    ctx,
                    self.engine,
                    self.model,
                    tpl.id,
                    rec.input_tokens,
                    rec.output_tokens,
                    rec.input_chars,
                    False,
                )
            )
        return results

    def contextualize_swb(
        self,
        document_text: str,
        chunks: Sequence[ChunkLike],
        summary: str,
        *,
        doc_id: str,
        batch_size: int = PAPER.swb_batch_size,
        window_chars: int = PAPER.swb_window_chars,
        title: str | None = None,
    ) -> list[ContextResult]:
        """Per chunk: the most related sentences of the summary and the batch's ±window.

        Each batch is metered as the prompt :func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts`
        builds for it, the prompt the LLM engine sends for the same batch.
        """
        chunks = list(chunks)
        swb = swb_batch_prompts(document_text, chunks, summary, batch_size=batch_size, window_chars=window_chars)
        if not swb.batches:
            return []
        key = self.memo.key(
            "swb",
            _sha(document_text),
            chunk_parts(chunks),
            _sha(summary),
            batch_size,
            window_chars,
            title,
            swb.template.id,
        )
        return self._memo_contexts(
            key, doc_id, lambda: self._contextualize_swb(document_text, chunks, summary, swb, doc_id, title)
        )

    def _contextualize_swb(self, document_text, chunks, summary, swb, doc_id, title) -> list[ContextResult]:
        lang, tpl = swb.language, swb.template
        idx = self._index_text(document_text)
        sum_idx = self._index_text(summary) if summary.strip() else None
        queries = dict(zip((c.chunk_id for c in chunks), self._embed([c.text for c in chunks]), strict=True))
        results: list[ContextResult] = []
        for b in swb.batches:
            ts = time.perf_counter()
            window_rows = idx.in_range(*b.window)
            window_rows = window_rows[idx.usable[window_rows]]
            # Candidates: the summary's sentences (first, the global picture), then the window's
            # sentences in document order.
            if sum_idx is not None:
                s_rows = np.flatnonzero(sum_idx.usable)
                vecs = np.concatenate([sum_idx.vectors[s_rows], idx.vectors[window_rows]])
                texts = [sum_idx.texts[r] for r in s_rows] + [idx.texts[r] for r in window_rows]
                toks = np.concatenate([sum_idx.tokens[s_rows], idx.tokens[window_rows]])
                n_sum = len(s_rows)
            else:
                vecs, texts, toks, n_sum = (
                    idx.vectors[window_rows],
                    [idx.texts[r] for r in window_rows],
                    idx.tokens[window_rows],
                    0,
                )
            contexts: list[tuple[str, str]] = []
            for c in b.chunks:
                relevance = vecs @ queries[c.chunk_id] if len(texts) else np.zeros(0, np.float32)
                own = np.isin(window_rows, idx.overlapping(c.start, c.end))
                relevance[n_sum:][own] = -np.inf  # never the chunk's own sentences
                prefix = self._prefix(lang, title, getattr(c, "section", None))
                picked = sorted(self._pick_context(vecs, relevance, toks, prefix))  # summary first, then document order
                contexts.append((c.chunk_id, self._with_prefix(prefix, " ".join(texts[j] for j in picked))))
                if not contexts[-1][1]:
                    self.stats["empty_contexts"] += 1
            output = json.dumps(
                {"contexts": [{"chunk_id": cid, "context": ctx} for cid, ctx in contexts]}, ensure_ascii=False
            )
            rec = self._record(STAGE_CONTEXT, doc_id, "swb", tpl.id, b.messages, output, time.perf_counter() - ts)
            usage = batch_shares(len(b.chunks), rec.input_tokens, rec.output_tokens, rec.input_chars)
            for (cid, ctx), (in_tok, out_tok, in_chars) in zip(contexts, usage, strict=True):
                results.append(
                    ContextResult(cid, ctx, self.engine, self.model, tpl.id, in_tok, out_tok, in_chars, False)
                )
        order_of = {c.chunk_id: i for i, c in enumerate(chunks)}
        results.sort(key=lambda r: order_of[r.chunk_id])
        return results

    # ----------------------------------------------------------------- answer
    def answer(
        self,
        question: str,
        passages: Sequence[tuple[str, str]],
        *,
        doc_id: str = "",
        starts: Sequence[int | None] | None = None,
    ) -> AnswerResult:
        """The passage sentences that answer the question (see
        :func:`~ctxwin_dagster.backends.tasks.answering.answer_from_passages`), citing their chunk
        ids; ``starts``, the passages' offsets in their documents, tell a document's opening."""
        passages = [(str(cid), str(text)) for cid, text in passages]
        lang = detect_language(question + "\n" + " ".join(t for _, t in passages[:2]))
        tpl = get_template("answer", lang)
        offsets = list(starts) if starts is not None else None
        key = self.memo.key("answer", question, passages, tpl.id, offsets)
        hit = self.memo.get(key)
        if hit is not None:
            if hit["not_found"]:
                self.stats["answers_not_found"] += 1
            recs = self._replay(hit["records"], doc_id)
            return AnswerResult(
                hit["text"], hit["cited"], hit["not_found"], recs, self.engine, self.model, tpl.id, [], hit["score"]
            )
        result = self._answer(question, passages, doc_id, tpl, english=lang == "en", starts=offsets)
        self.memo.put(
            key,
            {
                "text": result.text,
                "cited": result.cited_chunk_ids,
                "not_found": result.not_found,
                "score": result.score,
                "records": [record_to_dict(r) for r in result.records],
            },
        )
        return result

    def _answer(
        self,
        question: str,
        passages: list[tuple[str, str]],
        doc_id: str,
        tpl,
        *,
        english: bool,
        starts: Sequence[int | None] | None = None,
    ) -> AnswerResult:
        ts = time.perf_counter()
        msgs = tpl.render(question=question, passages=format_passages(passages))
        found = answer_from_passages(
            question, passages, self._embed, rule=self.answer_rule, english=english, starts=starts
        )
        if found.not_found:
            self.stats["answers_not_found"] += 1
        rec = self._record(STAGE_ANSWER, doc_id, "", tpl.id, msgs, found.text, time.perf_counter() - ts)
        return AnswerResult(
            found.text, found.cited, found.not_found, [rec], self.engine, self.model, tpl.id, [], found.best
        )

    def answer_many(self, items: Sequence[tuple[str, Sequence[tuple[str, str]], str]]) -> list[AnswerResult]:
        """:meth:`answer` for many ``(question, passages, doc_id)``."""
        return [self.answer(q, p, doc_id=d) for q, p, d in items]
