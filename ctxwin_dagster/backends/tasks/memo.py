"""A content-addressed memo for the extractive engine's tasks.

The extractive engine costs no money, but its work costs time (sentence splitting, embedding,
selection, and metering the prompts an LLM would get). Each task result is stored in the
project's response cache under a key made of everything that determines it — the task, the
inputs' content (document, chunks, summary, question, passages), the prompt versions, the
engine's settings and :data:`ALGORITHM_VERSION` — so a rerun with the same content reuses it and
accounts the work as cache hits (``CallRecord.cache_hit``), exactly as the LLM engine's cached
calls are accounted: token counts and the cost of the work kept, nothing paid.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxwin_dagster.backends.base import CallRecord, CallTags
from ctxwin_dagster.core.budget.tokens import PromptMeter
from ctxwin_dagster.core.methods.swb import ChunkLike

if TYPE_CHECKING:
    from ctxwin_dagster.backends.calls.cache import NullCache, ResponseCache

#: Bump when the extractive selection changes, so cached results are not reused.
ALGORITHM_VERSION = "1"


def extractive_record(
    meter: PromptMeter,
    model: str,
    tags: CallTags,
    version: str,
    messages: Sequence[Mapping[str, Any]],
    output: str,
    latency: float,
) -> CallRecord:
    """The record of work done in place of a model call: the prompt an LLM would have been sent,
    metered with ``meter``, and the extractive ``output`` (``backend="extractive"``, cost 0)."""
    return CallRecord(
        backend="extractive",
        model=model,
        tags=tags,
        prompt_version=version,
        input_tokens=meter.count_messages(messages),
        output_tokens=meter.counter.count(output),
        input_chars=sum(len(m.get("content") or "") for m in messages),
        output_chars=len(output),
        latency_s=latency,
        cost_usd=0.0,
        usage_counted=True,
    )


def record_to_dict(rec: CallRecord) -> dict[str, Any]:
    return dataclasses.asdict(rec)


def record_from_dict(data: dict[str, Any]) -> CallRecord:
    """A stored record replayed as a cache hit (no time spent, nothing paid)."""
    fields = dict(data)
    tags = CallTags(**fields.pop("tags"))
    fields.update(cache_hit=True, latency_s=0.0)
    return CallRecord(tags=tags, **fields)


class TaskMemo:
    """Get or store a task's JSON result under a content key; no cache: always a miss."""

    def __init__(self, cache: ResponseCache | NullCache | None, settings: Sequence[Any]) -> None:
        self.cache = cache
        self.settings = [ALGORITHM_VERSION, *settings]

    def key(self, task: str, *parts: Any) -> str | None:
        if self.cache is None:
            return None
        return self.cache.make_key("extractive", task, self.settings, *parts)

    def get(self, key: str | None) -> Any | None:
        if key is None or self.cache is None:
            return None
        return self.cache.get(key)

    def put(self, key: str | None, value: Any) -> None:
        if key is not None and self.cache is not None:
            self.cache.put(key, value)


def chunk_parts(chunks: Sequence[ChunkLike]) -> list[tuple[str, int, int, str, str]]:
    """What of the chunks a context depends on (ids, offsets, text, section)."""
    return [(c.chunk_id, c.start, c.end, c.text, getattr(c, "section", None) or "") for c in chunks]
