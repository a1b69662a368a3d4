"""Checking and naming the arguments the core's functions are given.

:func:`require_int` and :func:`check_count` raise the errors a size, a count or an overlap gets
when it is not a whole number in range, the message naming the fix; :func:`callable_name` is how
a function given as an argument is named in a ``repr`` or a report (None for a callable object
without a name).

Example::

    >>> check_count("num_neighbors", 2, minimum=0, fix="pass 0 for the hit alone")
    2
    >>> check_count("chunk_size", 0, minimum=1, fix="pass chunk_size >= 1")
    Traceback (most recent call last):
    ...
    ValueError: chunk_size must be positive (got 0); pass chunk_size >= 1
    >>> callable_name(len), callable_name(object())
    ('len', None)
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Named", "callable_name", "check_count", "require_int"]


@runtime_checkable
class Named(Protocol):
    """Anything with a ``__name__``: a function, builtin, method or class."""

    __name__: str


def require_int(name: str, value: object, *, show_type: bool = False) -> int:
    """``value`` when it is an int (a bool is not), else a :class:`TypeError` naming ``name``
    (and the value's type with ``show_type``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        kind = f" ({type(value).__name__})" if show_type else ""
        raise TypeError(f"{name} must be an int; got {value!r}{kind}")
    return value


def check_count(name: str, value: object, *, minimum: int, fix: str, show_type: bool = False) -> int:
    """``value`` when it is an int of at least ``minimum`` (0 or 1); else a :class:`TypeError`
    (see :func:`require_int`) or a :class:`ValueError` that ends with ``fix``."""
    number = require_int(name, value, show_type=show_type)
    if number < minimum:
        rule = "must be positive" if minimum == 1 else "must not be negative"
        raise ValueError(f"{name} {rule} (got {number}); {fix}")
    return number


def callable_name(fn: object) -> str | None:
    """The ``__name__`` of a function, builtin, method or class; None for a callable without one
    (an object with ``__call__``, a ``functools.partial``)."""
    return fn.__name__ if isinstance(fn, Named) else None
