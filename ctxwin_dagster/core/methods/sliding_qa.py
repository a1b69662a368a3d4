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

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ctxwin_dagster.core.methods.prompts import NOT_IN_DOCUMENTS
from ctxwin_dagster.core.methods.sliding_findings import (
    CallRecord,
    SlidingAnswer,
    Synthesis,
    WindowFinding,
    WindowReader,
    no_answer_finding,
)
from ctxwin_dagster.core.methods.sliding_merge import best_supported, format_findings, locate_evidence, parse_synthesis
from ctxwin_dagster.core.methods.sliding_windows import sliding_windows
from ctxwin_dagster.core.retrieval.window import Window

__all__ = [
    "DEFAULT_OVERLAP_TOKENS",
    "DEFAULT_WAVE_SIZE",
    "DEFAULT_WINDOW_TOKENS",
    "LimitedReader",
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
# The run
# --------------------------------------------------------------------------------------


@runtime_checkable
class LimitedReader(Protocol):
    """A reader whose window prompt leaves room for at most so many tokens of window text."""

    def window_token_limit(self, *, summary: str | None = None, question: str = "") -> int | None: ...


def _check_settings(
    question: str,
    reader: WindowReader,
    *,
    window_tokens: int,
    summary: str | None,
    early_stop: float | None,
    wave_size: int,
    max_synthesis: int,
) -> None:
    """Raise ValueError, naming the fix, for settings a run cannot use."""
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question is empty; pass the question to answer")
    if isinstance(wave_size, bool) or not isinstance(wave_size, int) or wave_size < 1:
        raise ValueError(f"wave_size must be an int >= 1; got {wave_size!r}")
    if early_stop is not None and not 0 <= early_stop <= 1:
        raise ValueError(f"early_stop is a confidence in [0, 1] (or None to read every window); got {early_stop!r}")
    if max_synthesis < 2:
        raise ValueError(f"max_synthesis must be >= 2; got {max_synthesis}")
    if isinstance(reader, LimitedReader):
        most = reader.window_token_limit(summary=summary, question=question)
        if most is not None and window_tokens > most:
            raise ValueError(
                f"window_tokens={window_tokens} does not fit {reader.model}: with the prompt around it a window "
                f"may hold at most {most} tokens; pass window_tokens <= {most}"
                + (" or a shorter summary" if summary else "")
            )


def _read_waves(
    question: str,
    windows: Sequence[Window],
    reader: WindowReader,
    *,
    summary: str | None,
    early_stop: float | None,
    wave_size: int,
    progress: Callable[[int, int], None] | None,
) -> tuple[list[WindowFinding], bool]:
    """(the findings of the windows read, in order; whether windows were left unread because a
    wave answered with at least ``early_stop`` confidence)."""
    total = len(windows)
    findings: list[WindowFinding] = []
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
            return findings, len(findings) < total
    return findings, False


@dataclass(slots=True)
class _Merged:
    """The answer of the windows that found one: its text and sources, and the merge's call records."""

    text: str
    sources: list[WindowFinding]
    not_found: bool
    records: tuple[CallRecord, ...] = ()
    synthesized: bool = False


def _merge(
    question: str, findings: Sequence[WindowFinding], reader: WindowReader, *, summary: str | None, max_synthesis: int
) -> _Merged:
    """No window found an answer: not found; one: its answer; several: the reader's merge of the
    ``max_synthesis`` most confident."""
    found = sorted((f for f in findings if f.found), key=lambda f: (-f.confidence, f.window))
    if not found:
        return _Merged(NOT_IN_DOCUMENTS, [], True)
    if len(found) == 1:
        return _Merged(found[0].answer, [found[0]], False)
    given = found[:max_synthesis]
    synth = reader.synthesize(question, given, summary=summary)
    if synth.not_found:
        return _Merged(NOT_IN_DOCUMENTS, [], True, synth.records, True)
    by_number = {f.window: f for f in given}
    sources = [by_number[n] for n in synth.windows if n in by_number] or list(given)
    sources.sort(key=lambda f: (-f.confidence, f.window))
    return _Merged(synth.text, sources, False, synth.records, True)


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
    _check_settings(
        question,
        reader,
        window_tokens=window_tokens,
        summary=summary,
        early_stop=early_stop,
        wave_size=wave_size,
        max_synthesis=max_synthesis,
    )
    started = time.perf_counter()
    windows = plan_windows(
        source, window_tokens=window_tokens, overlap_tokens=overlap_tokens, encode=encode, decode=decode, doc_id=doc_id
    )
    findings, stopped_early = _read_waves(
        question, windows, reader, summary=summary, early_stop=early_stop, wave_size=wave_size, progress=progress
    )
    merged = _merge(question, findings, reader, summary=summary, max_synthesis=max_synthesis)
    return SlidingAnswer(
        question=question,
        text=merged.text,
        not_found=merged.not_found,
        sources=merged.sources,
        findings=findings,
        windows=windows,
        stopped_early=stopped_early,
        engine=reader.engine,
        model=reader.model,
        records=[r for f in findings for r in f.records] + list(merged.records),
        latency_s=time.perf_counter() - started,
        synthesized=merged.synthesized,
    )
