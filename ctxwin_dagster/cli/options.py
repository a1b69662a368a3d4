"""What every ``ctxwin`` subcommand's options share: the help formatter that shows each default,
and the one spelling of variants (``t``, ``cc``, ``swb`` or the long names ``t_rag``…)."""

from __future__ import annotations

import argparse

__all__ = ["DefaultsFormatter", "variant"]


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


def variant(value: str) -> str:
    """An argparse ``type``: ``t``, ``cc``, ``swb`` or a long name (``t_rag``, ``T-RAG``…) → the variant's name."""
    from ctxwin_dagster.core.defaults import normalize_variant

    try:
        return normalize_variant(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
