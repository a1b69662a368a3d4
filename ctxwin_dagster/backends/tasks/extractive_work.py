"""What every task of the extractive engine shares: embeddings, sentence indexes, records, contexts.

:class:`ExtractiveWork` holds the engine's settings (set by
:class:`~ctxwin_dagster.backends.tasks.extractive.ExtractiveTasks`) and the work its tasks have
in common: texts embedded once per process, a document's sentences indexed once (a few
documents are kept), a :class:`~ctxwin_dagster.backends.base.CallRecord` for the work done in
place of each model call, stored records replayed as cache hits, and how a context is picked
from candidate sentences (CC-RAG and SWB-RAG alike).
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ctxwin_dagster.backends.base import CallRecord, CallTags, Embedder, Ledger
from ctxwin_dagster.backends.tasks.memo import TaskMemo, extractive_record, record_from_dict, record_to_dict
from ctxwin_dagster.backends.tasks.results import ContextResult
from ctxwin_dagster.backends.tasks.selection import SentenceIndex, top_rows
from ctxwin_dagster.core.budget.tokens import PromptMeter, TokenCounter
from ctxwin_dagster.core.evaluation.record_values import mappings
from ctxwin_dagster.core.text.sentences import split_sentences

__all__ = ["ExtractiveWork", "text_sha"]


def text_sha(text: str) -> str:
    """The SHA-256 of ``text`` (UTF-8), in hex: the key of a text's content."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_LABELS = {
    "en": {"document": "Document", "section": "Section"},
    "de": {"document": "Dokument", "section": "Abschnitt"},
}


class ExtractiveWork:
    """The settings and the work the extractive engine's tasks share (see the module docstring)."""

    engine: str
    model: str
    embedder: Embedder
    counter: TokenCounter
    meter: PromptMeter
    context_sentences: int
    context_tokens: int
    mmr_lambda: float
    ledger: Ledger
    memo: TaskMemo
    stats: Counter[str]
    max_cached_documents: int
    max_cached_vectors: int
    _docs: OrderedDict[str, SentenceIndex]
    _vectors: OrderedDict[str, np.ndarray]
    _lock: threading.Lock

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
        key = text_sha(text)
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

    # ----------------------------------------------------------------- records
    def _record(
        self,
        stage: str,
        doc_id: str,
        variant: str,
        tpl_id: str,
        messages: Sequence[Mapping[str, str]],
        output: str,
        latency: float,
    ) -> CallRecord:
        rec = extractive_record(
            self.meter, self.model, CallTags(stage, doc_id, variant), tpl_id, messages, output, latency
        )
        self.ledger.add(rec)
        return rec

    def _replay(self, stored: object, doc_id: str) -> list[CallRecord]:
        """Stored records (the list :meth:`_keep` wrote) as this call's cache hits, in the ledger."""
        out = []
        for data in mappings(stored):
            rec = record_from_dict(data)
            rec = dataclasses.replace(rec, tags=CallTags(rec.tags.stage, doc_id, rec.tags.variant))
            self.ledger.add(rec)
            out.append(rec)
        self.stats["cache_hits"] += len(out)
        return out

    def _keep(self, key: str | None, records: Sequence[CallRecord], **fields: object) -> None:
        """A task's result (``fields``, JSON) and the records of its work, in the memo under ``key``."""
        self.memo.put(key, {**fields, "records": [record_to_dict(r) for r in records]})

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

    def _memo_contexts(
        self, key: str | None, doc_id: str, compute: Callable[[], list[ContextResult]]
    ) -> list[ContextResult]:
        """Contexts from the memo (as cache hits), or computed and stored."""
        hit = self.memo.get(key)
        if hit is not None:
            self._replay(hit["records"], doc_id)
            return [ContextResult.from_dict({**c, "cached": True}) for c in mappings(hit["contexts"])]
        mark = len(self.ledger)
        results = compute()
        self._keep(key, self.ledger.since(mark), contexts=[c.to_dict() for c in results])
        return results
