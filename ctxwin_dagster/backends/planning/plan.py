"""Pre-flight plan: calls, tokens, characters and cost per variant, without calling any model.

The plan runs the real LLM task code (:class:`~ctxwin_dagster.backends.tasks.llm.LLMTasks`) against
a :class:`DryRunChatBackend`, which counts every request and answers with placeholder text of
the expected length instead of calling a server. The prompts counted are therefore exactly the
prompts a real run would send (same templates, batching, windows and fitting). Output sizes
are estimates: ``summary_tokens`` for each summary call, ``context_tokens`` per chunk context.

Each variant is priced twice: without prompt caching, and with a server that caches prompt
prefixes as OpenAI's does (a prompt of at least 1,024 tokens reuses the prefix it shares with a
recent prompt, in blocks of 128 tokens; cached tokens are billed at the cache-read price). CC-RAG
repeats the whole document at the head of every chunk's prompt, so caching serves most of it.

Example::

    >>> plan = plan_document("word " * 3000, doc_id="d", model="gemini-1.5-flash")
    >>> plan["swb_rag"]["calls"] >= 1 and plan["cc_rag"]["calls"] == plan["chunks"]
    True
"""

from __future__ import annotations

import json
import re
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from ctxwin_dagster.backends.base import CallRecord, ChatRequest, ChatResult, Ledger, Message
from ctxwin_dagster.backends.chat.local_model import is_local_model
from ctxwin_dagster.backends.planning.pricing import estimate_cost
from ctxwin_dagster.backends.tasks.llm import LLMTasks
from ctxwin_dagster.core.budget.fit import ContextOverflowError
from ctxwin_dagster.core.budget.limits import ModelLimits, get_model_limits
from ctxwin_dagster.core.budget.tokens import PromptMeter, get_token_counter
from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.text.splitting import RecursiveSplitter

__all__ = ["DryRunChatBackend", "plan_document"]

_CHUNK_ID = re.compile(r'chunk_id="([^"]+)"')


