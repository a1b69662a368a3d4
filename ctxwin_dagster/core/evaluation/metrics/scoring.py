"""Per-question retrieval and answer metrics over answer records.

Plain Python (numpy only): no dagster, ragas or lancedb.

An **answer record** is a plain dict, as the asking engine writes it::

    {"question_id": "q1", "doc_id": "act", "variant": "swb_rag",
     "question": "...", "answer": "...", "not_found": False,
     "reference_answer": "...", "reference_spans": [[120, 180]],
     "retrieved": [{"chunk_id": "c1", "doc_id": "act", "start": 0, "end": 1000,
                    "text": "...", "score": 0.83}, ...],
     "contexts": ["block given to the model", ...], "context_spans": [[0, 1900], ...],
     "latency_s": 1.2, "input_tokens": 900, "output_tokens": 40, "cost_usd": 0.0011}

Optional keys: ``is_impossible`` (else: unanswerable exactly when ``reference_answer`` is
empty and ``reference_spans`` is ``[]``), ``reference_chunk_ids`` (else found from a chunk
catalog, see :func:`reference_chunk_ids`), ``input_chars``, ``calls``, ``cache_hits`` (or
``cached``), ``paid_usd`` (what this run paid; ``cost_usd`` is the cost of the work, which a
cache hit keeps), ``complexity``. ``context_spans[i]`` is ``[start, end]`` (or
``[start, end, doc_id]`` / ``{"start", "end", "doc_id"}``) of ``contexts[i]`` in the question's
document.

Metrics per question (see :func:`score_record`):

* answerable questions: ``span_hit`` (a reference span lies wholly inside one context block),
  ``span_char_recall`` (share of reference-span characters covered by the context spans),
  ``hit@k`` and ``mrr`` over ``retrieved`` (a chunk is relevant when it overlaps a reference
  span), ``id_context_precision`` / ``id_context_recall`` (reference chunk ids = the chunks
  overlapping a reference span), ``answer_f1`` and ``exact_match`` against
  ``reference_answer`` (SQuAD normalization, citation markers left out; a ``not_found`` answer
  scores 0), ``abstained``;
* unanswerable questions: ``not_found_correct`` (1.0 when the model said it was not found).

A metric that does not apply to a question is ``None`` (never NaN); one that applies but whose
input is missing (no ``context_spans``, no chunk catalog for recall) is ``None`` too and is
counted as ``n_missing`` by :func:`~ctxwin_dagster.core.evaluation.metrics.aggregation.aggregate`, so
nothing is averaged away silently.

Example::

    >>> rec = {"question_id": "q1", "doc_id": "d", "variant": "t_rag", "question": "Where?",
    ...        "answer": "in France", "not_found": False, "reference_answer": "France",
    ...        "reference_spans": [[10, 16]],
    ...        "retrieved": [{"chunk_id": "a", "doc_id": "d", "start": 0, "end": 8, "text": "", "score": .9},
    ...                      {"chunk_id": "b", "doc_id": "d", "start": 8, "end": 20, "text": "", "score": .8}],
    ...        "contexts": ["..."], "context_spans": [[0, 20]]}
    >>> s = score_record(rec, ks=(1, 2))
    >>> s["span_hit"], s["hit@1"], s["hit@2"], s["mrr"], s["id_context_precision"]
    (1.0, 0.0, 1.0, 0.5, 0.5)
    >>> s["answer_f1"], s["exact_match"]
    (0.6666666666666666, 0.0)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, TypeAlias, runtime_checkable

from ctxwin_dagster.core.evaluation.metrics.answers import answer_f1, exact_match, reference_answers, strip_citations
from ctxwin_dagster.core.evaluation.metrics.records import (
    RecordError,
    check_record,
    context_spans,
    is_answerable,
    number_or_none,
    parse_span,
    record_where,
)
from ctxwin_dagster.core.evaluation.record_values import as_int, items, mappings, sequence
from ctxwin_dagster.core.json_types import JSONScalar

__all__ = [
    "ANSWERABLE_METRICS",
    "DEFAULT_KS",
    "EFFICIENCY_FIELDS",
    "METRIC_POPULATION",
    "UNANSWERABLE_METRICS",
    "Catalog",
    "ChunkSource",
    "ScoreRow",
    "chunk_catalog",
    "reference_chunk_ids",
    "reference_spans",
    "score_answers",
    "score_record",
    "union_length",
]

DEFAULT_KS: tuple[int, ...] = (1, 4)

#: Metrics computed for answerable questions only (``ks`` adds one ``hit@k`` each).
ANSWERABLE_METRICS: tuple[str, ...] = (
    "span_hit",
    "span_char_recall",
    "mrr",
    "id_context_precision",
    "id_context_recall",
    "answer_f1",
    "exact_match",
    "abstained",
)
#: Metrics computed for unanswerable questions only.
UNANSWERABLE_METRICS: tuple[str, ...] = ("not_found_correct",)

#: Which questions each metric is averaged over (``hit@k`` are "answerable" too).
METRIC_POPULATION: dict[str, str] = {
    **{m: "answerable" for m in ANSWERABLE_METRICS},
    **{m: "unanswerable" for m in UNANSWERABLE_METRICS},
}

#: Efficiency fields passed through from the record (None when the record lacks them).
EFFICIENCY_FIELDS: tuple[str, ...] = (
    "latency_s",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "paid_usd",
    "input_chars",
    "calls",
    "cache_hits",
)

#: The metrics of one record (see :func:`score_record`): identifiers, counts and metrics.
ScoreRow: TypeAlias = dict[str, JSONScalar]
#: A chunk catalog: ``{doc_id: [chunk dicts]}`` (``chunk_id``, ``start``, ``end``, maybe ``text``).
Catalog: TypeAlias = dict[str, list[dict[str, object]]]


@runtime_checkable
class _Frame(Protocol):
    """A table with columns that gives its rows as dicts (a pandas DataFrame)."""

    columns: object

    def to_dict(self, orient: str) -> list[dict[str, object]]: ...


#: Chunks as :func:`chunk_catalog` takes them: a catalog, chunk dicts with ``doc_id``, a
#: DataFrame of them, or None.
ChunkSource: TypeAlias = "Mapping[str, Iterable[Mapping[str, object]]] | Iterable[Mapping[str, object]] | _Frame | None"


# --------------------------------------------------------------------------------------
# Spans
# --------------------------------------------------------------------------------------


def union_length(spans: Iterable[tuple[int, int]]) -> int:
    """Characters covered by the union of ``[start, end)`` spans (overlaps counted once)."""
    total = 0
    current: tuple[int, int] | None = None
    for s, e in sorted(spans):
        if current is None or s > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = (s, e)
        else:
            current = (current[0], max(current[1], e))
    if current is not None:
        total += current[1] - current[0]
    return total


def _covered(ref: Sequence[tuple[int, int]], cover: Sequence[tuple[int, int]]) -> int:
    """Characters of the union of ``ref`` that the union of ``cover`` covers."""
    pieces = [(max(s, cs), min(e, ce)) for s, e in ref for cs, ce in cover if max(s, cs) < min(e, ce)]
    return union_length(pieces)


def _overlaps(start: int, end: int, spans: Sequence[tuple[int, int]]) -> bool:
    return any(start < e and s < end for s, e in spans)


def reference_spans(record: Mapping[str, object], where: str) -> list[tuple[int, int]]:
    """The record's non-empty ``reference_spans`` as ``(start, end)`` pairs.

    Raises :class:`~ctxwin_dagster.core.evaluation.metrics.records.RecordError` naming ``where``
    (the record) for a malformed span.

    Example::

        >>> reference_spans({"reference_spans": [[3, 9], [5, 5]]}, "record 0")
        [(3, 9)]
    """
    spans = []
    for i, value in enumerate(items(record, "reference_spans")):
        s, e, _ = parse_span(value, f"{where} reference_spans[{i}]")
        if e > s:
            spans.append((s, e))
    return spans


# --------------------------------------------------------------------------------------
# Chunks
# --------------------------------------------------------------------------------------


def chunk_catalog(chunks: ChunkSource) -> Catalog:
    """A chunk catalog as ``{doc_id: [chunk dicts]}``.

    Accepts ``{doc_id: [chunk dicts]}``, an iterable of chunk dicts with ``doc_id`` (the
    ``chunks`` asset's rows) or a DataFrame of them; None gives ``{}``.

    Example::

        >>> chunk_catalog([{"doc_id": "d", "chunk_id": "a", "start": 0, "end": 5}])
        {'d': [{'doc_id': 'd', 'chunk_id': 'a', 'start': 0, 'end': 5}]}
    """
    if chunks is None:
        return {}
    rows = chunks.to_dict("records") if isinstance(chunks, _Frame) else chunks
    if isinstance(rows, Mapping):
        return {str(doc): [dict(c) for c in doc_rows] for doc, doc_rows in rows.items()}
    by_doc: Catalog = defaultdict(list)
    for c in rows:
        if "doc_id" not in c:
            raise RecordError(
                f"chunk catalog row {dict(c)!r} has no doc_id; give chunks as {{doc_id: [...]}} or rows with doc_id"
            )
        by_doc[str(c["doc_id"])].append(dict(c))
    return dict(by_doc)


def reference_chunk_ids(record: Mapping[str, object], chunks: ChunkSource = None) -> list[str] | None:
    """The ids of the chunks that overlap a reference span, in document order.

    Taken from the record's ``reference_chunk_ids`` when present, else from ``chunks`` (a
    catalog: ``{doc_id: [{"chunk_id", "start", "end"}, ...]}``, a list of chunk dicts with
    ``doc_id``, or a DataFrame of them). None when neither is available.

    Example::

        >>> cat = {"d": [{"chunk_id": "a", "start": 0, "end": 10}, {"chunk_id": "b", "start": 8, "end": 20}]}
        >>> reference_chunk_ids({"doc_id": "d", "reference_spans": [[9, 12]]}, cat)
        ['a', 'b']
    """
    if record.get("reference_chunk_ids") is not None:
        return [str(c) for c in sequence(record["reference_chunk_ids"])]
    catalog = (
        chunks
        if isinstance(chunks, dict) and all(isinstance(v, list) for v in chunks.values())
        else chunk_catalog(chunks)
    )
    if not catalog:
        return None
    doc_id = str(record.get("doc_id"))
    if doc_id not in catalog:
        return None
    spans = reference_spans(record, record_where(record, None))
    rows = sorted(catalog[doc_id], key=lambda c: (as_int(c["start"]), as_int(c["end"])))
    return [str(c["chunk_id"]) for c in rows if _overlaps(as_int(c["start"]), as_int(c["end"]), spans)]


# --------------------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------------------


def _metric_names(ks: Sequence[int]) -> tuple[str, ...]:
    """Every metric of a row, in the row's order: ``hit@k`` after the span metrics."""
    return (*ANSWERABLE_METRICS[:2], *(f"hit@{k}" for k in ks), *ANSWERABLE_METRICS[2:], *UNANSWERABLE_METRICS)


