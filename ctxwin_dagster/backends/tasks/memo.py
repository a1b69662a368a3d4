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
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ctxwin_dagster.backends.base import CallRecord, CallTags
from ctxwin_dagster.core.budget.tokens import PromptMeter
from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.methods.swb import ChunkLike

if TYPE_CHECKING:
    from ctxwin_dagster.backends.calls.cache import ResponseCache
    from ctxwin_dagster.backends.calls.null_cache import NullCache

#: Bump when the extractive selection changes, so cached results are not reused.
ALGORITHM_VERSION = "1"


def extractive_record(
    meter: PromptMeter,
    model: str,
    tags: CallTags,
    version: str,
    messages: Sequence[Mapping[str, str]],
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


def record_to_dict(rec: CallRecord) -> JSONObject:
    stored: JSONObject = dataclasses.asdict(rec)
    return stored


def record_from_dict(data: Mapping[str, object]) -> CallRecord:
    """A stored record replayed as a cache hit (no time spent, nothing paid)."""
    fields: dict[str, Any] = dict(data)  # the fields as record_to_dict wrote them
    tags = CallTags(**fields.pop("tags"))
    fields.update(cache_hit=True, latency_s=0.0)
    return CallRecord(tags=tags, **fields)


class TaskMemo:
    """Get or store a task's JSON result under a content key; no cache: always a miss."""

    def __init__(self, cache: ResponseCache | NullCache | None, settings: Sequence[object]) -> None:
        self.cache = cache
        self.settings = [ALGORITHM_VERSION, *settings]

    def key(self, task: str, *parts: object) -> str | None:
        if self.cache is None:
            return None
        return self.cache.make_key("extractive", task, self.settings, *parts)

    def get(self, key: str | None) -> JSONObject | None:
        """The result stored under ``key`` (a JSON object), or None."""
        if key is None or self.cache is None:
            return None
        value = self.cache.get(key)
        return value if isinstance(value, dict) else None

    def put(self, key: str | None, value: Mapping[str, object]) -> None:
        if key is not None and self.cache is not None:
            self.cache.put(key, value)


@runtime_checkable
class _Sectioned(Protocol):
    """A chunk that knows its section (a :class:`~ctxwin_dagster.core.text.splitting.Chunk`)."""

    @property
    def section(self) -> str | None: ...


def section_of(chunk: ChunkLike) -> str | None:
    """The chunk's section (the heading path in force at its start), None when it has none."""
    return chunk.section if isinstance(chunk, _Sectioned) else None


def chunk_parts(chunks: Sequence[ChunkLike]) -> list[tuple[str, int, int, str, str]]:
    """What of the chunks a context depends on (ids, offsets, text, section)."""
    return [(c.chunk_id, c.start, c.end, c.text, section_of(c) or "") for c in chunks]
