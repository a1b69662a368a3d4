"""What retrieval reads of a question: its meaningful parts, the vectors that score sentences,
and the full-text query.

* :func:`question_parts` — a question built from a template ("Highlight the parts (if any) of
  this contract related to "X" that should be reviewed by a lawyer. Details: Y") carries its
  meaning in the quoted names and the labelled details, not in the template's words; the parts
  are found from the question's form alone (quotes, ``Label:`` fields), so a plain question is
  its own only part. The parts add weight to the question; they never replace it (a form can
  look like a template and still carry its meaning outside the parts: "What is Corning's FY2020
  DPO? DPO is defined as: 365 * …"; see :func:`query_texts`).
* :func:`query_texts` and :func:`query_weights` — the texts whose vectors score sentences (the
  question, then its parts) and their weights;
* :func:`dense_scorer` — ``texts -> weighted cosine similarity`` to those vectors, the
  ``score_sentences`` of the sentence focus;
* :func:`question_signals` — both of a question's signals at once: its dense sentence scorer by
  an embedder, and its full-text query (the question texts joined).

Plain Python and numpy: no Dagster, RAGAS or LanceDB.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ctxwin_dagster.core.retrieval.settings import RetrievalSettings

__all__ = [
    "QUESTION_SHARE",
    "dense_scorer",
    "parts_query",
    "query_texts",
    "query_weights",
    "question_parts",
    "question_signals",
]

#: ``texts -> one score per text``.
TextScorer = Callable[[Sequence[str]], np.ndarray]


def parts_query(question: str) -> str:
    """The full-text query of a question: its meaningful parts joined (:func:`question_parts`)."""
    return " ".join(question_parts(question))


_QUOTED = re.compile(r"[\"“”„]([^\"“”„]{2,120})[\"“”„]")
_LABELLED = re.compile(r"(?:^|(?<=[.?!]\s))([A-Z][A-Za-z ]{1,30}):\s+(.+?)(?=\s+[A-Z][A-Za-z ]{1,30}:\s|$)", re.DOTALL)


def question_parts(question: str) -> list[str]:
    """The parts of a templated question that carry its meaning: quoted names and the text of
    ``Label: text`` fields (the label dropped); ``[question]`` when it has neither.

    Example::

        >>> question_parts('Highlight the parts (if any) of this contract related to "Governing Law" that '
        ...                'should be reviewed by a lawyer. Details: Which state\\'s law governs the contract?')
        ['Governing Law', "Which state's law governs the contract?"]
        >>> question_parts("When did the Normans conquer England?")
        ['When did the Normans conquer England?']
    """
    text = question.strip()
    parts = [m.group(1).strip() for m in _QUOTED.finditer(text)]
    parts += [m.group(2).strip() for m in _LABELLED.finditer(text)]
    parts = [p for p in dict.fromkeys(parts) if p]
    return parts or [text]


#: The question's share of a sentence's dense score when the question has meaningful parts; the
#: parts share the rest equally. Chosen on the tuning split among 0.25, 0.5 and equal shares
#: (``evaluations/question_parts.py``: CUAD tune 67.4 % against 66.4 % and 66.9 %; SQuAD and
#: FinanceBench lose nothing to the whole question).
QUESTION_SHARE = 0.25


def query_texts(question: str, settings: RetrievalSettings) -> list[str]:
    """The texts whose vectors score sentences: the question itself first, then, with
    ``settings.question_parts``, its meaningful parts (:func:`question_parts`). The parts add
    weight; they never replace the question.

    Example::

        >>> from ctxwin_dagster.core.retrieval.settings import RetrievalSettings
        >>> settings = RetrievalSettings.named("ask")
        >>> query_texts('What does "force majeure" mean here?', settings)
        ['What does "force majeure" mean here?', 'force majeure']
        >>> query_texts("Who ruled Normandy?", settings)
        ['Who ruled Normandy?']
    """
    if not settings.question_parts:
        return [question]
    parts = [p for p in question_parts(question) if p.strip() != question.strip()]
    return [question, *parts]


def query_weights(n_texts: int, *, question_share: float = QUESTION_SHARE) -> np.ndarray:
    """The weights of :func:`query_texts`' vectors: the question ``question_share`` and its
    parts the rest equally; a question without parts weighs 1.

    Example::

        >>> query_weights(3).tolist()
        [0.25, 0.375, 0.375]
        >>> query_weights(1).tolist()
        [1.0]
    """
    if n_texts < 1:
        raise ValueError("a query has at least the question itself")
    if n_texts == 1:
        return np.ones(1, dtype=np.float32)
    rest = (1.0 - question_share) / (n_texts - 1)
    return np.array([question_share] + [rest] * (n_texts - 1), dtype=np.float32)


def dense_scorer(
    sentence_vectors: Callable[[Sequence[str]], np.ndarray],
    query_vectors: np.ndarray,
    weights: Sequence[float] | np.ndarray | None = None,
) -> TextScorer:
    """``texts -> weighted mean cosine similarity to the query vectors`` (rows L2-normalized;
    ``weights`` default to equal, and are scaled to sum to 1).

    Example::

        >>> vecs = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0])}
        >>> score = dense_scorer(lambda ts: np.stack([vecs[t] for t in ts]), np.array([[1.0, 0.0], [0.0, 1.0]]))
        >>> score(["a", "b"]).tolist()
        [0.5, 0.5]
        >>> dense_scorer(lambda ts: np.stack([vecs[t] for t in ts]), np.eye(2), [3, 1])(["a"]).tolist()
        [0.75]
    """
    q = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))
    w = np.ones(len(q), dtype=np.float32) if weights is None else np.asarray(weights, dtype=np.float32)
    if w.shape != (len(q),) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be {len(q)} non-negative numbers, not all 0; got {w.tolist()}")
    w = w / w.sum()

    def score(texts: Sequence[str]) -> np.ndarray:
        return np.asarray(np.asarray(sentence_vectors(texts) @ q.T) @ w)

    return score


def question_signals(
    question: str, vector: np.ndarray, settings: RetrievalSettings, embed: Callable[[Sequence[str]], np.ndarray]
) -> tuple[TextScorer, str]:
    """The question's dense sentence scorer (its similarity to each text and, with
    ``question_parts``, to its parts, by ``embed``, the embedder of ``vector``) and its
    full-text query (:func:`query_texts` joined)."""
    parts = query_texts(question, settings)
    qvecs = np.asarray(vector, dtype=np.float32)[None, :]
    if len(parts) > 1:  # the question's vector first, then its parts'
        qvecs = np.vstack([qvecs, np.asarray(embed(parts[1:]), dtype=np.float32)])
    scorer = dense_scorer(lambda ts: np.asarray(embed(list(ts)), dtype=np.float32), qvecs, query_weights(len(parts)))
    return scorer, " ".join(parts)
