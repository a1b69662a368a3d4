"""Questions generated from a document, and the checks every generated question must pass.

The model that writes the questions is driven by
:class:`~ctxwin_dagster.backends.tasks.question_writer.QuestionWriter`; this module holds what
does not need a model, so that each rule can be read and tested alone:

* where questions come from: :func:`passages_of` cuts a document into passages of whole
  sentences, :func:`spread` picks passages spread over the whole document, and
  :func:`far_pairs` pairs passages far apart that speak of the same things (shared words), for
  the questions that need two passages;
* how many of each kind: :func:`kind_counts` (``--count`` per document, by :data:`DEFAULT_MIX`);
* verification: :func:`locate_quote` finds the sentence a model quoted in its passage (exact,
  then with other white space, then fuzzy, with rapidfuzz), :func:`locate_answer_in` finds the
  answer inside that sentence; a question whose span is not found is rejected, never kept
  with a guessed span;
* :func:`lexical_answer` — a sentence of the document holding every content word of a question
  meant to be unanswerable (then it is likely answerable, and rejected);
* :func:`closed_book_correct` — a model's answer without the document matches the reference
  (the question tests what the model knows, not retrieval: rejected);
* :func:`is_duplicate` — near-identical wording of a question already kept;
* :class:`GenerationReport` — every draft counted: parsed, held to its schema, kept, and
  rejected by reason, per kind.

Plain Python (and rapidfuzz): no Dagster, RAGAS or LanceDB.

Example::

    >>> text = "The Normans were in France. Rollo was their leader. " * 3
    >>> [text[p.start:p.end][:27] for p in passages_of(text, max_chars=60, min_letters=10)][:2]
    ['The Normans were in France.', 'The Normans were in France.']
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ctxwin_dagster.core.evaluation.metrics.answers import answer_f1, normalize_answer
from ctxwin_dagster.core.evaluation.qa.items import Span
from ctxwin_dagster.core.evaluation.qa.text_match import FUNCTION_WORDS, WORD, fuzzy_alignment, squash
from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.text.sentences import split_sentences

__all__ = [
    "DEFAULT_MIX",
    "KINDS",
    "GenerationReport",
    "Passage",
    "closed_book_correct",
    "content_words",
    "far_pairs",
    "is_duplicate",
    "kind_counts",
    "lexical_answer",
    "locate_answer_in",
    "locate_quote",
    "passages_of",
    "question_id",
    "same_answer",
    "spread",
]

#: The kinds of generated questions: one fact in one sentence; an answer that needs a sentence
#: from each of two passages far apart; a question the document does not answer.
KINDS = ("single", "two_passages", "unanswerable")
#: How ``--count`` questions of a document are shared between the kinds asked for (3 : 1 : 1).
DEFAULT_MIX: Mapping[str, int] = {"single": 3, "two_passages": 1, "unanswerable": 1}
#: Passages are at most this many characters of whole sentences.
PASSAGE_CHARS = 1200
#: A passage needs this many letters to be worth a question (headings and tables of contents are not).
MIN_PASSAGE_LETTERS = 300
#: A closed-book answer with at least this token F1 against the reference counts as correct.
CLOSED_BOOK_F1 = 0.6
#: Two questions of a document with at least this token-set similarity (0–100) are duplicates.
DUPLICATE_SIMILARITY = 88.0


@dataclass(frozen=True, slots=True)
class Passage:
    """Whole sentences of a document, ``text[start:end]``, with each sentence's span."""

    start: int
    end: int
    sentences: tuple[Span, ...]

    def text(self, document: str) -> str:
        return document[self.start : self.end]

    def sentence_texts(self, document: str) -> list[str]:
        return [document[s:e] for s, e in self.sentences]


def passages_of(text: str, *, max_chars: int = PASSAGE_CHARS, min_letters: int = MIN_PASSAGE_LETTERS) -> list[Passage]:
    """``text`` cut into passages of consecutive whole sentences, each at most ``max_chars``
    long (a longer sentence is a passage alone), keeping those with ``min_letters`` letters."""
    out: list[Passage] = []
    group: list[Span] = []

    def close() -> None:
        if group:
            start, end = group[0][0], group[-1][1]
            if sum(ch.isalpha() for ch in text[start:end]) >= min_letters:
                out.append(Passage(start, end, tuple(group)))
            group.clear()

    for span in split_sentences(text):
        if group and span[1] - group[0][0] > max_chars:
            close()
        group.append(span)
    close()
    return out


