"""The LLM engine: summaries, CC/SWB contexts and answers from a chat model.

:class:`LLMTasks` talks to a chat model behind :class:`~ctxwin_dagster.backends.base.ChatBackend`
(OpenAI or any OpenAI-compatible server). Prompts come from :mod:`ctxwin_dagster.core.methods.prompts`
(the SWB batch prompts from :func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts`, the same
function the extractive engine meters), batches go through ``complete_many``, prompts are made
to fit the model (or refused with an error naming the fix), SWB replies are parsed, repaired,
retried once and, failing that, replaced per chunk by a single-chunk call over the batch's
window — every retry and fallback counted (:attr:`LLMTasks.stats`) and marked on the result.

Example::

    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
    with OpenAIChatBackend(model="gpt-4o-mini") as chat:
        tasks = LLMTasks(chat)
        summary = tasks.summarize(text, doc_id="ai_act")
        contexts = tasks.contextualize_swb(text, chunks, summary.text, doc_id="ai_act")
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ctxwin_dagster.backends.base import CallRecord, CallTags, ChatBackend, ChatRequest, ChatResult, Ledger
from ctxwin_dagster.backends.chat.structured import ENFORCED
from ctxwin_dagster.backends.tasks.results import (
    STAGE_ANSWER,
    STAGE_CONTEXT,
    STAGE_SUMMARY,
    AnswerResult,
    ContextResult,
    SummaryResult,
)
from ctxwin_dagster.core.budget.fit import ContextOverflowError, ensure_fit, truncate_text
from ctxwin_dagster.core.budget.limits import ModelLimits, get_model_limits
from ctxwin_dagster.core.budget.tokens import PromptMeter, TokenCounter, get_token_counter
from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.methods.prompts import (
    SWB_RETRY_NOTE,
    PromptOutputError,
    PromptTemplate,
    detect_language,
    format_passages,
    format_summaries,
    get_template,
    parse_answer,
    parse_swb_contexts,
)
from ctxwin_dagster.core.methods.prompts.schemas import CHARS_PER_TOKEN_FLOOR, ReplySchema, swb_contexts_schema
from ctxwin_dagster.core.methods.swb import (
    ChunkLike,
    SWBBatch,
    SWBPrompts,
    batch_shares,
    check_chunks,
    split_segments,
    swb_batch_prompts,
)

__all__ = ["LLMTasks", "check_sampling"]

log = logging.getLogger(__name__)


def check_sampling(temperature: float, top_p: float) -> None:
    """Raise ``ValueError`` unless ``temperature`` is in [0, 2] and ``top_p`` in (0, 1] (the API's ranges)."""
    if not 0 <= temperature <= 2:
        raise ValueError(f"temperature must be between 0 and 2; got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1]; got {top_p}")


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
            (first replies unusable), ``swb_repaired`` (usable replies that needed repair: a code
            fence, prose, another JSON shape, abbreviated ids), ``swb_retried``, ``swb_retry_invalid``,
            ``swb_fallback_chunks``, ``swb_fallback_failed``, ``swb_windows_shrunk``,
            ``swb_schema_enforced`` (first replies held to their schema by the backend),
            ``swb_schema_ignored`` (of those, replies that still did not parse: a server that
            ignored the schema, or a reply cut at ``max_tokens``),
            ``summary_truncations``, ``answer_passages_dropped``, ``empty_contexts``.
    """

    engine = "llm"
    #: Sentences are not selected by an embedder, and the model decides itself when there is no answer.
    embedder = None
    answer_threshold = None

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
        check_sampling(temperature, top_p)
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

    @property
    def ledger(self) -> Ledger:
        """Every call's record: the chat backend's ledger."""
        return self.chat.ledger

    def __repr__(self) -> str:
        return f"LLMTasks(model={self.model!r}, temperature={self.temperature}, top_p={self.top_p}, max_tokens={self.max_tokens})"

    # ----------------------------------------------------------------- plumbing
    def _request(
        self,
        messages: Sequence[Mapping[str, Any]],
        tpl_id: str,
        tags: CallTags,
        *,
        max_tokens: int | None = None,
        json_mode: bool = False,
        schema: ReplySchema | None = None,
    ) -> ChatRequest:
        return ChatRequest(
            messages=tuple(dict(m) for m in messages),
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=min(max_tokens or self.max_tokens, self.limits.max_completion_tokens),
            json_mode=json_mode or schema is not None,
            prompt_version=tpl_id,
            tags=tags,
            schema=schema,
        )

    def _swb_schema(self, ids: Sequence[str]) -> ReplySchema:
        """The schema of an SWB batch reply. A backend that decodes any schema (the local model)
        gets each chunk's id fixed at its place and a length cap per context, so that the whole
        JSON fits the reply's tokens; a server gets the strict-mode subset."""
        if not getattr(self.chat, "decodes_any_schema", False):
            return swb_contexts_schema(ids)
        entries = [{"number": n, "context": ""} for n in range(1, len(ids) + 1)]
        skeleton = json.dumps({"contexts": entries}, separators=(",", ":"))
        room = min(self.max_tokens, self.limits.max_completion_tokens) - self.counter.count(skeleton) - 8
        # Two characters per token: prose takes about four, but a small model that repeats itself
        # writes tokens of one or two characters, and a cap too high leaves the JSON cut.
        return swb_contexts_schema(
            ids, ordered=True, max_context_chars=max(24, CHARS_PER_TOKEN_FLOOR * room // len(ids))
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
        report = ensure_fit(
            messages, max_prompt_tokens=limit, strategy="smart_truncate", counter=self.counter, truncate_side="middle"
        )
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

    # ----------------------------------------------------------------- CC
    def contextualize_cc(self, document_text: str, chunks: Sequence[ChunkLike], *, doc_id: str) -> list[ContextResult]:
        """One call per chunk with the whole document (Anthropic's contextual retrieval).

        Raises:
            ContextOverflowError: the document does not fit the model — nothing is cut, since
                CC-RAG is defined by the whole document; the message names the fixes.
        """
        chunks = list(chunks)
        check_chunks(document_text, chunks)
        if not chunks:
            return []
        lang = detect_language(document_text)
        tpl = get_template("cc_context", lang)
        tags = CallTags(STAGE_CONTEXT, doc_id, "cc")
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
                        c.chunk_id,
                        ctx,
                        self.engine,
                        self.model,
                        tpl.id,
                        rec.input_tokens,
                        rec.output_tokens,
                        rec.input_chars,
                        rec.cache_hit,
                        False,
                        None if ctx else f"{self.model} returned an empty context",
                    )
                )
        return results

    # ----------------------------------------------------------------- SWB
    def contextualize_swb(
        self,
        document_text: str,
        chunks: Sequence[ChunkLike],
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

        The batch prompts are :func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts`'s, sent as
        they are unless one does not fit the model: then its windows are cut (far ends first).
        """
        chunks = list(chunks)
        swb = swb_batch_prompts(document_text, chunks, summary, batch_size=batch_size, window_chars=window_chars)
        if not swb.batches:
            return []
        tpl = swb.template
        cc_tpl = get_template("cc_context", swb.language)
        tags = CallTags(STAGE_CONTEXT, doc_id, "swb")
        batches = [list(b.chunks) for b in swb.batches]
        windows = [b.window for b in swb.batches]
        limit = self._prompt_limit(self.max_tokens)
        prompts = [
            b.messages if self.meter.count_messages(b.messages) <= limit else self._shrink_swb(swb, b, limit, doc_id)
            for b in swb.batches
        ]
        self.stats["swb_batches"] += len(batches)

        schemas = [self._swb_schema([c.chunk_id for c in batch]) for batch in batches]
        first = self._run([self._request(m, tpl.id, tags, schema=sc) for m, sc in zip(prompts, schemas, strict=True)])
        outcome: dict[int, dict[str, str]] = {}
        errors: dict[int, str] = {}
        calls: dict[int, list[CallRecord]] = {k: [r.record] for k, r in enumerate(first)}
        for k, (batch, res) in enumerate(zip(batches, first, strict=True)):
            ids = [c.chunk_id for c in batch]
            self.stats["swb_schema_enforced"] += res.record.reply_format in ENFORCED
            try:
                outcome[k] = parse_swb_contexts(res.text, ids)
                self.stats["swb_repaired"] += _needed_repair(res.text, ids)
            except PromptOutputError as exc:
                errors[k] = str(exc)
                # Held to the schema and still unusable: the server ignored it, or the reply was cut.
                self.stats["swb_schema_ignored"] += res.record.reply_format in ENFORCED
        if errors:
            self.stats["swb_invalid"] += len(errors)
            log.warning(
                "%s: %d of %d SWB batches gave unusable replies; retrying them once", doc_id, len(errors), len(batches)
            )
            retry_ids = sorted(errors)
            note = SWB_RETRY_NOTE.get(tpl.language, SWB_RETRY_NOTE["en"])
            retry_requests = []
            for k in retry_ids:
                msgs = [dict(m) for m in prompts[k]]
                msgs[-1]["content"] += note.format(n=len(batches[k]))
                retry_requests.append(self._request(msgs, f"{tpl.id}+retry1", tags, schema=schemas[k]))
            self.stats["swb_retried"] += len(retry_ids)
            for k, res in zip(retry_ids, self._run(retry_requests), strict=True):
                calls[k].append(res.record)
                ids = [c.chunk_id for c in batches[k]]
                try:
                    outcome[k] = parse_swb_contexts(res.text, ids)
                    self.stats["swb_repaired"] += _needed_repair(res.text, ids)
                    del errors[k]
                except PromptOutputError as exc:
                    self.stats["swb_retry_invalid"] += 1
                    errors[k] = f"{errors[k]}; after retry: {exc}"
                    partial = _lenient(first[k].text, ids)
                    partial.update(_lenient(res.text, ids))
                    outcome[k] = partial

        # Per-chunk fallback for whatever is still missing.
        fallback_jobs: list[tuple[int, ChunkLike]] = []
        for k, batch in enumerate(batches):
            got = outcome.get(k, {})
            fallback_jobs.extend((k, c) for c in batch if c.chunk_id not in got)
        fallback_results: dict[str, ChatResult] = {}
        if fallback_jobs:
            self.stats["swb_fallback_chunks"] += len(fallback_jobs)
            log.warning(
                "%s: %d chunks fall back to single-chunk calls over their batch window", doc_id, len(fallback_jobs)
            )
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
            usage = batch_shares(
                len(batch),
                sum(r.input_tokens for r in recs),
                sum(r.output_tokens for r in recs),
                sum(r.input_chars for r in recs),
            )
            batch_cached = all(r.cache_hit for r in recs)
            version = tpl.id if len(recs) == 1 else f"{tpl.id}+retry1"
            for c, (in_tok, out_tok, in_chars) in zip(batch, usage, strict=True):
                ctx = outcome.get(k, {}).get(c.chunk_id)
                if ctx is not None:
                    results.append(
                        ContextResult(
                            c.chunk_id,
                            ctx,
                            self.engine,
                            self.model,
                            version,
                            in_tok,
                            out_tok,
                            in_chars,
                            batch_cached,
                            False,
                            None,
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
                        c.chunk_id,
                        text,
                        self.engine,
                        self.model,
                        f"{cc_tpl.id}+swb_fallback",
                        in_tok + rec.input_tokens,
                        out_tok + rec.output_tokens,
                        in_chars + rec.input_chars,
                        batch_cached and rec.cache_hit,
                        True,
                        err,
                    )
                )
        order = {c.chunk_id: i for i, c in enumerate(chunks)}
        results.sort(key=lambda r: order[r.chunk_id])
        return results

    def _shrink_swb(self, swb: SWBPrompts, batch: SWBBatch, limit: int, doc_id: str) -> list[dict[str, str]]:
        """Shorten the batch's before/after windows (the far ends first) until its prompt fits."""
        base = self.meter.count_messages(swb.render(batch.chunks, "", ""))
        if base > limit:
            raise ContextOverflowError(
                f"SWB batch {batch.index} of {doc_id} does not fit {self.model} even without the surrounding text: "
                f"{base} prompt tokens for a limit of {limit}. Use a shorter summary (max_tokens), a smaller "
                "batch_size, or a model with a longer context"
            )
        room = limit - base - 8
        before, after = batch.before, batch.after
        tb, ta = self.counter.count(before), self.counter.count(after)
        keep_b = min(tb, room // 2) if ta > room // 2 else min(tb, room - ta)
        keep_a = min(ta, room - keep_b)
        before_cut = truncate_text(before, keep_b, side="head", counter=self.counter).text if keep_b < tb else before
        after_cut = truncate_text(after, keep_a, side="tail", counter=self.counter).text if keep_a < ta else after
        msgs = swb.render(batch.chunks, before_cut, after_cut)
        while self.meter.count_messages(msgs) > limit and (before_cut or after_cut):  # boundary effects
            before_cut = before_cut[len(before_cut) // 10 + 1 :]
            after_cut = after_cut[: len(after_cut) * 9 // 10]
            msgs = swb.render(batch.chunks, before_cut, after_cut)
        self.stats["swb_windows_shrunk"] += 1
        log.warning(
            "%s: SWB batch %d windows cut to %d/%d chars before/after to fit %s",
            doc_id,
            batch.index,
            len(before_cut),
            len(after_cut),
            self.model,
        )
        return msgs

    def _fit_fallback(
        self, msgs: list[dict[str, str]], tpl: PromptTemplate, window: str, chunk: ChunkLike
    ) -> list[dict[str, str]]:
        limit = self._prompt_limit(self.max_tokens)
        if self.meter.count_messages(msgs) <= limit:
            return msgs
        base = self.meter.count_messages(tpl.render(document="", chunk=chunk.text))
        cut = truncate_text(window, max(0, limit - base - 8), side="middle", counter=self.counter)
        return tpl.render(document=cut.text, chunk=chunk.text)

    # ----------------------------------------------------------------- answer
    def answer(
        self,
        question: str,
        passages: Sequence[tuple[str, str]],
        *,
        doc_id: str = "",
        starts: Sequence[int | None] | None = None,
    ) -> AnswerResult:
        """An answer from ``passages`` citing their chunk ids, or ``NOT_IN_DOCUMENTS``.

        Passages that do not fit the model are dropped from the end (the least relevant when
        they come ranked) and counted in ``stats["answer_passages_dropped"]``. The model reads
        the passages themselves, so ``starts`` is not used.
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
            requests.append(self._request(msgs, tpl.id, CallTags(STAGE_ANSWER, doc_id)))
            metas.append((tpl, [cid for cid, _ in passages]))
        out = []
        for (tpl, ids), res in zip(metas, self._run(requests), strict=True):
            parsed = parse_answer(res.text, ids)
            out.append(
                AnswerResult(
                    parsed.text,
                    list(parsed.cited_chunk_ids),
                    parsed.not_found,
                    [res.record],
                    self.engine,
                    self.model,
                    tpl.id,
                    list(parsed.unknown_citations),
                )
            )
        return out


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
