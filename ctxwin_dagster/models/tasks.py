"""The model tasks of the pipeline — summarize, contextualize (CC / SWB), answer — two ways.

Three small protocols (:class:`Summarizer`, :class:`Contextualizer`, :class:`Answerer`) and
two implementations of all three:

* :class:`LLMTasks` — a chat model behind :class:`~ctxwin_dagster.models.base.ChatBackend`
  (OpenAI or any OpenAI-compatible server). Prompts come from
  :mod:`ctxwin_dagster.core.prompts`, batches go through ``complete_many``, prompts are made to
  fit the model (or refused with an error naming the fix), SWB replies are parsed, repaired,
  retried once and, failing that, replaced per chunk by a single-chunk call over the batch's
  window — every retry and fallback counted (:attr:`LLMTasks.stats`) and marked on the result.
* :class:`ExtractiveTasks` — the offline default: the same tasks done by *selecting sentences*
  with an embedding model. Deterministic, no network, cost 0, and labelled ``engine="extractive"``
  everywhere. It still renders and counts the exact prompts the LLM path would send, so input
  volumes (tokens, characters) are reported the same way offline.

Chunks are duck-typed: anything with ``chunk_id``, ``start``, ``end``, ``text`` (and optionally
``section``) works, e.g. :class:`ctxwin_dagster.core.splitting.Chunk`.

SWB windows (the paper's settings by default): for a batch of ``batch_size`` consecutive chunks
the text before is ``document[max(0, batch_start - window_chars):batch_start]`` and the text
after is ``document[batch_end:batch_end + window_chars]``, where ``batch_start`` is the first
chunk's ``start`` and ``batch_end`` the last chunk's ``end``. A batch's call is shared by its
chunks: each chunk's ``input_tokens``/``output_tokens``/``input_chars`` are its share (the
batch totals split evenly, remainders to the first chunks), so sums over chunks equal the
totals of the calls.

Example (offline)::

    from ctxwin_dagster.models.embeddings import LocalEmbedder
    tasks = ExtractiveTasks(LocalEmbedder())
    summary = tasks.summarize(text, doc_id="ai_act", max_tokens=500)
    ctx = tasks.contextualize_swb(text, chunks, summary.text, doc_id="ai_act")
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..core.defaults import PAPER
from ..core.fit import ContextOverflowError, ensure_fit, truncate_text
from ..core.limits import ModelLimits, get_model_limits
from ..core.prompts import (
    NOT_IN_DOCUMENTS,
    SWB_RETRY_NOTE,
    PromptOutputError,
    PromptTemplate,
    detect_language,
    format_chunk_batch,
    format_passages,
    format_summaries,
    get_template,
    parse_answer,
    parse_swb_contexts,
)
from ..core.sentences import split_sentences
from ..core.tokens import PromptMeter, TokenCounter, get_token_counter
from .base import CallRecord, CallTags, ChatBackend, ChatRequest, ChatResult, Embedder, Ledger

__all__ = [
    "DEFAULT_ANSWER_THRESHOLD",
    "AnswerResult",
    "Answerer",
    "ContextResult",
    "Contextualizer",
    "ExtractiveTasks",
    "LLMTasks",
    "SummaryResult",
    "Summarizer",
    "split_segments",
    "swb_batches",
]

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

_STAGE_SUMMARY = "summary"
_STAGE_CONTEXT = "contextualize"
_STAGE_ANSWER = "answer"


# --------------------------------------------------------------------------------------
# Results and protocols
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """A global summary: the overview ``text``, the per-segment summaries and the calls made.

    ``notes`` lists everything cut to fit a model or a budget (empty when nothing was).
    """

    text: str
    segments: list[str]
    records: list[CallRecord]
    language: str = "en"
    engine: str = ""
    model: str = ""
    n_tokens: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ContextResult:
    """The situating context of one chunk and how it was made.

    ``cached`` is True when every call behind it was answered from the cache; ``fallback`` when
    it did not come from its own batch (SWB per-chunk fallback); ``error`` says what went wrong
    (None when nothing did).
    """

    chunk_id: str
    context: str
    engine: str
    model: str
    prompt_version: str
    input_tokens: int
    output_tokens: int
    input_chars: int
    cached: bool
    fallback: bool = False
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class AnswerResult:
    """An answer: its text, the chunk ids it cites, and whether the passages lacked the answer.

    ``text`` is :data:`~ctxwin_dagster.core.prompts.NOT_IN_DOCUMENTS` when ``not_found``.
    ``unknown_citations`` are bracketed ids in the reply that match no passage; ``score`` is the
    extractive engine's best question–sentence similarity (None for the LLM engine).
    """

    text: str
    cited_chunk_ids: list[str]
    not_found: bool
    records: list[CallRecord]
    engine: str = ""
    model: str = ""
    prompt_version: str = ""
    unknown_citations: list[str] = field(default_factory=list)
    score: float | None = None


@runtime_checkable
class Summarizer(Protocol):
    def summarize(
        self,
        text: str,
        *,
        doc_id: str,
        max_tokens: int = PAPER.summary_max_tokens,
        segment_chars: int = PAPER.summary_segment_chars,
        language: str | None = None,
    ) -> SummaryResult: ...


@runtime_checkable
class Contextualizer(Protocol):
    def contextualize_cc(self, document_text: str, chunks: Sequence[Any], *, doc_id: str) -> list[ContextResult]: ...

    def contextualize_swb(
        self,
        document_text: str,
        chunks: Sequence[Any],
        summary: str,
        *,
        doc_id: str,
        batch_size: int = PAPER.swb_batch_size,
        window_chars: int = PAPER.swb_window_chars,
    ) -> list[ContextResult]: ...


@runtime_checkable
class Answerer(Protocol):
    def answer(self, question: str, passages: Sequence[tuple[str, str]], *, doc_id: str = "") -> AnswerResult: ...


# --------------------------------------------------------------------------------------
# Shared helpers: segments, batches, windows
# --------------------------------------------------------------------------------------


def split_segments(text: str, segment_chars: int) -> list[tuple[int, int]]:
    """Cut ``text`` into consecutive ``(start, end)`` spans of at most ``segment_chars``.

    Cuts fall after a blank line, else a line break, else a sentence end, else a space, in the
    second half of the span; a text that fits is one segment. The spans cover the whole text.

    Example::

        >>> split_segments("aaa\\n\\nbbb\\n\\nccc", 7)
        [(0, 5), (5, 10), (10, 13)]
    """
    if segment_chars < 1:
        raise ValueError(f"segment_chars must be >= 1; got {segment_chars}")
    n = len(text)
    spans: list[tuple[int, int]] = []
    start = 0
    while n - start > segment_chars:
        limit = start + segment_chars
        cut = -1
        for sep in ("\n\n", "\n", ". ", " "):
            pos = text.rfind(sep, start + segment_chars // 2, limit)
            if pos != -1:
                cut = pos + len(sep)
                break
        if cut <= start:
            cut = limit
        spans.append((start, cut))
        start = cut
    spans.append((start, n))
    return spans


def swb_batches(chunks: Sequence[Any], batch_size: int) -> list[list[Any]]:
    """Consecutive batches of ``batch_size`` chunks (in document order)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size}")
    ordered = sorted(chunks, key=lambda c: (c.start, c.end))
    return [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]


