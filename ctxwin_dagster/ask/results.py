"""What an ask returns: the answer with its citations, windows, call records and latency."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from ctxwin_dagster.backends.base import CallRecord, Ledger, Totals
from ctxwin_dagster.core.budget.fit import FitReport
from ctxwin_dagster.core.defaults import normalize_variant as _normalize_variant
from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.methods.sliding_qa import SlidingAnswer
from ctxwin_dagster.core.retrieval.enhance import EnhancedContext
from ctxwin_dagster.core.retrieval.window import Window
from ctxwin_dagster.core.text.splitting import Chunk

__all__ = [
    "AskError",
    "AskResult",
    "Citation",
    "StaleIndexError",
    "cite_sentences",
    "normalize_variant",
    "sliding_result",
    "window_dict",
]


class AskError(ValueError):
    """A question cannot be asked as given; the message names the fix."""


class StaleIndexError(AskError):
    """The document file changed after it was indexed, so the index's offsets no longer hold."""


def normalize_variant(variant: str) -> str:
    """``"t"``/``"cc"``/``"swb"`` (or ``"t_rag"``, ``"T-RAG"``…) → the table variant name.

    Example::

        >>> normalize_variant("swb"), normalize_variant("T-RAG")
        ('swb_rag', 't_rag')
    """
    try:
        return _normalize_variant(variant)
    except ValueError as exc:
        raise AskError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Citation:
    """A cited span of a document: ``text[start:end]`` of ``doc_id``.

    ``chunk_id`` is the indexed chunk the span was cited by (retrieve mode: the best hit of
    the cited window) or the first indexed chunk overlapping it (sliding mode); None when the
    index has no chunk there. ``excerpt`` is the start of the span's text. ``marker`` is the
    number the answer cites it by (``[1]``, ``[2]`` …; several spans can share one: the sentences
    of one statement), 0 when the answer carries no markers (sliding mode).
    """

    chunk_id: str | None
    doc_id: str
    start: int
    end: int
    excerpt: str = ""
    marker: int = 0

    def as_tuple(self) -> tuple[str | None, str, int, int]:
        return (self.chunk_id, self.doc_id, self.start, self.end)

    def to_dict(self) -> JSONObject:
        """The fields by name: ``chunk_id``, ``doc_id``, ``start``, ``end``, ``excerpt``, ``marker``."""
        return asdict(self)


