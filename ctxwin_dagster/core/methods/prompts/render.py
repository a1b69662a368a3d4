"""Picking a template and formatting the values put into it.

Plain Python only: no Dagster, RAGAS or LanceDB.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ctxwin_dagster.core.methods.prompts.tables import SUMMARY_BLOCKS, TEMPLATES
from ctxwin_dagster.core.methods.prompts.template import PromptTemplate

__all__ = ["format_chunk_batch", "format_passages", "format_summaries", "get_template", "summary_block"]


def get_template(name: str, language: str | None = "en") -> PromptTemplate:
    """The template ``name`` in ``language``, or its English version when there is none.

    Raises:
        KeyError: no template has that name.

    Example::

        >>> get_template("cc_context", "fr").language
        'en'
    """
    lang = (language or "en").lower()
    found = TEMPLATES.get((name, lang)) or TEMPLATES.get((name, "en"))
    if found is None:
        names = sorted({n for n, _ in TEMPLATES})
        raise KeyError(f"no prompt template named {name!r}; known: {names}")
    return found


def format_passages(passages: Iterable[tuple[str, str]]) -> str:
    """Passages as ``[chunk_id]`` followed by the text, separated by blank lines.

    Example::

        >>> print(format_passages([("a1", "First."), ("b2", "Second.")]))
        [a1]
        First.
        <BLANKLINE>
        [b2]
        Second.
    """
    return "\n\n".join(f"[{cid}]\n{text}" for cid, text in passages)


def format_chunk_batch(chunks: Iterable[tuple[str, str]]) -> str:
    """A numbered batch of chunks for ``swb_batch``: ``<chunk number=".." chunk_id="..">``.

    Example::

        >>> print(format_chunk_batch([("a1", "Text.")]))
        <chunk number="1" chunk_id="a1">
        Text.
        </chunk>
    """
    return "\n\n".join(
        f'<chunk number="{i}" chunk_id="{cid}">\n{text}\n</chunk>' for i, (cid, text) in enumerate(chunks, start=1)
    )


def format_summaries(summaries: Sequence[str]) -> str:
    """Segment summaries for ``summarize_overview``: ``<summary part="i">`` blocks.

    Example::

        >>> print(format_summaries(["A.", "B."]))
        <summary part="1">
        A.
        </summary>
        <BLANKLINE>
        <summary part="2">
        B.
        </summary>
    """
    return "\n\n".join(f'<summary part="{i}">\n{s}\n</summary>' for i, s in enumerate(summaries, start=1))


def summary_block(summary: str | None, language: str | None = "en") -> str:
    """The optional ``summary_block`` of ``window_answer``: empty when there is no summary."""
    if not summary:
        return ""
    lang = language if language in SUMMARY_BLOCKS else "en"
    return SUMMARY_BLOCKS[lang].format(summary=summary)
