"""The values of JSON records (answer records, score rows, QA items, review keys), read with
their types checked.

A record read from a file is a ``Mapping[str, object]``: these helpers turn its values into the
numbers, lists and objects the evaluation works with, failing as Python's own conversions do
(``int("x")`` raises ValueError, ``int(None)`` TypeError) or giving an empty value where a
missing list or object means "none".

Example::

    >>> as_int("12"), as_float(3), items({"spans": [[1, 2]]}, "spans"), pair([1, 2])
    (12, 3.0, [[1, 2]], (1, 2))
    >>> items({"spans": None}, "spans"), mappings([{"a": 1}, "x"]), text_of({"a": None}, "a")
    ([], [{'a': 1}], '')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import SupportsFloat, SupportsIndex, SupportsInt

__all__ = ["as_float", "as_int", "items", "mappings", "pair", "sequence", "text_of"]


def as_int(value: object) -> int:
    """``int(value)``, for any value (a TypeError for what ``int`` does not take)."""
    if isinstance(value, (str, bytes, bytearray, SupportsInt, SupportsIndex)):
        return int(value)
    raise TypeError(
        f"int() argument must be a string, a bytes-like object or a real number, not '{type(value).__name__}'"
    )


def as_float(value: object) -> float:
    """``float(value)``, for any value (a TypeError for what ``float`` does not take)."""
    if isinstance(value, (str, bytes, bytearray, SupportsFloat, SupportsIndex)):
        return float(value)
    raise TypeError(f"float() argument must be a string or a real number, not '{type(value).__name__}'")


def sequence(value: object) -> Sequence[object]:
    """``value`` when it is a list (or another sequence that is not text), else empty."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        return value
    return ()


def items(record: Mapping[str, object], key: str) -> list[object]:
    """The items of the list under ``key``; empty when the key is missing, None or not a list."""
    return list(sequence(record.get(key)))


def mappings(value: object) -> list[Mapping[str, object]]:
    """The JSON objects among the items of the list ``value`` (others left out)."""
    return [v for v in sequence(value) if isinstance(v, Mapping)]


def pair(value: object) -> tuple[object, object]:
    """A value of two items (``[start, end]``) as a tuple, failing as unpacking it would."""
    if not isinstance(value, Iterable):
        raise TypeError(f"cannot unpack non-iterable {type(value).__name__} object")
    first, second = value
    return first, second


def text_of(record: Mapping[str, object], key: str) -> str:
    """``str`` of the value under ``key``; "" when it is missing or empty."""
    return str(record.get(key) or "")
