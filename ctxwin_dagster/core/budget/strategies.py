"""The truncation strategies: which chat messages each keeps within a token budget.

:func:`strategy_name` checks the messages and names the strategy; :func:`kept_by_strategy` gives
the positions of the messages a named strategy keeps (see
:data:`STRATEGIES` and :func:`ctxwin_dagster.core.budget.fit.ensure_fit`, which cuts a kept
message that is still too long); :func:`subsequence_positions` maps the messages a custom
strategy returned back to their positions.

Example::

    >>> msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Task"},
    ...         {"role": "assistant", "content": "Done"}, {"role": "user", "content": "Next?"}]
    >>> kept_by_strategy(msgs, "smart_truncate", 3, cost=len)  # a budget of three messages
    [0, 1, 3]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from ctxwin_dagster.core.arguments import callable_name

__all__ = ["STRATEGIES", "Message", "StrategyFn", "kept_by_strategy", "strategy_name", "subsequence_positions"]

#: A chat message, read only: ``{"role": ..., "content": ...}`` and maybe ``"name"``.
Message = Mapping[str, object]

V = TypeVar("V")

#: The named strategies.
STRATEGIES = ("keep_recent", "keep_bookends", "sliding_window", "smart_truncate")
#: A custom strategy: ``fn(messages, budget, count_messages) -> messages``.
StrategyFn = Callable[[list[dict[str, V]], int, Callable[[Sequence[Message]], int]], Sequence[Mapping[str, V]]]


def strategy_name(messages: Sequence[Message], strategy: str | Callable[..., object]) -> str:
    """The name of ``strategy`` to report (a function's own name, ``"custom"`` for another
    callable), once ``messages`` and ``strategy`` are checked."""
    if isinstance(messages, str | bytes):
        raise TypeError("ensure_fit takes a list of {'role', 'content'} messages; for one text use truncate_text()")
    if not messages:
        raise ValueError("messages is empty; pass at least one {'role', 'content'} message")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise ValueError(f"message {i} must be a mapping with a 'role' (and 'content'); got {m!r}")
    if callable(strategy):
        name = callable_name(strategy)
        return "custom" if name is None else name
    if strategy in STRATEGIES:
        return strategy
    raise ValueError(f"unknown strategy {strategy!r}; use one of {STRATEGIES} or a callable")


def kept_by_strategy(
    messages: Sequence[Message], strategy: str, budget: int, cost: Callable[[Sequence[Message]], int]
) -> list[int]:
    """Indices kept by a named strategy (before any text truncation)."""
    n = len(messages)
    system = [i for i, m in enumerate(messages) if m.get("role") == "system"]
    if strategy == "keep_recent":
        pinned: list[int] = []
    elif strategy in ("keep_bookends", "sliding_window"):
        pinned = system
    elif strategy == "smart_truncate":
        first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
        pinned = system + ([first_user] if first_user is not None else [])
    else:  # pragma: no cover - validated by the caller
        raise ValueError(strategy)
    pinned_set = set(pinned)
    rest = [i for i in range(n) if i not in pinned_set]

    if strategy == "sliding_window":
        # Units are whole turns: a user message and the non-user messages after it.
        units: list[list[int]] = []
        for i in rest:
            if messages[i].get("role") == "user" or not units:
                units.append([i])
            else:
                units[-1].append(i)
    else:
        units = [[i] for i in rest]

    kept = sorted(pinned_set)
    # Always keep the newest unit (the question being asked), even if it must be cut later.
    for k, unit in enumerate(reversed(units)):
        trial = sorted(kept + unit)
        if k == 0 or cost([messages[i] for i in trial]) <= budget:
            kept = trial
        else:
            break
    return kept


def subsequence_positions(original: Sequence[dict[str, V]], chosen: Sequence[Mapping[str, V]]) -> list[int]:
    """The positions in ``original`` of the ``chosen`` messages, when they are a subsequence of it
    (equal as dicts, in order); an empty list when they are not (a strategy rewrote messages).

    Example::

        >>> a, b, c = {"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "user", "content": "c"}
        >>> subsequence_positions([a, b, c], [a, c]), subsequence_positions([a, b, c], [c, a])
        ([0, 2], [])
    """
    kept: list[int] = []
    pos = 0
    for m in chosen:
        while pos < len(original) and original[pos] != dict(m):
            pos += 1
        if pos == len(original):
            return []
        kept.append(pos)
        pos += 1
    return kept
