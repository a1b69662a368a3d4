"""The extractive engine's answer: which passage sentences answer a question, and when none does.

An offline engine has no model that reads; it can only rank the passages' sentences and decide
whether the best of them answers. :func:`answer_from_passages` does both:

1. **Rank.** Each passage sentence (of four words or more, when there are such) gets the
   probability that it holds the answer, from a logistic model (:data:`RANKER`) over a few
   signals of the sentence (:func:`sentence_features`): its cosine similarity to the question and
   its gap to the best one, its BM25 score over the passages' sentences (divided by the best; the
   question's quoted names and labelled fields count twice), the rarity-weighted share of the
   question's words it holds and its gap to the best share, its passage's rank (passages come best
   first, as retrieved), its length, whether it holds the number, date or name the question
   asks for, and whether it lies in its document's opening (known when the passages' document
   offsets are given), alone and when the question is about the document itself ("Who are the
   parties to this agreement?"). With :attr:`AnswerRule.ranker` None the score is the cosine plus
   :attr:`AnswerRule.lexical_weight` × the scaled BM25, as before the model.
2. **Decide.** Nothing answers when the best cosine is under :attr:`AnswerRule.floor`, or when
   the probability that the passages do not hold the answer (:func:`not_found_probability`, a
   logistic model over a few signals of the question and its best sentence, see
   :func:`answer_signals`) reaches :attr:`AnswerRule.abstain_at`. The answer is then
   :data:`~ctxwin_dagster.core.methods.prompts.NOT_IN_DOCUMENTS`.
3. **Answer.** Up to :attr:`AnswerRule.sentences` sentences scoring within
   :attr:`AnswerRule.margin` of the best, in passage order, each group citing its passage. A
   picked sentence that introduces a list (it ends with ``:``) brings the list's items that
   follow it in the passage, so "The following practices shall be prohibited:" comes with the
   practices; a list cut by the passage's end or by :attr:`AnswerRule.list_chars` says so.

Every number of :class:`AnswerRule` and the model's weights were decided on the tuning split of
SQuAD 2.0 (its first 8 articles) and CUAD (its first 40 contracts), and are reported on the
other split, by ``evaluations/answer_quality.py``; its report is
``evaluations/reports/answer_quality.md``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ctxwin_dagster.core.methods.prompts import NOT_IN_DOCUMENTS
from ctxwin_dagster.core.text.sentences import split_sentences

__all__ = [
    "NOT_FOUND_MODEL",
    "RANKER",
    "RANK_FEATURES",
    "AnswerRule",
    "ExtractiveAnswer",
    "Pick",
    "answer_from_passages",
    "answer_signals",
    "candidate_sentences",
    "not_found_probability",
    "opening_flags",
    "sentence_features",
]

#: A sentence of fewer words is a heading or a fragment: used only when there is nothing else.
MIN_ANSWER_WORDS = 4


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


@dataclass(frozen=True, slots=True)
class AnswerRule:
    """How the extractive answer is picked (the defaults were decided on the tuning split).

    Attributes:
        lexical_weight: without a :attr:`ranker`, the weight of the BM25 score (scaled to the
            passages' best) added to the cosine similarity when ranking sentences.
        sentences: at most this many sentences answer.
        margin: a sentence answers with the best one when its score (with a :attr:`ranker`, its
            probability of holding the answer) is within this of the best.
        floor: below this best cosine similarity nothing answers, whatever the model says.
        abstain_at: NOT_IN_DOCUMENTS when :func:`not_found_probability` is at least this;
            None: only :attr:`floor` decides (also the case for questions not in English, which
            the model was not fitted on). The default is the lowest threshold at which at most
            5 % of SQuAD's answerable tuning questions are answered NOT_IN_DOCUMENTS: a wrong
            NOT_IN_DOCUMENTS hides an answer the document holds, while a wrong answer shows its
            cited sentences to be checked. At 0.55 the model finds 55 % of the unanswerable
            questions, but turns away 27 % of the answerable ones, the Todos contract's
            governing-law question among them.
        list_items / list_chars: a list introduced by a picked sentence brings at most this many
            items and characters.
        not_found_model: the logistic model :func:`not_found_probability` uses.
        model_max_words: the model decides only questions of at most this many content words.
            It was fitted on SQuAD's questions (5 words at the median, 9 at the 95th percentile);
            on CUAD's long clause questions (10 or more, 20 at the median) it does no better than
            chance (AUC 0.53), so those are decided by :attr:`floor` alone.
        ranker: the sentence model (:data:`RANKER`, weights by :data:`RANK_FEATURES`); None:
            rank by cosine plus :attr:`lexical_weight` × BM25.
    """

    lexical_weight: float = 0.3
    sentences: int = 3
    margin: float = 0.3
    floor: float = 0.40
    abstain_at: float | None = 0.75
    list_items: int = 16
    list_chars: int = 6000
    not_found_model: tuple[float, tuple[float, ...]] = NOT_FOUND_MODEL
    model_max_words: int = 9
    ranker: tuple[float, tuple[float, ...]] | None = RANKER

    def __post_init__(self) -> None:
        if not -1 <= self.floor <= 1:
            raise ValueError(f"floor is a cosine similarity in [-1, 1]; got {self.floor}")
        if self.abstain_at is not None and not 0 < self.abstain_at <= 1:
            raise ValueError(f"abstain_at is a probability in (0, 1]; got {self.abstain_at}")
        if self.sentences < 1 or self.margin < 0 or self.lexical_weight < 0:
            raise ValueError("sentences must be >= 1, margin and lexical_weight >= 0")
        if self.list_items < 0 or self.list_chars < 0:
            raise ValueError("list_items and list_chars must be >= 0")
        if len(self.not_found_model[1]) != len(SIGNALS):
            raise ValueError(f"not_found_model needs one weight per signal ({', '.join(SIGNALS)})")
        if self.ranker is not None and len(self.ranker[1]) != len(RANK_FEATURES):
            raise ValueError(f"ranker needs one weight per feature ({', '.join(RANK_FEATURES)})")

    def describe(self) -> str:
        """The rule in plain words, for a run's metadata.

        >>> print(AnswerRule().describe())  # doctest: +NORMALIZE_WHITESPACE
        sentences ranked by the sentence model (12 signals); up to 3 within 0.3 of the best;
        NOT_IN_DOCUMENTS under a cosine of 0.40, or at a not-found probability of 0.75 (questions
        of up to 9 content words); lists kept whole (up to 16 items, 6,000 characters)
        >>> print(AnswerRule(ranker=None, margin=0.1, abstain_at=None, list_items=0).describe())  # doctest: +NORMALIZE_WHITESPACE
        sentences ranked by cosine + 0.3 × BM25; up to 3 within 0.1 of the best;
        NOT_IN_DOCUMENTS under a cosine of 0.40; lists not kept
        """
        rank = (
            f"the sentence model ({len(RANK_FEATURES)} signals)"
            if self.ranker is not None
            else f"cosine + {self.lexical_weight:g} × BM25"
        )
        abstain = f"NOT_IN_DOCUMENTS under a cosine of {self.floor:.2f}"
        if self.abstain_at is not None:
            abstain += (
                f", or at a not-found probability of {self.abstain_at:g}"
                f" (questions of up to {self.model_max_words} content words)"
            )
        lists = (
            f"lists kept whole (up to {self.list_items} items, {self.list_chars:,} characters)"
            if self.list_items
            else "lists not kept"
        )
        return (
            f"sentences ranked by {rank}; up to {self.sentences} within {self.margin:g} of the best; {abstain}; {lists}"
        )


@dataclass(frozen=True, slots=True)
class Pick:
    """A sentence of the answer: its passage (index), its offsets in the passage's text, its text."""

    passage: int
    start: int
    end: int
    text: str
    list_item: bool = False


@dataclass(slots=True)
class ExtractiveAnswer:
    """The answer text (``"… [label]"`` per passage group, or NOT_IN_DOCUMENTS), what it cites, why."""

    text: str
    cited: list[str]
    best: float | None  # the best cosine similarity (None: the passages had no sentence)
    not_found_probability: float | None
    picks: list[Pick] = field(default_factory=list)
    reason: str = ""  # why NOT_IN_DOCUMENTS: "no sentences", "below the floor", "the model"
    plain: str = ""  # the answer without its citation labels
    top: Pick | None = None  # the best-ranked sentence (its evidence)
    signals: dict[str, float] | None = None  # what the not-found model weighed (None: no sentences)

    @property
    def not_found(self) -> bool:
        return self.text == NOT_IN_DOCUMENTS


# ------------------------------------------------------------------------------ signals
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


# ------------------------------------------------------------------------------ lists
#: A list item's marker, by kind: "(a)"/"a)"/"(iv)", "1."/"(1)"/"1)", or a bullet.
_ITEM = re.compile(r"\s*(?:(?P<letter>\(?[a-z]{1,4}\))|(?P<number>\(?\d{1,3}[.)])|(?P<bullet>[-–•*·]))\s+\S", re.I)


def _list_after(text: str, end: int, rule: AnswerRule) -> tuple[list[tuple[int, int]], bool]:
    """The list items (one per line, with the first item's kind of marker) that follow offset
    ``end`` in ``text``, and whether the list was cut before its last item: by the rule's limits,
    or by the passage's end (its last item does not close the list with a full stop)."""
    items: list[tuple[int, int]] = []
    used = 0
    kind = None  # the items' marker kind: the list ends at a line that has another
    for m in re.finditer(r"[^\n]+", text[end:]):
        line = m.group()
        if not line.strip():
            continue
        item = _ITEM.match(line)
        if item is None or (kind is not None and item.lastgroup != kind):
            return items, False
        kind = item.lastgroup
        if len(items) >= rule.list_items or used + len(line) > rule.list_chars:
            return items, True
        lead = len(line) - len(line.lstrip())
        items.append((end + m.start() + lead, end + m.end()))
        used += len(line)
    return items, bool(items) and not text[items[-1][0] : items[-1][1]].rstrip().endswith(".")


# ------------------------------------------------------------------------------ answer
def candidate_sentences(
    question: str,
    passages: Sequence[tuple[str, str]],
    embed: Callable[[Sequence[str]], np.ndarray],
    *,
    lexical: Callable[[str, Sequence[str]], np.ndarray] | None = None,
) -> tuple[list[tuple[int, int, int, str]], np.ndarray, np.ndarray]:
    """The passages' sentences that may answer (``(passage index, start, end, text)``; those of
    four words or more when there are such), their cosine similarities to the question and their
    BM25 scores divided by the best (see :func:`answer_from_passages` for ``embed`` and ``lexical``)."""
    sents: list[tuple[int, int, int, str]] = []
    for p, (_label, text) in enumerate(passages):
        for s, e in split_sentences(text):
            if e - s >= 10:
                sents.append((p, s, e, text[s:e]))
    # Headings ("Prohibited AI practices") make poor answers: prefer sentences of 4+ words.
    sents = [x for x in sents if len(x[3].split()) >= MIN_ANSWER_WORDS] or sents
    if not sents:
        return [], np.zeros(0), np.zeros(0)
    texts = [t for *_, t in sents]
    vecs = embed([question, *texts])
    sims = np.asarray(vecs[1:] @ vecs[0], dtype=np.float64)
    lex = np.asarray((lexical or _bm25)(question, texts), dtype=np.float64)
    top_lex = float(lex.max()) if len(lex) else 0.0
    return sents, sims, (lex / top_lex if top_lex > 0 else np.zeros_like(lex))


def opening_flags(sents: Sequence[tuple[int, int, int, str]], starts: Sequence[int | None] | None) -> list[bool]:
    """Whether each candidate sentence (``(passage index, start, end, text)``) starts within its
    document's first :data:`OPENING_CHARS` characters, given the passages' offsets in their
    documents (None, or a None offset: unknown, so no)."""
    if starts is None:
        return [False] * len(sents)
    return [(o := starts[p]) is not None and o + s < OPENING_CHARS for p, s, _e, _t in sents]


def answer_from_passages(
    question: str,
    passages: Sequence[tuple[str, str]],
    embed: Callable[[Sequence[str]], np.ndarray],
    *,
    rule: AnswerRule = AnswerRule(),
    english: bool = True,
    lexical: Callable[[str, Sequence[str]], np.ndarray] | None = None,
    starts: Sequence[int | None] | None = None,
) -> ExtractiveAnswer:
    """The extractive answer to ``question`` from ``passages`` (``(label, text)``), as the module
    docstring says. ``embed`` returns unit vectors; ``lexical(question, sentences)`` their BM25
    scores over those sentences (default: :class:`~ctxwin_dagster.core.retrieval.lexical.TextBM25`).
    ``english=False`` leaves the not-found model out (it was fitted on English questions).
    ``starts`` are the passages' offsets in their documents (None: unknown), which tell the
    sentences of a document's opening."""
    sents, sims, scaled = candidate_sentences(question, passages, embed, lexical=lexical)
    if not sents:
        return ExtractiveAnswer(NOT_IN_DOCUMENTS, [], None, None, reason="no sentences")
    texts = [t for *_, t in sents]
    # The not-found model was fitted on the best sentence by cosine and BM25: its signals keep it.
    plain_score = sims + rule.lexical_weight * scaled
    score = plain_score
    if rule.ranker is not None:
        intercept, weights = rule.ranker
        features = sentence_features(question, texts, sims, scaled, [x[0] for x in sents], opening_flags(sents, starts))
        z = intercept + features @ np.asarray(weights)
        score = 1.0 / (1.0 + np.exp(-z))
    order = np.argsort(-score, kind="stable")
    best = float(sims.max())
    signals = answer_signals(question, texts, sims, int(np.argmax(plain_score)))
    if best < rule.floor:
        return ExtractiveAnswer(NOT_IN_DOCUMENTS, [], best, None, reason="below the floor", signals=signals)
    probability = None
    if english and signals["question_words"] <= rule.model_max_words:
        probability = not_found_probability(signals, rule.not_found_model)
        if rule.abstain_at is not None and probability >= rule.abstain_at:
            return ExtractiveAnswer(NOT_IN_DOCUMENTS, [], best, probability, reason="the model", signals=signals)
    top = float(score[order[0]])
    chosen = sorted(int(i) for i in order[: rule.sentences] if score[i] >= top - rule.margin)
    picks: list[Pick] = []
    cut_lists: set[int] = set()
    for i in chosen:
        p, s, e, t = sents[i]
        if any(x.passage == p and x.start <= s < x.end for x in picks):
            continue  # already brought in as a list item
        picks.append(Pick(p, s, e, t))
        if t.rstrip().endswith(":") and rule.list_items:
            text = passages[p][1]
            items, cut = _list_after(text, e, rule)
            picks.extend(Pick(p, a, b, text[a:b], list_item=True) for a, b in items)
            if cut:
                cut_lists.add(len(picks) - 1)
    top_pick = Pick(*sents[int(order[0])])
    labels = [label for label, _ in passages]
    text, plain = _render(picks, labels, cut_lists, True), _render(picks, labels, cut_lists, False)
    cited = list(dict.fromkeys(labels[x.passage] for x in picks))
    return ExtractiveAnswer(text, cited, best, probability, picks, plain=plain, top=top_pick, signals=signals)


def _render(picks: Sequence[Pick], labels: Sequence[str], cut_lists: set[int], cite: bool) -> str:
    """The picks as the answer's text: list items on their own lines, each passage's group ending
    with ``[label]`` when ``cite``, and a note after a list that goes on in the source."""
    pieces: list[str] = []
    group: list[str] = []
    for n, pick in enumerate(picks):
        if group and pick.passage != picks[n - 1].passage:
            pieces.append(" ".join(group) + (f" [{labels[picks[n - 1].passage]}]" if cite else ""))
            group = []
        group.append(("\n" if pick.list_item else "") + pick.text)
        if n in cut_lists:
            group.append("\n(the list goes on in the source)")
    if group:
        pieces.append(" ".join(group) + (f" [{labels[picks[-1].passage]}]" if cite else ""))
    return " ".join(pieces).replace(" \n", "\n")


def _bm25(question: str, sentences: Sequence[str]) -> np.ndarray:
    """BM25 of ``sentences`` for the question, its meaningful parts (a templated question's quoted
    name, say) counted once more: they add weight, and never replace the question."""
    from ctxwin_dagster.core.retrieval.lexical import TextBM25, parts_query

    parts = parts_query(question)
    query = question if parts == question else f"{question} {parts}"
    return TextBM25(sentences).scorer(query)(sentences)