def _retrieval_metrics(
    out: ScoreRow,
    record: Mapping[str, object],
    retrieved: Sequence[Mapping[str, object]],
    ref_spans: Sequence[tuple[int, int]],
    *,
    ks: Sequence[int],
    chunks: ChunkSource,
) -> None:
    """``hit@k``, ``mrr`` and the ID-based context precision and recall, into ``out``."""
    doc_id = out["doc_id"]
    relevant = [
        (hit.get("doc_id") is None or doc_id is None or str(hit.get("doc_id")) == doc_id)
        and _overlaps(as_int(hit["start"]), as_int(hit["end"]), ref_spans)
        for hit in retrieved
    ]
    for k in ks:
        out[f"hit@{k}"] = float(any(relevant[:k]))
    first = next((i for i, r in enumerate(relevant) if r), None)
    out["mrr"] = 0.0 if first is None else 1.0 / (first + 1)
    ids: dict[str, bool] = {}
    for hit, rel in zip(retrieved, relevant):
        ids[str(hit["chunk_id"])] = ids.get(str(hit["chunk_id"]), False) or rel
    if ids:
        out["id_context_precision"] = sum(ids.values()) / len(ids)
    ref_ids = reference_chunk_ids(record, chunks)
    if ref_ids is not None:
        out["n_reference_chunks"] = len(ref_ids)
        if ref_ids:
            out["id_context_recall"] = len(set(ref_ids) & set(ids)) / len(set(ref_ids))


