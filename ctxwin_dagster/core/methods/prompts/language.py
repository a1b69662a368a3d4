"""Which language a text is in, to pick the prompts' language (German or English).

Plain Python only: no Dagster, RAGAS or LanceDB.
"""

from __future__ import annotations

import re

__all__ = ["detect_language"]

_WORD_RE = re.compile(r"[^\W\d_]+")
_STOP_EN = frozenset(
    [
        "the",
        "and",
        "of",
        "to",
        "in",
        "is",
        "that",
        "for",
        "with",
        "as",
        "on",
        "be",
        "by",
        "this",
        "are",
        "it",
        "or",
        "shall",
        "from",
        "which",
        "an",
        "at",
        "not",
        "have",
        "has",
        "was",
        "were",
        "such",
        "its",
        "their",
        "any",
        "where",
        "these",
        "those",
    ]
)
_STOP_DE = frozenset(
    [
        "der",
        "die",
        "das",
        "und",
        "ist",
        "nicht",
        "mit",
        "von",
        "zu",
        "den",
        "dem",
        "des",
        "für",
        "eine",
        "einer",
        "eines",
        "ein",
        "auf",
        "im",
        "sich",
        "werden",
        "wird",
        "sind",
        "oder",
        "auch",
        "als",
        "bei",
        "nach",
        "über",
        "durch",
        "diese",
        "dieser",
        "dieses",
        "gemäß",
        "sowie",
    ]
)


def detect_language(text: str, *, sample_chars: int = 20_000) -> str:
    """``"de"`` when German stop words outnumber English ones in a sample of ``text``, else ``"en"``.

    The sample is up to ``sample_chars`` characters from the start and the middle of the text.

    Example::

        >>> detect_language("Die Kommission erlässt delegierte Rechtsakte gemäß Artikel 97.")
        'de'
        >>> detect_language("The Commission shall adopt delegated acts in accordance with Article 97.")
        'en'
    """
    if len(text) > sample_chars:
        half = sample_chars // 2
        mid = len(text) // 2
        text = text[:half] + " " + text[mid : mid + half]
    en = de = 0
    for word in _WORD_RE.findall(text.lower()):
        if word in _STOP_EN:
            en += 1
        elif word in _STOP_DE:
            de += 1
    return "de" if de > en else "en"
