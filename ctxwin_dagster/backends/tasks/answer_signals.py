"""What the extractive answer weighs: the signals of a question and its sentences, and two models.

* :func:`sentence_features` gives each passage sentence the signals of :data:`RANK_FEATURES`
  (its similarity to the question, BM25, the question's words it holds, its passage's rank, a
  number, date or name asked for, its place in its document's opening); :data:`RANKER`, a
  logistic model over them, is the probability that the sentence holds the answer.
* :func:`answer_signals` gives a question and its best sentence the signals of :data:`SIGNALS`;
  :func:`not_found_probability`, a logistic model over them (:data:`NOT_FOUND_MODEL`), is the
  probability that the passages do not hold the answer.

Word statistics are the passages' own. How the answer uses them is :mod:`.answering`'s; the
weights were fitted on the tuning split by ``evaluations/answer_quality.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

__all__ = [
    "NOT_FOUND_MODEL",
    "OPENING_CHARS",
    "RANKER",
    "RANK_FEATURES",
    "SIGNALS",
    "answer_signals",
    "not_found_probability",
    "sentence_features",
]

#: The signals :func:`not_found_probability` weighs, in the order of :data:`NOT_FOUND_MODEL`'s weights.
SIGNALS = ("best", "coverage", "missing_rarest", "question_words", "negated", "negation_unmatched", "type_missing")


#: The logistic model of "the passages do not hold the answer": ``(intercept, weights by SIGNALS)``,
#: fitted on SQuAD's tuning split (2,805 questions, 1,527 of them unanswerable) by
#: ``evaluations/answer_quality.py --fit`` (unscaled signals). AUC 0.71 there, 0.70 on the
#: report split: it tells the two apart better than the best cosine alone (0.66 and 0.62).
NOT_FOUND_MODEL: tuple[float, tuple[float, ...]] = (1.9977, (-4.0113, 0.6586, 0.1461, -0.0454, 0.8381, 1.811, 0.9007))

#: The signals :func:`sentence_features` gives each sentence, in the order of :data:`RANKER`'s weights.
RANK_FEATURES = (
    "cosine",
    "cosine_gap",
    "bm25",
    "overlap",
    "overlap_gap",
    "passage_rank",
    "log_words",
    "number_asked",
    "date_asked",
    "name_asked",
    "in_opening",
    "opening_about_document",
)

#: The logistic model of "this sentence holds the answer": ``(intercept, weights by RANK_FEATURES)``,
#: fitted on the tuning split's answerable questions whose context holds the answer (SQuAD's
#: first 8 articles and CUAD's first 40 contracts) by ``evaluations/answer_quality.py
#: --fit-ranker``; a sentence's label is that it holds a reference span whole.
#: Measured with two folds over the tuning documents (fitted on one half, measured on the other),
#: with :attr:`AnswerRule.margin` 0.3 against the cosine + 0.3 × BM25 rule with margin 0.1: cited
#: span hit 0.809 against 0.780 on SQuAD at an answer F1 of 0.185 against 0.183; 0.446 against
#: 0.296 on CUAD (F1 0.358 against 0.336). A margin of 0.4 cites more (0.829) at a lower F1 (0.178).
#: Without the two opening signals CUAD's cited span hit was 0.364.
RANKER: tuple[float, tuple[float, ...]] = (
    -5.9277,
    (1.1549, 4.5282, 1.5495, 2.0567, 3.7165, 2.1382, 0.4231, 0.5108, 0.7486, 0.3498, -0.3472, 3.4365),
)


_WORD = re.compile(r"(?u)\b\w\w+\b")
#: Words a question's content leaves out: bm25s's English stop words and the question words.
_STOP_WORDS = """a an and are as at be but by for if in into is it no not of on or such that the their then
there these they this to was will with what which who whom whose when where why how many much did does do were has
have had name type kind"""
_STOP = frozenset(_STOP_WORDS.split())
_NEGATION = re.compile(r"\b(not|never|no|none|nothing|without|cannot)\b|n't\b", re.IGNORECASE)
_NUMBER = re.compile(
    r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|hundred|thousand|million|billion)\b", re.I
)
_DATE = re.compile(
    r"\b(1[0-9]{3}|20[0-9]{2})s?\b|\b(january|february|march|april|may|june|july|august|september|october|"
    r"november|december|century|centuries)\b",
    re.IGNORECASE,
)
_ASKS_NUMBER = re.compile(r"\bhow (many|much|long|large|big|old|far)\b|\bwhat (percentage|percent|number|amount)\b")
_ASKS_DATE = re.compile(r"\bwhen\b|\bwhat (year|century|decade|date|month)\b|\bin (which|what) year\b")


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP}


def _question_idf(question: str, sentences: Sequence[str]) -> tuple[set[str], list[set[str]], dict[str, float]]:
    """The question's content words, each sentence's, and each question word's IDF over the
    sentences (the passages' own statistics)."""
    q = _words(question) or {"_"}
    sets = [_words(t) for t in sentences]
    n = len(sets)
    idf = {w: math.log((n + 1) / (sum(1 for x in sets if w in x) + 0.5)) for w in q}
    return q, sets, idf


def answer_signals(question: str, sentences: Sequence[str], sims: np.ndarray, best_row: int) -> dict[str, float]:
    """What tells an answerable question from one the passages do not answer.

    ``sentences`` are the passages' candidate sentences, ``sims`` their cosine similarities to
    the question, ``best_row`` the top-ranked one. Word statistics are the passages' own (no
    document-wide counts), so the signals are the same in ``ctxwin ask`` and the evaluation:

    * ``best``: the best cosine similarity;
    * ``coverage``: the share of the question's words (weighted by rarity, IDF over the
      sentences) found anywhere in the passages;
    * ``missing_rarest``: the IDF of the rarest question word missing from the best sentence;
    * ``question_words``: how many content words the question has;
    * ``negated``, ``negation_unmatched``: the question is negated; and the best sentence is not;
    * ``type_missing``: the question asks for a number or a date and the top sentences have none.
    """
    q, sets, idf = _question_idf(question, sentences)
    total = sum(idf.values()) or 1.0
    in_passages = {w for x in sets for w in x & q}
    best_words = sets[best_row] if sets else set()
    top = " ".join(sentences[i] for i in np.argsort(-sims, kind="stable")[:3])
    ql = question.lower()
    asks = "number" if _ASKS_NUMBER.search(ql) else "date" if _ASKS_DATE.search(ql) else ""
    negated = bool(_NEGATION.search(question))
    return {
        "best": float(sims.max()) if len(sims) else 0.0,
        "coverage": sum(idf[w] for w in q if w in in_passages) / total,
        "missing_rarest": max([idf[w] for w in q if w not in best_words] or [0.0]),
        "question_words": float(len(q)),
        "negated": float(negated),
        "negation_unmatched": float(negated and not _NEGATION.search(sentences[best_row] if sentences else "")),
        "type_missing": float(
            (asks == "number" and not _NUMBER.search(top)) or (asks == "date" and not _DATE.search(top))
        ),
    }


def not_found_probability(signals: dict[str, float], model: tuple[float, Sequence[float]] = NOT_FOUND_MODEL) -> float:
    """The model's probability that the passages do not answer (see :func:`answer_signals`)."""
    intercept, weights = model
    z = intercept + sum(w * signals[name] for name, w in zip(SIGNALS, weights, strict=True))
    return 1.0 / (1.0 + math.exp(-z))


#: Characters at the start of a document that are its opening (a contract's title, parties and date;
#: a filing's company and period), as the ``ask`` retrieval's ``opening_chars`` gives them.
OPENING_CHARS = 500
#: A question about the document itself: it names the document by its kind, and asks for a name,
#: the parties or a date ("Who are the parties to this agreement?", "When was the contract signed?").
_DOCUMENT_KIND = re.compile(r"\b(contract|agreement|document)s?\b", re.I)
_ASKS_IDENTITY = re.compile(r"\b(names?|title|part(y|ies)|dated?|signed|effective|when|who)\b", re.I)
_ASKS_NAME = re.compile(
    r"\bwho(m|se)?\b|\bwhat (is|was|are|were) the names?\b|\bwhich (person|people|company|country|city)\b", re.I
)
_CAPITALIZED = re.compile(r"\b[A-Z][a-z]+")


def sentence_features(
    question: str,
    sentences: Sequence[str],
    sims: np.ndarray,
    lexical: np.ndarray,
    passage_ranks: Sequence[int],
    in_opening: Sequence[bool] | None = None,
) -> np.ndarray:
    """One row of :data:`RANK_FEATURES` per sentence: what tells the sentence that answers from
    its neighbours in the context.

    ``sims`` are the sentences' cosine similarities to the question, ``lexical`` their BM25
    scores divided by the best, ``passage_ranks`` each sentence's passage's place in the context
    (0: the first passage, the best retrieved). Word statistics are the passages' own:

    * ``cosine``, ``cosine_gap``: the similarity, and how far it is under the best sentence's;
    * ``bm25``: the scaled BM25 score;
    * ``overlap``, ``overlap_gap``: the share of the question's words (weighted by their IDF over
      the sentences) the sentence holds, and how far under the best share;
    * ``passage_rank``: 1 / (1 + the passage's place);
    * ``log_words``: the log of its number of words;
    * ``number_asked`` / ``date_asked`` / ``name_asked``: the question asks how many or how much /
      when / who, and the sentence holds a number / a date / a capitalized name the question
      does not.
    * ``in_opening``: the sentence starts within its document's first :data:`OPENING_CHARS`
      characters (``in_opening``, one flag per sentence; unknown: no);
    * ``opening_about_document``: it does, and the question is about the document itself (it
      names the document by its kind and asks for a name, the parties or a date).

    >>> rows = sentence_features("When did William land?", ["William landed in 1066.", "William was a duke."],
    ...                          np.array([0.8, 0.6]), np.array([1.0, 0.5]), [0, 1])
    >>> [dict(zip(RANK_FEATURES, r.round(2).tolist()))["date_asked"] for r in rows]
    [1.0, 0.0]
    >>> [dict(zip(RANK_FEATURES, r.round(2).tolist()))["cosine_gap"] for r in rows]
    [0.0, -0.2]
    """
    n = len(sentences)
    q, sets, idf = _question_idf(question, sentences)
    total = sum(idf.values()) or 1.0
    overlap = np.array([sum(idf[w] for w in q & x) / total for x in sets])
    ql = question.lower()
    asks_number, asks_date = bool(_ASKS_NUMBER.search(ql)), bool(_ASKS_DATE.search(ql))
    asks_name = bool(_ASKS_NAME.search(question))
    named = set(_CAPITALIZED.findall(question))
    about_document = bool(_DOCUMENT_KIND.search(question)) and bool(_ASKS_IDENTITY.search(question))
    opening = np.zeros(n) if in_opening is None else np.asarray(in_opening, dtype=np.float64)
    sims = np.asarray(sims, dtype=np.float64)
    return np.column_stack(
        [
            sims,
            sims - sims.max(),
            np.asarray(lexical, dtype=np.float64),
            overlap,
            overlap - overlap.max(),
            1.0 / (1.0 + np.asarray(passage_ranks, dtype=np.float64)),
            [math.log(max(1, len(t.split()))) for t in sentences],
            [float(asks_number and bool(_NUMBER.search(t))) for t in sentences],
            [float(asks_date and bool(_DATE.search(t))) for t in sentences],
            # a name other than the question's own (the sentence's first word is capitalized anyway)
            [float(asks_name and bool(set(_CAPITALIZED.findall(t[1:])) - named)) for t in sentences],
            opening,
            opening * float(about_document),
        ]
    )
