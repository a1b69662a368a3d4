"""Does a prompt fit a model, and if not, what to cut.

* :func:`check_fit` tells whether a prompt (a text or chat messages) fits the model's available
  prompt tokens and by how much it overflows.
* :func:`ensure_fit` makes chat messages fit with a truncation strategy and reports exactly what
  was dropped or shortened; it never grows the prompt.
* :func:`truncate_text` cuts one text to a token budget from its head, tail or middle.

Strategies (``strategy=``):

``keep_recent``
    the newest messages that fit, whatever their role (the system message may go).
``keep_bookends``
    the system messages plus the newest messages that fit.
``sliding_window``
    the system messages plus the newest *whole turns* that fit: history is dropped a turn
    (a user message and the replies after it) at a time, so it always starts at a user message.
``smart_truncate``
    the system messages, the first user message (the task) and the newest messages that fit.
a callable
    ``fn(messages, budget, count_messages) -> messages``; its result is checked to fit.

When even the messages a strategy must keep are too long, the longest kept message is cut
(middle by default) with :func:`truncate_text`, and the report says so.

Example::

    >>> msgs = [{"role": "system", "content": "Be brief."}] + [
    ...     {"role": "user", "content": "word " * 500} for _ in range(10)]
    >>> report = ensure_fit(msgs, max_prompt_tokens=1200, strategy="keep_bookends")
    >>> report.fits, report.dropped_indices
    (True, (1, 2, 3, 4, 5, 6, 7, 8))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar, cast

from ctxwin_dagster.core.budget.limits import ModelLimits, ModelRegistry, get_model_limits
from ctxwin_dagster.core.budget.strategies import (
    Message,
    StrategyFn,
    kept_by_strategy,
    strategy_name,
    subsequence_positions,
)
from ctxwin_dagster.core.budget.tokens import TokenCounter, get_token_counter
from ctxwin_dagster.core.json_types import JSONObject

__all__ = [
    "ContextOverflowError",
    "FitReport",
    "TextTruncation",
    "TruncationReport",
    "check_fit",
    "ensure_fit",
    "truncate_text",
]

#: The type of the values of the messages given to :func:`ensure_fit` (``str`` for plain chats).
V = TypeVar("V")
Side = Literal["head", "tail", "middle"]


class ContextOverflowError(ValueError):
    """The prompt cannot be made to fit; the message says by how much and what to change."""


@dataclass(frozen=True, slots=True)
class FitReport:
    """Result of :func:`check_fit`.

    ``limit`` is the available prompt tokens (context length minus the reserved completion,
    capped by the model's prompt limit); ``overflow`` is how many tokens must go (0 when it fits);
    ``headroom`` is how many could still be added.
    """

    fits: bool
    prompt_tokens: int
    limit: int
    overflow: int
    reserved_completion: int
    context_length: int
    model: str | None
    encoding: str
    exact_tokens: bool
    limits_known: bool

    @property
    def headroom(self) -> int:
        return max(0, self.limit - self.prompt_tokens)

    def to_dict(self) -> JSONObject:
        return {
            "fits": self.fits,
            "prompt_tokens": self.prompt_tokens,
            "limit": self.limit,
            "overflow": self.overflow,
            "headroom": self.headroom,
            "reserved_completion": self.reserved_completion,
            "context_length": self.context_length,
            "model": self.model,
            "encoding": self.encoding,
            "exact_tokens": self.exact_tokens,
            "limits_known": self.limits_known,
        }


@dataclass(frozen=True, slots=True)
class TextTruncation:
    """Result of :func:`truncate_text`: the kept text and what was removed."""

    text: str
    side: str
    tokens_before: int
    tokens_after: int
    removed_chars: int
    marker: str

    @property
    def removed_tokens(self) -> int:
        return self.tokens_before - self.tokens_after

    @property
    def truncated(self) -> bool:
        return self.removed_chars > 0


@dataclass(frozen=True, slots=True)
class TruncationReport(Generic[V]):
    """Result of :func:`ensure_fit`: the messages to send and an account of every cut."""

    messages: list[dict[str, V]]
    strategy: str
    tokens_before: int
    tokens_after: int
    limit: int
    dropped_indices: tuple[int, ...]
    dropped_messages: tuple[dict[str, V], ...]
    truncated: dict[int, TextTruncation] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.tokens_after <= self.limit

    @property
    def changed(self) -> bool:
        return bool(self.dropped_indices or self.truncated)

    def summary(self) -> str:
        parts = [f"{self.strategy}: {self.tokens_before} -> {self.tokens_after} tokens (limit {self.limit})"]
        if self.dropped_indices:
            parts.append(f"dropped messages {list(self.dropped_indices)}")
        for i, t in self.truncated.items():
            parts.append(f"cut message {i} at its {t.side} by {t.removed_tokens} tokens")
        return "; ".join(parts)


def _resolve_limit(
    model: str | None,
    limits: ModelLimits | None,
    max_prompt_tokens: int | None,
    reserved_completion: int | None,
    registry: ModelRegistry | None,
) -> tuple[int, int, int, bool, str | None]:
    """(limit, reserved, context_length, known, model) from the caller's arguments."""
    if max_prompt_tokens is not None:
        if max_prompt_tokens <= 0:
            raise ValueError(f"max_prompt_tokens must be > 0; got {max_prompt_tokens}")
        reserved = reserved_completion or 0
        return max_prompt_tokens, reserved, max_prompt_tokens + reserved, True, model
    if limits is None:
        if model is None:
            raise ValueError("pass model=, limits= or max_prompt_tokens= so the prompt has a limit to fit")
        limits = get_model_limits(model, registry=registry)
    reserved = limits.max_completion_tokens if reserved_completion is None else reserved_completion
    return (
        limits.available_prompt_tokens(reserved),
        reserved,
        limits.context_length,
        limits.known,
        model or limits.model,
    )


def _counter_for(model: str | None, counter: TokenCounter | None) -> TokenCounter:
    return counter if counter is not None else get_token_counter(model)


def check_fit(
    prompt: str | Sequence[Message],
    *,
    model: str | None = None,
    limits: ModelLimits | None = None,
    max_prompt_tokens: int | None = None,
    reserved_completion: int | None = None,
    counter: TokenCounter | None = None,
    registry: ModelRegistry | None = None,
) -> FitReport:
    """Whether ``prompt`` fits the model, with the arithmetic.

    The limit is ``max_prompt_tokens`` when given, else the model's available prompt tokens
    (context length − ``reserved_completion``, which defaults to the model's max completion).

    Example::

        >>> r = check_fit("hello" + " hello" * 99, max_prompt_tokens=50)
        >>> r.fits, r.prompt_tokens, r.overflow
        (False, 100, 50)
    """
    tc = _counter_for(model, counter)
    limit, reserved, context, known, name = _resolve_limit(
        model, limits, max_prompt_tokens, reserved_completion, registry
    )
    n = tc.count(prompt) if isinstance(prompt, str) else tc.count_messages(prompt)
    return FitReport(
        fits=n <= limit,
        prompt_tokens=n,
        limit=limit,
        overflow=max(0, n - limit),
        reserved_completion=reserved,
        context_length=context,
        model=name,
        encoding=tc.info.name,
        exact_tokens=tc.info.exact,
        limits_known=known,
    )


def truncate_text(
    text: str,
    max_tokens: int,
    *,
    side: Side = "tail",
    counter: TokenCounter | None = None,
    model: str | None = None,
    marker: str = " … ",
) -> TextTruncation:
    """Cut ``text`` to at most ``max_tokens`` tokens.

    ``side`` says what is removed: ``"tail"`` keeps the beginning, ``"head"`` keeps the end and
    ``"middle"`` keeps both ends. ``marker`` is put where text was removed (its tokens count
    towards ``max_tokens``; pass ``""`` for none). Cuts fall on token boundaries, so the result
    decodes to a prefix/suffix of the original text's tokens.

    Example::

        >>> truncate_text("one two three four five", 2, marker="").text
        'one two'
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0; got {max_tokens}")
    if side not in ("head", "tail", "middle"):
        raise ValueError(f"side must be 'head', 'tail' or 'middle'; got {side!r}")
    tc = _counter_for(model, counter)
    tokens = tc.encode(text)
    before = len(tokens)
    if before <= max_tokens:
        return TextTruncation(text, side, before, before, 0, marker)
    marker_tokens = len(tc.encode(marker)) if marker else 0
    if marker_tokens >= max_tokens:
        marker, marker_tokens = "", 0
    keep = max_tokens - marker_tokens
    # Decoding a slice of tokens can split a multi-byte character; shrink until the result
    # round-trips within the budget.
    while True:
        if side == "tail":
            kept = tc.decode(tokens[:keep]) + (marker if keep < before else "")
        elif side == "head":
            kept = (marker if keep < before else "") + tc.decode(tokens[before - keep :] if keep else [])
        else:
            left = (keep + 1) // 2
            right = keep - left
            kept = tc.decode(tokens[:left]) + marker + (tc.decode(tokens[before - right :]) if right else "")
        after = tc.count(kept)
        if after <= max_tokens or keep == 0:
            break
        keep -= 1
    if after > max_tokens:  # only the marker was left and it does not fit
        kept, after = "", 0
    return TextTruncation(kept, side, before, after, max(0, len(text) - len(kept) + len(marker)), marker)


def ensure_fit(
    messages: Sequence[Mapping[str, V]],
    *,
    model: str | None = None,
    limits: ModelLimits | None = None,
    max_prompt_tokens: int | None = None,
    reserved_completion: int | None = None,
    strategy: str | StrategyFn[V] = "smart_truncate",
    counter: TokenCounter | None = None,
    registry: ModelRegistry | None = None,
    truncate_side: Side = "middle",
    truncate_oversized: bool = True,
) -> TruncationReport[V]:
    """Make chat ``messages`` fit the model; report what was cut.

    Messages that fit are returned unchanged (as new dicts). Otherwise the ``strategy`` picks
    which messages stay (see the module docstring); if the kept messages are still too long
    and ``truncate_oversized`` is true, the longest kept message is shortened with
    :func:`truncate_text` from ``truncate_side``. Raises :class:`ContextOverflowError` when it
    cannot fit (e.g. the chat overhead alone exceeds the limit, or truncation is off).
    """
    name = strategy_name(messages, strategy)
    tc = _counter_for(model, counter)
    limit = _resolve_limit(model, limits, max_prompt_tokens, reserved_completion, registry)[0]
    original = [dict(m) for m in messages]
    cost = tc.count_messages
    before = cost(original)
    if before <= limit:
        return TruncationReport(original, name, before, before, limit, (), ())
    if callable(strategy):
        return _custom_fit(strategy, name, original, before, limit, cost)

    kept_idx = kept_by_strategy(original, name, limit, cost)
    kept_msgs = [dict(original[i]) for i in kept_idx]
    dropped = tuple(i for i in range(len(original)) if i not in set(kept_idx))
    truncated: dict[int, TextTruncation] = {}
    after = cost(kept_msgs)
    if after > limit:
        if not truncate_oversized:
            raise ContextOverflowError(
                f"after {name} the prompt is still {after} tokens, {after - limit} over the limit of {limit}; "
                "allow truncate_oversized=True, shorten the kept messages, or use a model with a larger context"
            )
        after = _shorten_kept(kept_msgs, kept_idx, truncated, limit, after, tc, truncate_side)
    return TruncationReport(
        kept_msgs, name, before, after, limit, dropped, tuple(original[i] for i in dropped), truncated
    )


def _custom_fit(
    strategy: StrategyFn[V],
    name: str,
    original: list[dict[str, V]],
    before: int,
    limit: int,
    cost: Callable[[Sequence[Message]], int],
) -> TruncationReport[V]:
    """The report of a custom strategy, whose result must fit and must not grow the prompt."""
    chosen = list(strategy(list(original), limit, cost))
    kept_idx = subsequence_positions(original, chosen)
    if not kept_idx and chosen:
        # The callable rewrote messages; report everything not kept verbatim as dropped.
        kept_msgs = [dict(m) for m in chosen]
        dropped = tuple(i for i, m in enumerate(original) if m not in kept_msgs)
    else:
        kept_msgs = [original[i] for i in kept_idx]
        dropped = tuple(i for i in range(len(original)) if i not in set(kept_idx))
    after = cost(kept_msgs)
    if after > before:
        raise ContextOverflowError(f"strategy {name!r} grew the prompt from {before} to {after} tokens")
    if after > limit:
        raise ContextOverflowError(
            f"strategy {name!r} returned {after} tokens, over the limit of {limit} by {after - limit}; "
            "make the strategy drop or shorten more"
        )
    return TruncationReport(kept_msgs, name, before, after, limit, dropped, tuple(original[i] for i in dropped))


def _shorten_kept(
    kept_msgs: list[dict[str, V]],
    kept_idx: list[int],
    truncated: dict[int, TextTruncation],
    limit: int,
    after: int,
    tc: TokenCounter,
    side: Side,
) -> int:
    """Shorten the longest kept string content, one message at a time, until the messages
    (``after`` tokens now) fit; record each cut in ``truncated`` (by original position) and
    return the tokens after."""
    while after > limit:
        lengths = [
            (tc.count(content), pos, content)
            for pos, m in enumerate(kept_msgs)
            if isinstance(content := m.get("content"), str) and kept_idx[pos] not in truncated
        ]
        if not lengths:
            break
        n_tokens, pos, content = max(lengths)  # positions differ, so contents are never compared
        target = max(0, n_tokens - (after - limit))
        cut = truncate_text(content, target, side=side, counter=tc)
        # The content was a str, so a str is one of the messages' values.
        kept_msgs[pos]["content"] = cast(V, cut.text)
        truncated[kept_idx[pos]] = cut
        after = tc.count_messages(kept_msgs)
    if after > limit:
        raise ContextOverflowError(
            f"cannot fit: even with every kept message cut, the prompt is {after} tokens, over the limit "
            f"of {limit}; the per-message overhead of {len(kept_msgs)} messages is too large for the model — "
            "send fewer messages or raise the limit"
        )
    return after
