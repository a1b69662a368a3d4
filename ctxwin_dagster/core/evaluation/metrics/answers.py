"""SQuAD's answer metrics: normalization, exact match and token F1 against reference answers.

Plain Python: no dagster, ragas or lancedb.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

__all__ = ["answer_f1", "exact_match", "normalize_answer", "reference_answers", "strip_citations"]

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


#: A citation marker an answer carries: ``[1]``, ``[1, 2]``, a chunk id (8 to 64 hex digits) or a
#: sliding window ``[W3]``, alone or several in one bracket. Other brackets ("[sic]") are words.
_MARKER = re.compile(r"\s*\[(?:\d{1,4}|[0-9a-f]{8,64}|W\d{1,5})(?:\s*[,;]\s*(?:\d{1,4}|[0-9a-f]{8,64}|W\d{1,5}))*\]")


def strip_citations(text: str) -> str:
    """The answer without its citation markers, which are not words of the answer.

    Example::

        >>> strip_citations("Rollo led them [1]. He was Norse [1, 2] [sic].")
        'Rollo led them. He was Norse [sic].'
    """
    return _MARKER.sub("", str(text or ""))


def normalize_answer(text: str) -> str:
    """SQuAD's normalization: lower case, no punctuation, no English articles, single spaces.

    Example::

        >>> normalize_answer("The  Eiffel-Tower!")
        'eiffeltower'
    """
    text = str(text or "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def reference_answers(reference: object) -> list[str]:
    """The reference answers as a list: None gives ``[]``, a string ``[it]``, a sequence its items as strings.

    Example::

        >>> reference_answers("Paris"), reference_answers(None)
        (['Paris'], [])
    """
    if reference is None:
        return []
    if isinstance(reference, str):
        return [reference]
    if not isinstance(reference, Iterable):
        raise TypeError(f"a reference answer is a string or a list of strings; got {type(reference).__name__}")
    return [str(r) for r in reference]


def exact_match(prediction: str, reference: str | Sequence[str]) -> float:
    """1.0 when the normalized prediction equals a normalized reference (best of several).

    Example::

        >>> exact_match("the Paris", ["Paris", "City of Paris"])
        1.0
    """
    refs = reference_answers(reference)
    if not refs:
        raise ValueError("exact_match needs at least one reference answer")
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(r) for r in refs))


def answer_f1(prediction: str, reference: str | Sequence[str]) -> float:
    """SQuAD token F1 between a prediction and a reference (the best over several references).

    Two empty answers score 1.0; an empty one against a non-empty one scores 0.0.

    Example::

        >>> round(answer_f1("located in northern France", "France"), 3)
        0.4
    """
    refs = reference_answers(reference)
    if not refs:
        raise ValueError("answer_f1 needs at least one reference answer")
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for ref in refs:
        ref_tokens = normalize_answer(ref).split()
        if not pred_tokens or not ref_tokens:
            best = max(best, float(pred_tokens == ref_tokens))
            continue
        common = Counter(pred_tokens) & Counter(ref_tokens)
        same = sum(common.values())
        if same == 0:
            continue
        precision = same / len(pred_tokens)
        recall = same / len(ref_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best
