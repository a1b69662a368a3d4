"""SWB-RAG contexts: chunks situated in batches, from the summary and a window around the batch.

Both engines build each batch's prompt with
:func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts` and give the results in the chunks'
order (:func:`in_chunk_order`); a batch's call is shared evenly by its chunks
(:func:`~ctxwin_dagster.core.methods.swb.batch_shares`).

* :class:`LLMSWBContexts` — one call per batch, in four steps: the prompts fitted to the model
  (:meth:`~LLMSWBContexts._swb_calls`), the first replies parsed
  (:meth:`~LLMSWBContexts._ask_swb_batches`), unusable replies asked again once
  (:meth:`~LLMSWBContexts._retry_swb_batches`), and a single-chunk call over the batch's window
  for each chunk still without a context (:meth:`~LLMSWBContexts._swb_fallbacks`).
* :class:`ExtractiveSWBContexts` — per chunk, the sentences of the summary and of the batch's
  window most related to it, metered as the batch prompt the model would get.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ctxwin_dagster.backends.base import CallRecord, CallTags, ChatResult
from ctxwin_dagster.backends.chat.structured import ENFORCED
from ctxwin_dagster.backends.tasks.extractive_work import ExtractiveWork, text_sha
from ctxwin_dagster.backends.tasks.interface import SWBJob
from ctxwin_dagster.backends.tasks.llm_calls import LLMCalls
from ctxwin_dagster.backends.tasks.memo import chunk_parts, section_of
from ctxwin_dagster.backends.tasks.results import STAGE_CONTEXT, ContextResult
from ctxwin_dagster.core.methods.prompts import PromptOutputError, PromptTemplate, get_template, parse_swb_contexts
from ctxwin_dagster.core.methods.prompts.schemas import ReplySchema
from ctxwin_dagster.core.methods.prompts.tables import SWB_RETRY_NOTE
from ctxwin_dagster.core.methods.swb import ChunkLike, SWBPrompts, batch_shares

__all__ = ["ExtractiveSWBContexts", "LLMSWBContexts", "in_chunk_order"]

log = logging.getLogger(__name__)


def in_chunk_order(results: list[ContextResult], chunks: Sequence[ChunkLike]) -> list[ContextResult]:
    """``results`` sorted in place into the order of ``chunks``, and returned."""
    order = {c.chunk_id: i for i, c in enumerate(chunks)}
    results.sort(key=lambda r: order[r.chunk_id])
    return results


@dataclass(frozen=True, slots=True)
class _SWBCalls:
    """The batch calls of one document: their template and tags, each batch's chunks, its prompt
    (fitted to the model) and the schema its reply is held to."""

    template: PromptTemplate
    tags: CallTags
    batches: list[list[ChunkLike]]
    prompts: list[list[dict[str, str]]]
    schemas: list[ReplySchema]


@dataclass(slots=True)
class _BatchReplies:
    """What the batches got back: the first replies, the contexts by batch (by chunk id), why a
    batch's reply could not be used (by batch), and the calls behind each batch."""

    first: list[ChatResult]
    contexts: dict[int, dict[str, str]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    calls: dict[int, list[CallRecord]] = field(default_factory=dict)


class LLMSWBContexts(LLMCalls):
    """The LLM engine's SWB-RAG contexts."""

    def _contextualize_swb(self, job: SWBJob) -> list[ContextResult]:
        """One call per batch of ``batch_size`` chunks with the summary and ±``window_chars``, in
        the four steps of the module docstring (``title`` is not in the prompt).

        Replies are parsed as JSON (code fences, prose around the object, a bare list and ids
        abbreviated to a unique prefix or given as the chunk's number are repaired). A batch
        whose reply is still unusable is retried once with a reminder (and a new prompt version,
        so the cache cannot return the same reply); chunks still without a context then get a
        single-chunk ``cc_context`` call over the batch's window (not the whole document), with
        ``fallback=True`` and the reason in ``error``. All of it is counted in ``stats``.

        The batch prompts are :func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts`'s, sent as
        they are unless one does not fit the model: then its windows are cut (far ends first).
        """
        swb, doc_id = job.swb, job.doc_id
        cc_tpl = get_template("cc_context", swb.language)
        calls = self._swb_calls(swb, doc_id)
        replies = self._ask_swb_batches(calls)
        if replies.errors:
            self._retry_swb_batches(calls, replies, doc_id)
        fallbacks = self._swb_fallbacks(job.document_text, swb, cc_tpl, calls, replies, doc_id)
        results = [
            result
            for k, batch in enumerate(calls.batches)
            for result in self._swb_batch_results(k, batch, calls.template, cc_tpl, replies, fallbacks)
        ]
        return in_chunk_order(results, job.chunks)

    def _swb_calls(self, swb: SWBPrompts, doc_id: str) -> _SWBCalls:
        """The batches' calls: each prompt as built, or with its windows cut to fit the model."""
        tags = CallTags(STAGE_CONTEXT, doc_id, "swb")
        batches = [list(b.chunks) for b in swb.batches]
        limit = self._prompt_limit(self.max_tokens)
        prompts = [
            b.messages if self.meter.count_messages(b.messages) <= limit else self._shrink_swb(swb, b, limit, doc_id)
            for b in swb.batches
        ]
        self.stats["swb_batches"] += len(batches)
        schemas = [self._swb_schema([c.chunk_id for c in batch]) for batch in batches]
        return _SWBCalls(swb.template, tags, batches, prompts, schemas)

    def _ask_swb_batches(self, calls: _SWBCalls) -> _BatchReplies:
        """The first call of every batch, and its reply parsed (or why it could not be used)."""
        tpl, tags = calls.template, calls.tags
        first = self._run(
            [self._request(m, tpl.id, tags, schema=sc) for m, sc in zip(calls.prompts, calls.schemas, strict=True)]
        )
        replies = _BatchReplies(first, calls={k: [r.record] for k, r in enumerate(first)})
        for k, (batch, res) in enumerate(zip(calls.batches, first, strict=True)):
            self.stats["swb_schema_enforced"] += res.record.reply_format in ENFORCED
            try:
                replies.contexts[k] = self._parse_swb_reply(res.text, [c.chunk_id for c in batch])
            except PromptOutputError as exc:
                replies.errors[k] = str(exc)
                # Held to the schema and still unusable: the server ignored it, or the reply was cut.
                self.stats["swb_schema_ignored"] += res.record.reply_format in ENFORCED
        return replies

    def _retry_swb_batches(self, calls: _SWBCalls, replies: _BatchReplies, doc_id: str) -> None:
        """Each batch whose reply was unusable asked once more, with a reminder and a new prompt
        version; of a reply still unusable, the contexts that can be read (from either reply) are kept."""
        tpl, errors = calls.template, replies.errors
        self.stats["swb_invalid"] += len(errors)
        log.warning(
            "%s: %d of %d SWB batches gave unusable replies; retrying them once",
            doc_id,
            len(errors),
            len(calls.batches),
        )
        retry_ids = sorted(errors)
        note = SWB_RETRY_NOTE.get(tpl.language, SWB_RETRY_NOTE["en"])
        retry_requests = []
        for k in retry_ids:
            msgs = [dict(m) for m in calls.prompts[k]]
            msgs[-1]["content"] += note.format(n=len(calls.batches[k]))
            retry_requests.append(self._request(msgs, f"{tpl.id}+retry1", calls.tags, schema=calls.schemas[k]))
        self.stats["swb_retried"] += len(retry_ids)
        for k, res in zip(retry_ids, self._run(retry_requests), strict=True):
            replies.calls[k].append(res.record)
            ids = [c.chunk_id for c in calls.batches[k]]
            try:
                replies.contexts[k] = self._parse_swb_reply(res.text, ids)
                del errors[k]
            except PromptOutputError as exc:
                self.stats["swb_retry_invalid"] += 1
                errors[k] = f"{errors[k]}; after retry: {exc}"
                partial = _lenient(replies.first[k].text, ids)
                partial.update(_lenient(res.text, ids))
                replies.contexts[k] = partial

    def _parse_swb_reply(self, text: str, ids: Sequence[str]) -> dict[str, str]:
        """The reply's contexts by chunk id, counting a reply that needed repair.

        Raises:
            PromptOutputError: the reply cannot be used.
        """
        contexts = parse_swb_contexts(text, ids)
        self.stats["swb_repaired"] += _needed_repair(text, ids)
        return contexts

    def _swb_fallbacks(
        self,
        document_text: str,
        swb: SWBPrompts,
        cc_tpl: PromptTemplate,
        calls: _SWBCalls,
        replies: _BatchReplies,
        doc_id: str,
    ) -> dict[str, ChatResult]:
        """For each chunk still without a context, by chunk id: a single-chunk ``cc_context`` call
        over its batch's window."""
        jobs: list[tuple[int, ChunkLike]] = []
        for k, batch in enumerate(calls.batches):
            got = replies.contexts.get(k, {})
            jobs.extend((k, c) for c in batch if c.chunk_id not in got)
        if not jobs:
            return {}
        self.stats["swb_fallback_chunks"] += len(jobs)
        log.warning("%s: %d chunks fall back to single-chunk calls over their batch window", doc_id, len(jobs))
        requests = []
        for k, c in jobs:
            ws, we = swb.batches[k].window
            msgs = cc_tpl.render(document=document_text[ws:we], chunk=c.text)
            msgs = self._fit_fallback(msgs, cc_tpl, document_text[ws:we], c)
            requests.append(self._request(msgs, f"{cc_tpl.id}+swb_fallback", calls.tags))
        return {c.chunk_id: res for (_k, c), res in zip(jobs, self._run(requests), strict=True)}

    def _swb_batch_results(
        self,
        k: int,
        batch: list[ChunkLike],
        tpl: PromptTemplate,
        cc_tpl: PromptTemplate,
        replies: _BatchReplies,
        fallbacks: dict[str, ChatResult],
    ) -> list[ContextResult]:
        """The contexts of batch ``k``'s chunks: from the batch's replies, or from a chunk's
        fallback call (marked ``fallback``, with the reason in ``error``). The batch's calls are
        shared by its chunks, and a fallback's call is added to its chunk's share."""
        recs = replies.calls[k]
        usage = batch_shares(
            len(batch),
            sum(r.input_tokens for r in recs),
            sum(r.output_tokens for r in recs),
            sum(r.input_chars for r in recs),
        )
        version = tpl.id if len(recs) == 1 else f"{tpl.id}+retry1"
        cached = all(r.cache_hit for r in recs)
        results: list[ContextResult] = []
        for c, (in_tok, out_tok, in_chars) in zip(batch, usage, strict=True):
            ctx = replies.contexts.get(k, {}).get(c.chunk_id)
            share = ContextResult(
                c.chunk_id, ctx or "", self.engine, self.model, version, in_tok, out_tok, in_chars, cached
            )
            if ctx is None:
                reason = f"swb batch {k}: {replies.errors.get(k, 'no context for this chunk')}"
                share = self._with_fallback(share, fallbacks[c.chunk_id], f"{cc_tpl.id}+swb_fallback", reason)
            results.append(share)
        return results

    def _with_fallback(self, share: ContextResult, fb: ChatResult, version: str, reason: str) -> ContextResult:
        """A chunk's share of its batch's calls, with the context of its fallback call, and that call added."""
        text = fb.text.strip()
        error = f"{reason}; per-chunk fallback over the batch window"
        if not text:
            self.stats["swb_fallback_failed"] += 1
            error += "; the fallback call returned an empty context"
        rec = fb.record
        return replace(
            share,
            context=text,
            prompt_version=version,
            input_tokens=share.input_tokens + rec.input_tokens,
            output_tokens=share.output_tokens + rec.output_tokens,
            input_chars=share.input_chars + rec.input_chars,
            cached=share.cached and rec.cache_hit,
            fallback=True,
            error=error,
        )


def _needed_repair(text: str, ids: Sequence[str]) -> bool:
    """True when a usable SWB reply was not the exact form asked for (plain JSON ``{"contexts": [...]}``
    with every chunk's full id, or every chunk's number in order under the ordered schema): a code
    fence, prose around it, another shape, abbreviated ids."""
    try:
        value = json.loads(text.strip())
    except ValueError:
        return True
    entries = value.get("contexts") if isinstance(value, dict) else None
    if not isinstance(entries, list):
        return True
    if all(isinstance(e, dict) and "number" in e and "chunk_id" not in e for e in entries):  # the ordered schema's form
        return [e["number"] for e in entries] != list(range(1, len(ids) + 1))
    return sorted(str(e.get("chunk_id")) for e in entries if isinstance(e, dict)) != sorted(ids)


def _lenient(text: str, ids: Sequence[str]) -> dict[str, str]:
    try:
        return parse_swb_contexts(text, ids, strict=False)
    except PromptOutputError:
        return {}


class ExtractiveSWBContexts(ExtractiveWork):
    """The extractive engine's SWB-RAG contexts."""

    def _contextualize_swb(self, job: SWBJob) -> list[ContextResult]:
        """Per chunk: the most related sentences of the summary and the batch's ±window, after
        ``title`` and the chunk's section; from the memo, or selected (:meth:`_select_swb`) and
        kept. Each batch is metered as the prompt
        :func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts` builds for it, the prompt the
        LLM engine sends for the same batch."""
        key = self.memo.key(
            "swb",
            text_sha(job.document_text),
            chunk_parts(job.chunks),
            text_sha(job.swb.summary),
            job.batch_size,
            job.window_chars,
            job.title,
            job.swb.template.id,
        )
        return self._memo_contexts(key, job.doc_id, lambda: self._select_swb(job))

    def _select_swb(self, job: SWBJob) -> list[ContextResult]:
        swb, doc_id, title = job.swb, job.doc_id, job.title
        lang, tpl = swb.language, swb.template
        idx = self._index_text(job.document_text)
        sum_idx = self._index_text(swb.summary) if swb.summary.strip() else None
        queries = dict(zip((c.chunk_id for c in job.chunks), self._embed([c.text for c in job.chunks]), strict=True))
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
                prefix = self._prefix(lang, title, section_of(c))
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
        return in_chunk_order(results, job.chunks)