def _common_start(a: str, b: str, block: int = 1 << 16) -> int:
    """The length of the longest common prefix of ``a`` and ``b``: blocks compared whole, then a
    binary search inside the first block that differs (comparisons run at memory speed)."""
    n = min(len(a), len(b))
    start = 0
    while start < n and a[start : start + block] == b[start : start + block]:
        start += block
    if start >= n:
        return n
    lo, hi = start, min(n, start + block)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[start:mid] == b[start:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class DryRunChatBackend:
    """A :class:`~ctxwin_dagster.backends.base.ChatBackend` that sends nothing.

    Each request is counted (tokens with the model's encoding, characters) into ``ledger``
    and answered with filler text of the estimated length: ``summary_tokens`` for summaries,
    ``context_tokens`` per context (CC), and valid SWB JSON with one such context per chunk id.
    ``cost_usd`` uses genai-prices for ``price_model`` (default: ``model``), with the input
    tokens a prefix-caching server would read from its cache (``cached_tokens``: the longest
    prefix shared with one of the last ``cache_recent`` prompts, if at least
    ``cache_min_tokens``, rounded down to ``cache_block`` tokens) at the cache-read price;
    ``cache_saving_usd`` is what that saves.
    """

    #: OpenAI's prompt caching: prompts of 1,024 tokens or more, in blocks of 128 tokens.
    cache_min_tokens = 1024
    cache_block = 128
    cache_recent = 8

    def __init__(
        self,
        *,
        model: str,
        summary_tokens: int = PAPER.summary_max_tokens,
        context_tokens: int = 100,
        price_model: str | None = None,
        limits: ModelLimits | None = None,
        sample_text: str = "",
    ) -> None:
        if summary_tokens < 1 or context_tokens < 1:
            raise ValueError("summary_tokens and context_tokens must be >= 1")
        self.model = model
        self.limits = limits or get_model_limits(model)
        self.ledger = Ledger()
        self.max_concurrency = 8
        self.summary_tokens = summary_tokens
        self.context_tokens = context_tokens
        self.price_model = price_model or model
        self.counter = get_token_counter(model)
        self.meter = PromptMeter(self.counter)
        self.over_limit = 0
        # Filler is cut from the document itself, so estimated outputs have its characters per token.
        self._sample = self.counter.encode(sample_text[:200_000]) if sample_text.strip() else []
        self._recent: deque[list[Message]] = deque(maxlen=self.cache_recent)

    def cached_tokens(self, messages: list[Message]) -> int:
        """Input tokens of ``messages`` a prefix-caching server would serve from its cache after
        the recent prompts; ``messages`` becomes one of them."""
        shared = max((self._shared_start(prev, messages) for prev in self._recent), default=(0, 0))
        self._recent.append(messages)
        whole, chars = shared
        n = self.meter.count_messages(messages[:whole]) if whole else 0
        if chars and whole < len(messages):
            n += max(0, self.meter.count(str(messages[whole].get("content"))[:chars]) - 1)  # the last may be cut
        if n < self.cache_min_tokens:
            return 0
        return n // self.cache_block * self.cache_block

    @staticmethod
    def _shared_start(a: list[Message], b: list[Message]) -> tuple[int, int]:
        """How two prompts start the same: the number of equal leading messages, then the
        characters at the start of the next message's content that are equal."""
        whole = 0
        for ma, mb in zip(a, b, strict=False):
            if ma != mb:
                ca, cb = ma.get("content"), mb.get("content")
                if ma.get("role") == mb.get("role") and isinstance(ca, str) and isinstance(cb, str):
                    return whole, _common_start(ca, cb)
                break
            whole += 1
        return whole, 0

    def _filler(self, n_tokens: int) -> str:
        n_tokens = max(1, n_tokens)
        if len(self._sample) >= n_tokens:
            return self.counter.decode(self._sample[:n_tokens]).strip() or "word"
        return " ".join(["word"] * n_tokens)  # " word" is one token in the cl100k/o200k encodings

    def complete(self, request: ChatRequest) -> ChatResult:
        started = time.perf_counter()
        messages = list(request.messages)
        n_in = self.meter.count_messages(messages)
        limit = self.limits.available_prompt_tokens(min(request.max_tokens, self.limits.max_completion_tokens))
        if n_in > limit:
            self.over_limit += 1
        version = request.prompt_version
        if version.startswith("swb_batch"):
            ids = _CHUNK_ID.findall(str(messages[-1].get("content", "")))
            text = json.dumps(
                {"contexts": [{"chunk_id": cid, "context": self._filler(self.context_tokens - 8)} for cid in ids]}
            )
        elif version.startswith("summarize"):
            text = self._filler(min(self.summary_tokens, request.max_tokens) - 1)
        else:
            text = self._filler(min(self.context_tokens, request.max_tokens) - 1)
        n_out = self.counter.count(text)
        cached = self.cached_tokens(messages)
        if is_local_model(self.price_model):
            cost: float | None = 0.0
            full: float | None = 0.0
        else:
            cost = estimate_cost(self.price_model, input_tokens=n_in, output_tokens=n_out, cached_tokens=cached)
            full = estimate_cost(self.price_model, input_tokens=n_in, output_tokens=n_out) if cached else cost
        record = CallRecord(
            backend="dry-run",
            model=self.model,
            tags=request.tags,
            prompt_version=version,
            input_tokens=n_in,
            output_tokens=n_out,
            input_chars=sum(len(str(m.get("content", ""))) for m in messages),
            output_chars=len(text),
            latency_s=time.perf_counter() - started,
            cached_tokens=cached,
            cost_usd=cost,
            cache_saving_usd=max(0.0, full - cost) if full is not None and cost is not None else 0.0,
            usage_counted=True,
        )
        self.ledger.add(record)
        return ChatResult(text=text, record=record, finish_reason="stop")

    def complete_many(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        return [self.complete(r) for r in requests]


def _totals(records: list[CallRecord]) -> dict[str, object]:
    t = Ledger.summarize(records)
    return {
        "calls": t["calls"],
        "input_tokens": t["input_tokens"],
        "input_chars": t["input_chars"],
        "output_tokens_est": t["output_tokens"],
        "cost_usd_est": round(t["uncached_cost_usd"], 4) if t["cost_known"] else None,
        "cached_tokens_est": t["cached_tokens"],
        "cost_usd_est_cached": round(t["cost_usd"], 4) if t["cost_known"] else None,
    }


def plan_document(
    text: str,
    *,
    doc_id: str,
    model: str = PAPER.contextualizer_model,
    chunk_size: int = PAPER.chunk_size,
    chunk_overlap: int = PAPER.chunk_overlap,
    batch_size: int = PAPER.swb_batch_size,
    window_chars: int = PAPER.swb_window_chars,
    summary_max_tokens: int = PAPER.summary_max_tokens,
    segment_chars: int = PAPER.summary_segment_chars,
    context_tokens: int = 100,
    max_output_tokens: int = PAPER.max_output_tokens,
) -> dict[str, Any]:
    """The plan for one document: per variant, calls, input tokens and characters, estimated
    output tokens and cost: ``cost_usd_est`` without prompt caching, ``cost_usd_est_cached``
    with a prefix-caching server, which would read ``cached_tokens_est`` of the input tokens from
    its cache. ``cc_rag["fits"]`` is False when the whole document does not fit the model
    (CC-RAG cannot run with it)."""
    started = time.perf_counter()
    chunks = RecursiveSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap).split(
        text, doc_id=doc_id, doc_sha256="plan", sections=False
    )
    backend = DryRunChatBackend(
        model=model, summary_tokens=summary_max_tokens, context_tokens=context_tokens, sample_text=text
    )
    tasks = LLMTasks(backend, max_tokens=max_output_tokens)
    summary = tasks.summarize(text, doc_id=doc_id, max_tokens=summary_max_tokens, segment_chars=segment_chars)
    summary_records = list(summary.records)
    mark = len(backend.ledger)
    swb_error = None
    try:
        tasks.contextualize_swb(
            text, chunks, summary.text, doc_id=doc_id, batch_size=batch_size, window_chars=window_chars
        )
    except ContextOverflowError as exc:
        swb_error = str(exc)
    swb_records = backend.ledger.since(mark)
    mark = len(backend.ledger)
    cc_error = None
    try:
        tasks.contextualize_cc(text, chunks, doc_id=doc_id)
    except ContextOverflowError as exc:
        cc_error = str(exc)
    if cc_error:  # count what a model with a long enough context would receive
        from ctxwin_dagster.core.methods.prompts import detect_language, get_template

        tpl = get_template("cc_context", detect_language(text))
        for c in chunks:
            backend.complete(
                ChatRequest(
                    messages=tuple(tpl.render(document=text, chunk=c.text)),
                    prompt_version=tpl.id,
                    max_tokens=max_output_tokens,
                )
            )
    cc_records = backend.ledger.since(mark)
    swb = _totals(summary_records + swb_records)
    swb.update(
        summary_calls=len(summary_records),
        batch_calls=len(swb_records),
        batch_input_chars=sum(r.input_chars for r in swb_records),
        fits=swb_error is None,
        error=swb_error,
        windows_cut=int(tasks.stats["swb_windows_shrunk"]),
    )
    cc = _totals(cc_records)
    cc.update(fits=cc_error is None, error=cc_error)
    return {
        "doc_id": doc_id,
        "model": model,
        "n_chars": len(text),
        "n_tokens": backend.counter.count(text),
        "encoding": backend.counter.info.name,
        "tokens_exact": backend.counter.info.exact,
        "chunks": len(chunks),
        "batches": -(-len(chunks) // batch_size),
        "t_rag": {
            "calls": 0,
            "input_tokens": 0,
            "input_chars": 0,
            "output_tokens_est": 0,
            "cost_usd_est": 0.0,
            "cached_tokens_est": 0,
            "cost_usd_est_cached": 0.0,
            "fits": True,
            "error": None,
        },
        "cc_rag": cc,
        "swb_rag": swb,
        "prompts_over_limit": backend.over_limit,
        "plan_runtime_s": round(time.perf_counter() - started, 2),
    }
