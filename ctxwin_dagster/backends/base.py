"""Small protocols shared by the model backends, and the record every model call leaves.

Backends (chat, embeddings, the extractive engine) implement these protocols; the task
layer and the Dagster assets depend only on them.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol, TypeAlias, TypedDict, runtime_checkable

import numpy as np

from ctxwin_dagster.backends.chat.structured import ENFORCED
from ctxwin_dagster.core.budget.limits import ModelLimits, get_model_limits
from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.json_types import JSONObject, JSONValue
from ctxwin_dagster.core.methods.prompts.schemas import ReplySchema

__all__ = [
    "BackendStats",
    "CallRecord",
    "CallTags",
    "ChatBackend",
    "ChatRequest",
    "ChatResult",
    "Embedder",
    "Ledger",
    "Message",
    "Totals",
    "chat_concurrency",
    "chat_limits",
    "decodes_any_schema",
]

#: A chat message as the API takes it: ``role``, ``content`` (a text, or a list of parts) and
#: optional fields such as ``name``.
Message: TypeAlias = Mapping[str, JSONValue]
#: The totals of :meth:`Ledger.summarize`: counts (ints), volumes, latency and costs (floats),
#: and ``cost_known`` (a bool).
Totals: TypeAlias = dict[str, int | float | bool]
#: The volumes of a call that :meth:`Ledger.summarize` adds up.
VOLUMES = ("input_tokens", "output_tokens", "cached_tokens", "input_chars", "output_chars", "latency_s")


class BackendStats(TypedDict):
    """A chat backend's ``stats()``: its ledger's totals and its cache's counters."""

    ledger: Totals
    cache: dict[str, int]


@dataclass(frozen=True, slots=True)
class CallTags:
    """Where a call belongs, for accounting: the pipeline stage, document and variant."""

    stage: str = ""
    doc_id: str = ""
    variant: str = ""

    def value(self, name: str) -> str:
        """The tag ``name``: ``stage``, ``doc_id`` or ``variant``.

        Raises:
            AttributeError: no tag of that name.
        """
        values = {"stage": self.stage, "doc_id": self.doc_id, "variant": self.variant}
        if name not in values:
            raise AttributeError(f"CallTags has no tag {name!r}; the tags are {sorted(values)}")
        return values[name]


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One model call (or one cache hit standing in for it), as accounted.

    ``input_tokens``/``output_tokens`` come from the response's usage when the server reports
    it, else from counting (``usage_counted=True``). ``cost_usd`` is the cost of the work: what
    the call costs at the model's price, None when the model has no known price. A cache hit
    (``cache_hit=True``) keeps the token counts and the cost of the call it reuses, so input
    volumes and the cost of the work are reported the same on a rerun; what was paid in this
    run is :attr:`paid_usd` (0 for a cache hit, else ``cost_usd``). ``cached_tokens`` are the
    input tokens the server read from its prompt cache (billed at the cache-read price where the
    provider has one); ``cache_saving_usd`` is what that saved against the full input price, so
    :attr:`uncached_cost_usd` is what the call would cost on a server without prompt caching.
    """

    backend: str
    model: str
    tags: CallTags = field(default_factory=CallTags)
    prompt_version: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    input_chars: int = 0
    output_chars: int = 0
    latency_s: float = 0.0
    cost_usd: float | None = None
    cache_saving_usd: float = 0.0
    cache_hit: bool = False
    usage_counted: bool = False
    attempts: int = 1
    ok: bool = True
    error: str | None = None
    #: For a request with a reply schema: how the reply was held to it. ``schema``: the server's
    #: structured output or the local model's constrained decoding; ``json_object``: JSON only
    #: (the server has no schema support); ``text``: nothing (neither); empty: no schema asked.
    reply_format: str = ""

    @property
    def paid_usd(self) -> float | None:
        """What this run paid for the call: 0 for a cache hit, else ``cost_usd`` (None when unknown)."""
        return 0.0 if self.cache_hit else self.cost_usd

    @property
    def uncached_cost_usd(self) -> float | None:
        """The cost of the work had no input token come from the server's prompt cache."""
        return None if self.cost_usd is None else self.cost_usd + self.cache_saving_usd

    def volumes(self) -> dict[str, float]:
        """What :meth:`Ledger.summarize` adds up (:data:`VOLUMES`): tokens, characters and latency."""
        values = (
            self.input_tokens,
            self.output_tokens,
            self.cached_tokens,
            self.input_chars,
            self.output_chars,
            self.latency_s,
        )
        return dict(zip(VOLUMES, values, strict=True))

    def to_dict(self) -> JSONObject:
        d: JSONObject = asdict(self)
        del d["tags"]
        d.update(asdict(self.tags))
        d["paid_usd"] = self.paid_usd
        d["uncached_cost_usd"] = self.uncached_cost_usd
        return d


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A chat completion to make: messages plus sampling settings and accounting tags."""

    messages: tuple[Message, ...]
    temperature: float = PAPER.temperature
    top_p: float = PAPER.top_p
    max_tokens: int = PAPER.max_output_tokens
    json_mode: bool = False
    prompt_version: str = ""
    tags: CallTags = field(default_factory=CallTags)
    #: The reply's JSON schema: sent as structured output where the backend supports it (implies
    #: ``json_mode``); the task engine still parses the reply and counts what it had to repair.
    schema: ReplySchema | None = None


@dataclass(frozen=True, slots=True)
class ChatResult:
    """The text a chat call returned, with its accounting record."""

    text: str
    record: CallRecord
    finish_reason: str | None = None


@runtime_checkable
class ChatBackend(Protocol):
    """A chat model: an OpenAI-compatible server, or a stand-in for tests."""

    model: str
    ledger: Ledger

    def complete(self, request: ChatRequest) -> ChatResult:
        """Run one request (blocking)."""
        ...

    def complete_many(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Run many requests with bounded concurrency; results in request order."""
        ...


