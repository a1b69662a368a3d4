"""What a chat call leaves behind: the cache entry of an answer and the call's record.

* :func:`answer_entry` — the response-cache entry of an answer just received (its text, finish
  reason, token counts from the server's usage or counted, served model, cost and reply format);
* :func:`entry_result` — the :class:`~ctxwin_dagster.backends.base.ChatResult` and its
  :class:`~ctxwin_dagster.backends.base.CallRecord` for an entry, whether just received or a
  cache hit (which keeps the cost of the work of the call it reuses and pays nothing);
* :func:`call_record`, :func:`failure_record` and :func:`duplicate_record` — the record of a
  call, of a failed one, and of a request that repeats another of the same batch.

Costs come from the caller (``cost``: USD for a call with these input, output and cached
tokens, None when the price is unknown), so these functions hold no prices of their own.

Example::

    >>> from ctxwin_dagster.backends.base import ChatRequest
    >>> from ctxwin_dagster.backends.chat.messages import prepare
    >>> p = prepare(ChatRequest(messages=({"role": "user", "content": "Hi"},)), backend_id="b", model="m")
    >>> entry = {"text": "Hello", "input_tokens": 8, "output_tokens": 2, "cost_usd": 0.5}
    >>> result = entry_result(p, entry, backend="b", model="m", cost=lambda *tokens: 1.0, latency_s=0.0, attempts=0)
    >>> result.text, result.record.cache_hit, result.record.cost_usd, result.record.paid_usd
    ('Hello', True, 0.5, 0.0)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ctxwin_dagster.backends.base import CallRecord, ChatResult
from ctxwin_dagster.backends.chat.messages import Prepared, Reply
from ctxwin_dagster.core.budget.tokens import TokenCounter

__all__ = ["CACHE_FORMAT", "Cost", "answer_entry", "call_record", "duplicate_record", "entry_result", "failure_record"]

#: The layout of a response-cache entry.
CACHE_FORMAT = 1

#: USD for a call with ``(input_tokens, output_tokens, cached_tokens)``, None when the price is unknown.
Cost = Callable[[int, int, int], float | None]


def call_record(p: Prepared, *, backend: str, model: str, **fields: Any) -> CallRecord:
    """A record of a call for ``p`` by ``backend``, with ``fields`` (volumes, latency, outcome)."""
    return CallRecord(
        backend=backend,
        model=model,
        tags=p.request.tags,
        prompt_version=p.request.prompt_version,
        **fields,
    )


def answer_entry(p: Prepared, reply: Reply, *, counter: TokenCounter, cost: Cost, reply_format: str) -> dict[str, Any]:
    """The cache entry of ``reply``, the answer to ``p`` asked with ``reply_format``: tokens from
    the server's usage, else counted with ``counter`` (``usage_counted``)."""
    text, finish, usage, served_model = reply
    if usage is not None:
        input_tokens, output_tokens, cached_tokens, counted = *usage, False
    else:
        input_tokens = counter.count_messages(p.messages)
        output_tokens, cached_tokens, counted = counter.count(text), 0, True
    return {
        "format": CACHE_FORMAT,
        "text": text,
        "finish_reason": finish,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cached_tokens": cached_tokens,
        "usage_counted": counted,
        "served_model": served_model,
        "cost_usd": cost(input_tokens, output_tokens, cached_tokens),
        "reply_format": reply_format,
    }


def entry_result(
    p: Prepared,
    entry: Mapping[str, Any],
    *,
    backend: str,
    model: str,
    cost: Cost,
    latency_s: float,
    attempts: int,
) -> ChatResult:
    """The result and its record for a cache entry: an answer just received (``attempts`` >= 1)
    or a cache hit (``attempts=0``)."""
    text = str(entry.get("text", ""))
    input_tokens = int(entry.get("input_tokens", 0))
    output_tokens = int(entry.get("output_tokens", 0))
    cached_tokens = int(entry.get("cached_tokens", 0))
    # A hit's cost of the work is the cost of the call it reuses (paid_usd is 0); an entry
    # without a recorded price is priced from its stored token counts.
    spent = entry.get("cost_usd")
    if attempts == 0 and not isinstance(spent, int | float):
        spent = cost(input_tokens, output_tokens, cached_tokens)
    # What the prompt cache saved: the same call with every input token at the full price.
    full = cost(input_tokens, output_tokens, 0) if cached_tokens and spent is not None else None
    saving = max(0.0, float(full) - float(spent)) if full is not None and spent is not None else 0.0
    record = call_record(
        p,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=cached_tokens,
        input_chars=p.input_chars,
        output_chars=len(text),
        latency_s=latency_s,
        cost_usd=None if spent is None else float(spent),
        cache_saving_usd=saving,
        cache_hit=attempts == 0,
        usage_counted=bool(entry.get("usage_counted", False)),
        attempts=attempts,
        reply_format=str(entry.get("reply_format") or ("schema" if p.request.schema is not None else "")),
        backend=backend,
        model=model,
    )
    return ChatResult(text=text, record=record, finish_reason=entry.get("finish_reason"))


def failure_record(p: Prepared, error: BaseException, *, backend: str, model: str, **fields: Any) -> CallRecord:
    """The record of a call for ``p`` that failed with ``error``, with ``fields`` (latency, attempts)."""
    return call_record(
        p, backend=backend, model=model, ok=False, error=f"{type(error).__name__}: {error}"[:500], **fields
    )


def duplicate_record(p: Prepared, twin: ChatResult) -> CallRecord:
    """The record of ``p``, a request of a batch answered by its identical ``twin``: it keeps the
    twin's token counts and cost of the work, and as a cache hit it paid nothing."""
    return replace(twin.record, tags=p.request.tags, latency_s=0.0, cache_hit=True, attempts=0)
