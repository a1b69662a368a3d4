"""What an index row embeds: a chunk and its situating context fitted into the embedding window.

:func:`plan_row` decides, by :data:`ROW_STRATEGIES`, what the row of a chunk and its context gives
the embedding model, with exact counts of the tokens of chunk and context and of what did not
fit; :func:`plan_rows` plans many rows with batched tokenization and :func:`window_report` totals
the plans. The window itself (limits, tokenizer, pieces that fit) is in
:mod:`ctxwin_dagster.core.budget.embedding_window`.

Strategies for a contextualized row (chunk + its situating context):

``context_budget``
    the context, then the chunk; the context gets only the tokens left after the whole chunk
    (its end is trimmed and counted).
``chunk_first``
    the chunk, then the context, trimmed the same way.
``separate``
    chunk and context embedded on their own and their vectors combined
    (``(1 - w) * chunk + w * context``, ``w = context_weight``); nothing is trimmed.
``pooled``
    context and chunk as one text, embedded in window-sized pieces whose vectors are pooled;
    nothing is trimmed.

A chunk that alone exceeds the window is always embedded in pieces whose vectors are pooled
(``oversize="pool"``), so its text counts in full. ``oversize="truncate"`` gives the text to
the model as it is and lets the model cut it — the behaviour of most RAG libraries — and only
counts what was cut; it exists to measure that behaviour and fails the index's window check.

Example::

    >>> from ctxwin_dagster.core.budget.embedding_window import WhitespaceTokenizer
    >>> tok = WhitespaceTokenizer()
    >>> limits = EmbeddingLimits("toy", max_tokens=6, special_tokens=2)
    >>> plan = plan_row("one two three", "ctx a b c", strategy="context_budget", tokenizer=tok, limits=limits)
    >>> plan.parts[0].pieces, plan.context_tokens_cut, plan.chunk_tokens_cut
    (('ctx\\n\\none two three',), 3, 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ctxwin_dagster.core.budget.embedding_window import (
    OVERSIZE_MODES,
    EmbeddingLimits,
    EmbeddingTokenizer,
    Oversize,
    TextFit,
    fit_text,
    token_count,
)

__all__ = [
    "DEFAULT_CONTEXT_WEIGHT",
    "DEFAULT_ROW_STRATEGY",
    "ROW_STRATEGIES",
    "RowPart",
    "RowPlan",
    "plan_row",
    "plan_rows",
    "window_report",
]

RowStrategy = Literal["context_budget", "chunk_first", "separate", "pooled"]
ROW_STRATEGIES: tuple[str, ...] = ("context_budget", "chunk_first", "separate", "pooled")

#: The strategy used when none is chosen, by measurement on a tune split of SQuAD and CUAD
#: (evaluations/embedding_strategies.py; the table, and the report split that confirms it, are in
#: evaluations/reports/embedding_strategies.md): the best span hit@4 of CC-RAG and SWB-RAG
#: together, tied with ``pooled`` at half its embedding cost.
DEFAULT_ROW_STRATEGY: RowStrategy = "context_budget"

#: The context's share of a row vector in the ``separate`` strategy.
DEFAULT_CONTEXT_WEIGHT = 0.5

#: What joins context and chunk in an embedded text (as in Anthropic's contextual retrieval).
SEPARATOR = "\n\n"


@dataclass(frozen=True, slots=True)
class RowPart:
    """One part of a row's vector: texts embedded and pooled, and the part's weight."""

    pieces: tuple[str, ...]
    piece_weights: tuple[float, ...]
    weight: float


@dataclass(frozen=True, slots=True)
class RowPlan:
    """What one index row embeds and what did not fit (exact counts, special tokens excluded).

    The row vector is ``normalize(sum(part.weight * pool(part)))`` where ``pool`` is the
    weighted mean of the part's piece vectors.
    """

    strategy: str
    parts: tuple[RowPart, ...]
    embedded_text: str
    chunk_tokens: int
    context_tokens: int
    context_tokens_cut: int
    chunk_tokens_cut: int
    over_window: bool

    @property
    def embed_pieces(self) -> int:
        """Inputs the model reads for this row (1 when everything fits in one)."""
        return sum(len(p.pieces) for p in self.parts)

    def to_dict(self) -> dict[str, str | int]:
        """The index row's columns that say how it was embedded."""
        return {
            "embed_strategy": self.strategy,
            "embed_pieces": self.embed_pieces,
            "chunk_tokens": self.chunk_tokens,
            "context_tokens": self.context_tokens,
            "context_tokens_cut": self.context_tokens_cut,
            "chunk_tokens_cut": self.chunk_tokens_cut,
        }


