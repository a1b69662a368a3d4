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

from ctxwin_dagster.backends.base import CallRecord, ChatResult
from ctxwin_dagster.backends.chat.messages import Prepared, Reply
from ctxwin_dagster.core.budget.tokens import TokenCounter
from ctxwin_dagster.core.json_types import JSONObject, JSONValue

__all__ = ["CACHE_FORMAT", "Cost", "answer_entry", "call_record", "duplicate_record", "entry_result", "failure_record"]

#: The layout of a response-cache entry.
CACHE_FORMAT = 1

#: USD for a call with ``(input_tokens, output_tokens, cached_tokens)``, None when the price is unknown.
Cost = Callable[[int, int, int], float | None]


def call_record(p: Prepared, *, backend: str, model: str) -> CallRecord:
    """A record of a call for ``p`` by ``backend``: its tags and prompt version, nothing counted
    yet (the volumes, latency and outcome are set with :func:`dataclasses.replace`)."""
    return CallRecord(backend=backend, model=model, tags=p.request.tags, prompt_version=p.request.prompt_version)


def _whole(entry: Mapping[str, JSONValue], key: str) -> int:
    """The count ``entry[key]`` (0 when absent)."""
    value = entry.get(key, 0)
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"the cache entry's {key} is a {type(value).__name__}, not a number")


def answer_entry(p: Prepared, reply: Reply, *, counter: TokenCounter, cost: Cost, reply_format: str) -> JSONObject:
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
    entry: Mapping[str, JSONValue],
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
    input_tokens = _whole(entry, "input_tokens")
    output_tokens = _whole(entry, "output_tokens")
    cached_tokens = _whole(entry, "cached_tokens")
    # A hit's cost of the work is the cost of the call it reuses (paid_usd is 0); an entry
    # without a recorded price is priced from its stored token counts.
    stored = entry.get("cost_usd")
    spent = (
        float(stored)
        if isinstance(stored, int | float)
        else cost(input_tokens, output_tokens, cached_tokens)
        if attempts == 0
        else None
    )
    # What the prompt cache saved: the same call with every input token at the full price.
    full = cost(input_tokens, output_tokens, 0) if cached_tokens and spent is not None else None
    saving = max(0.0, float(full) - float(spent)) if full is not None and spent is not None else 0.0
    finish = entry.get("finish_reason")
    record = replace(
        call_record(p, backend=backend, model=model),
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
    )
    return ChatResult(text=text, record=record, finish_reason=finish if isinstance(finish, str) else None)


def failure_record(
    p: Prepared, error: BaseException, *, backend: str, model: str, latency_s: float, attempts: int = 1
) -> CallRecord:
    """The record of a call for ``p`` that failed with ``error`` after ``attempts`` attempts."""
    return replace(
        call_record(p, backend=backend, model=model),
        latency_s=latency_s,
        attempts=attempts,
        ok=False,
        error=f"{type(error).__name__}: {error}"[:500],
    )


def duplicate_record(p: Prepared, twin: ChatResult) -> CallRecord:
    """The record of ``p``, a request of a batch answered by its identical ``twin``: it keeps the
    twin's token counts and cost of the work, and as a cache hit it paid nothing."""
    return replace(twin.record, tags=p.request.tags, latency_s=0.0, cache_hit=True, attempts=0)
