"""A document's opening: the first characters, where a document says what it is.

A contract names itself, its parties and its date in its first lines; a filing its company,
form and period; a law its number and title. A question about any of these ("the name of the
contract", "the parties", "the agreement date") rarely scores that opening highest: its words
are names and dates, not the question's. With ``opening_chars`` (:class:`~ctxwin_dagster.core.
retrieval.settings.RetrievalSettings`) every document in a focus context also gives its
opening, so these answers reach the model whatever the ranking did.

Example::

    >>> text = "SERVICES AGREEMENT\\n\\nThis Agreement is made on 1 May 2020 by ACME Inc. and Beta LLC. It has 12 sections."
    >>> text[:opening_end(text, 90)]
    'SERVICES AGREEMENT\\n\\nThis Agreement is made on 1 May 2020 by ACME Inc. and Beta LLC.'
    >>> opening_end(text, 0), opening_end(text, 500) == len(text)
    (0, True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ctxwin_dagster.core.retrieval.around_hits import document_text
from ctxwin_dagster.core.retrieval.enhance import EnhancedContext
from ctxwin_dagster.core.retrieval.window import Window, merge_windows
from ctxwin_dagster.core.text.sentences import split_sentences
from ctxwin_dagster.core.text.splitting import Chunk

__all__ = ["opening_end", "with_openings"]


def opening_end(text: str, chars: int) -> int:
    """Where the opening of ``text`` ends: at most ``chars`` characters, cut after the last
    sentence that ends within them; when none ends in their second half (one long preamble
    sentence), cut at the last white space instead, so the opening is never much shorter than
    asked. 0 when ``chars`` is 0.
    """
    if chars <= 0 or not text:
        return 0
    if len(text) <= chars:
        return len(text)
    # split past the cut, so a sentence the cut runs through is not taken for one that ends
    ends = [e for _, e in split_sentences(text[: chars + 400]) if e <= chars]
    if ends and ends[-1] >= chars // 2:
        return ends[-1]
    space = max(text.rfind(" ", 0, chars + 1), text.rfind("\n", 0, chars + 1))
    return space if space >= chars // 2 else chars


def with_openings(
    ctx: EnhancedContext, chars: int, by_doc: Mapping[str, Sequence[Chunk]], doc_texts: Mapping[str, str] | None
) -> EnhancedContext:
    """``ctx`` with the opening of each of its documents (:func:`~ctxwin_dagster.core.retrieval.
    opening.opening_end`), merged with the windows it overlaps; an opening scores 0.0, so it
    comes after the retrieved windows unless it joins one of them."""
    if chars <= 0 or not ctx.windows:
        return ctx
    openings = []
    texts: dict[str, str] = {}
    for d in dict.fromkeys(w.doc_id for w in ctx.windows):
        text = texts[d] = document_text(d, by_doc.get(d, []), doc_texts)
        end = opening_end(text, chars)
        if end > 0:
            ids = tuple(c.chunk_id for c in sorted(by_doc.get(d, []), key=lambda c: c.chunk_index) if c.start < end)
            openings.append(Window(doc_id=d, start=0, end=end, text=text[:end], score=0.0, chunk_ids=ids))
    return replace(ctx, windows=merge_windows([*ctx.windows, *openings], doc_texts=texts))
