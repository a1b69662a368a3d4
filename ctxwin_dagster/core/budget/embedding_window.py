"""The embedding model's window: what fits, and a text cut into pieces that each fit.

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
* :func:`fit_text` — the pieces of a text to embed and pool, or (``oversize="truncate"``) the
  text as it is with the tokens the model cuts counted.

What an index row (a chunk and its context) embeds is planned in
:mod:`ctxwin_dagster.core.budget.embedding_rows`.

Example::

    >>> fit_text("a b c d e", WhitespaceTokenizer(), EmbeddingLimits("toy", max_tokens=4, special_tokens=2)).pieces
    ('a b', 'c d', 'e')
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

__all__ = [
    "EMBEDDING_LIMITS",
    "OVERSIZE_MODES",
    "EmbeddingLimits",
    "EmbeddingTokenizer",
    "TextFit",
    "WhitespaceTokenizer",
    "fit_text",
    "get_embedding_limits",
    "token_count",
    "window_pieces",
]

Oversize = Literal["pool", "truncate"]
OVERSIZE_MODES: tuple[str, ...] = ("pool", "truncate")


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


def token_count(tokenizer: EmbeddingTokenizer, text: str) -> int:
    """Tokens of ``text`` (special tokens excluded)."""
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
            n = token_count(tokenizer, text[start:end])
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