def _swb_window(document_text: str, batch: Sequence[Any], window_chars: int) -> tuple[str, str, int, int]:
    start, end = batch[0].start, batch[-1].end
    before = document_text[max(0, start - window_chars) : start]
    after = document_text[end : end + window_chars]
    return before, after, start, end


def _swb_messages(tpl: PromptTemplate, summary: str, before: str, batch: Sequence[Any], after: str) -> list[dict[str, str]]:
    return tpl.render(
        summary=summary,
        before=before,
        chunks=format_chunk_batch([(c.chunk_id, c.text) for c in batch]),
        after=after,
        n=len(batch),
    )


def _check_chunks(document_text: str, chunks: Sequence[Any]) -> None:
    seen: set[str] = set()
    for c in chunks:
        for attr in ("chunk_id", "start", "end", "text"):
            if not hasattr(c, attr):
                raise TypeError(f"chunks need .chunk_id, .start, .end and .text; got {type(c).__name__} without .{attr}")
        if not (0 <= c.start <= c.end <= len(document_text)):
            raise ValueError(
                f"chunk {c.chunk_id} spans [{c.start}, {c.end}) outside the document of {len(document_text)} chars; "
                "pass the chunks of this document"
            )
        if c.chunk_id in seen:
            raise ValueError(f"chunk id {c.chunk_id} appears twice; chunk ids must be unique")
        seen.add(c.chunk_id)


def _shares(total: int, n: int) -> list[int]:
    """``total`` split into ``n`` integer shares that sum to it (remainder to the first)."""
    base, rem = divmod(total, n)
    return [base + (1 if i < rem else 0) for i in range(n)]


