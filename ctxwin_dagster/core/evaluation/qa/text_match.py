"""How question generation matches text: the words of a question that say something (function
words left out), text compared with its white space squashed, and rapidfuzz's fuzzy alignment of
a quote inside a passage.

Example::

    >>> squash(" a \\n b "), sorted(w for w in WORD.findall("What is the Act?") if w.lower() not in FUNCTION_WORDS)
    ('a b', ['Act'])
"""

from __future__ import annotations

import re

__all__ = ["FUNCTION_WORDS", "FUZZY_CUTOFF", "WORD", "fuzzy_alignment", "squash"]

#: A word: letters and digits.
WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Words that say nothing of a question's subject (English; a German document's questions keep more words).
_FUNCTION_WORDS_TEXT = """
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had
has have having he her here hers him his how i if in into is it its itself just may me might
more most must my no nor not now of off on once only or other our out over own same shall she
should so some such than that the their them then there these they this those through to too
under until up upon very was we were what when where which while who whom whose why will with
would you your yours according document passage text state states stated say says said give
given name named mention mentioned describe described
"""
#: The lower-cased words left out of a question's content words.
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS_TEXT.split())

#: A quote or an answer found by fuzzy matching must score at least this (rapidfuzz, 0–100).
FUZZY_CUTOFF = 88.0


def squash(text: str) -> str:
    """``text`` with every run of white space made one space, none at the ends."""
    return " ".join(text.split())


def fuzzy_alignment(needle: str, haystack: str) -> tuple[float, int, int] | None:
    """``(score, start, end)`` of the part of ``haystack`` that best matches ``needle``
    (rapidfuzz's partial ratio, at least :data:`FUZZY_CUTOFF`), or None."""
    from rapidfuzz import fuzz

    if not needle.strip() or not haystack.strip():
        return None
    found = fuzz.partial_ratio_alignment(needle, haystack, score_cutoff=FUZZY_CUTOFF)
    if found is None:
        return None
    return found.score, found.dest_start, found.dest_end
