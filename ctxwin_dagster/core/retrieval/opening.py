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

from ctxwin_dagster.core.text.sentences import split_sentences

__all__ = ["opening_end"]


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
