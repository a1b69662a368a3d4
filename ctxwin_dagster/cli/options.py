"""What every ``ctxwin`` subcommand's options share: the help formatter that shows each default,
the subcommands a module adds its commands to, and the one spelling of variants (``t``, ``cc``,
``swb`` or the long names ``t_rag``…)."""

from __future__ import annotations

import argparse
import weakref
from typing import Any, ClassVar

__all__ = ["DefaultsFormatter", "Subcommands", "every_parser", "variant"]


class DefaultsFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's help ends with its default, unless the help already names it (or there is
    none to name: no value, a flag that is off)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if default in (None, False, argparse.SUPPRESS, [], "") or "default" in text.lower():
            return text
        if not action.option_strings and action.nargs not in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else "%(default)s"
        return f"{text} (default: {shown})" if text else f"default: {shown}"


class Subcommands:
    """The subcommands of a parser (argparse's ``add_subparsers``): each is made with the
    :class:`DefaultsFormatter`, and kept in :attr:`parsers`, so the command tree can be walked
    (:meth:`of`) without argparse's private lists.

    Example::

        >>> parser = argparse.ArgumentParser(prog="x")
        >>> sub = Subcommands(parser, dest="command")
        >>> sub.add_parser("go", help="go").formatter_class is DefaultsFormatter
        True
        >>> list(Subcommands.of(parser).parsers)
        ['go']
    """

    _of: ClassVar[weakref.WeakKeyDictionary[argparse.ArgumentParser, Subcommands]] = weakref.WeakKeyDictionary()

    def __init__(self, parser: argparse.ArgumentParser, **kwargs: Any) -> None:
        self._action = parser.add_subparsers(**kwargs)
        self.parsers: dict[str, argparse.ArgumentParser] = {}
        Subcommands._of[parser] = self

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        child = self._action.add_parser(name, **kwargs)
        self.parsers[name] = child
        return child

    @classmethod
    def of(cls, parser: argparse.ArgumentParser) -> Subcommands | None:
        """The subcommands made under ``parser`` (None: it has none)."""
        return cls._of.get(parser)


def every_parser(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser under it, depth first."""
    sub = Subcommands.of(parser)
    return [parser] + [p for child in (sub.parsers.values() if sub else ()) for p in every_parser(child)]


def variant(value: str) -> str:
    """An argparse ``type``: ``t``, ``cc``, ``swb`` or a long name (``t_rag``, ``T-RAG``…) → the variant's name."""
    from ctxwin_dagster.core.defaults import normalize_variant

    try:
        return normalize_variant(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
