"""What the blinded review shows beside each answer: the answer with its citations numbered
``[1]``, ``[2]`` … and the passages they point into (the sentences the answer took from them
marked), and the passage of the document that holds the reference answer.

Also what makes two answers the same (:func:`answer_sentences`): the review records such pairs
as ties without asking anyone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TypeAlias, TypedDict

from ctxwin_dagster.core.evaluation.record_values import as_int, items, mappings, pair, sequence, text_of

__all__ = [
    "REFERENCE_MARGIN",
    "CitedPassage",
    "PairPassages",
    "ReferencePassage",
    "answer_sentences",
    "answer_text",
    "cited_cell",
    "cited_passages",
    "reference_passage",
]

#: An inline citation as the answerers write it: ``[chunk_id]`` (hex ids of 12 or more characters).
_CITATION = re.compile(r"\s*\[([0-9a-f]{12,})\]")

#: Characters of the document shown on each side of a reference span in the review form.
REFERENCE_MARGIN = 300

#: A span of a passage's text to highlight, ``(start, end)`` in the passage.
Mark: TypeAlias = tuple[int, int]


class CitedPassage(TypedDict):
    """A passage an answer cites: its number ``n`` in the answer, where it is in its document
    (``start`` None: the chunk was not among those retrieved), its text and ``marks``."""

    n: int
    chunk_id: object
    doc_id: str
    start: object
    end: object
    text: str
    marks: list[Mark]


class ReferencePassage(TypedDict):
    """The passage of the document around the reference spans, the spans marked."""

    doc_id: str
    start: int
    end: int
    text: str
    marks: list[Mark]


#: Per question: the passages answer A cites, those answer B cites, and the reference passage.
PairPassages: TypeAlias = tuple[list[CitedPassage], list[CitedPassage], ReferencePassage | None]


def answer_text(r: Mapping[str, object]) -> str:
    """The record's answer; a note when it is empty because the document did not hold one."""
    answer = text_of(r, "answer")
    if not answer.strip() and r.get("not_found"):
        return "(no answer: not found in the document)"
    return answer


def _plain(answer: str) -> str:
    """The answer without its citation markers and extra spaces: what makes two answers the same."""
    return " ".join(_CITATION.sub(" ", answer).split())


def answer_sentences(answer: str) -> list[str]:
    """The sentences of an answer, without citation markers, in sorted order: two answers made of
    the same sentences in another order are the same answer.

    >>> answer_sentences("B is second. A is first [0123456789abcdef].") == answer_sentences("A is first. B is second.")
    True
    """
    from ctxwin_dagster.core.text.sentences import split_sentences

    text = re.sub(r"\s+([.,;:!?])", r"\1", _plain(answer))  # a marker before a full stop leaves a space
    return sorted(" ".join(text[s:e].split()) for s, e in split_sentences(text))


def reference_passage(
    r: Mapping[str, object], document_text: Callable[[str], str | None] | None
) -> ReferencePassage | None:
    """The passage of the document that holds the reference answer (its ``reference_spans``,
    marked, with :data:`REFERENCE_MARGIN` characters around), or None when the item gives no
    span or the document cannot be read."""
    spans = [(as_int(s), as_int(e)) for s, e in (pair(v) for v in items(r, "reference_spans")) if as_int(e) > as_int(s)]
    doc_id = text_of(r, "doc_id")
    text = document_text(doc_id) if (spans and document_text is not None) else None
    if not text or spans[-1][1] > len(text):
        return None
    start, end = max(0, spans[0][0] - REFERENCE_MARGIN), min(len(text), spans[-1][1] + REFERENCE_MARGIN)
    marks = [(s - start, e - start) for s, e in spans if start <= s and e <= end]
    return {"doc_id": doc_id, "start": start, "end": end, "text": text[start:end], "marks": marks}


