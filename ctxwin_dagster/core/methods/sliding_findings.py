"""What sliding-window question answering passes around: what one window said
(:class:`WindowFinding`), the merged answer of several (:class:`Synthesis`), the reader that
makes the model work (:class:`WindowReader`) and the result of a run (:class:`SlidingAnswer`).

:mod:`~ctxwin_dagster.core.methods.sliding_qa` runs the windows and documents the method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, runtime_checkable

from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.methods.prompts import NO_ANSWER
from ctxwin_dagster.core.retrieval.window import Window

__all__ = [
    "CallRecord",
    "SlidingAnswer",
    "Synthesis",
    "WindowFinding",
    "WindowReader",
    "no_answer_finding",
]

#: A call record of a reader: the backends' record of one model call, which this layer cannot
#: name (it sits below the backends); findings carry them untouched and the asking engine reads
#: them back as its own.
CallRecord: TypeAlias = Any


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
    records: tuple[CallRecord, ...] = ()

    @property
    def span(self) -> tuple[str, int, int]:
        """The cited span: the evidence when located, else the whole window."""
        if self.evidence_span is not None:
            return (self.doc_id, *self.evidence_span)
        return (self.doc_id, self.start, self.end)

    def to_dict(self) -> JSONObject:
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
    records: tuple[CallRecord, ...] = ()
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
    records: list[CallRecord] = field(default_factory=list)
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

    def to_dict(self) -> JSONObject:
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
            "errors": list(self.errors),
        }


def no_answer_finding(
    window: Window, number: int, *, error: str | None = None, records: tuple[CallRecord, ...] = ()
) -> WindowFinding:
    """A finding saying ``window`` does not hold the answer (``NO_ANSWER``, confidence 0)."""
    return WindowFinding(
        number, window.doc_id, window.start, window.end, False, NO_ANSWER, 0.0, "", None, error, records
    )
