"""Per-question retrieval and answer metrics over answer records, and their aggregation.

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
  ``reference_answer`` (SQuAD normalization; a ``not_found`` answer scores 0), ``abstained``;
* unanswerable questions: ``not_found_correct`` (1.0 when the model said it was not found).

A metric that does not apply to a question is ``None`` (never NaN); one that applies but whose
input is missing (no ``context_spans``, no chunk catalog for recall) is ``None`` too and is
counted as ``n_missing`` by :func:`aggregate`, so nothing is averaged away silently.

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

import math
import re
import string
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "ANSWERABLE_METRICS",
    "UNANSWERABLE_METRICS",
    "EFFICIENCY_FIELDS",
    "METRIC_POPULATION",
    "RecordError",
    "aggregate",
    "aggregate_efficiency",
    "answer_f1",
    "bootstrap_mean_ci",
    "chunk_catalog",
    "exact_match",
    "is_answerable",
    "normalize_answer",
    "reference_chunk_ids",
    "score_answers",
    "score_record",
    "scores_by_variant",
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
EFFICIENCY_FIELDS: tuple[str, ...] = ("latency_s", "input_tokens", "output_tokens", "cost_usd", "paid_usd", "input_chars", "calls", "cache_hits")

_REQUIRED = ("question_id", "variant")


class RecordError(ValueError):
    """An answer record is malformed; the message names the record and the fix."""


# --------------------------------------------------------------------------------------
# Answer text
# --------------------------------------------------------------------------------------

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """SQuAD's normalization: lower case, no punctuation, no English articles, single spaces.

    Example::

        >>> normalize_answer("The  Eiffel-Tower!")
        'eiffeltower'
    """
    text = str(text or "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _references(reference: str | Sequence[str] | None) -> list[str]:
    if reference is None:
        return []
    if isinstance(reference, str):
        return [reference]
    return [str(r) for r in reference]


def exact_match(prediction: str, reference: str | Sequence[str]) -> float:
    """1.0 when the normalized prediction equals a normalized reference (best of several).

    Example::

        >>> exact_match("the Paris", ["Paris", "City of Paris"])
        1.0
    """
    refs = _references(reference)
    if not refs:
        raise ValueError("exact_match needs at least one reference answer")
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(r) for r in refs))


def answer_f1(prediction: str, reference: str | Sequence[str]) -> float:
    """SQuAD token F1 between a prediction and a reference (the best over several references).

    Two empty answers score 1.0; an empty one against a non-empty one scores 0.0.

    Example::

        >>> round(answer_f1("located in northern France", "France"), 3)
        0.4
    """
    refs = _references(reference)
    if not refs:
        raise ValueError("answer_f1 needs at least one reference answer")
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for ref in refs:
        ref_tokens = normalize_answer(ref).split()
        if not pred_tokens or not ref_tokens:
            best = max(best, float(pred_tokens == ref_tokens))
            continue
        common = Counter(pred_tokens) & Counter(ref_tokens)
        same = sum(common.values())
        if same == 0:
            continue
        precision = same / len(pred_tokens)
        recall = same / len(ref_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


# --------------------------------------------------------------------------------------
# Spans
# --------------------------------------------------------------------------------------


def _span(value: Any, where: str) -> tuple[int, int, str | None]:
    """``(start, end, doc_id or None)`` from ``[s, e]``, ``[s, e, doc]`` or a dict."""
    doc = None
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
    if isinstance(start, bool) or isinstance(end, bool) or not isinstance(start, (int, np.integer)) or not isinstance(end, (int, np.integer)):
        raise RecordError(f"{where}: span offsets must be integers; got {value!r}")
    if not 0 <= start <= end:
        raise RecordError(f"{where}: a span needs 0 <= start <= end; got {value!r}")
    return int(start), int(end), (None if doc is None else str(doc))


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


# --------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------


def _where(record: Mapping[str, Any], index: int | None) -> str:
    qid = record.get("question_id", "?") if isinstance(record, Mapping) else "?"
    variant = record.get("variant", "?") if isinstance(record, Mapping) else "?"
    pos = "" if index is None else f"record {index} "
    return f"{pos}(question_id={qid!r}, variant={variant!r})"


def is_answerable(record: Mapping[str, Any]) -> bool:
    """Whether the question has an answer in the document.

    ``is_impossible`` wins when present; else a question is unanswerable exactly when its
    ``reference_answer`` is empty and it has no ``reference_spans``.

    Example::

        >>> is_answerable({"reference_answer": "", "reference_spans": []})
        False
    """
    if record.get("is_impossible") is not None:
        return not bool(record["is_impossible"])
    has_answer = any(r.strip() for r in _references(record.get("reference_answer")))
    return has_answer or bool(record.get("reference_spans"))


def _reference_spans(record: Mapping[str, Any], where: str) -> list[tuple[int, int]]:
    spans = []
    for i, value in enumerate(record.get("reference_spans") or []):
        s, e, _ = _span(value, f"{where} reference_spans[{i}]")
        if e > s:
            spans.append((s, e))
    return spans


def _context_spans(record: Mapping[str, Any], where: str) -> list[tuple[int, int]] | None:
    raw = record.get("context_spans")
    if raw is None:
        return None
    contexts = record.get("contexts")
    if contexts is not None and len(contexts) != len(raw):
        raise RecordError(
            f"{where}: context_spans has {len(raw)} spans for {len(contexts)} contexts; "
            "give one [start, end] per context block (in the same order)"
        )
    doc_id = record.get("doc_id")
    spans = []
    for i, value in enumerate(raw):
        s, e, doc = _span(value, f"{where} context_spans[{i}]")
        if doc is None or doc_id is None or doc == str(doc_id):
            spans.append((s, e))
    return spans


def chunk_catalog(chunks: Any) -> dict[str, list[dict[str, Any]]]:
    """A chunk catalog as ``{doc_id: [chunk dicts]}``.

    Accepts ``{doc_id: [chunk dicts]}``, an iterable of chunk dicts with ``doc_id`` (the
    ``chunks`` asset's rows) or a DataFrame of them; None gives ``{}``.

    Example::

        >>> chunk_catalog([{"doc_id": "d", "chunk_id": "a", "start": 0, "end": 5}])
        {'d': [{'doc_id': 'd', 'chunk_id': 'a', 'start': 0, 'end': 5}]}
    """
    if chunks is None:
        return {}
    if hasattr(chunks, "to_dict") and hasattr(chunks, "columns"):  # a pandas DataFrame
        chunks = chunks.to_dict("records")
    if isinstance(chunks, Mapping):
        return {str(doc): [dict(c) for c in rows] for doc, rows in chunks.items()}
    by_doc: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in chunks:
        if "doc_id" not in c:
            raise RecordError(f"chunk catalog row {dict(c)!r} has no doc_id; give chunks as {{doc_id: [...]}} or rows with doc_id")
        by_doc[str(c["doc_id"])].append(dict(c))
    return dict(by_doc)


def reference_chunk_ids(record: Mapping[str, Any], chunks: Any = None) -> list[str] | None:
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
        return [str(c) for c in record["reference_chunk_ids"]]
    catalog = chunks if isinstance(chunks, dict) and all(isinstance(v, list) for v in chunks.values()) else chunk_catalog(chunks)
    if not catalog:
        return None
    doc_id = str(record.get("doc_id"))
    if doc_id not in catalog:
        return None
    spans = _reference_spans(record, _where(record, None))
    rows = sorted(catalog[doc_id], key=lambda c: (int(c["start"]), int(c["end"])))
    return [str(c["chunk_id"]) for c in rows if _overlaps(int(c["start"]), int(c["end"]), spans)]


def _check_record(record: Any, index: int | None) -> str:
    if not isinstance(record, Mapping):
        raise RecordError(f"record {index}: an answer record must be a dict; got {type(record).__name__}")
    where = _where(record, index)
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


def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def score_record(
    record: Mapping[str, Any],
    *,
    chunks: Any = None,
    ks: Sequence[int] = DEFAULT_KS,
    index: int | None = None,
) -> dict[str, Any]:
    """The metrics of one answer record (see the module docstring for the fields)."""
    where = _check_record(record, index)
    if any(int(k) < 1 for k in ks):
        raise ValueError(f"ks must be positive integers; got {tuple(ks)}")
    answerable = is_answerable(record)
    not_found = bool(record.get("not_found", False))
    contexts = record.get("contexts") or []
    retrieved = list(record.get("retrieved") or [])
    out: dict[str, Any] = {
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
    for name in ("span_hit", "span_char_recall", *(f"hit@{k}" for k in ks), "mrr",
                 "id_context_precision", "id_context_recall", "answer_f1", "exact_match",
                 "abstained", "not_found_correct"):
        out[name] = None

    if answerable:
        ref_spans = _reference_spans(record, where)
        ctx_spans = _context_spans(record, where)
        if ref_spans and ctx_spans is not None:
            out["span_hit"] = float(any(cs <= s and e <= ce for s, e in ref_spans for cs, ce in ctx_spans))
            out["span_char_recall"] = _covered(ref_spans, ctx_spans) / union_length(ref_spans)
        if ref_spans:
            doc_id = out["doc_id"]
            relevant = [
                (hit.get("doc_id") is None or doc_id is None or str(hit.get("doc_id")) == doc_id)
                and _overlaps(int(hit["start"]), int(hit["end"]), ref_spans)
                for hit in retrieved
            ]
            for k in ks:
                out[f"hit@{k}"] = float(any(relevant[:k]))
            first = next((i for i, r in enumerate(relevant) if r), None)
            out["mrr"] = 0.0 if first is None else 1.0 / (first + 1)
            ids: dict[str, float] = {}
            for hit, rel in zip(retrieved, relevant):
                ids[str(hit["chunk_id"])] = ids.get(str(hit["chunk_id"]), False) or rel
            if ids:
                out["id_context_precision"] = sum(ids.values()) / len(ids)
            ref_ids = reference_chunk_ids(record, chunks)
            if ref_ids is not None:
                out["n_reference_chunks"] = len(ref_ids)
                if ref_ids:
                    out["id_context_recall"] = len(set(ref_ids) & set(ids)) / len(set(ref_ids))
        refs = [r for r in _references(record.get("reference_answer")) if r.strip()]
        if refs:
            prediction = "" if not_found else str(record.get("answer") or "")
            out["answer_f1"] = 0.0 if not_found else answer_f1(prediction, refs)
            out["exact_match"] = 0.0 if not_found else exact_match(prediction, refs)
        out["abstained"] = float(not_found)
    else:
        out["not_found_correct"] = float(not_found)

    out["latency_s"] = _num(record.get("latency_s"))
    out["input_tokens"] = _num(record.get("input_tokens"))
    out["output_tokens"] = _num(record.get("output_tokens"))
    out["cost_usd"] = _num(record.get("cost_usd"))
    out["paid_usd"] = _num(record.get("paid_usd"))
    out["input_chars"] = _num(record.get("input_chars"))
    out["calls"] = _num(record.get("calls"))
    cache_hits = record.get("cache_hits")
    if cache_hits is None and record.get("cached") is not None:
        cache_hits = int(bool(record["cached"]))
    out["cache_hits"] = _num(cache_hits)
    if record.get("complexity") is not None:
        out["complexity"] = str(record["complexity"])
    return out


def score_answers(
    records: Iterable[Mapping[str, Any]],
    *,
    chunks: Any = None,
    ks: Sequence[int] = DEFAULT_KS,
) -> list[dict[str, Any]]:
    """:func:`score_record` for every record; duplicate ``(variant, question_id)`` are rejected.

    Args:
        records: answer records (dicts).
        chunks: a chunk catalog for ``id_context_recall`` (see :func:`reference_chunk_ids`).
        ks: the cut-offs of ``hit@k``.
    """
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], int] = {}
    catalog = chunk_catalog(chunks) if chunks is not None else None
    for i, record in enumerate(records):
        row = score_record(record, chunks=catalog, ks=ks, index=i)
        key = (row["variant"], row["question_id"])
        if key in seen:
            raise RecordError(
                f"record {i}: question_id={key[1]!r} appears twice for variant={key[0]!r} "
                f"(first as record {seen[key]}); keep one answer per question and variant"
            )
        seen[key] = i
        rows.append(row)
    return rows


# --------------------------------------------------------------------------------------
# Aggregation
# --------------------------------------------------------------------------------------


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray,
    *,
    n_boot: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
    block: int = 1_000,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean, vectorized in blocks of resamples, seeded.

    Returns ``(nan, nan)`` for an empty input.

    Example::

        >>> lo, hi = bootstrap_mean_ci([0.0, 1.0, 1.0, 0.0, 1.0], n_boot=2000, seed=1)
        >>> lo <= 0.6 <= hi
        True
    """
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1; got {n_boot}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}")
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"values must be one-dimensional; got shape {x.shape}")
    n = x.shape[0]
    if n == 0:
        return (math.nan, math.nan)
    if np.isnan(x).any():
        raise ValueError("values contain NaN; drop (and count) them before bootstrapping")
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot, dtype=float)
    step = max(1, min(block, (4_000_000 // max(n, 1)) or 1))
    for b in range(0, n_boot, step):
        m = min(step, n_boot - b)
        idx = rng.integers(0, n, size=(m, n))
        means[b : b + m] = x[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def _metric_names(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    names: list[str] = []
    skip = {"question_id", "doc_id", "variant", "answerable", "not_found", "complexity",
            "n_retrieved", "n_contexts", "context_chars", "n_reference_chunks", *EFFICIENCY_FIELDS}
    for row in rows:
        for key, value in row.items():
            if key in skip or key in names:
                continue
            if value is None or isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool):
                names.append(key)
    return names


def _population(metric: str, populations: Mapping[str, str]) -> str:
    if metric in populations:
        return populations[metric]
    if metric.startswith("hit@"):
        return "answerable"
    return "all"


def aggregate(
    scores: Iterable[Mapping[str, Any]],
    *,
    metrics: Sequence[str] | None = None,
    by: str | Sequence[str] = "variant",
    populations: Mapping[str, str] | None = None,
    ci: bool = True,
    n_boot: int = 2_000,
    seed: int = 0,
    ci_level: float = 0.95,
) -> list[dict[str, Any]]:
    """Means of per-question metrics per group, one row per (group, metric).

    Each metric is averaged over its population (``"answerable"``, ``"unanswerable"`` or
    ``"all"``, from ``populations`` merged over :data:`METRIC_POPULATION`); within it a
    ``None`` is counted as ``n_missing`` and a NaN as ``n_nan`` and neither enters the mean.

    Returns rows ``{<by...>, metric, population, n_population, n, n_missing, n_nan, mean,
    ci_low, ci_high}`` (``mean``/``ci_*`` are None when ``n == 0``).

    Example::

        >>> rows = [{"variant": "a", "answerable": True, "span_hit": 1.0},
        ...         {"variant": "a", "answerable": True, "span_hit": None},
        ...         {"variant": "a", "answerable": False, "span_hit": None}]
        >>> r = aggregate(rows, metrics=["span_hit"], ci=False)[0]
        >>> r["n_population"], r["n"], r["n_missing"], r["mean"]
        (2, 1, 1, 1.0)
    """
    rows = [dict(r) for r in scores]
    keys = [by] if isinstance(by, str) else list(by)
    pops = {**METRIC_POPULATION, **(populations or {})}
    names = list(metrics) if metrics is not None else _metric_names(rows)
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        missing = [k for k in keys if k not in row]
        if missing:
            raise RecordError(f"score row for question_id={row.get('question_id')!r} has no {missing}; cannot group by {keys}")
        groups[tuple(row[k] for k in keys)].append(row)
    out: list[dict[str, Any]] = []
    for group, members in groups.items():
        for metric in names:
            population = _population(metric, pops)
            if population == "answerable":
                pop = [r for r in members if r.get("answerable", True)]
            elif population == "unanswerable":
                pop = [r for r in members if not r.get("answerable", True)]
            else:
                pop = members
            values, n_missing, n_nan = [], 0, 0
            for r in pop:
                v = r.get(metric)
                if v is None:
                    n_missing += 1
                elif isinstance(v, (float, np.floating)) and math.isnan(v):
                    n_nan += 1
                else:
                    values.append(float(v))
            row_out: dict[str, Any] = dict(zip(keys, group))
            row_out.update(metric=metric, population=population, n_population=len(pop), n=len(values),
                           n_missing=n_missing, n_nan=n_nan, mean=None, ci_low=None, ci_high=None)
            if values:
                row_out["mean"] = float(np.mean(values))
                if ci:
                    row_out["ci_low"], row_out["ci_high"] = bootstrap_mean_ci(values, n_boot=n_boot, seed=seed, level=ci_level)
            out.append(row_out)
    return out


def aggregate_efficiency(
    records_or_scores: Iterable[Mapping[str, Any]],
    *,
    by: str = "variant",
) -> list[dict[str, Any]]:
    """Totals per variant: questions, runtime, calls, tokens, characters, costs, cache hits.

    ``cost_usd`` sums the cost of the work (cache hits at the cost of the call they reuse),
    ``paid_usd`` what was paid in the run that made the records. Works on answer records or on
    :func:`score_answers` rows. ``context_chars`` is computed
    from ``contexts`` (or taken from a score row); the other fields come from the records, and a
    record that lacks one is counted in ``n_missing_<field>`` instead of being taken as 0.
    ``calls`` defaults to one call per record only where a record gives no ``calls``, which is
    also counted (``n_missing_calls``).

    Example::

        >>> aggregate_efficiency([{"variant": "a", "latency_s": 1.5, "contexts": ["abc"], "cost_usd": 0.1},
        ...                       {"variant": "a", "latency_s": 0.5, "contexts": ["de"]}])[0]["runtime_s"]
        2.0
    """
    groups: dict[Any, list[Mapping[str, Any]]] = defaultdict(list)
    for r in records_or_scores:
        groups[r.get(by)].append(r)
    out = []
    for group, members in groups.items():
        row: dict[str, Any] = {by: group, "n_questions": len(members)}
        sums: dict[str, float] = {}
        missing: dict[str, int] = {}
        for field_, label in (("latency_s", "runtime_s"), ("calls", "calls"), ("input_tokens", "input_tokens"),
                              ("input_chars", "input_chars"), ("output_tokens", "output_tokens"),
                              ("cost_usd", "cost_usd"), ("paid_usd", "paid_usd"), ("cache_hits", "cache_hits")):
            total, n_missing = 0.0, 0
            for r in members:
                value = r.get(field_)
                if field_ == "cache_hits" and value is None and r.get("cached") is not None:
                    value = int(bool(r["cached"]))
                v = _num(value)
                if v is None:
                    n_missing += 1
                    if field_ == "calls":
                        total += 1.0
                else:
                    total += v
            sums[label] = total
            missing[label] = n_missing
        ctx = 0
        for r in members:
            if "context_chars" in r and r["context_chars"] is not None:
                ctx += int(r["context_chars"])
            else:
                ctx += sum(len(str(c)) for c in (r.get("contexts") or []))
        row.update(sums)
        n_timed = len(members) - missing["runtime_s"]
        row["mean_latency_s"] = sums["runtime_s"] / n_timed if n_timed else None
        row["context_chars"] = ctx
        row["context_chars_per_question"] = ctx / len(members) if members else None
        for label, n in missing.items():
            row[f"n_missing_{label}"] = n
        out.append(row)
    return out


def scores_by_variant(
    rows: Iterable[Mapping[str, Any]],
    metrics: Sequence[str] | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """Score rows as ``{variant: {question_id: {metric: value}}}`` for :func:`stats.compare_variants`.

    Not-applicable metrics (``None``) are left out; NaN values are kept (the comparison counts
    the pairs it drops because of them).

    Example::

        >>> scores_by_variant([{"variant": "a", "question_id": "q", "span_hit": 1.0, "mrr": None}], ["span_hit", "mrr"])
        {'a': {'q': {'span_hit': 1.0}}}
    """
    rows = list(rows)
    names = list(metrics) if metrics is not None else _metric_names(rows)
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for row in rows:
        values = {m: float(row[m]) for m in names if row.get(m) is not None}
        out[str(row["variant"])].setdefault(str(row["question_id"]), {}).update(values)
    return dict(out)
