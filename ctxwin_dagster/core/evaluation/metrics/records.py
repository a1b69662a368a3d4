"""An answer record's checks and the values read from it: its spans (reference and context,
checked), whether its question is answerable, and its numbers.

The format of a record is described in :mod:`~ctxwin_dagster.core.evaluation.metrics.scoring`;
every malformed value raises :class:`RecordError` naming the record and the fix.

Example::

    >>> parse_span([3, 9, "d"], "record 0"), number_or_none("1.5"), number_or_none(True)
    ((3, 9, 'd'), 1.5, None)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ctxwin_dagster.core.evaluation.metrics.answers import reference_answers
from ctxwin_dagster.core.evaluation.record_values import as_float, sequence

__all__ = [
    "RecordError",
    "check_record",
    "context_spans",
    "is_answerable",
    "number_or_none",
    "parse_span",
    "record_where",
]

_REQUIRED = ("question_id", "variant")


class RecordError(ValueError):
    """An answer record is malformed; the message names the record and the fix."""


def parse_span(value: object, where: str) -> tuple[int, int, str | None]:
    """``(start, end, doc_id or None)`` from ``[s, e]``, ``[s, e, doc]`` or a dict."""
    doc = None
    start: object
    end: object
    if isinstance(value, Mapping):
        try:
            start, end = value["start"], value["end"]
        except KeyError as exc:
            raise RecordError(f"{where}: a span given as a dict needs 'start' and 'end'; got {dict(value)!r}") from exc
        doc = value.get("doc_id")
    elif isinstance(value, (list, tuple)) and len(value) in (2, 3):
        start, end = value[0], value[1]
        if len(value) == 3:
            doc = value[2]
    else:
        raise RecordError(f"{where}: a span must be [start, end] (character offsets); got {value!r}")
    if (
        isinstance(start, bool)
        or isinstance(end, bool)
        or not isinstance(start, (int, np.integer))
        or not isinstance(end, (int, np.integer))
    ):
        raise RecordError(f"{where}: span offsets must be integers; got {value!r}")
    if not 0 <= start <= end:
        raise RecordError(f"{where}: a span needs 0 <= start <= end; got {value!r}")
    return int(start), int(end), (None if doc is None else str(doc))


def record_where(record: object, index: int | None) -> str:
    """How an error names a record: its position (when known), question and variant."""
    qid = record.get("question_id", "?") if isinstance(record, Mapping) else "?"
    variant = record.get("variant", "?") if isinstance(record, Mapping) else "?"
    pos = "" if index is None else f"record {index} "
    return f"{pos}(question_id={qid!r}, variant={variant!r})"


def is_answerable(record: Mapping[str, object]) -> bool:
    """Whether the question has an answer in the document.

    ``is_impossible`` wins when present; else a question is unanswerable exactly when its
    ``reference_answer`` is empty and it has no ``reference_spans``.

    Example::

        >>> is_answerable({"reference_answer": "", "reference_spans": []})
        False
    """
    if record.get("is_impossible") is not None:
        return not bool(record["is_impossible"])
    has_answer = any(r.strip() for r in reference_answers(record.get("reference_answer")))
    return has_answer or bool(record.get("reference_spans"))


def context_spans(record: Mapping[str, object], where: str) -> list[tuple[int, int]] | None:
    """The ``(start, end)`` of each context block in the question's document (blocks of other
    documents left out); None when the record has no ``context_spans``."""
    raw = record.get("context_spans")
    if raw is None:
        return None
    given = sequence(raw)
    contexts = record.get("contexts")
    if contexts is not None and len(sequence(contexts)) != len(given):
        raise RecordError(
            f"{where}: context_spans has {len(given)} spans for {len(sequence(contexts))} contexts; "
            "give one [start, end] per context block (in the same order)"
        )
    doc_id = record.get("doc_id")
    spans = []
    for i, value in enumerate(given):
        s, e, doc = parse_span(value, f"{where} context_spans[{i}]")
        if doc is None or doc_id is None or doc == str(doc_id):
            spans.append((s, e))
    return spans


def check_record(record: object, index: int | None) -> str:
    """Check that ``record`` is an answer record (a dict with question_id and variant, lists
    where lists go, retrieved chunks with their ids and offsets); returns how errors name it."""
    if not isinstance(record, Mapping):
        raise RecordError(f"record {index}: an answer record must be a dict; got {type(record).__name__}")
    where = record_where(record, index)
    missing = [k for k in _REQUIRED if record.get(k) in (None, "")]
    if missing:
        raise RecordError(f"{where}: missing {', '.join(missing)}; every answer record needs question_id and variant")
    for key in ("retrieved", "contexts", "context_spans", "reference_spans"):
        value = record.get(key)
        if value is not None and (isinstance(value, (str, bytes)) or not isinstance(value, Sequence)):
            raise RecordError(f"{where}: {key} must be a list; got {type(value).__name__}")
    for i, hit in enumerate(record.get("retrieved") or []):
        if not isinstance(hit, Mapping) or any(k not in hit for k in ("chunk_id", "start", "end")):
            raise RecordError(f"{where}: retrieved[{i}] must be a dict with chunk_id, doc_id, start, end, text, score")
    return where


def number_or_none(value: object) -> float | None:
    """``value`` as a float; None for None, a bool, anything not a number, and NaN."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = as_float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out