def spread(passages: Sequence[Passage], n: int, *, skip: Iterable[Passage] = (), seed: int = 0) -> list[Passage]:
    """``n`` passages spread evenly over the document (fewer when there are fewer), leaving out
    ``skip``; ``seed`` shifts the picks, so another seed gives other passages."""
    pool = [p for p in passages if p not in set(skip)]
    if n <= 0 or not pool:
        return []
    if n >= len(pool):
        return list(pool)
    step = len(pool) / n
    shift = (seed * 0.618034) % 1.0  # the golden ratio: shifts that do not repeat soon
    picks = sorted({int((i + shift) * step) % len(pool) for i in range(n)})
    return [pool[i] for i in picks]


def content_words(text: str) -> set[str]:
    """The lower-cased words of ``text`` that say something (no function words, at least 3 characters)."""
    return {w for w in (m.group(0).lower() for m in WORD.finditer(text)) if len(w) >= 3 and w not in FUNCTION_WORDS}


def far_pairs(
    text: str, passages: Sequence[Passage], n: int, *, min_gap: int | None = None
) -> list[tuple[Passage, Passage]]:
    """Up to ``n`` pairs of passages at least ``min_gap`` characters apart (default a quarter of
    the document, at least 2,000), most shared content words first; each passage in one pair only.
    Pairs that share fewer than 2 content words are not offered (nothing to ask about both)."""
    gap = min_gap if min_gap is not None else max(2000, len(text) // 4)
    words = [content_words(p.text(text)) for p in passages]
    scored = []
    for i in range(len(passages)):
        for j in range(i + 1, len(passages)):
            if passages[j].start - passages[i].end < gap:
                continue
            shared = len(words[i] & words[j])
            if shared >= 2:
                scored.append((-shared, i, j))
    scored.sort()
    used: set[int] = set()
    out: list[tuple[Passage, Passage]] = []
    for _neg, i, j in scored:
        if len(out) >= n:
            break
        if i in used or j in used:
            continue
        used.update((i, j))
        out.append((passages[i], passages[j]))
    return out


def kind_counts(count: int, kinds: Sequence[str] = KINDS, mix: Mapping[str, int] = DEFAULT_MIX) -> dict[str, int]:
    """``count`` questions shared between ``kinds`` by ``mix`` (largest remainders; every kind
    asked for gets one as soon as ``count`` allows).

    >>> kind_counts(5), kind_counts(2), kind_counts(4, ["single"])
    ({'single': 3, 'two_passages': 1, 'unanswerable': 1}, {'single': 1, 'two_passages': 1, 'unanswerable': 0}, {'single': 4})
    """
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown question kind(s) {unknown}; the kinds are {', '.join(KINDS)}")
    if count < 0:
        raise ValueError(f"the count of questions must be >= 0; got {count}")
    kinds = [k for k in KINDS if k in kinds]
    weights = {k: mix.get(k, 1) for k in kinds}
    total = sum(weights.values()) or 1
    exact = {k: count * w / total for k, w in weights.items()}
    out = {k: int(v) for k, v in exact.items()}
    for k in sorted(kinds, key=lambda k: (out[k] > 0, -(exact[k] - out[k]), KINDS.index(k))):
        if sum(out.values()) >= count:
            break
        out[k] += 1
    return out


def locate_quote(text: str, passages: Sequence[Passage], quote: str) -> tuple[Span | None, str]:
    """The span of the sentence(s) of ``passages`` that ``quote`` copies, and how it was found:
    ``exact``, ``whitespace`` (other white space), ``fuzzy:<score>`` (rapidfuzz's partial ratio
    ≥ :data:`~ctxwin_dagster.core.evaluation.qa.text_match.FUZZY_CUTOFF`, widened to whole sentences), or ``(None, "none")``."""
    quote = quote.strip()
    if len(quote) < 8:
        return None, "none"
    for p in passages:
        body = p.text(text)
        at = body.find(quote)
        if at >= 0:
            return (p.start + at, p.start + at + len(quote)), "exact"
    squashed = squash(quote)
    for p in passages:
        for s, e in p.sentences:
            if squash(text[s:e]) == squashed:
                return (s, e), "whitespace"
    best: tuple[float, Passage, int, int] | None = None
    for p in passages:
        found = fuzzy_alignment(quote, p.text(text))
        if found and (best is None or found[0] > best[0]):
            best = (found[0], p, found[1], found[2])
    if best is None:
        return None, "none"
    score, p, a, b = best
    start, end = p.start + a, p.start + b
    covering = [(s, e) for s, e in p.sentences if s < end and e > start]
    if covering:
        start, end = covering[0][0], covering[-1][1]
    return (start, end), f"fuzzy:{score:.0f}"


def locate_answer_in(text: str, span: Span, answer: str) -> tuple[Span | None, str]:
    """The span of ``answer`` inside ``text[span[0]:span[1]]`` (exact, any case, other white
    space, then fuzzy at word boundaries), and how it was found; ``(None, "none")`` if absent."""
    answer = answer.strip().strip(".,;:")
    start, end = span
    body = text[start:end]
    if not answer:
        return None, "none"
    at = body.find(answer)
    if at >= 0:
        return (start + at, start + at + len(answer)), "exact"
    at = body.lower().find(answer.lower())
    if at >= 0:
        return (start + at, start + at + len(answer)), "case"
    pattern = r"\s+".join(re.escape(tok) for tok in answer.split())
    m = re.search(pattern, body, flags=re.IGNORECASE)
    if m:
        return (start + m.start(), start + m.end()), "whitespace"
    if len(answer) < 4:
        return None, "none"
    found = fuzzy_alignment(answer, body)
    if found is None:
        return None, "none"
    score, a, b = found
    while a > 0 and body[a - 1].isalnum():  # whole words
        a -= 1
    while b < len(body) and body[b].isalnum():
        b += 1
    return (start + a, start + b), f"fuzzy:{score:.0f}"


def lexical_answer(question: str, text: str, sentences: Sequence[Span]) -> Span | None:
    """A sentence of ``text`` that holds every content word of ``question`` (at least two), or
    None: a question meant to be unanswerable whose words all stand in one sentence is likely
    answered there."""
    words = content_words(question)
    if len(words) < 2:
        return None
    for s, e in sentences:
        if words <= content_words(text[s:e]):
            return (s, e)
    return None


def closed_book_correct(answer: str, reference: str) -> bool:
    """Whether ``answer`` (given without the document) matches ``reference``: token F1 at least
    :data:`CLOSED_BOOK_F1`, or the normalized reference inside the answer."""
    if not answer.strip() or not reference.strip():
        return False
    ref = normalize_answer(reference)
    return answer_f1(answer, reference) >= CLOSED_BOOK_F1 or (
        len(ref) >= 3 and f" {ref} " in f" {normalize_answer(answer)} "
    )


def same_answer(check_quote: Span | None, check_answer: str, quotes: Sequence[Span], answer: str) -> bool:
    """Whether a check's reply gives back a draft's answer (round-trip consistency, Alberti et
    al., ACL 2019): token F1 ≥ 0.5 with the draft's answer, or the draft's answer inside the
    check's, quoting one of the draft's sentences."""
    if not check_answer.strip():
        return False
    if answer_f1(check_answer, answer) >= 0.5:
        return True
    overlap = check_quote is not None and any(check_quote[0] < e and check_quote[1] > s for s, e in quotes)
    return overlap and f" {normalize_answer(answer)} " in f" {normalize_answer(check_answer)} "


def is_duplicate(question: str, kept: Iterable[str]) -> bool:
    """Whether ``question`` is worded nearly as one of ``kept`` (token-set similarity ≥ :data:`DUPLICATE_SIMILARITY`)."""
    from rapidfuzz import fuzz

    q = normalize_answer(question)
    return any(fuzz.token_set_ratio(q, normalize_answer(k)) >= DUPLICATE_SIMILARITY for k in kept)


def question_id(doc_id: str, kind: str, question: str) -> str:
    """A stable id: the same question of the same document always gets the same one."""
    digest = hashlib.sha1(f"{doc_id}\x00{kind}\x00{squash(question)}".encode()).hexdigest()[:12]
    return f"gen_{digest}"


#: Why a draft was not kept, in the order the checks run.
REJECTIONS = {
    "unparsed": "the reply was not JSON of the schema",
    "too_long": "the prompt did not fit the model's window",
    "empty": "the question or the answer was empty",
    "not_a_question": "the question does not end with a question mark",
    "answer_in_question": "the question holds its own answer",
    "quote_not_found": "the quoted sentence is not in the passage",
    "answer_not_found": "the answer is not in the quoted sentence",
    "one_passage": "the answer does not draw on both passages",
    "answered_lexically": "one sentence of the document holds all the question's words",
    "answered_by_model": "the model found the answer in the document's most relevant passages",
    "round_trip": "the model, shown the passage among others like the question, did not give the same answer",
    "closed_book": "a model answered it correctly without the document",
    "duplicate": "worded as a question already kept",
}


@dataclass
class GenerationReport:
    """Every draft of one or more documents, counted per kind (see :data:`REJECTIONS`)."""

    wanted: Counter[str] = field(default_factory=Counter)
    drafted: Counter[str] = field(default_factory=Counter)
    schema_enforced: Counter[str] = field(default_factory=Counter)
    kept: Counter[str] = field(default_factory=Counter)
    rejected: Counter[tuple[str, str]] = field(default_factory=Counter)
    found: Counter[str] = field(default_factory=Counter)  # how spans were found: exact, whitespace, fuzzy
    checks: Counter[str] = field(default_factory=Counter)  # model calls that checked drafts
    documents: int = 0
    no_passages: list[str] = field(default_factory=list)

    def reject(self, kind: str, reason: str) -> None:
        if reason not in REJECTIONS:
            raise ValueError(f"unknown rejection {reason!r}")
        self.rejected[(kind, reason)] += 1

    def _counts(self) -> tuple[Counter[str], ...]:
        """The counts per kind or per way of finding a span (all but :attr:`rejected`)."""
        return (self.wanted, self.drafted, self.schema_enforced, self.kept, self.found, self.checks)

    def merge(self, other: GenerationReport) -> None:
        for mine, theirs in zip(self._counts(), other._counts(), strict=True):
            mine.update(theirs)
        self.rejected.update(other.rejected)
        self.documents += other.documents
        self.no_passages.extend(other.no_passages)

    def span_found_rate(self) -> float | None:
        """Of the drafts with a reference span to find (answerable kinds, parsed), the share whose span was found."""
        answerable = [k for k in KINDS if k != "unanswerable"]
        tried = sum(self.drafted[k] for k in answerable) - sum(
            self.rejected[(k, r)] for k in answerable for r in ("unparsed", "too_long", "empty")
        )
        lost = sum(self.rejected[(k, r)] for k in answerable for r in ("quote_not_found", "answer_not_found"))
        return None if tried <= 0 else (tried - lost) / tried

    def to_dict(self) -> JSONObject:
        kinds = [k for k in KINDS if self.wanted[k] or self.drafted[k]]
        return {
            "documents": self.documents,
            "wanted": {k: self.wanted[k] for k in kinds},
            "drafted": {k: self.drafted[k] for k in kinds},
            "schema_enforced": {k: self.schema_enforced[k] for k in kinds},
            "kept": {k: self.kept[k] for k in kinds},
            "rejected": {k: {r: self.rejected[(k, r)] for r in REJECTIONS if self.rejected[(k, r)]} for k in kinds},
            "spans_found_by": dict(self.found),
            "span_found_rate": self.span_found_rate(),
            "check_calls": dict(self.checks),
            "documents_without_passages": list(self.no_passages),
        }

    def lines(self) -> list[str]:
        """The report as lines for a person."""
        out = []
        for k in KINDS:
            if not (self.wanted[k] or self.drafted[k]):
                continue
            why = ", ".join(f"{r} {self.rejected[(k, r)]}" for r in REJECTIONS if self.rejected[(k, r)])
            out.append(
                f"{k}: kept {self.kept[k]} of {self.wanted[k]} wanted; {self.drafted[k]} drafted "
                f"({self.schema_enforced[k]} sent with a schema the server took)"
                + (f"; rejected: {why}" if why else "")
            )
        rate = self.span_found_rate()
        if rate is not None:
            out.append(f"reference spans found in the document: {rate:.0%} of the answerable drafts that parsed")
        for doc in self.no_passages:
            out.append(f"{doc}: no passage of {MIN_PASSAGE_LETTERS}+ letters to ask about; no question generated")
        return out