def _chars(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(len(m.get("content") or "") for m in messages)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------
# LLM tasks
# --------------------------------------------------------------------------------------


class LLMTasks:
    """Summaries, CC/SWB contexts and answers from a chat model.

    Args:
        chat: a :class:`ChatBackend` (e.g. ``OpenAIChatBackend``); its ``ledger`` gets every call.
        temperature, top_p, max_tokens: sampling settings of every request (the paper's
            contextualization settings by default); ``max_tokens`` is capped by the model's
            maximum completion.
        counter: token counter for fitting prompts; default the model's.
        limits: the model's limits; default ``chat.limits`` or the registry's.
        wave_size: requests handed to ``complete_many`` at once (a CC prompt holds the whole
            document, so all of a long document's CC prompts at once would not fit in memory);
            default ``4 * max_concurrency``.

    Attributes:
        stats: a :class:`collections.Counter` of events: ``swb_batches``, ``swb_invalid``
            (first replies unusable), ``swb_retried``, ``swb_retry_invalid``,
            ``swb_fallback_chunks``, ``swb_fallback_failed``, ``swb_windows_shrunk``,
            ``summary_truncations``, ``answer_passages_dropped``, ``empty_contexts``.
    """

    engine = "llm"

    def __init__(
        self,
        chat: ChatBackend,
        *,
        temperature: float = PAPER.temperature,
        top_p: float = PAPER.top_p,
        max_tokens: int = PAPER.max_output_tokens,
        counter: TokenCounter | None = None,
        limits: ModelLimits | None = None,
        wave_size: int | None = None,
    ) -> None:
        if not 0 <= temperature <= 2:
            raise ValueError(f"temperature must be between 0 and 2; got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1]; got {top_p}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1; got {max_tokens}")
        if wave_size is not None and wave_size < 1:
            raise ValueError(f"wave_size must be >= 1; got {wave_size}")
        self.chat = chat
        self.model = chat.model
        self.temperature = temperature
        self.top_p = top_p
        self.limits = limits or getattr(chat, "limits", None) or get_model_limits(chat.model)
        if not isinstance(self.limits, ModelLimits):
            raise TypeError(f"limits must be a ModelLimits; got {type(self.limits).__name__}")
        self.max_tokens = min(max_tokens, self.limits.max_completion_tokens)
        self.counter = counter or get_token_counter(chat.model)
        self.meter = PromptMeter(self.counter)
        self.wave_size = wave_size or max(16, 4 * int(getattr(chat, "max_concurrency", 8)))
        self.stats: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"LLMTasks(model={self.model!r}, temperature={self.temperature}, top_p={self.top_p}, max_tokens={self.max_tokens})"

    # ----------------------------------------------------------------- plumbing
    def _request(self, messages: Sequence[Mapping[str, Any]], tpl_id: str, tags: CallTags, *, max_tokens: int | None = None, json_mode: bool = False) -> ChatRequest:
        return ChatRequest(
            messages=tuple(dict(m) for m in messages),
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=min(max_tokens or self.max_tokens, self.limits.max_completion_tokens),
            json_mode=json_mode,
            prompt_version=tpl_id,
            tags=tags,
        )

    def _prompt_limit(self, reserved: int) -> int:
        return self.limits.available_prompt_tokens(min(reserved, self.limits.max_completion_tokens))

    def _run(self, requests: list[ChatRequest]) -> list[ChatResult]:
        out: list[ChatResult] = []
        for i in range(0, len(requests), self.wave_size):
            out.extend(self.chat.complete_many(requests[i : i + self.wave_size]))
        return out

    def _fit(self, messages: list[dict[str, str]], reserved: int, what: str, notes: list[str]) -> list[dict[str, str]]:
        """``messages`` cut to fit (middle of the longest message), noting what was cut."""
        limit = self._prompt_limit(reserved)
        n = self.meter.count_messages(messages)
        if n <= limit:
            return messages
        report = ensure_fit(messages, max_prompt_tokens=limit, strategy="smart_truncate", counter=self.counter, truncate_side="middle")
        note = f"{what}: cut to fit {self.model} ({report.summary()})"
        notes.append(note)
        log.warning(note)
        self.stats["summary_truncations"] += 1
        return report.messages

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
        """Map (one summary per segment of ≤ ``segment_chars``), then reduce to an overview of ≤ ``max_tokens``.

        A document of one segment needs one call. A segment too long for the model is cut in
        its middle to fit, and the cut is listed in ``notes``; an overview longer than
        ``max_tokens`` is cut at its end (also noted).
        """
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1; got {max_tokens}")
        if not text.strip():
            raise ValueError(f"document {doc_id!r} is empty; there is nothing to summarize")
        lang = language or detect_language(text)
        tags = CallTags(_STAGE_SUMMARY, doc_id)
        spans = split_segments(text, segment_chars)
        seg_tpl = get_template("summarize_segment", lang)
        budget = min(max_tokens, self.limits.max_completion_tokens)
        reply_tokens = min(self.limits.max_completion_tokens, max(self.max_tokens, budget + budget // 10 + 16))
        notes: list[str] = []
        requests = []
        for i, (s, e) in enumerate(spans, start=1):
            msgs = seg_tpl.render(part=i, parts=len(spans), text=text[s:e], max_tokens=budget)
            msgs = self._fit(msgs, reply_tokens, f"segment {i}/{len(spans)} of {doc_id}", notes)
            requests.append(self._request(msgs, seg_tpl.id, tags, max_tokens=reply_tokens))
        results = self._run(requests)
        segments = [r.text.strip() for r in results]
        records = [r.record for r in results]
        for i, seg in enumerate(segments, start=1):
            if not seg:
                raise RuntimeError(
                    f"{self.model} returned an empty summary for segment {i} of {doc_id}; check the model's "
                    "output (max_tokens, content filters) and run again"
                )
        if len(segments) == 1:
            overview = segments[0]
        else:
            ov_tpl = get_template("summarize_overview", lang)
            msgs = ov_tpl.render(parts=len(segments), summaries=format_summaries(segments), max_tokens=budget)
            msgs = self._fit(msgs, reply_tokens, f"overview of {doc_id}", notes)
            result = self.chat.complete(self._request(msgs, ov_tpl.id, tags, max_tokens=reply_tokens))
            records.append(result.record)
            overview = result.text.strip()
            if not overview:
                raise RuntimeError(f"{self.model} returned an empty overview for {doc_id}; run again or check the model")
        n_tokens = self.counter.count(overview)
        if n_tokens > max_tokens:
            cut = truncate_text(overview, max_tokens, side="tail", counter=self.counter, marker=" …")
            notes.append(f"overview of {doc_id}: {n_tokens} tokens cut to {cut.tokens_after} (max_tokens={max_tokens})")
            self.stats["summary_truncations"] += 1
            overview, n_tokens = cut.text, cut.tokens_after
        return SummaryResult(overview, segments, records, lang, self.engine, self.model, n_tokens, notes)

    # ----------------------------------------------------------------- CC
    def contextualize_cc(self, document_text: str, chunks: Sequence[Any], *, doc_id: str) -> list[ContextResult]:
        """One call per chunk with the whole document (Anthropic's contextual retrieval).

        Raises:
            ContextOverflowError: the document does not fit the model — nothing is cut, since
                CC-RAG is defined by the whole document; the message names the fixes.
        """
        chunks = list(chunks)
        _check_chunks(document_text, chunks)
        if not chunks:
            return []
        lang = detect_language(document_text)
        tpl = get_template("cc_context", lang)
        tags = CallTags(_STAGE_CONTEXT, doc_id, "cc")
        longest = max(chunks, key=lambda c: len(c.text))
        need = self.meter.count_messages(tpl.render(document=document_text, chunk=longest.text))
        limit = self._prompt_limit(self.max_tokens)
        if need > limit:
            raise ContextOverflowError(
                f"CC-RAG puts the whole document in every prompt: {doc_id} needs {need} prompt tokens, but "
                f"{self.model} allows {limit} (context {self.limits.context_length} minus {self.max_tokens} "
                f"reserved for the reply), over by {need - limit}. Use a model with a longer context for the "
                "contextualizer (the SWB-RAG paper used Gemini 1.5 Flash), or use SWB-RAG, which needs only the "
                "summary and a ±window per batch. Nothing was sent."
            )
        results: list[ContextResult] = []
        for w in range(0, len(chunks), self.wave_size):
            wave = chunks[w : w + self.wave_size]
            requests = [self._request(tpl.render(document=document_text, chunk=c.text), tpl.id, tags) for c in wave]
            for c, r in zip(wave, self.chat.complete_many(requests), strict=True):
                ctx = r.text.strip()
                if not ctx:
                    self.stats["empty_contexts"] += 1
                rec = r.record
                results.append(
                    ContextResult(
                        c.chunk_id, ctx, self.engine, self.model, tpl.id, rec.input_tokens, rec.output_tokens,
                        rec.input_chars, rec.cache_hit, False, None if ctx else f"{self.model} returned an empty context",
                    )
                )
        return results

    # ----------------------------------------------------------------- SWB
    def contextualize_swb(
        self,
        document_text: str,
        chunks: Sequence[Any],
        summary: str,
        *,
        doc_id: str,
        batch_size: int = PAPER.swb_batch_size,
        window_chars: int = PAPER.swb_window_chars,
    ) -> list[ContextResult]:
        """One call per batch of ``batch_size`` chunks with the summary and ±``window_chars``.

        Replies are parsed as JSON (code fences, prose around the object, a bare list and ids
        abbreviated to a unique prefix or given as the chunk's number are repaired). A batch
        whose reply is still unusable is retried once with a reminder (and a new prompt version,
        so the cache cannot return the same reply); chunks still without a context then get a
        single-chunk ``cc_context`` call over the batch's window (not the whole document), with
        ``fallback=True`` and the reason in ``error``. All of it is counted in :attr:`stats`.
        """
        if window_chars < 0:
            raise ValueError(f"window_chars must be >= 0; got {window_chars}")
        chunks = list(chunks)
        _check_chunks(document_text, chunks)
        if not chunks:
            return []
        lang = detect_language(document_text)
        tpl = get_template("swb_batch", lang)
        cc_tpl = get_template("cc_context", lang)
        tags = CallTags(_STAGE_CONTEXT, doc_id, "swb")
        batches = swb_batches(chunks, batch_size)
        limit = self._prompt_limit(self.max_tokens)

        prompts: list[list[dict[str, str]]] = []
        windows: list[tuple[int, int]] = []
        for k, batch in enumerate(batches):
            before, after, start, end = _swb_window(document_text, batch, window_chars)
            msgs = _swb_messages(tpl, summary, before, batch, after)
            if self.meter.count_messages(msgs) > limit:
                msgs = self._shrink_swb(tpl, summary, before, batch, after, limit, doc_id, k)
            prompts.append(msgs)
            windows.append((max(0, start - window_chars), end + window_chars))
        self.stats["swb_batches"] += len(batches)

        first = self._run([self._request(m, tpl.id, tags, json_mode=True) for m in prompts])
        outcome: dict[int, dict[str, str]] = {}
        errors: dict[int, str] = {}
        calls: dict[int, list[CallRecord]] = {k: [r.record] for k, r in enumerate(first)}
        for k, (batch, res) in enumerate(zip(batches, first, strict=True)):
            ids = [c.chunk_id for c in batch]
            try:
                outcome[k] = parse_swb_contexts(res.text, ids)
            except PromptOutputError as exc:
                errors[k] = str(exc)
        if errors:
            self.stats["swb_invalid"] += len(errors)
            log.warning("%s: %d of %d SWB batches gave unusable replies; retrying them once", doc_id, len(errors), len(batches))
            retry_ids = sorted(errors)
            note = SWB_RETRY_NOTE.get(tpl.language, SWB_RETRY_NOTE["en"])
            retry_requests = []
            for k in retry_ids:
                msgs = [dict(m) for m in prompts[k]]
                msgs[-1]["content"] += note.format(n=len(batches[k]))
                retry_requests.append(self._request(msgs, f"{tpl.id}+retry1", tags, json_mode=True))
            self.stats["swb_retried"] += len(retry_ids)
            for k, res in zip(retry_ids, self._run(retry_requests), strict=True):
                calls[k].append(res.record)
                ids = [c.chunk_id for c in batches[k]]
                try:
                    outcome[k] = parse_swb_contexts(res.text, ids)
                    del errors[k]
                except PromptOutputError as exc:
                    self.stats["swb_retry_invalid"] += 1
                    errors[k] = f"{errors[k]}; after retry: {exc}"
                    partial = _lenient(first[k].text, ids)
                    partial.update(_lenient(res.text, ids))
                    outcome[k] = partial

        # Per-chunk fallback for whatever is still missing.
        fallback_jobs: list[tuple[int, Any]] = []
        for k, batch in enumerate(batches):
            got = outcome.get(k, {})
            fallback_jobs.extend((k, c) for c in batch if c.chunk_id not in got)
        fallback_results: dict[str, ChatResult] = {}
        if fallback_jobs:
            self.stats["swb_fallback_chunks"] += len(fallback_jobs)
            log.warning("%s: %d chunks fall back to single-chunk calls over their batch window", doc_id, len(fallback_jobs))
            requests = []
            for k, c in fallback_jobs:
                ws, we = windows[k]
                msgs = cc_tpl.render(document=document_text[ws:we], chunk=c.text)
                msgs = self._fit_fallback(msgs, cc_tpl, document_text[ws:we], c)
                requests.append(self._request(msgs, f"{cc_tpl.id}+swb_fallback", tags))
            for (_k, c), res in zip(fallback_jobs, self._run(requests), strict=True):
                fallback_results[c.chunk_id] = res

        results: list[ContextResult] = []
        for k, batch in enumerate(batches):
            recs = calls[k]
            n = len(batch)
            in_tok = _shares(sum(r.input_tokens for r in recs), n)
            out_tok = _shares(sum(r.output_tokens for r in recs), n)
            in_chars = _shares(sum(r.input_chars for r in recs), n)
            batch_cached = all(r.cache_hit for r in recs)
            version = tpl.id if len(recs) == 1 else f"{tpl.id}+retry1"
            for i, c in enumerate(batch):
                ctx = outcome.get(k, {}).get(c.chunk_id)
                if ctx is not None:
                    results.append(
                        ContextResult(
                            c.chunk_id, ctx, self.engine, self.model, version, in_tok[i], out_tok[i], in_chars[i],
                            batch_cached, False, None,
                        )
                    )
                    continue
                fb = fallback_results[c.chunk_id]
                text = fb.text.strip()
                err = f"swb batch {k}: {errors.get(k, 'no context for this chunk')}; per-chunk fallback over the batch window"
                if not text:
                    self.stats["swb_fallback_failed"] += 1
                    err += "; the fallback call returned an empty context"
                rec = fb.record
                results.append(
                    ContextResult(
                        c.chunk_id, text, self.engine, self.model, f"{cc_tpl.id}+swb_fallback",
                        in_tok[i] + rec.input_tokens, out_tok[i] + rec.output_tokens, in_chars[i] + rec.input_chars,
                        batch_cached and rec.cache_hit, True, err,
                    )
                )
        order = {c.chunk_id: i for i, c in enumerate(chunks)}
        results.sort(key=lambda r: order[r.chunk_id])
        return results

    def _shrink_swb(
        self, tpl: PromptTemplate, summary: str, before: str, batch: Sequence[Any], after: str, limit: int, doc_id: str, k: int
    ) -> list[dict[str, str]]:
        """Shorten the before/after windows (the far ends first) until the batch prompt fits."""
        msgs = _swb_messages(tpl, summary, "", batch, "")
        base = self.meter.count_messages(msgs)
        if base > limit:
            raise ContextOverflowError(
                f"SWB batch {k} of {doc_id} does not fit {self.model} even without the surrounding text: "
                f"{base} prompt tokens for a limit of {limit}. Use a shorter summary (max_tokens), a smaller "
                "batch_size, or a model with a longer context"
            )
        room = limit - base - 8
        tb, ta = self.counter.count(before), self.counter.count(after)
        keep_b = min(tb, room // 2) if ta > room // 2 else min(tb, room - ta)
        keep_a = min(ta, room - keep_b)
        before_cut = truncate_text(before, keep_b, side="head", counter=self.counter).text if keep_b < tb else before
        after_cut = truncate_text(after, keep_a, side="tail", counter=self.counter).text if keep_a < ta else after
        msgs = _swb_messages(tpl, summary, before_cut, batch, after_cut)
        while self.meter.count_messages(msgs) > limit and (before_cut or after_cut):  # boundary effects
            before_cut = before_cut[len(before_cut) // 10 + 1 :]
            after_cut = after_cut[: len(after_cut) * 9 // 10]
            msgs = _swb_messages(tpl, summary, before_cut, batch, after_cut)
        self.stats["swb_windows_shrunk"] += 1
        log.warning(
            "%s: SWB batch %d windows cut to %d/%d chars before/after to fit %s", doc_id, k, len(before_cut), len(after_cut), self.model
        )
        return msgs

    def _fit_fallback(self, msgs: list[dict[str, str]], tpl: PromptTemplate, window: str, chunk: Any) -> list[dict[str, str]]:
        limit = self._prompt_limit(self.max_tokens)
        if self.meter.count_messages(msgs) <= limit:
            return msgs
        base = self.meter.count_messages(tpl.render(document="", chunk=chunk.text))
        cut = truncate_text(window, max(0, limit - base - 8), side="middle", counter=self.counter)
        return tpl.render(document=cut.text, chunk=chunk.text)

    # ----------------------------------------------------------------- answer
    def answer(self, question: str, passages: Sequence[tuple[str, str]], *, doc_id: str = "") -> AnswerResult:
        """An answer from ``passages`` citing their chunk ids, or ``NOT_IN_DOCUMENTS``.

        Passages that do not fit the model are dropped from the end (the least relevant when
        they come ranked) and counted in ``stats["answer_passages_dropped"]``.
        """
        return self.answer_many([(question, passages, doc_id)])[0]

    def answer_many(self, items: Sequence[tuple[str, Sequence[tuple[str, str]], str]]) -> list[AnswerResult]:
        """:meth:`answer` for many ``(question, passages, doc_id)`` at once (concurrent calls)."""
        requests = []
        metas = []
        for question, passages, doc_id in items:
            passages = [(str(cid), str(text)) for cid, text in passages]
            lang = detect_language(question + "\n" + " ".join(t for _, t in passages[:2]))
            tpl = get_template("answer", lang)
            msgs = tpl.render(question=question, passages=format_passages(passages))
            limit = self._prompt_limit(self.max_tokens)
            while self.meter.count_messages(msgs) > limit and len(passages) > 1:
                passages = passages[:-1]
                self.stats["answer_passages_dropped"] += 1
                msgs = tpl.render(question=question, passages=format_passages(passages))
            requests.append(self._request(msgs, tpl.id, CallTags(_STAGE_ANSWER, doc_id)))
            metas.append((tpl, [cid for cid, _ in passages]))
        out = []
        for (tpl, ids), res in zip(metas, self._run(requests), strict=True):
            parsed = parse_answer(res.text, ids)
            out.append(
                AnswerResult(
                    parsed.text, list(parsed.cited_chunk_ids), parsed.not_found, [res.record], self.engine, self.model,
                    tpl.id, list(parsed.unknown_citations),
                )
            )
        return out


def _lenient(text: str, ids: Sequence[str]) -> dict[str, str]:
    try:
        return parse_swb_contexts(text, ids, strict=False)
    except PromptOutputError:
        return {}


# --------------------------------------------------------------------------------------
# Extractive tasks
# --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _DocIndex:
    """A document's sentences (spans, texts) with their embeddings and token counts."""

    starts: np.ndarray
    ends: np.ndarray
    texts: list[str]
    vectors: np.ndarray
    tokens: np.ndarray
    usable: np.ndarray  # long enough to stand as a context/summary sentence

    def in_range(self, start: int, end: int) -> np.ndarray:
        """Indices of the sentences lying wholly inside ``[start, end)``."""
        lo = int(np.searchsorted(self.starts, start, side="left"))
        hi = int(np.searchsorted(self.starts, end, side="left"))
        idx = np.arange(lo, hi)
        return idx[self.ends[idx] <= end]

    def overlapping(self, start: int, end: int) -> np.ndarray:
        """Indices of the sentences that share any character with ``[start, end)``."""
        lo = int(np.searchsorted(self.ends, start, side="right"))
        hi = int(np.searchsorted(self.starts, end, side="left"))
        return np.arange(lo, max(lo, hi))


_MIN_USABLE_CHARS = 25
_MIN_USABLE_WORDS = 4

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
    * **answer** — the passage sentences most similar to the question, each group citing its
      chunk id in brackets; :data:`~ctxwin_dagster.core.prompts.NOT_IN_DOCUMENTS` when the best
      similarity is below ``answer_threshold``.

    Every task also renders the prompt the LLM engine would send and records a
    :class:`CallRecord` (``backend="extractive"``, cost 0) with its counted input tokens and
    characters, and output tokens counted from the extractive output, in :attr:`ledger`.

    ``answer_threshold`` default (:data:`DEFAULT_ANSWER_THRESHOLD` = 0.40): on 2,000 SQuAD 2.0
    dev questions with the top-4 chunks (1,000/100) of their own article as passages, the best
    question–sentence cosine is ≥ 0.40 for 97.9 % of the answerable questions, while the same
    questions against another article's chunks (unrelated passages) fall below it 98.0 % of the
    time. SQuAD's unanswerable questions are adversarial (written against the paragraph) and
    95 % of them pass: similarity alone cannot tell those apart.

    Args:
        embedder: an :class:`~ctxwin_dagster.models.base.Embedder` (e.g. ``LocalEmbedder``).
        counter: the token counter for prompts, budgets and outputs; default
            ``cl100k_base`` (the offline encoding).
        model_label: the ``model`` of results and records.
        answer_threshold: see above.
        context_sentences / context_tokens: the size of a context.
        mmr_lambda: relevance vs. diversity in MMR (1 = relevance only).
        ledger: where records go; a new :class:`Ledger` when None.
    """

    engine = "extractive"

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
        mmr_lambda: float = 0.7,
        ledger: Ledger | None = None,
        max_cached_documents: int = 4,
        max_cached_vectors: int = 50_000,
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
        self.mmr_lambda = mmr_lambda
        self.ledger = ledger if ledger is not None else Ledger()
        self.max_cached_documents = max(1, max_cached_documents)
        self._docs: OrderedDict[str, _DocIndex] = OrderedDict()
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self.max_cached_vectors = max(0, max_cached_vectors)
        self._lock = threading.Lock()
        self.stats: Counter[str] = Counter()

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

    def _index_text(self, text: str) -> _DocIndex:
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
        vectors = self._embed(texts)
        tokens = np.asarray(self.counter.count_many(texts) if texts else [], dtype=np.int64)
        usable = np.asarray([len(t) >= _MIN_USABLE_CHARS and len(t.split()) >= _MIN_USABLE_WORDS for t in texts], dtype=bool)
        idx = _DocIndex(
            np.asarray([s for s, _ in spans], dtype=np.int64),
            np.asarray([e for _, e in spans], dtype=np.int64),
            texts,
            np.asarray(vectors, dtype=np.float32),
            tokens,
            usable,
        )
        with self._lock:
            self._docs[key] = idx
            self.stats["document_indexes_built"] += 1
            self.stats["sentences_indexed"] += len(texts)
            while len(self._docs) > self.max_cached_documents:
                self._docs.popitem(last=False)
        return idx

    def _record(self, stage: str, doc_id: str, variant: str, tpl_id: str, messages: Sequence[Mapping[str, Any]], output: str, latency: float, input_tokens: int | None = None) -> CallRecord:
        rec = CallRecord(
            backend="extractive",
            model=self.model,
            tags=CallTags(stage, doc_id, variant),
            prompt_version=tpl_id,
            input_tokens=self.meter.count_messages(messages) if input_tokens is None else input_tokens,
            output_tokens=self.counter.count(output),
            input_chars=_chars(messages),
            output_chars=len(output),
            latency_s=latency,
            cost_usd=0.0,
            usage_counted=True,
        )
        self.ledger.add(rec)
        return rec

    # ----------------------------------------------------------------- selection
    def _mmr(self, vectors: np.ndarray, relevance: np.ndarray, tokens: np.ndarray, budget: int, max_items: int | None) -> list[int]:
        """Greedy MMR over rows: relevance vs. redundancy, within a token budget (row order)."""
        n = len(relevance)
        if n == 0 or budget <= 0:
            return []
        lam = self.mmr_lambda
        chosen: list[int] = []
        used = 0
        redundancy = np.full(n, -1.0, dtype=np.float32)
        available = tokens.astype(np.int64) + 1 <= budget
        while available.any():
            score = lam * relevance - (1 - lam) * np.maximum(redundancy, 0.0)
            score = np.where(available, score, -np.inf)
            best = int(np.argmax(score))  # ties: lowest index (document order) — deterministic
            chosen.append(best)
            used += int(tokens[best]) + 1
            available[best] = False
            if max_items is not None and len(chosen) >= max_items:
                break
            available &= tokens + 1 <= budget - used
            redundancy = np.maximum(redundancy, vectors @ vectors[best])
        return chosen

    def _summarize_sentences(self, idx: _DocIndex, rows: np.ndarray, budget: int) -> list[int]:
        """Rows (document order) of a summary of ``rows`` within ``budget`` tokens."""
        if len(rows) == 0:
            return []
        if idx.usable[rows].any():  # headings and fragments only when there is nothing else
            rows = rows[idx.usable[rows]]
        vecs = idx.vectors[rows]
        centroid = vecs.mean(axis=0)
        norm = float(np.linalg.norm(centroid))
        relevance = vecs @ (centroid / norm) if norm > 0 else np.zeros(len(rows), dtype=np.float32)
        picked = self._mmr(vecs, relevance, idx.tokens[rows], budget, None)
        return sorted(int(rows[i]) for i in picked)

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
            rows = self._summarize_sentences(idx, idx.in_range(s, e), max_tokens)
            seg_rows.append(rows)
            summary = self._join(idx, rows, max_tokens)
            segments.append(summary)
            msgs = seg_tpl.render(part=i, parts=len(spans), text=text[s:e], max_tokens=max_tokens)
            records.append(self._record(_STAGE_SUMMARY, doc_id, "", seg_tpl.id, msgs, summary, time.perf_counter() - ts))
        if len(spans) == 1:
            overview = segments[0]
        else:
            ts = time.perf_counter()
            ov_tpl = get_template("summarize_overview", lang)
            pool = np.asarray(sorted({r for rows in seg_rows for r in rows}), dtype=np.int64)
            overview = self._join(idx, self._summarize_sentences(idx, pool, max_tokens), max_tokens)
            msgs = ov_tpl.render(parts=len(segments), summaries=format_summaries(segments), max_tokens=max_tokens)
            records.append(self._record(_STAGE_SUMMARY, doc_id, "", ov_tpl.id, msgs, overview, time.perf_counter() - ts))
        n_tokens = self.counter.count(overview)
        log.info("extractive summary of %s: %d tokens in %.1fs", doc_id, n_tokens, time.perf_counter() - t0)
        return SummaryResult(overview, segments, records, lang, self.engine, self.model, n_tokens, [])

    def _join(self, idx: _DocIndex, rows: Sequence[int], budget: int) -> str:
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
        finite = np.isfinite(relevance)
        n_valid = int(finite.sum())
        if n_valid == 0:
            return []
        budget = max(1, self.context_tokens - (self.counter.count(prefix) + 1 if prefix else 0))
        # Only the most relevant candidates can win; MMR over a short list keeps it fast.
        k = min(n_valid, max(32, 8 * self.context_sentences))
        top = np.argpartition(-np.where(finite, relevance, -np.inf), k - 1)[:k] if k < len(relevance) else np.arange(len(relevance))
        top = top[finite[top]]
        top = top[np.lexsort((top, -relevance[top]))]  # by relevance, ties by position
        picked = self._mmr(vectors[top], relevance[top], tokens[top], budget, self.context_sentences)
        return [int(top[i]) for i in picked]

    @staticmethod
    def _with_prefix(prefix: str, body: str) -> str:
        return f"{prefix} {body}".strip() if prefix else body

    def contextualize_cc(
        self, document_text: str, chunks: Sequence[Any], *, doc_id: str, title: str | None = None
    ) -> list[ContextResult]:
        """Per chunk: the most related sentences of the whole document (not the chunk's own)."""
        chunks = list(chunks)
        _check_chunks(document_text, chunks)
        if not chunks:
            return []
        t0 = time.perf_counter()
        lang = detect_language(document_text)
        tpl = get_template("cc_context", lang)
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
            rec = self._record(_STAGE_CONTEXT, doc_id, "cc", tpl.id, msgs, ctx, per_chunk_latency + time.perf_counter() - ts)
            if not ctx:
                self.stats["empty_contexts"] += 1
            results.append(
                ContextResult(c.chunk_id, ctx, self.engine, self.model, tpl.id, rec.input_tokens, rec.output_tokens, rec.input_chars, False)
            )
        return results

    def contextualize_swb(
        self,
        document_text: str,
        chunks: Sequence[Any],
        summary: str,
        *,
        doc_id: str,
        batch_size: int = PAPER.swb_batch_size,
        window_chars: int = PAPER.swb_window_chars,
        title: str | None = None,
    ) -> list[ContextResult]:
        """Per chunk: the most related sentences of the summary and the batch's ±window."""
        if window_chars < 0:
            raise ValueError(f"window_chars must be >= 0; got {window_chars}")
        chunks = list(chunks)
        _check_chunks(document_text, chunks)
        if not chunks:
            return []
        lang = detect_language(document_text)
        tpl = get_template("swb_batch", lang)
        idx = self._index_text(document_text)
        sum_idx = self._index_text(summary) if summary.strip() else None
        batches = swb_batches(chunks, batch_size)
        queries = dict(zip((c.chunk_id for c in chunks), self._embed([c.text for c in chunks]), strict=True))
        results: list[ContextResult] = []
        for batch in batches:
            ts = time.perf_counter()
            before, after, start, end = _swb_window(document_text, batch, window_chars)
            window_rows = idx.in_range(max(0, start - window_chars), end + window_chars)
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
                vecs, texts, toks, n_sum = idx.vectors[window_rows], [idx.texts[r] for r in window_rows], idx.tokens[window_rows], 0
            contexts: list[tuple[str, str]] = []
            for c in batch:
                relevance = vecs @ queries[c.chunk_id] if len(texts) else np.zeros(0, np.float32)
                own = np.isin(window_rows, idx.overlapping(c.start, c.end))
                relevance[n_sum:][own] = -np.inf  # never the chunk's own sentences
                prefix = self._prefix(lang, title, getattr(c, "section", None))
                picked = sorted(self._pick_context(vecs, relevance, toks, prefix))  # summary first, then document order
                contexts.append((c.chunk_id, self._with_prefix(prefix, " ".join(texts[j] for j in picked))))
                if not contexts[-1][1]:
                    self.stats["empty_contexts"] += 1
            output = json.dumps({"contexts": [{"chunk_id": cid, "context": ctx} for cid, ctx in contexts]}, ensure_ascii=False)
            msgs = _swb_messages(tpl, summary, before, batch, after)
            rec = self._record(_STAGE_CONTEXT, doc_id, "swb", tpl.id, msgs, output, time.perf_counter() - ts)
            n = len(batch)
            in_tok, out_tok, in_chars = _shares(rec.input_tokens, n), _shares(rec.output_tokens, n), _shares(rec.input_chars, n)
            for i, (cid, ctx) in enumerate(contexts):
                results.append(ContextResult(cid, ctx, self.engine, self.model, tpl.id, in_tok[i], out_tok[i], in_chars[i], False))
        order_of = {c.chunk_id: i for i, c in enumerate(chunks)}
        results.sort(key=lambda r: order_of[r.chunk_id])
        return results

    # ----------------------------------------------------------------- answer
    def answer(self, question: str, passages: Sequence[tuple[str, str]], *, doc_id: str = "") -> AnswerResult:
        """The passage sentences closest to the question, citing their chunk ids."""
        ts = time.perf_counter()
        passages = [(str(cid), str(text)) for cid, text in passages]
        lang = detect_language(question + "\n" + " ".join(t for _, t in passages[:2]))
        tpl = get_template("answer", lang)
        msgs = tpl.render(question=question, passages=format_passages(passages))
        sents: list[tuple[int, int, str]] = []  # (passage index, start, text)
        for p, (_cid, text) in enumerate(passages):
            for s, e in split_sentences(text):
                if e - s >= 10:
                    sents.append((p, s, text[s:e]))
        # Headings ("Prohibited AI practices") make poor answers: prefer sentences of 4+ words.
        full = [x for x in sents if len(x[2].split()) >= _MIN_USABLE_WORDS]
        sents = full or sents
        best = -1.0
        answer_text, cited = NOT_IN_DOCUMENTS, []
        if sents:
            vecs = self._embed([question] + [t for _, _, t in sents])
            q, sv = vecs[0], vecs[1:]
            sims = sv @ q
            best = float(sims.max())
            if best >= self.answer_threshold:
                floor = max(self.answer_threshold, best - 0.15)
                eligible = np.flatnonzero(sims >= floor)
                tokens = np.asarray(self.counter.count_many([sents[i][2] for i in eligible]), dtype=np.int64)
                picked = self._mmr(sv[eligible], sims[eligible], tokens, 10_000, self.answer_sentences)
                chosen = sorted((int(eligible[i]) for i in picked), key=lambda i: (sents[i][0], sents[i][1]))
                pieces: list[str] = []
                group: list[str] = []
                group_p = None
                for i in chosen:
                    p = sents[i][0]
                    if group and p != group_p:
                        pieces.append(" ".join(group) + f" [{passages[group_p][0]}]")
                        group = []
                    group.append(sents[i][2])
                    group_p = p
                if group:
                    pieces.append(" ".join(group) + f" [{passages[group_p][0]}]")
                answer_text = " ".join(pieces)
                cited = list(dict.fromkeys(passages[sents[i][0]][0] for i in chosen))
        not_found = answer_text == NOT_IN_DOCUMENTS
        if not_found:
            self.stats["answers_not_found"] += 1
        rec = self._record(_STAGE_ANSWER, doc_id, "", tpl.id, msgs, answer_text, time.perf_counter() - ts)
        return AnswerResult(answer_text, cited, not_found, [rec], self.engine, self.model, tpl.id, [], best if sents else None)

    def answer_many(self, items: Sequence[tuple[str, Sequence[tuple[str, str]], str]]) -> list[AnswerResult]:
        """:meth:`answer` for many ``(question, passages, doc_id)``."""
        return [self.answer(q, p, doc_id=d) for q, p, d in items]
