"""The summary task: a document's global summary, map (one per segment) then reduce (an overview).

* :class:`LLMSummaries` — the chat model summarizes each segment of ≤ ``segment_chars``, then
  writes the overview of the segment summaries; prompts are cut to fit the model, and an
  overview over ``max_tokens`` is cut at its end (both noted).
* :class:`ExtractiveSummaries` — the same shape by selection: per segment the sentences closest
  to its centroid (MMR), then the overview picked the same way from the segments' sentences;
  the prompts the model would get are metered all the same.

Both use the ``summarize_segment`` and ``summarize_overview`` prompts and refuse the same inputs
(:func:`check_summary_input`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np

from ctxwin_dagster.backends.base import CallRecord, CallTags
from ctxwin_dagster.backends.tasks.extractive_work import ExtractiveWork, text_sha
from ctxwin_dagster.backends.tasks.llm_calls import LLMCalls
from ctxwin_dagster.backends.tasks.results import STAGE_SUMMARY, SummaryResult
from ctxwin_dagster.backends.tasks.selection import SentenceIndex, central_rows
from ctxwin_dagster.core.budget.fit import truncate_text
from ctxwin_dagster.core.evaluation.record_values import as_int, items
from ctxwin_dagster.core.methods.prompts import detect_language, format_summaries, get_template
from ctxwin_dagster.core.methods.swb import split_segments

__all__ = ["ExtractiveSummaries", "LLMSummaries", "check_summary_input"]

log = logging.getLogger(__name__)


def check_summary_input(text: str, doc_id: str, max_tokens: int) -> None:
    """Raise ``ValueError`` for a budget under one token or a document with nothing to summarize."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1; got {max_tokens}")
    if not text.strip():
        raise ValueError(f"document {doc_id!r} is empty; there is nothing to summarize")


class LLMSummaries(LLMCalls):
    """The LLM engine's summary."""

    def _summarize(
        self, text: str, doc_id: str, max_tokens: int, segment_chars: int, language: str | None
    ) -> SummaryResult:
        """Map (one summary per segment of ≤ ``segment_chars``), then reduce to an overview of ≤
        ``max_tokens``.

        A document of one segment needs one call. A segment too long for the model is cut in
        its middle to fit, and the cut is listed in ``notes``; an overview longer than
        ``max_tokens`` is cut at its end (also noted).
        """
        check_summary_input(text, doc_id, max_tokens)
        lang = language or detect_language(text)
        tags = CallTags(STAGE_SUMMARY, doc_id)
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
                raise RuntimeError(
                    f"{self.model} returned an empty overview for {doc_id}; run again or check the model"
                )
        n_tokens = self.counter.count(overview)
        if n_tokens > max_tokens:
            cut = truncate_text(overview, max_tokens, side="tail", counter=self.counter, marker=" …")
            notes.append(f"overview of {doc_id}: {n_tokens} tokens cut to {cut.tokens_after} (max_tokens={max_tokens})")
            self.stats["summary_truncations"] += 1
            overview, n_tokens = cut.text, cut.tokens_after
        return SummaryResult(overview, segments, records, lang, self.engine, self.model, n_tokens, notes)


class ExtractiveSummaries(ExtractiveWork):
    """The extractive engine's summary."""

    def _summarize(
        self, text: str, doc_id: str, max_tokens: int, segment_chars: int, language: str | None
    ) -> SummaryResult:
        """Central, diverse document sentences within ``max_tokens``, in document order: from the
        memo, or selected (:meth:`_select_summary`) and kept."""
        lang = language or detect_language(text)
        tpl_ids = [get_template(n, lang).id for n in ("summarize_segment", "summarize_overview")]
        key = self.memo.key("summarize", text_sha(text), max_tokens, segment_chars, lang, tpl_ids)
        hit = self.memo.get(key)
        if hit is not None:
            records = self._replay(hit["records"], doc_id)
            segments = [str(s) for s in items(hit, "segments")]
            return SummaryResult(
                str(hit["text"]), segments, records, lang, self.engine, self.model, as_int(hit["n_tokens"]), []
            )
        result = self._select_summary(text, doc_id, max_tokens, segment_chars, lang)
        self._keep(key, result.records, text=result.text, segments=result.segments, n_tokens=result.n_tokens)
        return result

    def _select_summary(
        self, text: str, doc_id: str, max_tokens: int, segment_chars: int, language: str | None
    ) -> SummaryResult:
        """Per segment the central sentences (MMR around its centroid); then the overview from theirs."""
        check_summary_input(text, doc_id, max_tokens)
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
