"""What a model call costs in USD, from genai-prices (an offline snapshot of providers' prices).

Local models (Ollama, vLLM, llama.cpp) have no price there; give them one with ``overrides``
(USD per 1M input tokens, USD per 1M output tokens), usually ``(0.0, 0.0)``. An unknown model
costs ``None`` — unknown, not free — and never raises.

Example::

    >>> round(estimate_cost("gpt-4o", input_tokens=1_000_000, output_tokens=0), 2)
    2.5
    >>> estimate_cost("llama3.1:8b", input_tokens=1000, output_tokens=100) is None
    True
    >>> estimate_cost("llama3.1:8b", input_tokens=1000, output_tokens=100, overrides={"llama3.1:8b": (0.0, 0.0)})
    0.0
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from functools import lru_cache

__all__ = ["estimate_cost", "has_price"]

PriceOverrides = Mapping[str, tuple[float, float]]


def _check_tokens(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative int; got {value!r}")


def _override_for(model: str, overrides: PriceOverrides | None) -> tuple[float, float] | None:
    if not overrides:
        return None
    names = [model, model.lower()]
    if "/" in model:
        bare = model.split("/", 1)[1]
        names += [bare, bare.lower()]
    for name in names:
        if name in overrides:
            price = overrides[name]
            try:
                per_in, per_out = (float(p) for p in price)
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"overrides[{name!r}] must be (USD per 1M input tokens, USD per 1M output tokens); got {price!r}"
                ) from exc
            if per_in < 0 or per_out < 0 or math.isnan(per_in) or math.isnan(per_out):
                raise ValueError(f"overrides[{name!r}] prices must be >= 0; got {price!r}")
            return per_in, per_out
    return None


def _candidates(model: str) -> list[tuple[str, str | None]]:
    """(model_ref, provider_id) pairs to try: as given, then without a ``provider/`` prefix."""
    out: list[tuple[str, str | None]] = [(model, None)]
    if "/" in model:
        provider, bare = model.split("/", 1)
        out += [(bare, provider), (bare, None)]
    return out


@lru_cache(maxsize=256)
def _resolve(model: str) -> tuple[str, str | None] | None:
    """The first (model_ref, provider_id) genai-prices knows, or None."""
    try:
        from genai_prices import Usage, calc_price
    except ImportError:  # pragma: no cover - genai-prices is a dependency
        return None
    for ref, provider in _candidates(model):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                calc_price(Usage(input_tokens=1, output_tokens=1), ref, provider_id=provider)
        except Exception:  # noqa: BLE001 - LookupError, or anything genai-prices raises for odd names
            continue
        return ref, provider
    return None


def has_price(model: str, *, overrides: PriceOverrides | None = None) -> bool:
    """True when :func:`estimate_cost` would return a number for ``model``."""
    return _override_for(model, overrides) is not None or (bool(model) and _resolve(model) is not None)


def estimate_cost(
    model: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int = 0,
    overrides: PriceOverrides | None = None,
) -> float | None:
    """USD for one call of ``model``, or None when its price is unknown.

    ``input_tokens`` is the whole prompt, cached tokens included (OpenAI's ``prompt_tokens``);
    ``cached_tokens`` of them are billed at the provider's cache-read price. ``overrides`` maps a
    model name (as given, or without its ``provider/`` prefix) to (USD per 1M input tokens, USD per
    1M output tokens) and wins over genai-prices; overridden models bill cached tokens as input.

    Example::

        >>> estimate_cost("openai/gpt-4o", input_tokens=1000, output_tokens=100)
        0.0035
    """
    _check_tokens("input_tokens", input_tokens)
    _check_tokens("output_tokens", output_tokens)
    _check_tokens("cached_tokens", cached_tokens)
    cached_tokens = min(cached_tokens, input_tokens)
    override = _override_for(model, overrides)
    if override is not None:
        return (input_tokens * override[0] + output_tokens * override[1]) / 1_000_000
    if not model:
        return None
    resolved = _resolve(model)
    if resolved is None:
        return None
    from genai_prices import Usage, calc_price

    ref, provider = resolved
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens, cache_read_tokens=cached_tokens)
            price = calc_price(usage, ref, provider_id=provider)
    except Exception:  # noqa: BLE001 - never raise for pricing; the cost is just unknown
        return None
    return float(price.total_price)