@dataclass(slots=True)
class AskResult:
    """One answered question (see the module docstring).

    Attributes:
        question, answer: the question and the answer text (``NOT_IN_DOCUMENTS`` when not found).
        not_found: True when the documents (as given to the model) do not hold the answer.
        citations: the cited spans.
        windows: the context windows used (retrieve) or read (sliding): ``doc_id``, ``start``,
            ``end``, ``score``, ``chunk_ids``, ``n_chars``.
        mode: the mode asked for; ``mode_used``: ``"retrieve"`` or ``"sliding"``.
        variant, doc_id: the index table and the document searched (None: all documents).
        engine, model: the answer engine (``"llm"`` or ``"extractive"``) and its model.
        records: the call records (answer calls, window calls, merge call).
        latency_s: wall time of the whole ask (retrieval included).
        fit: the fit check of the assembled context (auto mode), else None.
        notes: what the caller should know (text rebuilt from the index, context too long…).
        context: the enhanced context (retrieve/auto), else None.
        sliding: the sliding-window run (sliding, or auto when it did not fit), else None.
    """

    question: str
    answer: str
    not_found: bool
    citations: list[Citation]
    windows: list[JSONObject]
    mode: str
    mode_used: str
    variant: str | None
    doc_id: str | None
    engine: str
    model: str
    records: list[CallRecord] = field(default_factory=list)
    latency_s: float = 0.0
    fit: FitReport | None = None
    notes: list[str] = field(default_factory=list)
    context: EnhancedContext | None = None
    sliding: SlidingAnswer | None = None

    @property
    def cited_spans(self) -> list[tuple[str | None, str, int, int]]:
        """The citations as ``(chunk_id, doc_id, start, end)`` tuples."""
        return [c.as_tuple() for c in self.citations]

    @property
    def totals(self) -> Totals:
        """Calls, cache hits, tokens, characters and cost over :attr:`records`."""
        return Ledger.summarize(self.records)

    @property
    def input_tokens(self) -> int:
        return int(self.totals["input_tokens"])

    @property
    def output_tokens(self) -> int:
        return int(self.totals["output_tokens"])

    @property
    def cost_usd(self) -> float | None:
        """The cost of the work in USD (cache hits at the cost of the call they reuse), None
        when a model's price is unknown."""
        t = self.totals
        return float(t["cost_usd"]) if t["cost_known"] else None

    @property
    def paid_usd(self) -> float | None:
        """What answering paid in USD in this run (cache hits are free), None when a model's
        price is unknown."""
        t = self.totals
        return float(t["paid_usd"]) if t["cost_known"] else None

    @property
    def context_chars(self) -> int:
        return sum(n for w in self.windows if isinstance(n := w["n_chars"], int))

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict."""
        totals = self.totals
        return {
            "question": self.question,
            "answer": self.answer,
            "not_found": self.not_found,
            "citations": [c.to_dict() for c in self.citations],
            "windows": list(self.windows),
            "mode": self.mode,
            "mode_used": self.mode_used,
            "variant": self.variant,
            "doc_id": self.doc_id,
            "engine": self.engine,
            "model": self.model,
            "latency_s": round(self.latency_s, 3),
            "calls": totals["calls"],
            "cache_hits": totals["cache_hits"],
            "input_tokens": totals["input_tokens"],
            "output_tokens": totals["output_tokens"],
            "input_chars": totals["input_chars"],
            "cost_usd": self.cost_usd,
            "paid_usd": self.paid_usd,
            "fit": None if self.fit is None else self.fit.to_dict(),
            "notes": list(self.notes),
            "sliding": None if self.sliding is None else self.sliding.to_dict(),
        }

    def to_record(
        self,
        *,
        question_id: str,
        reference_answer: str = "",
        reference_spans: Sequence[Sequence[int]] = (),
        is_impossible: bool | None = None,
    ) -> JSONObject:
        """An answer record in the format of :mod:`ctxwin_dagster.core.evaluation.metrics.scoring`."""
        totals = self.totals
        rec: JSONObject = {
            "question_id": question_id,
            "doc_id": self.doc_id,
            "variant": self.variant or self.mode_used,
            "question": self.question,
            "answer": self.answer,
            "not_found": self.not_found,
            "reference_answer": reference_answer,
            "reference_spans": [list(s) for s in reference_spans],
            "retrieved": [],
            "contexts": [],
            "context_spans": [[w["start"], w["end"], w["doc_id"]] for w in self.windows],
            "citations": [c.to_dict() for c in self.citations],
            "latency_s": self.latency_s,
            "input_tokens": totals["input_tokens"],
            "output_tokens": totals["output_tokens"],
            "input_chars": totals["input_chars"],
            "calls": totals["calls"],
            "cache_hits": totals["cache_hits"],
            "cost_usd": self.cost_usd,
            "paid_usd": self.paid_usd,
        }
        if self.context is not None:
            rec["contexts"] = [w.text for w in self.context.windows]
        elif self.sliding is not None:
            rec["contexts"] = [w.text for w in self.sliding.windows[: self.sliding.n_read]]
        if is_impossible is not None:
            rec["is_impossible"] = is_impossible
        return rec


def _excerpt(text: str, n: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 1].rstrip() + "…"


#: A bracketed citation in an answer: ``[id]`` or ``[id1, id2]`` (as the answer prompt asks).
_BRACKET = re.compile(r"\[([^\[\]\n]{1,200})\]")


def _label_of(part: str, labels: Sequence[str]) -> str | None:
    part = part.strip()
    if part in labels:
        return part
    hits = [x for x in labels if len(part) >= 8 and x.startswith(part)]
    return hits[0] if len(hits) == 1 else None


def cite_sentences(answer: str, windows: Mapping[str, Window]) -> tuple[str, list[Citation]]:
    """Number an answer's citations and point each at the exact sentences it stands for.

    ``windows`` maps each passage label the answer may cite (a chunk id) to its window. Every
    bracket that cites known labels becomes ``[n]`` (``[n, m]``), numbered in the order the labels
    first appear, so the answer and the list of spans use one marker style; brackets naming no
    passage are left as they are. For each cited label, the answer's statement before the
    bracket (since the previous one) is split into sentences and each is looked up, white space
    aside, in the label's window: a sentence found there is cited with its own document offsets
    (sentences found one after another become one span). A statement found nowhere (a model that
    paraphrases) cites its whole window.

    >>> w = Window("d", 100, 158, "Notices are in writing. The laws of Israel govern it. End.", 1.0, ("c1",))
    >>> text, cites = cite_sentences("The laws of Israel govern it. [c1]", {"c1": w})
    >>> text, [(c.marker, c.start, c.end) for c in cites]
    ('The laws of Israel govern it. [1]', [(1, 124, 153)])
    """
    from ctxwin_dagster.core.text.sentences import split_sentences

    labels = list(windows)
    numbers: dict[str, int] = {}
    spans: dict[tuple[int, str], list[tuple[int, int]]] = {}
    out: list[str] = []
    at = 0
    for m in _BRACKET.finditer(answer):
        cited = [label for part in re.split(r"[,;]\s*", m.group(1)) if (label := _label_of(part, labels))]
        if not cited:
            continue
        statement = answer[at : m.start()]
        out.append(statement)
        for label in dict.fromkeys(cited):
            n = numbers.setdefault(label, len(numbers) + 1)
            text = windows[label].text
            found = spans.setdefault((n, label), [])
            for s, e in split_sentences(statement):
                words = statement[s:e].split()
                if len(" ".join(words)) < 10:
                    continue
                hit = re.search(r"\s+".join(re.escape(x) for x in words), text)
                if hit is not None:
                    found.append((hit.start(), hit.end()))
        out.append("[" + ", ".join(str(numbers[label]) for label in dict.fromkeys(cited)) + "]")
        at = m.end()
    out.append(answer[at:])
    citations: list[Citation] = []
    for (n, label), found in spans.items():
        w = windows[label]
        merged: list[list[int]] = []
        for s, e in sorted(set(found)):
            if merged and (s <= merged[-1][1] or not w.text[merged[-1][1] : s].strip()):
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        for s, e in merged or [[0, len(w.text)]]:
            citations.append(Citation(label, w.doc_id, w.start + s, w.start + e, _excerpt(w.text[s:e]), n))
    return "".join(out), citations


def window_dict(w: Window) -> JSONObject:
    return {
        "doc_id": w.doc_id,
        "start": w.start,
        "end": w.end,
        "score": round(float(w.score), 6),
        "chunk_ids": list(w.chunk_ids),
        "n_chars": len(w.text),
    }


def sliding_result(
    question: str,
    run: SlidingAnswer,
    *,
    mode: str,
    variant: str | None,
    doc_id: str | None,
    texts: Mapping[str, str],
    chunks: Sequence[Chunk],
    notes: list[str],
) -> AskResult:
    """The :class:`AskResult` of a sliding-window run: citations mapped to indexed chunks where they overlap one."""
    by_doc: dict[str, list[Chunk]] = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c)
    citations = []
    for f in run.sources:
        d, s, e = f.span
        cid = next((c.chunk_id for c in by_doc.get(d, []) if c.start < e and s < c.end), None)
        text = texts.get(d, "")
        excerpt = _excerpt(text[s:e]) if text else _excerpt(f.evidence or f.answer)
        citations.append(Citation(cid, d, s, e, excerpt))
    if run.stopped_early:
        notes.append(
            f"stopped early after {run.n_read} of {run.n_windows} windows (a window reached the confidence threshold)"
        )
    if run.errors:
        notes.append(f"{len(run.errors)} windows gave no usable reply: {run.errors[0]}")
    windows: list[JSONObject] = [
        {
            "doc_id": f.doc_id,
            "start": f.start,
            "end": f.end,
            "score": round(f.confidence, 6),
            "chunk_ids": [],
            "n_chars": f.end - f.start,
            "window": f.window,
            "found": f.found,
        }
        for f in run.findings
    ]
    return AskResult(
        question=question,
        answer=run.text,
        not_found=run.not_found,
        citations=citations,
        windows=windows,
        mode=mode,
        mode_used="sliding",
        variant=variant,
        doc_id=doc_id,
        engine=run.engine,
        model=run.model,
        records=list(run.records),
        notes=notes,
        sliding=run,
    )
