"""The extractive engine's answer: which passage sentences answer a question, and when none does.

An offline engine has no model that reads; it can only rank the passages' sentences and decide
whether the best of them answers. :func:`answer_from_passages` does both:

1. **Rank.** Each passage sentence (of four words or more, when there are such) gets the
   probability that it holds the answer, from a logistic model
   (:data:`~.answer_signals.RANKER`) over a few signals of the sentence
   (:func:`~.answer_signals.sentence_features`): its cosine similarity to the question and
   its gap to the best one, its BM25 score over the passages' sentences (divided by the best; the
   question's quoted names and labelled fields count twice), the rarity-weighted share of the
   question's words it holds and its gap to the best share, its passage's rank (passages come best
   first, as retrieved), its length, whether it holds the number, date or name the question
   asks for, and whether it lies in its document's opening (known when the passages' document
   offsets are given), alone and when the question is about the document itself ("Who are the
   parties to this agreement?"). With :attr:`AnswerRule.ranker` None the score is the cosine plus
   :attr:`AnswerRule.lexical_weight` × the scaled BM25, as before the model.
2. **Decide.** Nothing answers when the best cosine is under :attr:`AnswerRule.floor`, or when
   the probability that the passages do not hold the answer
   (:func:`~.answer_signals.not_found_probability`, a logistic model over a few signals of the
   question and its best sentence, see :func:`~.answer_signals.answer_signals`) reaches
   :attr:`AnswerRule.abstain_at`. The answer is then
   :data:`~ctxwin_dagster.core.methods.prompts.NOT_IN_DOCUMENTS`.
3. **Answer.** Up to :attr:`AnswerRule.sentences` sentences scoring within
   :attr:`AnswerRule.margin` of the best, in passage order, each group citing its passage. A
   picked sentence that introduces a list (it ends with ``:``) brings the list's items that
   follow it in the passage, so "The following practices shall be prohibited:" comes with the
   practices; a list cut by the passage's end or by :attr:`AnswerRule.list_chars` says so.

Every number of :class:`AnswerRule` and the model's weights were decided on the tuning split of
SQuAD 2.0 (its first 8 articles) and CUAD (its first 40 contracts), and are reported on the
other split, by ``evaluations/answer_quality.py``; its report is
``evaluations/reports/answer_quality.md``. The signals and the two models are
:mod:`.answer_signals`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ctxwin_dagster.backends.tasks.answer_signals import (
    NOT_FOUND_MODEL,
    OPENING_CHARS,
    RANK_FEATURES,
    RANKER,
    SIGNALS,
    answer_signals,
    not_found_probability,
    sentence_features,
)
from ctxwin_dagster.core.methods.prompts import NOT_IN_DOCUMENTS
from ctxwin_dagster.core.text.sentences import split_sentences

__all__ = [
    "AnswerRule",
    "ExtractiveAnswer",
    "Pick",
    "answer_from_passages",
    "candidate_sentences",
    "opening_flags",
]

#: A sentence of fewer words is a heading or a fragment: used only when there is nothing else.
MIN_ANSWER_WORDS = 4


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
        abstain_at: NOT_IN_DOCUMENTS when :func:`~.answer_signals.not_found_probability` is at
            least this; None: only :attr:`floor` decides (also the case for questions not in
            English, which the model was not fitted on). The default is the lowest threshold at
            which at most 5 % of SQuAD's answerable tuning questions are answered
            NOT_IN_DOCUMENTS: a wrong NOT_IN_DOCUMENTS hides an answer the document holds, while a
            wrong answer shows its cited sentences to be checked. At 0.55 the model finds 55 % of
            the unanswerable questions, but turns away 27 % of the answerable ones, the Todos
            contract's governing-law question among them.
        list_items / list_chars: a list introduced by a picked sentence brings at most this many
            items and characters.
        not_found_model: the logistic model :func:`~.answer_signals.not_found_probability` uses.
        model_max_words: the model decides only questions of at most this many content words.
            It was fitted on SQuAD's questions (5 words at the median, 9 at the 95th percentile);
            on CUAD's long clause questions (10 or more, 20 at the median) it does no better than
            chance (AUC 0.53), so those are decided by :attr:`floor` alone.
        ranker: the sentence model (:data:`~.answer_signals.RANKER`, weights by
            :data:`~.answer_signals.RANK_FEATURES`); None: rank by cosine plus
            :attr:`lexical_weight` × BM25.
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
    document's first :data:`~.answer_signals.OPENING_CHARS` characters, given the passages'
    offsets in their documents (None, or a None offset: unknown, so no)."""
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
    from ctxwin_dagster.core.retrieval.lexical import TextBM25
    from ctxwin_dagster.core.retrieval.question import parts_query

    parts = parts_query(question)
    query = question if parts == question else f"{question} {parts}"
    return TextBM25(sentences).scorer(query)(sentences)
