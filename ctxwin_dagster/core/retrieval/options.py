"""The retrieval options a user sets: one table for ``ctxwin ask``'s flags, the ask server's
request fields and the evaluation resource's fields, so none of them translates by hand.

Each :class:`RetrievalOption` names its :class:`~ctxwin_dagster.core.retrieval.settings.RetrievalSettings`
field, the option's name where users give it (``ctxwin ask --neighbors``, ``"neighbors"`` in a
request to the ask server, ``num_neighbors`` in the evaluation's config), its type, its least
value and its help. :func:`settings_from` turns the options given into settings: the named
setting (``ask`` by default) changed by them, through :meth:`RetrievalSettings.named`.

Plain Python, light to import (``ctxwin ask`` reads this table before it knows the command).

Example::

    >>> settings_from({"neighbors": 2, "k": 6, "route_to": 0}).describe()
    "top-6 chunks, each with ±2 neighbouring chunks, merged (changed from 'ask')"
    >>> [o.flag for o in RETRIEVAL_OPTIONS][:3]
    ['--focus-chars', '--neighbors', '--window-chars']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ctxwin_dagster.core.retrieval.settings import RETRIEVAL_PRESETS, RetrievalSettings

__all__ = ["NO_ENHANCE", "RETRIEVAL_NAMES", "RETRIEVAL_OPTIONS", "RetrievalOption", "option_of", "settings_from"]

#: The named retrieval settings, in order.
RETRIEVAL_NAMES: tuple[str, ...] = tuple(sorted(RETRIEVAL_PRESETS))

#: The option that turns enhancement off (``--no-enhance``; the evaluation's ``enhance_mode="none"``).
NO_ENHANCE = "no_enhance"


@dataclass(frozen=True, slots=True)
class RetrievalOption:
    """One retrieval option.

    Attributes:
        field: the :class:`RetrievalSettings` field it sets.
        name: its name in ``ctxwin ask``'s options and the ask server's requests (the flag is
            ``--`` and the name with dashes).
        kind: ``int``, ``float`` or ``bool`` (a bool flag has its ``--no-`` form).
        minimum: the least value (None for a bool).
        help: what it does, with its default.
        exclusive: an option of one enhancement mode: ``ctxwin ask`` takes one of these at most.
    """

    field: str
    name: str
    kind: type
    minimum: float | None
    help: str
    exclusive: bool = False

    @property
    def flag(self) -> str:
        """The command-line flag, e.g. ``--focus-chars``."""
        return "--" + self.name.replace("_", "-")


#: Every retrieval option, in the order ``ctxwin ask --help`` lists them.
RETRIEVAL_OPTIONS: tuple[RetrievalOption, ...] = (
    RetrievalOption(
        "focus_chars",
        "focus_chars",
        int,
        1,
        "sentence focus (the default): windows around the best sentences of the hits, at most N characters in all "
        "(default 8000)",
        exclusive=True,
    ),
    RetrievalOption("num_neighbors", "neighbors", int, 0, "add N chunks on each side of every hit", exclusive=True),
    RetrievalOption(
        "context_window_size",
        "window_chars",
        int,
        1,
        "grow every hit with adjacent chunks up to N characters",
        exclusive=True,
    ),
    RetrievalOption("k", "k", int, 1, "chunks to retrieve (default 24 for sentence focus, else 4)"),
    RetrievalOption(
        "opening_chars",
        "opening_chars",
        int,
        0,
        "sentence focus: also give each document's first N characters, where it names itself, its parties "
        "and its date (default 500; 0: none)",
    ),
    RetrievalOption(
        "hybrid",
        "hybrid",
        bool,
        None,
        "fuse vector search with full-text search (default: on for sentence focus, off otherwise)",
    ),
    RetrievalOption(
        "route_to",
        "route_to",
        int,
        0,
        "a question asked of every document (no --doc) that names a year or quarter is searched in the N documents it most likely asks "
        "about, when that period dates some documents and not others, and one pointing at 'this agreement' (or "
        "contract, lease, license, regulation, directive) in the documents of that kind (default 1; 0 searches "
        "every document)",
    ),
    RetrievalOption(
        "question_parts",
        "question_parts",
        bool,
        None,
        "sentence focus: score sentences by the question's meaningful parts too (quoted names, 'Label: text' "
        "fields) (default: on)",
    ),
    RetrievalOption(
        "lexical_weight",
        "lexical_weight",
        float,
        0,
        "sentence focus: the weight of a sentence's BM25 score (default 0.2; 0: off)",
    ),
    RetrievalOption(
        "score_drop",
        "score_drop",
        float,
        0,
        "sentence focus: add windows while their score is within this of the best (default 0.23)",
    ),
    RetrievalOption(
        "structure",
        "structure",
        bool,
        None,
        "sentence focus: windows cover their paragraph or clause first (default: off)",
    ),
    RetrievalOption(
        "statements",
        "statements",
        bool,
        None,
        "sentence focus: a question naming a financial statement gets the chunks holding its title (default: on)",
    ),
)


def option_of(field: str) -> RetrievalOption:
    """The option that sets the :class:`RetrievalSettings` field ``field``."""
    for option in RETRIEVAL_OPTIONS:
        if option.field == field:
            return option
    raise KeyError(f"no retrieval option sets {field!r}; the options set {[o.field for o in RETRIEVAL_OPTIONS]}")


def settings_from(
    options: Mapping[str, object],
    *,
    retrieval: str | None = None,
    by_field: bool = False,
    enhance_mode: str | None = None,
) -> RetrievalSettings:
    """The named setting ``retrieval`` (default ``ask``) changed by the options given (by
    :attr:`RetrievalOption.name`, or by settings field with ``by_field``; None or missing:
    unchanged). ``no_enhance`` turns enhancement off; ``enhance_mode`` picks another mode.

    Raises:
        ValueError: options that contradict each other or the named setting's mode, or a value
            out of range.
    """
    changes: dict[str, object] = {o.field: options.get(o.field if by_field else o.name) for o in RETRIEVAL_OPTIONS}
    if options.get(NO_ENHANCE):
        changes["enhance_mode"] = "none"
    elif enhance_mode:
        changes["enhance_mode"] = enhance_mode
    return RetrievalSettings.named(retrieval or "ask", **changes)