def cited_passages(r: Mapping[str, object]) -> tuple[str, list[CitedPassage]]:
    """(the answer with its citations numbered [1], [2] …, the cited passages). A passage is the
    context window (or, in records written before answers carried numbered citations, the
    retrieved chunk) a marker points into, with its document offsets and ``marks``: the spans of
    the sentences the answer took from it."""
    from ctxwin_dagster.core.text.sentences import split_sentences

    answer = answer_text(r)
    numbered = [c for c in mappings(r.get("citations")) if c.get("marker")]
    if numbered:
        return answer, _passages_of_citations(numbered, r)
    chunks = {str(c.get("chunk_id")): c for c in mappings(r.get("retrieved"))}
    numbers: dict[str, int] = {}
    quoted: dict[str, list[str]] = {}
    parts = _CITATION.split(answer)  # text, id, text, id, …, text
    for i in range(1, len(parts), 2):
        cid = parts[i]
        numbers.setdefault(cid, len(numbers) + 1)
        said = parts[i - 1]
        quoted.setdefault(cid, []).extend(said[s:e].strip() for s, e in split_sentences(said))
    shown = _CITATION.sub(lambda m: f" [{numbers[m.group(1)]}]", answer).strip()
    passages: list[CitedPassage] = []
    for cid, n in numbers.items():
        chunk = chunks.get(cid) or {}
        text = text_of(chunk, "text")
        marks = sorted({(i, i + len(q)) for q in quoted.get(cid, []) if len(q) >= 10 and (i := text.find(q)) >= 0})
        passages.append(
            {
                "n": n,
                "chunk_id": cid,
                "doc_id": str(chunk.get("doc_id") or r.get("doc_id") or ""),
                "start": chunk.get("start"),
                "end": chunk.get("end"),
                "text": text,
                "marks": marks,
            }
        )
    return shown, passages


def _passages_of_citations(citations: list[Mapping[str, object]], r: Mapping[str, object]) -> list[CitedPassage]:
    """The passages of an answer's numbered citations: per marker, the context window that holds
    its spans, the spans marked; a span in no window is shown by itself."""
    windows = [
        (as_int(span[0]), as_int(span[1]), str(span[2]), str(text))
        for span, text in zip(map(sequence, items(r, "context_spans")), items(r, "contexts"))
        if len(span) >= 3
    ]
    by_marker: dict[int, list[Mapping[str, object]]] = {}
    for c in citations:
        by_marker.setdefault(as_int(c["marker"]), []).append(c)
    passages: list[CitedPassage] = []
    for n, group in sorted(by_marker.items()):
        first = group[0]
        doc, start, end = text_of(first, "doc_id"), as_int(first["start"]), as_int(first["end"])
        window = next((w for w in windows if w[2] == doc and w[0] <= start and end <= w[1]), None)
        if window is None:
            text = text_of(first, "excerpt")
            passages.append(
                {
                    "n": n,
                    "chunk_id": first.get("chunk_id"),
                    "doc_id": doc,
                    "start": start,
                    "end": end,
                    "text": text,
                    "marks": [(0, len(text))],
                }
            )
            continue
        ws, we, _, text = window
        marks = sorted(
            (as_int(c["start"]) - ws, as_int(c["end"]) - ws)
            for c in group
            if ws <= as_int(c["start"]) and as_int(c["end"]) <= we
        )
        passages.append(
            {
                "n": n,
                "chunk_id": first.get("chunk_id"),
                "doc_id": doc,
                "start": ws,
                "end": we,
                "text": text,
                "marks": marks,
            }
        )
    return passages


def cited_cell(passages: list[CitedPassage]) -> str:
    """The cited passages as one CSV cell: ``[n] doc_id start–end: text`` per passage."""
    out = []
    for p in passages:
        where = f"{p['start']}–{p['end']}" if p["start"] is not None else "(not among the retrieved chunks)"
        out.append(f"[{p['n']}] {p['doc_id']} {where}: {' '.join(p['text'].split())}")
    return "\n".join(out)