@runtime_checkable
class _KnowsLimits(Protocol):
    """A chat backend that knows its model's token limits."""

    @property
    def limits(self) -> ModelLimits | None: ...


@runtime_checkable
class _Concurrent(Protocol):
    """A chat backend that says how many requests it runs at once."""

    @property
    def max_concurrency(self) -> int: ...


@runtime_checkable
class _SchemaDecoding(Protocol):
    """A chat backend that says whether it holds a reply to any JSON schema (ordered items,
    string lengths), not only to the subset OpenAI's strict mode takes."""

    @property
    def decodes_any_schema(self) -> bool: ...


def chat_limits(chat: ChatBackend, limits: ModelLimits | None = None) -> ModelLimits:
    """``limits``, else the backend's own, else the registry's for its model."""
    own = chat.limits if isinstance(chat, _KnowsLimits) else None
    return limits or own or get_model_limits(chat.model)


def chat_concurrency(chat: ChatBackend, default: int = 8) -> int:
    """How many requests ``chat`` runs at once (``default`` when it does not say)."""
    return int(chat.max_concurrency) if isinstance(chat, _Concurrent) else default


def decodes_any_schema(chat: ChatBackend | None) -> bool:
    """Whether ``chat`` holds a reply to any JSON schema (the local model, ctxwin's llama.cpp
    server), so the task engine may send the tighter schemas."""
    return bool(chat.decodes_any_schema) if isinstance(chat, _SchemaDecoding) else False


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalized float32 vectors of a fixed dimension."""

    # Read-only members: a plain attribute or a property (e.g. a dimension learnt from the server) will do.
    @property
    def model(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """An array of shape (len(texts), dim), rows L2-normalized."""
        ...


class Ledger:
    """A thread-safe list of :class:`CallRecord` with totals grouped by tag.

    Example::

        >>> led = Ledger()
        >>> led.add(CallRecord("openai", "m", CallTags("summary", "doc1"), input_tokens=10))
        >>> led.totals()["input_tokens"], led.totals()["calls"]
        (10, 1)
    """

    def __init__(self, records: Iterable[CallRecord] = ()) -> None:
        self._lock = threading.Lock()
        self._records: list[CallRecord] = list(records)

    def add(self, record: CallRecord) -> None:
        with self._lock:
            self._records.append(record)

    @property
    def records(self) -> list[CallRecord]:
        with self._lock:
            return list(self._records)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def since(self, mark: int) -> list[CallRecord]:
        """Records added after ``mark`` (a previous ``len(ledger)``)."""
        with self._lock:
            return list(self._records[mark:])

    @staticmethod
    def summarize(records: Iterable[CallRecord]) -> Totals:
        """Totals over ``records``: calls (made, not cached), cache hits, tokens, chars, costs.

        ``cost_usd`` is the cost of the work (cache hits count at the cost of the call they
        reuse), ``paid_usd`` what was paid in this run (cache hits count 0),
        ``uncached_cost_usd`` the cost of the work on a server without prompt caching (the
        ``cached_tokens`` priced as input); ``cost_known`` is
        False when a record has no known price (its cost is then left out of both sums).
        ``schema_enforced`` / ``schema_not_enforced`` count the records of requests with a reply
        schema whose reply was held to it (structured output, constrained decoding) or was not
        (the backend supports neither; the parser's repair and retry deal with the reply).

        Example::

            >>> led = Ledger([CallRecord("openai", "m", cost_usd=0.5), CallRecord("openai", "m", cost_usd=0.5, cache_hit=True)])
            >>> t = led.totals()
            >>> t["calls"], t["cache_hits"], t["cost_usd"], t["paid_usd"]
            (1, 1, 1.0, 0.5)
        """
        out: Totals = dict.fromkeys(VOLUMES, 0)
        out.update(calls=0, cache_hits=0, failures=0, cost_usd=0.0, paid_usd=0.0, uncached_cost_usd=0.0)
        out["cost_known"] = True
        out.update(schema_enforced=0, schema_not_enforced=0)
        for r in records:
            if r.reply_format:
                out["schema_enforced" if r.reply_format in ENFORCED else "schema_not_enforced"] += 1
            for k, v in r.volumes().items():
                out[k] += v
            if r.cache_hit:
                out["cache_hits"] += 1
            else:
                out["calls"] += 1
            if r.cost_usd is None:
                out["cost_known"] = False
            else:
                out["cost_usd"] += r.cost_usd
                out["paid_usd"] += 0.0 if r.cache_hit else r.cost_usd
                out["uncached_cost_usd"] += r.cost_usd + r.cache_saving_usd
            if not r.ok:
                out["failures"] += 1
        out["latency_s"] = round(out["latency_s"], 3)
        return out

    def totals(self, **tag_filter: str) -> Totals:
        """Totals of the records whose tags match ``tag_filter`` (e.g. ``stage="summary"``)."""
        recs = [r for r in self.records if all(r.tags.value(k) == v for k, v in tag_filter.items())]
        return self.summarize(recs)

    def grouped(self, by: Sequence[str] = ("stage", "doc_id", "variant")) -> dict[tuple[str, ...], Totals]:
        """Totals per distinct combination of the ``by`` tags."""
        groups: dict[tuple[str, ...], list[CallRecord]] = defaultdict(list)
        for r in self.records:
            groups[tuple(r.tags.value(k) for k in by)].append(r)
        return {k: self.summarize(v) for k, v in groups.items()}
