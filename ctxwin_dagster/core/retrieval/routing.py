"""Routing a question asked of a whole folder to the documents it most likely asks about.

A folder often holds near copies: one company's filings of several years, a contract and its
amendments. Their tables and clauses read alike, so the best chunks of a folder-wide search come
from the wrong year as often as from the right one. What tells them apart is said once, near the
start: the document's name and its opening ("For the fiscal year ended December 31, 2018").

:class:`DocumentRouter` ranks the folder's documents for a question in two steps:

* **period** first — when the question names years or quarters and documents are dated: the
  documents of the latest year it names first, then those of any year it names (a quarter named
  prefers quarterly reports; none named prefers the others). A document's dates are the years in
  its name and in "fiscal year / quarterly period / year ended <date>" in its opening. A document
  of a worse-fitting period never comes before one of a better-fitting period: the period is
  what the question says, while a chunk of last year's report reads like this year's.
* then, among the documents that fit alike, reciprocal rank fusion of two rankings, weighed alike:

  * **best chunk** — each document's most similar chunk to the question's vector;
  * **card** — BM25 over each document's *card*: its name and its first :data:`CARD_CHARS`
    characters, with names and years split into words (``3M_2018_10K`` -> ``3M 2018 10K``,
    ``FY2018`` -> ``FY 2018``).

**Kind** — a question that points at a document by its kind ("this agreement", "this
contract", "this regulation") asks about a document of that kind: a contract's name or first
:data:`KIND_CHARS` characters call it an agreement, a contract, a lease or a license; a law's
a regulation or a directive (:data:`KINDS`). In a folder where some documents are of that kind
and others are not, only those of that kind are ranked and searched.

**Routing narrows only where the dates or the kind tell documents apart**: when the question
names a year or quarter, some document is dated by it and the others are not, ``ctxwin ask``
without ``--doc`` searches only the first :attr:`RetrievalSettings.route_to
<ctxwin_dagster.core.retrieval.settings.RetrievalSettings.route_to>` documents (of the kind
asked about, if one is); when only the kind tells them apart, it searches every document of
that kind; otherwise (:meth:`DocumentRouter.route` gives None) it searches the whole folder. Measured
(evaluations/financebench_retrieval.py, evaluations/squad_folder.py): on FinanceBench dev's
tuning companies the question's own filing is first for 95 % of the routed questions with the
period ranked first (87 % with the period as a third equal vote in the fusion, 54 % without it);
on SQuAD's 16 undated articles, routing by the best chunk and the cards alone lost 9 to 20 points
of span hit against searching every article, so it is not done there. In folders of one CUAD
contract beside the 16 SQuAD articles and the EU AI Act, the contract's questions ("… this
contract …") got 73.7 % span hit over the whole folder and 80.2 % routed by kind, as searching
the contract alone (the 40 tuning contracts; the report contracts are in the report).

Example::

    >>> router = DocumentRouter([
    ...     DocumentCard.of("ACME_2018_10K", "ACME Corp. Annual report for the fiscal year ended December 31, 2018"),
    ...     DocumentCard.of("ACME_2022_10K", "ACME Corp. Annual report for the fiscal year ended December 31, 2022"),
    ...     DocumentCard.of("Globex_2022_10K", "Globex Inc. Annual report for the fiscal year ended June 30, 2022"),
    ...     DocumentCard.of("eu_ai_act", "REGULATION (EU) 2024/1689 OF THE EUROPEAN PARLIAMENT"),
    ...     DocumentCard.of("reseller", "MARKETING AND RESELLER AGREEMENT (the Agreement) THIS AGREEMENT is made"),
    ...     DocumentCard.of("Normans", "The Normans were the people who gave their name to Normandy"),
    ... ])
    >>> router.route("What was ACME's FY2022 capital expenditure?", {"ACME_2018_10K": 0.61, "ACME_2022_10K": 0.58}, 1)
    ['ACME_2022_10K']
    >>> print(router.route("What was ACME's capital expenditure?", {"ACME_2018_10K": 0.61}, 1))  # no period named
    None
    >>> question_periods("Was there any drop in cash between FY 2023 and Q2 of FY2024?")
    Periods(years=(2023, 2024), quarters=frozenset({2}))
    >>> question_kind("Which country's law governs this agreement?")
    'contract'
    >>> router.route("Which country's law governs this agreement?", {"eu_ai_act": 0.6, "reseller": 0.5}, 1)
    ['reseller']
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ctxwin_dagster.core.retrieval.lexical import RRF_K, TextBM25

__all__ = [
    "CARD_CHARS",
    "ROUTE_DEPTH",
    "DocumentCard",
    "DocumentRouter",
    "KINDS",
    "KIND_CHARS",
    "Periods",
    "card_words",
    "question_kind",
    "question_periods",
    "routing_note",
]

#: Characters of a document's opening read into its card (a filing's cover page).
CARD_CHARS = 3000
#: Chunks of a folder-wide vector search whose best score per document ranks the documents
#: (a document with no chunk among them ranks last on that signal).
ROUTE_DEPTH = 200

#: The kinds of document a question can point at ("this agreement"), each with the words that
#: name it in a question and in a document's name or opening.
KINDS: dict[str, tuple[str, ...]] = {
    "contract": ("agreement", "contract", "amendment", "lease", "license", "licence"),
    "regulation": ("regulation", "directive"),
}
#: Characters of a document's opening where it names its kind (a contract's title and preamble).
KIND_CHARS = 1000
_KIND_WORD = {w: kind for kind, words in KINDS.items() for w in words}
_QUESTION_KIND = re.compile(rf"\bthis\s+({'|'.join(_KIND_WORD)})s?\b", re.IGNORECASE)
_KIND_IN_TEXT = {
    kind: re.compile(rf"(?<![A-Za-z])(?:{'|'.join(words)})s?(?![A-Za-z])", re.IGNORECASE)
    for kind, words in KINDS.items()
}

_LETTER_DIGIT = re.compile(r"(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z]{2})")
_YEAR = r"(?:19|20)\d\d"
_QUESTION_YEAR = re.compile(rf"(?<![\d.,$])({_YEAR})(?![\d%])")
_QUARTER_YEAR = re.compile(rf"\bQ[1-4]\s?'?({_YEAR})(?!\d)")  # Q22023, Q2'2023
_SHORT_FY = re.compile(r"\bFY\s?'?(\d\d)\b", re.IGNORECASE)
_QUARTER = re.compile(r"\bQ([1-4])(?:\b|(?=\s?'?(?:19|20)\d\d))")
_QUARTER_WORD = re.compile(r"\b(first|second|third|fourth)\s+(?:fiscal\s+)?quarter", re.IGNORECASE)
_ORDINAL = {"first": 1, "second": 2, "third": 3, "fourth": 4}
_ENDED = re.compile(
    rf"(?:fiscal year|year|quarterly period|quarter|period)\s+ended\s+[A-Za-z]+\.?\s+\d{{1,2}},?\s+({_YEAR})",
    re.IGNORECASE,
)
_QUARTERLY_OPENING = re.compile(r"quarterly period ended|quarter ended", re.IGNORECASE)
_QUARTERLY_NAME = re.compile(r"(?<![A-Za-z])(?:Q[1-4]|10-?Q)(?![A-Za-z])", re.IGNORECASE)


def card_words(text: str) -> str:
    """Names and years as words: ``3M_2018_10K`` -> ``3M 2018 10K``, ``FY2018`` -> ``FY 2018``."""
    return _LETTER_DIGIT.sub(" ", text.replace("_", " "))


class Periods(NamedTuple):
    """The years (in the order named, repeats kept once) and quarters a question names."""

    years: tuple[int, ...]
    quarters: frozenset[int]


def question_periods(question: str) -> Periods:
    """The years and quarters ``question`` names: ``2018``, ``FY2018``, ``FY 2018``, ``FY20``,
    ``Q2 of FY2024``, ``Q2'2023``, ``Q22023``, ``second quarter``. Amounts (``$2019``, ``2,019``)
    and percentages are not years."""
    years = [int(m.group(1)) for m in _QUESTION_YEAR.finditer(question)]
    years += [int(m.group(1)) for m in _QUARTER_YEAR.finditer(question)]
    years += [2000 + int(m.group(1)) for m in _SHORT_FY.finditer(question)]
    quarters = {int(m.group(1)) for m in _QUARTER.finditer(question)}
    quarters |= {_ORDINAL[m.group(1).lower()] for m in _QUARTER_WORD.finditer(question)}
    return Periods(tuple(dict.fromkeys(years)), frozenset(quarters))


def question_kind(question: str) -> str | None:
    """The kind of document ``question`` points at with "this <kind>" ("this agreement" ->
    ``"contract"``; see :data:`KINDS`), or None."""
    m = _QUESTION_KIND.search(question)
    return _KIND_WORD[m.group(1).lower()] if m else None


def routing_note(question: str, routed: Sequence[str]) -> str:
    """What ``ctxwin ask`` tells the user when :meth:`DocumentRouter.route` narrowed its search
    to ``routed``: which documents, and what in the question chose them.

    >>> note = routing_note("What does this agreement say about Q2 2023?", ["reseller"])
    >>> note.startswith("searched reseller only: the document most likely asked about, of those dated by")
    True
    >>> note.endswith('of the kind it points at ("this agreement") (--route-to 0 searches every document)')
    True
    """
    why = []
    if any(question_periods(question)):
        why.append("dated by the year or quarter the question names")
    if (m := _QUESTION_KIND.search(question)) is not None:
        why.append(f'of the kind it points at ("{m.group(0)}")')
    several = len(routed) > 1
    return (
        f"searched {', '.join(routed)} only: the document{'s' * several} most likely asked about, of those "
        f"{' and '.join(why)} (--route-to 0 searches every document)"
    )


@dataclass(frozen=True, slots=True)
class DocumentCard:
    """What identifies a document in a folder: its id, its name and its opening.

    Attributes:
        doc_id: the document's id in the index.
        text: its card's text (name and opening, names split into words) for BM25.
        years: the years it is dated by (its name, "… ended <date>" in its opening); empty: undated.
        quarterly: a quarterly report (``Q2``/``10-Q`` in its name, "quarterly period ended").
        quarters: the quarters its name gives (``2023Q2`` -> {2}).
        kinds: the kinds of :data:`KINDS` its name or first :data:`KIND_CHARS` characters name.
    """

    doc_id: str
    text: str
    years: frozenset[int]
    quarterly: bool
    quarters: frozenset[int]
    kinds: frozenset[str] = frozenset()

    @classmethod
    def of(cls, doc_id: str, opening: str, *, name: str | None = None) -> DocumentCard:
        """The card of a document from its id, its text's opening (only the first
        :data:`CARD_CHARS` characters are read) and its file name (default: the id)."""
        name = name or doc_id
        head = opening[:CARD_CHARS]
        years = {int(y) for y in re.findall(rf"(?<!\d)({_YEAR})(?!\d)", name)}
        years |= {int(m.group(1)) for m in _ENDED.finditer(head)}
        quarters = frozenset(int(q) for q in re.findall(r"Q([1-4])", name, flags=re.IGNORECASE))
        quarterly = bool(_QUARTERLY_NAME.search(name.replace("_", " "))) or bool(_QUARTERLY_OPENING.search(head))
        named = f"{name.replace('_', ' ')} {head[:KIND_CHARS]}"
        kinds = frozenset(kind for kind, pattern in _KIND_IN_TEXT.items() if pattern.search(named))
        return cls(doc_id, card_words(f"{name} {head}"), frozenset(years), quarterly, quarters, kinds)

    def period_score(self, periods: Periods) -> float:
        """How well the document's dates fit the periods a question names (higher is better):
        0 for a document dated by none of the years named; else 2 when it is dated by the latest
        year named, 1 by another (or when no year is named), plus 1 when the quarter fits (a
        quarterly report when a quarter is named, another report when none is). An undated
        document scores 0.5: it neither fits nor contradicts."""
        if not self.years:
            return 0.5
        if periods.years and not self.years.intersection(periods.years):
            return 0.0
        score = 2.0 if periods.years and max(periods.years) in self.years else 1.0
        if periods.quarters:
            score += 1.0 if self.quarterly and (not self.quarters or self.quarters & periods.quarters) else 0.0
        else:
            score += 0.0 if self.quarterly else 1.0
        return score


def _ranks(scores: np.ndarray) -> np.ndarray:
    """1-based ranks, best first, in a stable order (ties keep the documents' order)."""
    ranks = np.empty(len(scores), dtype=int)
    ranks[np.argsort(-scores, kind="stable")] = np.arange(1, len(scores) + 1)
    return ranks


class DocumentRouter:
    """Ranks a folder's documents for a question (see the module's docstring).

    Args:
        cards: one :class:`DocumentCard` per document of the folder, in a fixed order (ties
            keep it).
    """

    def __init__(self, cards: Sequence[DocumentCard]) -> None:
        if not cards:
            raise ValueError("DocumentRouter needs at least one document card")
        self.cards = list(cards)
        self.doc_ids = [c.doc_id for c in self.cards]
        self._bm25 = TextBM25([c.text for c in self.cards])

    def dated(self, question: str) -> np.ndarray | None:
        """Each document's :meth:`DocumentCard.period_score` for ``question``; None when the
        question names no period, no document is dated by it, or every document fits it alike
        (then the dates tell nothing apart)."""
        periods = question_periods(question)
        if not (periods.years or periods.quarters):
            return None
        scores = np.array([c.period_score(periods) for c in self.cards])
        return scores if scores.max() >= 1.0 and len(set(scores.tolist())) > 1 else None

    def of_kind(self, question: str) -> list[str] | None:
        """The documents of the kind ``question`` points at (:func:`question_kind`), in the
        folder's order; None when it points at none, or when the kind does not tell the documents
        apart (none of them, or all of them, are of that kind)."""
        kind = question_kind(question)
        if kind is None:
            return None
        ids = [c.doc_id for c in self.cards if kind in c.kinds]
        return ids if 0 < len(ids) < len(self.cards) else None

    def scores(self, question: str, best_chunk: Mapping[str, float]) -> dict[str, float]:
        """``doc_id -> fused score`` for every document, best first. ``best_chunk`` holds each
        document's best chunk similarity (a document missing from it ranks last on that signal)."""
        n = len(self.cards)
        dense = np.array([best_chunk.get(d, -np.inf) for d in self.doc_ids], dtype=float)
        fused = 1.0 / (RRF_K + _ranks(dense))
        unique = self._bm25.scores(card_words(question))
        lexical = np.array([unique[self._bm25.row[c.text]] for c in self.cards], dtype=float)
        if lexical.any():
            fused += 1.0 / (RRF_K + _ranks(lexical))
        dated = self.dated(question)
        if dated is not None:
            # The period decides first: a fused score is below 2 / (RRF_K + 1) < 1, so adding the
            # period score (0, 0.5, 1, 2 or 3) keeps the documents of a better-fitting period ahead
            # of any of a worse one, and the best chunk and the card order those that fit alike.
            fused += dated
        order = np.argsort(-fused, kind="stable")
        return {self.doc_ids[i]: float(fused[i]) for i in order[:n]}

    def route(self, question: str, best_chunk: Mapping[str, float], m: int) -> list[str] | None:
        """The documents ``question`` most likely asks about, best first: the first ``m`` when the
        periods it names tell the documents apart (of the kind it points at, if it does), every
        document of that kind when only the kind does; None when neither does (then search them
        all)."""
        if m < 1:
            raise ValueError(f"route to at least one document; got m={m}")
        dated, kind = self.dated(question), self.of_kind(question)
        if dated is None and kind is None:
            return None
        order = list(self.scores(question, best_chunk))
        if kind is not None:
            of_kind = set(kind)
            order = [d for d in order if d in of_kind]
        return order[:m] if dated is not None else order
