"""Sliding-window question answering over text longer than a model's context.

The text (a whole document, or the blocks of an assembled context) is cut into overlapping
token windows (:func:`~ctxwin_dagster.core.methods.sliding_windows.sliding_windows` in token mode, stride =
size − overlap). Every window is asked the question with the ``window_answer`` template — JSON
``{"answer", "confidence", "evidence"}``, or ``NO_ANSWER`` when the window does not hold it —
optionally with a global summary of the document in every prompt. Windows are read in waves
(document order, one wave handed to the reader at once so its calls run in parallel); with
``early_stop`` the run stops after the first wave in which a window answered with at least that
confidence. Finally the windows that found an answer are merged into one answer, and the
answer lists the windows (document spans) it came from:

* no window found an answer → :data:`~ctxwin_dagster.core.methods.prompts.NOT_IN_DOCUMENTS`;
* one window → its answer (no further call);
* several → the reader's :meth:`WindowReader.synthesize` (an LLM reader makes one more call
  with :data:`~ctxwin_dagster.core.methods.prompts.SYNTHESIZE_TEMPLATES`; an extractive reader picks
  the best-supported answer, :func:`best_supported`).

The model work is done by a :class:`WindowReader` (see ``ctxwin_dagster.backends.tasks.window_readers``
for the chat-model and the extractive readers); this module is plain Python and makes no call
itself.

Example (a toy reader that "finds" the answer in windows containing a word)::

    >>> class Toy:
    ...     engine, model = "toy", "toy"
    ...     def read(self, question, windows, *, numbers, total, summary=None):
    ...         return [WindowFinding(n, w.doc_id, w.start, w.end, "Paris" in w.text,
    ...                               "Paris" if "Paris" in w.text else "NO_ANSWER",
    ...                               0.9 if "Paris" in w.text else 0.0)
    ...                 for n, w in zip(numbers, windows)]
    ...     def synthesize(self, question, findings, *, summary=None):
    ...         return Synthesis(findings[0].answer, (findings[0].window,))
    >>> text = "Some words. " * 20 + "The capital is Paris. " + "More words. " * 20
    >>> enc = lambda s: [ord(c) for c in s]
    >>> dec = lambda t: "".join(map(chr, t))
    >>> result = sliding_window_qa("Capital?", text, reader=Toy(), doc_id="d",
    ...                            window_tokens=100, overlap_tokens=30, encode=enc, decode=dec)
    >>> result.text, result.n_windows, [(f.start, f.end) for f in result.sources]
    ('Paris', 7, [(210, 310)])
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ctxwin_dagster.core.methods.prompts import NO_ANSWER, NOT_IN_DOCUMENTS
from ctxwin_dagster.core.methods.sliding_windows import sliding_windows
from ctxwin_dagster.core.retrieval.window import Window

__all__ = [
    "DEFAULT_OVERLAP_TOKENS",
    "DEFAULT_WAVE_SIZE",
    "DEFAULT_WINDOW_TOKENS",
    "SlidingAnswer",
    "Synthesis",
    "WindowFinding",
    "WindowReader",
    "best_supported",
    "format_findings",
    "locate_evidence",
    "no_answer_finding",
    "parse_synthesis",
    "plan_windows",
    "sliding_window_qa",
]

#: Window size and overlap in tokens when none are given: a window of a few pages, well
#: inside any current model's context, with a paragraph of overlap so that no sentence is
#: only ever seen cut in two.
DEFAULT_WINDOW_TOKENS = 4000
DEFAULT_OVERLAP_TOKENS = 200

#: Windows handed to the reader at once (its calls run in parallel within a wave).
DEFAULT_WAVE_SIZE = 8


@dataclass(frozen=True, slots=True)
class WindowFinding:
    """What one window said about the question.

    Attributes:
        window: the window's number (1-based, in reading order).
        doc_id, start, end: the window's span in its document.
        found: False when the window does not hold the answer (``answer`` is ``NO_ANSWER``).
        answer: the window's answer.
        confidence: 0..1, the reader's confidence that the window holds the answer (an LLM's
            own estimate, or the extractive engine's question–sentence cosine similarity).
        evidence: a quote from the window supporting the answer ("" when none).
        evidence_span: document offsets of ``evidence`` when it was found in the window.
        error: why the window has no usable reply (an unparsable reply), else None.
        records: the call records behind it (opaque to this module).
    """

    window: int
    doc_id: str
    start: int
    end: int
    found: bool
    answer: str
    confidence: float
    evidence: str = ""
    evidence_span: tuple[int, int] | None = None
    error: str | None = None
    records: tuple[Any, ...] = ()

    @property
    def span(self) -> tuple[str, int, int]:
        """The cited span: the evidence when located, else the whole window."""
        if self.evidence_span is not None:
            return (self.doc_id, *self.evidence_span)
        return (self.doc_id, self.start, self.end)

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "doc_id": self.doc_id,
            "start": self.start,
            "end": self.end,
            "found": self.found,
            "answer": self.answer,
            "confidence": self.confidence,
            "evidence": self.evidence,
            "evidence_span": list(self.evidence_span) if self.evidence_span else None,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class Synthesis:
    """A merged answer and the window numbers it comes from."""

    text: str
    windows: tuple[int, ...]
    records: tuple[Any, ...] = ()
    not_found: bool = False


@runtime_checkable
class WindowReader(Protocol):
    """Reads windows and merges their answers (an LLM, or the extractive engine).

    ``read`` gets one wave of windows and must return one :class:`WindowFinding` per window,
    in order (numbered by ``numbers``; ``total`` is the number of windows of the run).
    ``synthesize`` gets the findings that found an answer (at least two), best first.
    """

    engine: str
    model: str

    def read(
        self,
        question: str,
        windows: Sequence[Window],
        *,
        numbers: Sequence[int],
        total: int,
        summary: str | None = None,
    ) -> list[WindowFinding]: ...

    def synthesize(
        self, question: str, findings: Sequence[WindowFinding], *, summary: str | None = None
    ) -> Synthesis: ...


@dataclass(slots=True)
class SlidingAnswer:
    """The result of :func:`sliding_window_qa`.

    Attributes:
        question: the question.
        text: the merged answer, or ``NOT_IN_DOCUMENTS``.
        not_found: True when no window held the answer.
        sources: the findings the answer comes from (document spans), best first.
        findings: every window read, in reading order.
        windows: every window planned (also those not read after an early stop).
        stopped_early: True when windows were left unread because of ``early_stop``.
        engine, model: the reader's.
        records: every call record (windows and the merge), in order.
        latency_s: wall time of the run.
    """

    question: str
    text: str
    not_found: bool
    sources: list[WindowFinding]
    findings: list[WindowFinding]
    windows: list[Window]
    stopped_early: bool
    engine: str
    model: str
    records: list[Any] = field(default_factory=list)
    latency_s: float = 0.0
    synthesized: bool = False

    @property
    def n_windows(self) -> int:
        return len(self.windows)

    @property
    def n_read(self) -> int:
        return len(self.findings)

    @property
    def n_found(self) -> int:
        return sum(1 for f in self.findings if f.found)

    @property
    def errors(self) -> list[str]:
        """The reasons of windows without a usable reply."""
        return [f"window {f.window}: {f.error}" for f in self.findings if f.error]

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.text,
            "not_found": self.not_found,
            "engine": self.engine,
            "model": self.model,
            "n_windows": self.n_windows,
            "n_read": self.n_read,
            "n_found": self.n_found,
            "stopped_early": self.stopped_early,
            "synthesized": self.synthesized,
            "latency_s": round(self.latency_s, 3),
            "sources": [f.to_dict() for f in self.sources],
            "findings": [f.to_dict() for f in self.findings],
            "errors": self.errors,
        }


# --------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------


def plan_windows(
    source: str | Sequence[Window],
    *,
    window_tokens: int = DEFAULT_WINDOW_TOKENS,
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
    encode: Callable[[str], Sequence[int]],
    decode: Callable[[Sequence[int]], str] | None = None,
    doc_id: str = "",
) -> list[Window]:
    """The token windows of ``source``, with document offsets.

    ``source`` is a whole document text (``doc_id`` names it) or blocks of documents
    (:class:`Window` objects with their spans, e.g. an assembled context): each block is cut on
    its own and window offsets are moved to the block's place in its document. Blocks no
    longer than ``window_tokens`` stay whole.

    Example::

        >>> enc = lambda s: [ord(c) for c in s]
        >>> dec = lambda t: "".join(map(chr, t))
        >>> [(w.start, w.end) for w in plan_windows("abcdefghij", window_tokens=4, overlap_tokens=1,
        ...                                         encode=enc, decode=dec, doc_id="d")]
        [(0, 4), (3, 7), (6, 10)]
        >>> [(w.doc_id, w.start, w.text) for w in plan_windows([Window("d", 100, 106, "abcdef")],
        ...      window_tokens=4, overlap_tokens=2, encode=enc, decode=dec)]
        [('d', 100, 'abcd'), ('d', 102, 'cdef')]
    """
    blocks = [Window(doc_id, 0, len(source), source)] if isinstance(source, str) else list(source)
    planned: list[Window] = []
    for b in blocks:
        if not isinstance(b, Window):
            raise TypeError(f"source must be a text or a sequence of Window; got an item of type {type(b).__name__}")
        if len(b.text) != b.end - b.start:
            raise ValueError(
                f"block of {b.doc_id!r} at [{b.start}, {b.end}) holds {len(b.text)} characters; "
                "pass blocks whose text is their document span"
            )
        for w in sliding_windows(
            b.text,
            size=window_tokens,
            overlap=overlap_tokens,
            unit="tokens",
            encode=encode,
            decode=decode,
            doc_id=b.doc_id,
        ):
            planned.append(Window(b.doc_id, b.start + w.start, b.start + w.end, w.text, b.score, b.chunk_ids))
    return planned


# --------------------------------------------------------------------------------------
# Merging
# --------------------------------------------------------------------------------------

_WS = re.compile(r"\s+")


def locate_evidence(evidence: str, window: Window) -> tuple[int, int] | None:
    """Document offsets of a quote in ``window``: exact match first, then ignoring white space
    and case; None when the quote is not in the window (a paraphrase).

    Example::

        >>> locate_evidence("brown  fox", Window("d", 100, 119, "The quick brown fox"))
        (110, 119)
    """
    quote = evidence.strip().strip("\"'“”„‘’").strip()
    if len(quote) < 3:
        return None
    i = window.text.find(quote)
    if i >= 0:
        return (window.start + i, window.start + i + len(quote))
    words = [re.escape(w) for w in quote.split()]
    if not words:
        return None
    m = re.search(r"\s+".join(words), window.text, flags=re.IGNORECASE)
    if m is None:
        return None
    return (window.start + m.start(), window.start + m.end())


def _overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def best_supported(findings: Sequence[WindowFinding]) -> tuple[WindowFinding, list[WindowFinding]]:
    """The best-supported answer among ``findings`` (those with ``found``) and its support.

    The answer with the highest confidence wins; ties go to the answer more windows agree on
    (same normalized answer text, or overlapping evidence spans), then to the earlier window.
    Returns the winner and every finding that agrees with it (the winner first).

    Example::

        >>> fs = [WindowFinding(1, "d", 0, 10, True, "A", 0.6, evidence_span=(5, 9)),
        ...       WindowFinding(2, "d", 8, 20, True, "A", 0.6, evidence_span=(5, 9)),
        ...       WindowFinding(3, "d", 18, 30, True, "B", 0.6)]
        >>> win, support = best_supported(fs)
        >>> win.window, [f.window for f in support]
        (1, [1, 2])
    """
    found = [f for f in findings if f.found]
    if not found:
        raise ValueError("best_supported needs at least one finding with found=True")

    def agrees(a: WindowFinding, b: WindowFinding) -> bool:
        return _norm(a.answer) == _norm(b.answer) or _overlap(a.evidence_span, b.evidence_span)

    support = {f.window: [g for g in found if agrees(f, g)] for f in found}
    best = min(found, key=lambda f: (-round(f.confidence, 6), -len(support[f.window]), f.window))
    agreeing = [best] + [g for g in support[best.window] if g is not best]
    return best, agreeing


def _norm(text: str) -> str:
    return _WS.sub(" ", text.strip().lower())


def format_findings(findings: Sequence[WindowFinding]) -> str:
    """The ``{answers}`` of :data:`~ctxwin_dagster.core.methods.prompts.SYNTHESIZE_TEMPLATES`: one block per window.

    Example::

        >>> print(format_findings([WindowFinding(3, "d", 0, 9, True, "Yes.", 0.9, "it is so")]))
        [W3] (confidence 0.90)
        Answer: Yes.
        Quote: "it is so"
    """
    blocks = []
    for f in findings:
        lines = [f"[W{f.window}] (confidence {f.confidence:.2f})", f"Answer: {f.answer}"]
        if f.evidence:
            lines.append(f'Quote: "{f.evidence}"')
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


_W_CITATION = re.compile(r"\[\s*(W\s*\d+(?:\s*[,;]\s*W?\s*\d+)*)\s*\]", re.IGNORECASE)


def parse_synthesis(text: str, windows: Sequence[int]) -> Synthesis:
    """The window numbers a merged answer cites (``[W3]``, ``[W3, W7]``), and the not-found sentinel.

    Numbers that name no given window are ignored.

    Example::

        >>> parse_synthesis("Paris [W2], not Lyon [W5, W9].", [2, 5]).windows
        (2, 5)
        >>> parse_synthesis("NOT_IN_DOCUMENTS", [1]).not_found
        True
    """
    clean = text.strip()
    bare = clean.strip(" \t\n.\"'`*")
    if bare.upper().replace(" ", "_") == NOT_IN_DOCUMENTS:
        return Synthesis(NOT_IN_DOCUMENTS, (), (), True)
    allowed = set(windows)
    cited: dict[int, None] = {}
    for m in _W_CITATION.finditer(clean):
        for num in re.findall(r"\d+", m.group(1)):
            if int(num) in allowed:
                cited.setdefault(int(num), None)
    return Synthesis(clean, tuple(cited))


# --------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------


def sliding_window_qa(
    question: str,
    source: str | Sequence[Window],
    *,
    reader: WindowReader,
    encode: Callable[[str], Sequence[int]],
    decode: Callable[[Sequence[int]], str] | None = None,
    doc_id: str = "",
    window_tokens: int = DEFAULT_WINDOW_TOKENS,
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
    summary: str | None = None,
    early_stop: float | None = None,
    wave_size: int = DEFAULT_WAVE_SIZE,
    max_synthesis: int = 12,
    progress: Callable[[int, int], None] | None = None,
) -> SlidingAnswer:
    """Answer ``question`` from ``source`` window by window (see the module docstring).

    Args:
        question: the question.
        source: a whole document text, or blocks of documents (:class:`Window` with spans).
        reader: the :class:`WindowReader` (LLM or extractive).
        encode, decode: the tokenizer of the windows (e.g. ``counter.encoding.encode_ordinary``
            and ``counter.encoding.decode`` of a :class:`~ctxwin_dagster.core.budget.tokens.TokenCounter`).
        doc_id: the document's id when ``source`` is a text.
        window_tokens, overlap_tokens: window size and overlap in tokens.
        summary: a global summary put in every window prompt (None: no summary).
        early_stop: stop after the first wave in which a window answered with at least this
            confidence (None: read every window).
        wave_size: windows handed to the reader at once.
        max_synthesis: at most this many answers (the most confident) go to the merge.
        progress: ``fn(windows_read, windows_total)`` after each wave.

    Raises:
        ValueError: invalid settings (the message names the fix), or a reader that returned
            the wrong number of findings.
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question is empty; pass the question to answer")
    if isinstance(wave_size, bool) or not isinstance(wave_size, int) or wave_size < 1:
        raise ValueError(f"wave_size must be an int >= 1; got {wave_size!r}")
    if early_stop is not None and not 0 <= early_stop <= 1:
        raise ValueError(f"early_stop is a confidence in [0, 1] (or None to read every window); got {early_stop!r}")
    if max_synthesis < 2:
        raise ValueError(f"max_synthesis must be >= 2; got {max_synthesis}")
    limit = getattr(reader, "window_token_limit", None)
    if callable(limit):
        most = limit(summary=summary, question=question)
        if most is not None and window_tokens > most:
            raise ValueError(
                f"window_tokens={window_tokens} does not fit {reader.model}: with the prompt around it a window "
                f"may hold at most {most} tokens; pass window_tokens <= {most}"
                + (" or a shorter summary" if summary else "")
            )
    started = time.perf_counter()
    windows = plan_windows(
        source, window_tokens=window_tokens, overlap_tokens=overlap_tokens, encode=encode, decode=decode, doc_id=doc_id
    )
    total = len(windows)
    findings: list[WindowFinding] = []
    stopped_early = False
    for w0 in range(0, total, wave_size):
        wave = windows[w0 : w0 + wave_size]
        numbers = list(range(w0 + 1, w0 + len(wave) + 1))
        got = list(reader.read(question, wave, numbers=numbers, total=total, summary=summary))
        if len(got) != len(wave):
            raise ValueError(
                f"{type(reader).__name__}.read returned {len(got)} findings for {len(wave)} windows; it must return one per window"
            )
        findings.extend(got)
        if progress is not None:
            progress(len(findings), total)
        if early_stop is not None and any(f.found and f.confidence >= early_stop for f in got):
            stopped_early = len(findings) < total
            break
    records: list[Any] = [r for f in findings for r in f.records]
    found = sorted((f for f in findings if f.found), key=lambda f: (-f.confidence, f.window))
    synthesized = False
    if not found:
        text, sources, not_found = NOT_IN_DOCUMENTS, [], True
    elif len(found) == 1:
        text, sources, not_found = found[0].answer, [found[0]], False
    else:
        given = found[:max_synthesis]
        synth = reader.synthesize(question, given, summary=summary)
        records.extend(synth.records)
        synthesized = True
        if synth.not_found:
            text, sources, not_found = NOT_IN_DOCUMENTS, [], True
        else:
            by_number = {f.window: f for f in given}
            sources = [by_number[n] for n in synth.windows if n in by_number] or list(given)
            sources.sort(key=lambda f: (-f.confidence, f.window))
            text, not_found = synth.text, False
    return SlidingAnswer(
        question=question,
        text=text,
        not_found=not_found,
        sources=sources,
        findings=findings,
        windows=windows,
        stopped_early=stopped_early,
        engine=getattr(reader, "engine", ""),
        model=getattr(reader, "model", ""),
        records=records,
        latency_s=time.perf_counter() - started,
        synthesized=synthesized,
    )


def no_answer_finding(
    window: Window, number: int, *, error: str | None = None, records: tuple[Any, ...] = ()
) -> WindowFinding:
    """A finding saying ``window`` does not hold the answer (``NO_ANSWER``, confidence 0)."""
    return WindowFinding(
        number, window.doc_id, window.start, window.end, False, NO_ANSWER, 0.0, "", None, error, records
    )