def _trim_to(text: str, offsets: Sequence[tuple[int, int]], n: int) -> str:
    """The first ``n`` tokens of ``text`` (by their offsets)."""
    if n <= 0 or not offsets:
        return ""
    return text[: offsets[min(n, len(offsets)) - 1][1]]


def _single(text: str) -> RowPart:
    return RowPart((text,), (1.0,), 1.0)


def _from_fit(fit: TextFit, weight: float) -> RowPart:
    return RowPart(fit.pieces, fit.weights, weight)


def plan_row(
    chunk_text: str,
    context: str,
    *,
    strategy: str = DEFAULT_ROW_STRATEGY,
    tokenizer: EmbeddingTokenizer,
    limits: EmbeddingLimits,
    oversize: Oversize = "pool",
    context_weight: float = DEFAULT_CONTEXT_WEIGHT,
    chunk_offsets: Sequence[tuple[int, int]] | None = None,
    context_offsets: Sequence[tuple[int, int]] | None = None,
) -> RowPlan:
    """What the index row of ``chunk_text`` with its situating ``context`` embeds.

    ``chunk_offsets``/``context_offsets`` may be given when already computed (batched). With
    ``oversize="pool"`` (the default) no token of the chunk is ever lost: ``chunk_tokens_cut``
    is 0. With ``oversize="truncate"`` the composed text goes to the model as it is and the
    tokens past the window are counted as cut (context first, then chunk, by position).

    Raises:
        ValueError: an unknown strategy or oversize mode, or ``context_weight`` outside [0, 1).
    """
    if strategy not in ROW_STRATEGIES:
        raise ValueError(f"strategy must be one of {ROW_STRATEGIES}; got {strategy!r}")
    if oversize not in OVERSIZE_MODES:
        raise ValueError(f"oversize must be one of {OVERSIZE_MODES}; got {oversize!r}")
    if not 0.0 <= context_weight < 1.0:
        raise ValueError(f"context_weight must be in [0, 1); got {context_weight}")
    context = context.strip() if context else ""
    c_offs = list(tokenizer.offsets(chunk_text) if chunk_offsets is None else chunk_offsets)
    x_offs = list(tokenizer.offsets(context) if context_offsets is None else context_offsets) if context else []
    n_chunk, n_ctx = len(c_offs), len(x_offs)
    budget = limits.content_tokens
    sep = token_count(tokenizer, SEPARATOR) if context else 0
    over = n_chunk + n_ctx + sep > budget

    if not context:
        fit = fit_text(chunk_text, tokenizer, limits, oversize=oversize, offsets=c_offs)
        return RowPlan(strategy, (_from_fit(fit, 1.0),), chunk_text, n_chunk, 0, 0, fit.tokens_cut, over)

    if strategy == "separate":
        cf = fit_text(chunk_text, tokenizer, limits, oversize=oversize, offsets=c_offs)
        xf = fit_text(context, tokenizer, limits, oversize=oversize, offsets=x_offs)
        parts = (_from_fit(cf, 1.0 - context_weight), _from_fit(xf, context_weight))
        return RowPlan(
            strategy, parts, f"{chunk_text}{SEPARATOR}{context}", n_chunk, n_ctx, xf.tokens_cut, cf.tokens_cut, over
        )

    if strategy == "pooled":
        text = f"{context}{SEPARATOR}{chunk_text}"
        fit = fit_text(text, tokenizer, limits, oversize=oversize)
        ctx_cut, chunk_cut = _split_cut(fit.tokens_cut, n_chunk, n_ctx + sep)
        return RowPlan(strategy, (_from_fit(fit, 1.0),), text, n_chunk, n_ctx, ctx_cut, chunk_cut, over)

    # context_budget / chunk_first: the context gets what the whole chunk leaves.
    def compose(ctx: str) -> str:
        if not ctx:
            return chunk_text
        return f"{ctx}{SEPARATOR}{chunk_text}" if strategy == "context_budget" else f"{chunk_text}{SEPARATOR}{ctx}"

    if oversize == "truncate":
        text = compose(context)
        offs = tokenizer.offsets(text)
        cut = max(0, len(offs) - budget)
        if strategy == "context_budget":
            ctx_cut, chunk_cut = _split_cut(cut, n_chunk, n_ctx + sep)
        else:  # the context is at the end: it is cut first
            chunk_cut = max(0, cut - (n_ctx + sep))
            ctx_cut = cut - chunk_cut
            ctx_cut = min(ctx_cut, n_ctx)
        return RowPlan(strategy, (_single(text),), text, n_chunk, n_ctx, ctx_cut, chunk_cut, over)

    if n_chunk + sep >= budget:
        # No room for any context: the chunk alone, pooled from pieces if it is over the window.
        fit = fit_text(chunk_text, tokenizer, limits, oversize="pool", offsets=c_offs)
        return RowPlan(strategy, (_from_fit(fit, 1.0),), chunk_text, n_chunk, n_ctx, n_ctx, 0, over)

    keep = min(n_ctx, budget - n_chunk - sep)
    while True:
        ctx = _trim_to(context, x_offs, keep)
        text = compose(ctx)
        n = token_count(tokenizer, text)
        if n <= budget or keep == 0:
            break
        keep = max(0, keep - max(1, n - budget))
    return RowPlan(strategy, (_single(text),), text, n_chunk, n_ctx, n_ctx - keep, 0, over)


