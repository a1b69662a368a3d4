"""A registry of model limits: context length, completion and prompt budgets.

Context windows come from ``genai-prices`` (an offline snapshot of providers' model data).
It has no maximum completion length, so a small project table supplies those for the common
hosted models, and another gives local models served through an OpenAI-compatible server
(vLLM, Ollama, llama.cpp). Anything else gets safe defaults flagged ``known=False`` so callers
can show a warning rather than trust them. Project code and users add their own with
:meth:`ModelRegistry.register`.

Example::

    >>> limits = get_model_limits("gpt-4o")
    >>> limits.context_length, limits.max_completion_tokens
    (128000, 16384)
    >>> limits.available_prompt_tokens(reserved_completion=2048)
    125952
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from threading import Lock
from typing import TypeVar

from ctxwin_dagster.core.json_types import JSONObject

__all__ = [
    "DEFAULT_LIMITS",
    "ModelLimits",
    "ModelRegistry",
    "default_registry",
    "get_model_limits",
]


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """Token limits of one model.

    Attributes:
        model: the name the limits were asked for.
        context_length: total tokens of prompt plus completion the model accepts.
        max_completion_tokens: most tokens the model will generate in one reply.
        max_prompt_tokens: a separate cap on the prompt, when the provider has one.
        source: where the numbers came from (``genai-prices``, ``project``, ``user``, ``default``).
        known: False when the numbers are defaults for a model the registry does not know.
    """

    model: str
    context_length: int
    max_completion_tokens: int
    max_prompt_tokens: int | None = None
    source: str = "user"
    known: bool = True

    def __post_init__(self) -> None:
        if self.context_length <= 0:
            raise ValueError(f"context_length of {self.model!r} must be > 0; got {self.context_length}")
        if not 0 < self.max_completion_tokens <= self.context_length:
            raise ValueError(
                f"max_completion_tokens of {self.model!r} must be between 1 and context_length "
                f"({self.context_length}); got {self.max_completion_tokens}"
            )
        if self.max_prompt_tokens is not None and not 0 < self.max_prompt_tokens <= self.context_length:
            raise ValueError(
                f"max_prompt_tokens of {self.model!r} must be between 1 and context_length "
                f"({self.context_length}) or None; got {self.max_prompt_tokens}"
            )

    def available_prompt_tokens(self, reserved_completion: int | None = None) -> int:
        """Prompt tokens left once ``reserved_completion`` tokens are kept for the reply.

        ``reserved_completion`` defaults to ``max_completion_tokens``; the result is also capped
        by ``max_prompt_tokens``.
        """
        reserved = self.max_completion_tokens if reserved_completion is None else reserved_completion
        if reserved < 0:
            raise ValueError(f"reserved_completion must be >= 0; got {reserved}")
        if reserved > self.max_completion_tokens:
            raise ValueError(
                f"reserved_completion ({reserved}) exceeds {self.model!r}'s max_completion_tokens "
                f"({self.max_completion_tokens}); reserve at most that many"
            )
        available = self.context_length - reserved
        if self.max_prompt_tokens is not None:
            available = min(available, self.max_prompt_tokens)
        return available

    def to_dict(self) -> JSONObject:
        d: JSONObject = asdict(self)
        d["available_prompt_tokens"] = self.available_prompt_tokens()
        return d


#: Limits used for a model nobody knows: small enough to be safe with most servers.
DEFAULT_LIMITS = ModelLimits("unknown", context_length=8192, max_completion_tokens=2048, source="default", known=False)

# Maximum completion tokens of hosted models (genai-prices has context windows only).
# Longest prefix wins; names are matched without a "provider/" prefix.
_MAX_COMPLETION: dict[str, int] = {
    "gpt-3.5-turbo": 4096,
    "gpt-4-turbo": 4096,
    "gpt-4-32k": 4096,
    "gpt-4": 4096,
    "gpt-4o": 16384,
    "gpt-4o-mini": 16384,
    "chatgpt-4o": 16384,
    "gpt-4.1": 32768,
    "gpt-4.5": 16384,
    "gpt-5": 128000,
    "o1": 100000,
    "o1-mini": 65536,
    "o3": 100000,
    "o4-mini": 100000,
    "gemini-1.0": 2048,
    "gemini-1.5": 8192,
    "gemini-2.0": 8192,
    "gemini-2.5": 65536,
    "claude-3-": 4096,
    "claude-3-5": 8192,
    "claude-3-7": 64000,
    "claude-sonnet-4": 64000,
    "claude-opus-4": 32000,
    "claude-haiku-4": 64000,
    "mistral-large": 8192,
}

# Local and open models, as Ollama/vLLM/llama.cpp name them (context, max completion).
_LOCAL: dict[str, tuple[int, int]] = {
    "llama3.1": (131072, 8192),
    "llama3.2": (131072, 8192),
    "llama3.3": (131072, 8192),
    "llama3": (8192, 4096),
    "meta-llama/llama-3.1": (131072, 8192),
    "meta-llama/meta-llama-3.1": (131072, 8192),
    "qwen2.5": (32768, 8192),
    "qwen/qwen2.5": (32768, 8192),
    "qwen3": (40960, 8192),
    "mistral": (32768, 8192),
    "mistralai/mistral-7b-instruct": (32768, 8192),
    "mixtral": (32768, 8192),
    "gemma2": (8192, 4096),
    "gemma3": (131072, 8192),
    "phi3": (4096, 2048),
    "phi4": (16384, 4096),
    "deepseek-r1": (131072, 8192),
}


def _normalize(model: str) -> str:
    return model.strip().lower()


_T = TypeVar("_T")


def _longest_prefix(table: Mapping[str, _T], name: str) -> _T | None:
    best = None
    for key in table:
        if (name == key or name.startswith(key)) and (best is None or len(key) > len(best)):
            best = key
    return None if best is None else table[best]


class ModelRegistry:
    """Looks up :class:`ModelLimits` by model name.

    Order: limits registered on this registry (exact name, then longest prefix), the local
    model table, genai-prices' context window with the project's completion table, and last the
    flagged defaults (``known=False``).

    Example::

        >>> reg = ModelRegistry()
        >>> reg.register(ModelLimits("my-vllm-model", context_length=32768, max_completion_tokens=4096))
        >>> reg.get("my-vllm-model").available_prompt_tokens()
        28672
    """

    def __init__(self, overrides: Iterable[ModelLimits] = (), *, default: ModelLimits = DEFAULT_LIMITS) -> None:
        self._overrides: dict[str, ModelLimits] = {}
        self._default = default
        self._lock = Lock()
        self._cache: dict[str, ModelLimits] = {}
        for limits in overrides:
            self.register(limits)

    def register(self, limits: ModelLimits) -> None:
        """Add or replace the limits of ``limits.model`` (also used as a prefix)."""
        with self._lock:
            self._overrides[_normalize(limits.model)] = limits
            self._cache.clear()

    def get(self, model: str) -> ModelLimits:
        """Limits for ``model``; never raises for an unknown model (see ``known``)."""
        if not model or not model.strip():
            raise ValueError("model name is empty; pass the name the server knows the model by")
        key = _normalize(model)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        limits = self._lookup(model, key)
        with self._lock:
            self._cache[key] = limits
        return limits

    def _lookup(self, model: str, key: str) -> ModelLimits:
        bare = (
            key.split("/", 1)[1]
            if key.count("/") == 1 and not key.startswith(("meta-llama/", "qwen/", "mistralai/"))
            else key
        )
        for name in (key, bare):
            found = _longest_prefix(self._overrides, name)
            if found is not None:
                return replace(found, model=model)
        for name in (key, bare):
            local = _longest_prefix(_LOCAL, name.replace(":", "").replace("-instruct", ""))
            if local is None:
                local = _longest_prefix(_LOCAL, name)
            if local is not None:
                return ModelLimits(model, context_length=local[0], max_completion_tokens=local[1], source="project")
        context = _genai_prices_context(bare)
        if context is not None:
            completion = _longest_prefix(_MAX_COMPLETION, re.sub(r"^(models/)", "", bare))
            known = completion is not None
            if completion is None:
                completion = min(4096, context // 4)
            return ModelLimits(
                model,
                context_length=context,
                max_completion_tokens=min(completion, context),
                source="genai-prices" if known else "genai-prices+default-completion",
                known=True,
            )
        return replace(self._default, model=model)


def _genai_prices_context(model: str) -> int | None:
    try:
        from genai_prices import data_snapshot
    except ImportError:  # pragma: no cover - genai-prices is a dependency
        return None
    try:
        _provider, info = data_snapshot.get_snapshot().find_provider_model(model, None, None, None)
    except LookupError:
        return None
    return int(info.context_window) if info.context_window else None


_DEFAULT_REGISTRY = ModelRegistry()


def default_registry() -> ModelRegistry:
    """The process-wide registry used when no registry is passed."""
    return _DEFAULT_REGISTRY


def get_model_limits(model: str, *, registry: ModelRegistry | None = None) -> ModelLimits:
    """Limits of ``model`` from ``registry`` (the default registry when None)."""
    return (registry or _DEFAULT_REGISTRY).get(model)
