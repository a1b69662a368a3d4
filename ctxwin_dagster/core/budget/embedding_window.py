"""The embedding model's window: what fits, what a row embeds, and what was cut (counted).

An embedding model reads a bounded number of tokens and silently drops the rest:
``all-MiniLM-L6-v2`` reads 256 word pieces, ``[CLS]`` and ``[SEP]`` included; OpenAI's
``text-embedding-3-*`` 8,191 tokens. This module is the core's fit logic applied to embedders:

* :class:`EmbeddingLimits` and :func:`get_embedding_limits` — a model's window, from a registry
  (unknown models get a clear default flagged ``known=False``);
* :class:`EmbeddingTokenizer` — what the core needs of the model's own tokenizer: the character
  span of every token of a text, and how many special tokens wrap an input;
* :func:`window_pieces` — a text cut, at token boundaries, into consecutive pieces that each
  fit the window (every token of the text lands in exactly one piece), so a long text can be
  embedded whole by pooling the pieces' vectors;
* :func:`plan_row` — what an index row embeds, by :data:`ROW_STRATEGIES`, with exact counts of
  the tokens of chunk and context and of what did not fit.

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

    >>> tok = WhitespaceTokenizer()
    >>> limits = EmbeddingLimits("toy", max_tokens=6, special_tokens=2)
    >>> plan = plan_row("one two three", "ctx a b c", strategy="context_budget", tokenizer=tok, limits=limits)
    >>> plan.parts[0].pieces, plan.context_tokens_cut, plan.chunk_tokens_cut
    (('ctx\\n\\none two three',), 3, 0)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "DEFAULT_CONTEXT_WEIGHT",
    "DEFAULT_ROW_STRATEGY",
    "EMBEDDING_LIMITS",
    "OVERSIZE_MODES",
    "ROW_STRATEGIES",
    "EmbeddingLimits",
    "EmbeddingTokenizer",
    "RowPart",
    "RowPlan",
    "TextFit",
    "WhitespaceTokenizer",
    "fit_text",
    "get_embedding_limits",
    "plan_row",
    "plan_rows",
    "window_pieces",
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

Oversize = Literal["pool", "truncate"]
OVERSIZE_MODES: tuple[str, ...] = ("pool", "truncate")

#: What joins context and chunk in an embedded text (as in Anthropic's contextual retrieval).
SEPARATOR = "\n\n"


@dataclass(frozen=True, slots=True)
class EmbeddingLimits:
    """An embedding model's window.

    Attributes:
        model: the model name.
        max_tokens: tokens the model reads per input, special tokens included.
        special_tokens: tokens the tokenizer adds to every input (``[CLS]``/``[SEP]``: 2).
        tokenizer: what the counts are made with.
        exact: True when the counts come from the model's own tokenizer.
        known: False when the model is not in the registry and ``max_tokens`` is a default.
    """

    model: str
    max_tokens: int
    special_tokens: int = 0
    tokenizer: str = ""
    exact: bool = True
    known: bool = True

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1; got {self.max_tokens} for {self.model!r}")
        if not 0 <= self.special_tokens < self.max_tokens:
            raise ValueError(
                f"special_tokens must be >= 0 and below max_tokens ({self.max_tokens}); got {self.special_tokens}"
            )

    @property
    def content_tokens(self) -> int:
        """Tokens of text that fit in one input (the window minus the special tokens)."""
        return self.max_tokens - self.special_tokens

    def describe(self) -> str:
        """E.g. ``"256 tokens (all-MiniLM-L6-v2's own tokenizer, 2 special)"``."""
        how = self.tokenizer or ("the model's own tokenizer" if self.exact else "an estimate")
        extra = f", {self.special_tokens} special" if self.special_tokens else ""
        guess = "; not in the registry, a default" if not self.known else ""
        return f"{self.max_tokens:,} tokens ({how}{extra}{guess})"


#: Known windows. ``all-MiniLM-L6-v2``: 256 word pieces (its ``max_seq_length``); OpenAI's
#: embedding models: 8,191 tokens of ``cl100k_base``; common models served by Ollama, vLLM or
#: TEI. Counts for the latter are estimates unless the embedder has the model's tokenizer.
EMBEDDING_LIMITS: dict[str, EmbeddingLimits] = {
    e.model: e
    for e in (
        EmbeddingLimits("all-MiniLM-L6-v2", 256, 2, "WordPiece (the model's own)"),
        EmbeddingLimits("all-minilm", 256, 2, "WordPiece (the model's own)"),
        EmbeddingLimits("text-embedding-3-small", 8191, 0, "cl100k_base"),
        EmbeddingLimits("text-embedding-3-large", 8191, 0, "cl100k_base"),
        EmbeddingLimits("text-embedding-ada-002", 8191, 0, "cl100k_base"),
        EmbeddingLimits("nomic-embed-text", 8192, 0, "estimate (cl100k_base)", exact=False),
        EmbeddingLimits("mxbai-embed-large", 512, 2, "estimate (cl100k_base)", exact=False),
        EmbeddingLimits("bge-m3", 8192, 2, "estimate (cl100k_base)", exact=False),
        EmbeddingLimits("bge-small-en-v1.5", 512, 2, "estimate (cl100k_base)", exact=False),
        EmbeddingLimits("bge-base-en-v1.5", 512, 2, "estimate (cl100k_base)", exact=False),
        EmbeddingLimits("bge-large-en-v1.5", 512, 2, "estimate (cl100k_base)", exact=False),
    )
}

#: The window assumed for a model that is not in the registry: 512 tokens, the smallest
#: common window of served embedding models. Set the real one (``max_input_tokens``) if known.
DEFAULT_EMBEDDING_TOKENS = 512


def get_embedding_limits(model: str, *, max_tokens: int | None = None) -> EmbeddingLimits:
    """The window of ``model`` (a provider prefix such as ``openai/`` is ignored).

    ``max_tokens`` overrides the registry (for a model it does not know, or a server that was
    started with another limit). Unknown models get :data:`DEFAULT_EMBEDDING_TOKENS`, flagged
    ``known=False``.

    Example::

        >>> get_embedding_limits("text-embedding-3-small").max_tokens
        8191
        >>> get_embedding_limits("my-embedder").known
        False
    """
    name = model.split("/")[-1]
    entry = EMBEDDING_LIMITS.get(name) or EMBEDDING_LIMITS.get(name.split(":")[0])
    if entry is None:
        entry = EmbeddingLimits(
            name,
            max_tokens or DEFAULT_EMBEDDING_TOKENS,
            0,
            "estimate (cl100k_base)",
            exact=False,
            known=max_tokens is not None,
        )
    elif max_tokens is not None and max_tokens != entry.max_tokens:
        entry = EmbeddingLimits(
            entry.model, max_tokens, min(entry.special_tokens, max_tokens - 1), entry.tokenizer, entry.exact
        )
    return entry


@runtime_checkable
class EmbeddingTokenizer(Protocol):
    """The model's own tokenizer, as the fit logic needs it."""

    special_tokens: int

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """The ``(start, end)`` character span in ``text`` of every token (special tokens excluded)."""
        ...

    def offsets_many(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        """:meth:`offsets` of several texts (one batched call where the tokenizer allows)."""
        ...


class WhitespaceTokenizer:
    """A stand-in tokenizer for examples and tests: one token per run of non-space characters."""

    _TOKEN = re.compile(r"\S+")

    def __init__(self, special_tokens: int = 2) -> None:
        self.special_tokens = special_tokens

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in self._TOKEN.finditer(text)]

    def offsets_many(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        return [self.offsets(t) for t in texts]


def _count(tokenizer: EmbeddingTokenizer, text: str) -> int:
    return len(tokenizer.offsets(text))


def window_pieces(
    text: str,
    tokenizer: EmbeddingTokenizer,
    limits: EmbeddingLimits,
    *,
    offsets: Sequence[tuple[int, int]] | None = None,
) -> list[tuple[int, int]]:
    """``text`` cut into consecutive ``(start, end)`` spans that each fit the window.

    Cuts fall on token boundaries; each piece is re-counted with the tokenizer (a word cut in
    two can tokenize differently) and shortened until it fits. Every token of ``text`` lies in
    exactly one piece; only white space between pieces is left out. A text that fits is one
    piece; an empty text is none.

    Example::

        >>> window_pieces("a b c d e", WhitespaceTokenizer(), EmbeddingLimits("toy", 4, 2))
        [(0, 3), (4, 7), (8, 9)]
    """
    offs = list(tokenizer.offsets(text) if offsets is None else offsets)
    budget = limits.content_tokens
    if not offs:
        return []
    if len(offs) <= budget:
        return [(offs[0][0], offs[-1][1])]
    pieces: list[tuple[int, int]] = []
    i = 0
    while i < len(offs):
        j = min(i + budget, len(offs))
        while True:
            start, end = offs[i][0], offs[j - 1][1]
            n = _count(tokenizer, text[start:end])
            if n <= budget or j == i + 1:
                break
            j = max(i + 1, j - max(1, n - budget))
        if n > budget:
            raise ValueError(
                f"a single token of {n} pieces at {start}:{end} does not fit {limits.model}'s window of "
                f"{limits.max_tokens}; this tokenizer cannot cut the text"
            )
        pieces.append((start, end))
        i = j
    return pieces


@dataclass(frozen=True, slots=True)
class TextFit:
    """How one text goes into the embedding model.

    ``pieces`` are the texts given to the model (one when the text fits, none when it is
    empty); ``tokens`` the text's tokens (special tokens excluded); ``tokens_cut`` the tokens the
    model does not read (only with ``oversize="truncate"``).
    """

    pieces: tuple[str, ...]
    weights: tuple[float, ...]
    tokens: int
    over_window: bool
    tokens_cut: int = 0


def fit_text(
    text: str,
    tokenizer: EmbeddingTokenizer,
    limits: EmbeddingLimits,
    *,
    oversize: Oversize = "pool",
    offsets: Sequence[tuple[int, int]] | None = None,
) -> TextFit:
    """The pieces of ``text`` to embed and pool (weights: each piece's share of the tokens).

    Example::

        >>> fit = fit_text("a b c d e", WhitespaceTokenizer(), EmbeddingLimits("toy", 4, 2))
        >>> fit.pieces, fit.weights, fit.over_window
        (('a b', 'c d', 'e'), (0.4, 0.4, 0.2), True)
    """
    if oversize not in OVERSIZE_MODES:
        raise ValueError(f"oversize must be one of {OVERSIZE_MODES}; got {oversize!r}")
    offs = list(tokenizer.offsets(text) if offsets is None else offsets)
    n = len(offs)
    over = n > limits.content_tokens
    if not over or oversize == "truncate":
        cut = max(0, n - limits.content_tokens)
        return TextFit((text,) if text else (), (1.0,) if text else (), n, over, cut)
    spans = window_pieces(text, tokenizer, limits, offsets=offs)
    counts = [sum(1 for a, b in offs if s <= a and b <= e) for s, e in spans]
    total = sum(counts) or 1
    return TextFit(tuple(text[s:e] for s, e in spans), tuple(c / total for c in counts), n, True)


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

    def to_dict(self) -> dict[str, Any]:
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
    sep = _count(tokenizer, SEPARATOR) if context else 0
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
        n = _count(tokenizer, text)
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