def plan_rows(
    rows: Sequence[tuple[str, str]],
    *,
    tokenizer: EmbeddingTokenizer,
    limits: EmbeddingLimits,
    strategy: str = DEFAULT_ROW_STRATEGY,
    oversize: Oversize = "pool",
    context_weight: float = DEFAULT_CONTEXT_WEIGHT,
) -> list[RowPlan]:
    """:func:`plan_row` for many ``(chunk_text, context)`` pairs, tokenized in two batched calls."""
    chunk_offs = tokenizer.offsets_many([c for c, _ in rows])
    contexts = [(x or "").strip() for _, x in rows]
    ctx_offs = tokenizer.offsets_many(contexts)
    return [
        plan_row(
            c,
            x,
            strategy=strategy,
            tokenizer=tokenizer,
            limits=limits,
            oversize=oversize,
            context_weight=context_weight,
            chunk_offsets=co,
            context_offsets=xo,
        )
        for (c, _), x, co, xo in zip(rows, contexts, chunk_offs, ctx_offs, strict=True)
    ]


def window_report(plans: Sequence[RowPlan]) -> dict[str, int]:
    """Totals over row plans: rows over the window, pooled, and tokens cut from chunks and contexts.

    Example::

        >>> from ctxwin_dagster.core.budget.embedding_window import WhitespaceTokenizer
        >>> tok, lim = WhitespaceTokenizer(), EmbeddingLimits("toy", 6, 2)
        >>> window_report(plan_rows([("a b c", "x y z")], tokenizer=tok, limits=lim))["context_tokens_cut"]
        2
    """
    return {
        "rows": len(plans),
        "rows_over_window": sum(1 for p in plans if p.over_window),
        "rows_pooled": sum(1 for p in plans if p.embed_pieces > len(p.parts)),
        "chunk_tokens": sum(p.chunk_tokens for p in plans),
        "context_tokens": sum(p.context_tokens for p in plans),
        "chunk_tokens_cut": sum(p.chunk_tokens_cut for p in plans),
        "rows_with_chunk_cut": sum(1 for p in plans if p.chunk_tokens_cut),
        "context_tokens_cut": sum(p.context_tokens_cut for p in plans),
        "rows_with_context_cut": sum(1 for p in plans if p.context_tokens_cut),
    }


def _split_cut(cut: int, n_chunk: int, n_front: int) -> tuple[int, int]:
    """Tokens cut from the end of ``front + chunk``: (front tokens cut, chunk tokens cut)."""
    chunk_cut = min(cut, n_chunk)
    front_cut = max(0, cut - n_chunk)
    return min(front_cut, n_front), chunk_cut
