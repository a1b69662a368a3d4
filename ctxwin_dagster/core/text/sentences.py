"""The sentence splitter: sentence spans with character offsets, for any text ctxwin reads.

One splitter serves every place that needs sentences: the extractive engine (summaries,
contexts, answers), the extractive window reader of sliding-window QA, the sentence focus of
context enhancement (:func:`~ctxwin_dagster.core.retrieval.enhance.focus_windows`) and the evaluations.

Spans are ``(start, end)`` offsets into the text given (plus ``offset``), stripped of white
space, so ``text[start:end]`` is the sentence. Line breaks that only wrap a sentence (text
extracted from a PDF keeps the page's line wraps) are read through; sentences longer than the
embedding model reads well are split at ``;``/``:`` and then at spaces.

Plain Python only: no Dagster, RAGAS or LanceDB.

Example::

    >>> t = "Article 5\\nAI systems are banned. See Art. 6 for details."
    >>> [t[s:e] for s, e in split_sentences(t)]
    ['Article 5', 'AI systems are banned.', 'See Art. 6 for details.']
"""

from __future__ import annotations

import re

__all__ = ["MAX_SENTENCE_CHARS", "split_sentences"]

_ABBREVIATIONS = frozenset(
    [
        "no",
        "nos",
        "art",
        "arts",
        "e.g",
        "i.e",
        "etc",
        "nr",
        "abs",
        "ca",
        "vgl",
        "bzw",
        "z.b",
        "u.a",
        "d.h",
        "usw",
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "st",
        "cf",
        "para",
        "paras",
        "vol",
        "pp",
        "p",
        "fig",
        "sec",
        "ch",
        "op",
        "inc",
        "ltd",
        "co",
        "corp",
        "jr",
        "sr",
        "vs",
        "approx",
        "dept",
        "gen",
        "gov",
        "lit",
        "ziff",
        "buchst",
    ]
)
_SENT_END = re.compile(r"[.!?][\"'”’)\]]*\s+(?=[\"'“„‘(\[]?[A-ZÄÖÜ0-9])")
_SOFT_BREAK = re.compile(r"[;:]\s+")
#: Sentences longer than this are split (at ``;``/``:``, then at spaces).
MAX_SENTENCE_CHARS = 600
_MIN_PIECE_CHARS = 120


_LIST_MARKER = re.compile(r"\s*(?:\(?[0-9a-zA-Z]{1,5}\)|[0-9]+[.)]|[-•–*])\s")
_WRAP_MIN_CHARS = 40


def _blocks(text: str) -> list[tuple[int, int]]:
    """Spans of logical lines: a line plus the lines that merely continue it.

    Text extracted from PDFs keeps the page's line wraps; a line break is read as a wrap (and
    the lines joined) when the line before is long (≥ 40 chars, so not a heading), does not end
    a sentence or clause (``.!?:;``) and the next line does not start a list item.
    """
    blocks: list[tuple[int, int]] = []
    pos = 0
    cur: list[int] | None = None  # [start, end, length of the last line]
    for line in text.split("\n"):
        start, end = pos, pos + len(line)
        pos = end + 1
        if not line.strip():
            if cur is not None:
                blocks.append((cur[0], cur[1]))
                cur = None
            continue
        prev_line = text[cur[1] - cur[2] : cur[1]].rstrip() if cur is not None else ""
        wraps = (
            cur is not None
            and len(prev_line) >= _WRAP_MIN_CHARS
            and not prev_line.endswith((".", "!", "?", ":", ";"))
            and not _LIST_MARKER.match(line)
        )
        if wraps and cur is not None:
            cur[1], cur[2] = end, len(line)
        else:
            if cur is not None:
                blocks.append((cur[0], cur[1]))
            cur = [start, end, len(line)]
    if cur is not None:
        blocks.append((cur[0], cur[1]))
    return blocks


def split_sentences(text: str, *, offset: int = 0, max_chars: int = MAX_SENTENCE_CHARS) -> list[tuple[int, int]]:
    """Sentence spans ``(start, end)`` of ``text`` (plus ``offset``), stripped of white space.

    Lines are split at sentence ends (``.``/``!``/``?`` followed by a capital, a digit or an
    opening bracket, not after a common abbreviation such as "No." or "Art."); line breaks
    that only wrap a sentence (as in text extracted from a PDF) are read through; sentences
    longer than ``max_chars`` are split at ``;``/``:`` and then at spaces, so each stays within
    the embedding model's input length.

    Example::

        >>> t = "Article 5\\nAI systems are banned. See Art. 6 for details."
        >>> [t[s:e] for s, e in split_sentences(t)]
        ['Article 5', 'AI systems are banned.', 'See Art. 6 for details.']
        >>> t = "A sentence wrapped by the PDF page at the end of\\nthe line goes on here. Next one."
        >>> [t[s:e] for s, e in split_sentences(t)]
        ['A sentence wrapped by the PDF page at the end of\\nthe line goes on here.', 'Next one.']
    """
    spans: list[tuple[int, int]] = []
    for line_start, line_end in _blocks(text):
        line = text[line_start:line_end]
        cuts = [0]
        for m in _SENT_END.finditer(line):
            word_start = max(line.rfind(" ", 0, m.start()), line.rfind("\n", 0, m.start())) + 1
            word = line[word_start : m.start()].lstrip("(\"'“„‘[").lower()
            if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                continue
            if word_start == 0 and word.isdigit():  # "1. The following …": a numbered paragraph
                continue
            cuts.append(m.end())
        cuts.append(len(line))
        for a, b in zip(cuts, cuts[1:], strict=False):
            for s, e in _limit_length(line, a, b, max_chars):
                seg = line[s:e]
                lead = len(seg) - len(seg.lstrip())
                trail = len(seg) - len(seg.rstrip())
                if e - trail > s + lead:
                    spans.append((offset + line_start + s + lead, offset + line_start + e - trail))
    return spans


def _limit_length(line: str, a: int, b: int, max_chars: int) -> list[tuple[int, int]]:
    """Split ``line[a:b]`` into pieces of at most ``max_chars`` at ``;``/``:`` then spaces."""
    if b - a <= max_chars:
        return [(a, b)]
    out: list[tuple[int, int]] = []
    start = a
    while b - start > max_chars:
        window_end = start + max_chars
        cut = -1
        for m in _SOFT_BREAK.finditer(line, start + _MIN_PIECE_CHARS, window_end):
            cut = m.end()
        if cut == -1:
            sp = max(
                line.rfind(" ", start + _MIN_PIECE_CHARS, window_end),
                line.rfind("\n", start + _MIN_PIECE_CHARS, window_end),
            )
            cut = sp + 1 if sp != -1 else window_end
        out.append((start, cut))
        start = cut
    out.append((start, b))
    return out