def _answerable_metrics(
    out: ScoreRow,
    record: Mapping[str, object],
    where: str,
    retrieved: Sequence[Mapping[str, object]],
    *,
    ks: Sequence[int],
    chunks: ChunkSource,
) -> None:
    """The metrics of an answerable question (see the module docstring), into ``out``."""
    not_found = bool(out["not_found"])
    ref_spans = reference_spans(record, where)
    ctx_spans = context_spans(record, where)
    if ref_spans and ctx_spans is not None:
        out["span_hit"] = float(any(cs <= s and e <= ce for s, e in ref_spans for cs, ce in ctx_spans))
        out["span_char_recall"] = _covered(ref_spans, ctx_spans) / union_length(ref_spans)
    if ref_spans:
        _retrieval_metrics(out, record, retrieved, ref_spans, ks=ks, chunks=chunks)
    refs = [r for r in reference_answers(record.get("reference_answer")) if r.strip()]
    if refs:
        prediction = "" if not_found else strip_citations(str(record.get("answer") or ""))
        out["answer_f1"] = 0.0 if not_found else answer_f1(prediction, refs)
        out["exact_match"] = 0.0 if not_found else exact_match(prediction, refs)
    out["abstained"] = float(not_found)


def _efficiency(out: ScoreRow, record: Mapping[str, object]) -> None:
    """The record's :data:`EFFICIENCY_FIELDS` (``cache_hits`` also from a ``cached`` flag) and
    its complexity, into ``out``."""
    for name in EFFICIENCY_FIELDS:
        value = record.get(name)
        if name == "cache_hits" and value is None and record.get("cached") is not None:
            value = int(bool(record["cached"]))
        out[name] = number_or_none(value)
    if record.get("complexity") is not None:
        out["complexity"] = str(record["complexity"])


