"""How the LLM engine's tasks call the chat model: requests, waves of calls, prompts that fit.

:class:`LLMCalls` is what every task of :class:`~ctxwin_dagster.backends.tasks.llm.LLMTasks`
relies on: the engine's settings (set by ``LLMTasks``), requests made with its sampling
settings, requests handed to ``complete_many`` in waves, the reply schema of an SWB batch, and
prompts made to fit the model — a long message cut in its middle, an SWB batch's windows cut
at their far ends, a fallback's window cut in its middle.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Sequence

from ctxwin_dagster.backends.base import CallTags, ChatBackend, ChatRequest, ChatResult, Message, decodes_any_schema
from ctxwin_dagster.core.budget.fit import ContextOverflowError, ensure_fit, truncate_text
from ctxwin_dagster.core.budget.limits import ModelLimits
from ctxwin_dagster.core.budget.tokens import PromptMeter, TokenCounter
from ctxwin_dagster.core.methods.prompts import PromptTemplate
from ctxwin_dagster.core.methods.prompts.schemas import CHARS_PER_TOKEN_FLOOR, ReplySchema, swb_contexts_schema
from ctxwin_dagster.core.methods.swb import ChunkLike, SWBBatch, SWBPrompts

__all__ = ["LLMCalls"]

log = logging.getLogger(__name__)


class LLMCalls:
    """The settings and the chat calls the LLM engine's tasks share (see the module docstring)."""

    engine: str
    chat: ChatBackend
    model: str
    temperature: float
    top_p: float
    limits: ModelLimits
    max_tokens: int
    counter: TokenCounter
    meter: PromptMeter
    wave_size: int
    stats: Counter[str]

    def _request(
        self,
        messages: Sequence[Message],
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
        if not decodes_any_schema(self.chat):
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
