"""Sections of a text: the headings in it and the heading path in force at an offset.

:func:`detect_sections` finds Markdown headings (outside fenced code) and legal headings
(chapters, sections, articles, annexes; English and German) on lines of their own;
:func:`section_at` gives the heading path at a character offset, so a chunk can say which part of
the document it comes from (``"CHAPTER II > Article 5"``).

Example::

    >>> text = "# Guide\\n\\nIntro.\\n\\n## Setup\\n\\nSteps."
    >>> sections = detect_sections(text)
    >>> section_at(sections, text.index("Steps"))
    'Guide > Setup'
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence

__all__ = ["SECTION_JOIN", "detect_sections", "section_at"]

#: Joins the levels of a section path.
SECTION_JOIN = " > "

# Legal headings on a line of their own. Level: chapter/annex 1, section 2, article 3.
_LEGAL_KEYWORDS: dict[str, int] = {
    "chapter": 1,
    "kapitel": 1,
    "annex": 1,
    "anhang": 1,
    "section": 2,
    "abschnitt": 2,
    "article": 3,
    "artikel": 3,
}
_LEGAL_KW_ALT = "|".join(alt for kw in _LEGAL_KEYWORDS for alt in (kw.upper(), kw.capitalize()))
# One regex finds every candidate line: fences (to skip code), Markdown headings and legal
# headings. Matching only candidates keeps detection fast on long texts.
_HEADING_RE = re.compile(
    r"^(?:"
    r"(?P<fence>[ ]{0,3}(?:```|~~~))[^\n]*"
    r"|[ ]{0,3}(?P<hashes>\#{1,6})[ \t]+(?P<md>[^\n]*?)(?:[ \t]+\#+)?[ \t]*"
    rf"|[ \t]*(?P<legal>(?P<kw>{_LEGAL_KW_ALT})[ \t]+(?:[0-9]+[a-z]?|[IVXLCDM]+))[ \t]*"
    r")$",
    re.MULTILINE,
)


def detect_sections(text: str) -> list[tuple[int, str]]:
    """Find headings and return ``(offset, path)`` pairs in document order.

    ``offset`` is where the heading's line starts; ``path`` is the heading path in force from
    there on, levels joined by ``" > "``. Recognised on a line of their own:

    * Markdown headings ``#`` … ``######`` (outside fenced code blocks); level = number of ``#``;
    * legal headings, English and German, upper or title case: ``CHAPTER III`` /
      ``KAPITEL III`` and ``ANNEX III`` / ``ANHANG III`` (level 1), ``SECTION 2`` /
      ``ABSCHNITT 2`` (level 2), ``Article 5`` / ``Artikel 5`` (level 3).

    A heading replaces the heading of its level and everything below it.

    Example::

        >>> detect_sections("# Guide\\n\\ntext\\n\\n## Setup\\n\\nmore")
        [(0, 'Guide'), (15, 'Guide > Setup')]
        >>> detect_sections("CHAPTER II\\nPROHIBITED\\nArticle 5\\nTitle\\n1. Text")
        [(0, 'CHAPTER II'), (22, 'CHAPTER II > Article 5')]
        >>> detect_sections("no headings here")
        []
    """
    found: list[tuple[int, str]] = []
    stack: list[tuple[int, str]] = []  # (level, title)
    fence: str | None = None
    for m in _HEADING_RE.finditer(text):
        marker = m.group("fence")
        if marker is not None:
            marker = marker.strip()
            if fence is None:
                fence = marker
            elif marker == fence:
                fence = None
            continue
        if fence is not None:
            continue
        if m.group("hashes") is not None:
            title = m.group("md").strip()
            if not title:
                continue
            level = len(m.group("hashes"))
        else:
            title = m.group("legal")
            level = _LEGAL_KEYWORDS[m.group("kw").lower()]
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        found.append((m.start(), SECTION_JOIN.join(t for _, t in stack)))
    return found


def section_at(sections: Sequence[tuple[int, str]], offset: int) -> str | None:
    """The path of the last heading starting at or before ``offset`` (None before the first).

    Example::

        >>> section_at([(0, "A"), (10, "A > B")], 12)
        'A > B'
        >>> section_at([(5, "A")], 2) is None
        True
    """
    i = bisect_right(sections, offset, key=lambda s: s[0])
    return sections[i - 1][1] if i else None