def score_record(
    record: Mapping[str, object],
    *,
    chunks: ChunkSource = None,
    ks: Sequence[int] = DEFAULT_KS,
    index: int | None = None,
) -> ScoreRow:
    """The metrics of one answer record (see the module docstring for the fields)."""
    where = check_record(record, index)
    if any(int(k) < 1 for k in ks):
        raise ValueError(f"ks must be positive integers; got {tuple(ks)}")
    answerable = is_answerable(record)
    not_found = bool(record.get("not_found", False))
    contexts = items(record, "contexts")
    retrieved = mappings(record.get("retrieved"))
    out: ScoreRow = {
        "question_id": str(record["question_id"]),
        "doc_id": None if record.get("doc_id") is None else str(record["doc_id"]),
        "variant": str(record["variant"]),
        "answerable": answerable,
        "not_found": not_found,
        "n_retrieved": len(retrieved),
        "n_contexts": len(contexts),
        "context_chars": sum(len(str(c)) for c in contexts),
        "n_reference_chunks": None,
    }
    out.update(dict.fromkeys(_metric_names(ks)))
    if answerable:
        _answerable_metrics(out, record, where, retrieved, ks=ks, chunks=chunks)
    else:
        out["not_found_correct"] = float(not_found)
    _efficiency(out, record)
    return out


def score_answers(
    records: Iterable[Mapping[str, object]],
    *,
    chunks: ChunkSource = None,
    ks: Sequence[int] = DEFAULT_KS,
) -> list[ScoreRow]:
    """:func:`score_record` for every record; duplicate ``(variant, question_id)`` are rejected.

    Args:
        records: answer records (dicts).
        chunks: a chunk catalog for ``id_context_recall`` (see :func:`reference_chunk_ids`).
        ks: the cut-offs of ``hit@k``.
    """
    rows: list[ScoreRow] = []
    seen: dict[tuple[str, str], int] = {}
    catalog = chunk_catalog(chunks) if chunks is not None else None
    for i, record in enumerate(records):
        row = score_record(record, chunks=catalog, ks=ks, index=i)
        key = (str(row["variant"]), str(row["question_id"]))
        if key in seen:
            raise RecordError(
                f"record {i}: question_id={key[1]!r} appears twice for variant={key[0]!r} "
                f"(first as record {seen[key]}); keep one answer per question and variant"
            )
        seen[key] = i
        rows.append(row)
    return rows
