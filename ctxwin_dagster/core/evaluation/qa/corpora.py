"""Importers of the corpus files in ../shared/corpus (see its README) into QA items.

* :func:`squad_to_qa` — SQuAD 2.0 questions (``squad_v2_dev_half_questions.jsonl``);
* :func:`cuad_to_qa` — CUAD questions (``cuad_dev/questions.jsonl``).

Both give :class:`~ctxwin_dagster.core.evaluation.qa.items.QAItem` objects with reference spans as
character offsets into the corpus documents, ready for
:func:`~ctxwin_dagster.core.evaluation.qa.items.write_qa_jsonl`.

Plain Python only: this module imports neither dagster, ragas nor lancedb.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NotRequired, TypedDict, TypeVar

from ctxwin_dagster.core.evaluation.qa.items import QAFormatError, QAItem, Span
from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.text.file_names import safe_doc_id

__all__ = ["cuad_to_qa", "squad_to_qa"]


class _SquadAnswer(TypedDict):
    text: str
    answer_start: int
    answer_end: int


class _SquadRow(TypedDict):
    """A line of the SQuAD questions file."""

    id: str
    doc_id: str
    question: str
    is_impossible: bool
    answers: list[_SquadAnswer]
    paragraph_start: int
    paragraph_end: int


class _CuadAnswer(TypedDict):
    text: str
    answer_start: int
    answer_end: int
    pieces: NotRequired[list[list[int]]]
    located: NotRequired[bool]


class _CuadRow(TypedDict):
    """A line of the CUAD questions file."""

    id: str
    doc: str
    category: str
    question: str
    is_impossible: bool
    answers: list[_CuadAnswer]
    normalized_answer: NotRequired[str]


_Row = TypeVar("_Row", _SquadRow, _CuadRow)


def _read_jsonl(path: Path, row_type: type[_Row]) -> list[_Row]:
    """The lines of a corpus questions file, as the rows of ``row_type`` (not checked)."""
    rows: list[_Row] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise QAFormatError(f"{path}, line {lineno}: not valid JSON ({exc.msg})") from None
    return rows


def _kept(
    rows: list[_Row], names: list[str], wanted: set[str] | None, missing: Iterable[str], error: str
) -> list[_Row]:
    """The rows whose name (``names``, one per row) is ``wanted`` (all when None); ValueError
    (``error`` and the names) when a wanted name is ``missing`` from the file."""
    if missing:
        raise ValueError(f"{error} {sorted(missing)}")
    return [r for r, name in zip(rows, names) if wanted is None or name in wanted]


def _default_squad_doc_id(doc_id: str) -> str:
    return "squad_" + safe_doc_id(doc_id)


def squad_to_qa(
    questions_jsonl_path: str | Path,
    *,
    doc_ids: Iterable[str] | None = None,
    doc_id_for: Callable[[str], str] = _default_squad_doc_id,
) -> list[QAItem]:
    """Convert SQuAD questions (``squad_v2_dev_half_questions.jsonl``) to QA items.

    Each corpus line is ``{id, doc_id, question, is_impossible, answers: [{text,
    answer_start, answer_end}], paragraph_start, paragraph_end}`` with offsets into the
    article text. Identical answer spans are merged (first occurrence kept);
    ``reference_answer`` is the first answer's text; ``meta["answer_texts"]`` holds the
    text of each reference span, in the same order, and ``meta["paragraph"]`` the
    ``[start, end]`` offsets of the paragraph the question was written for.
    ``question_id`` is the SQuAD id.

    Args:
        questions_jsonl_path: the corpus questions file.
        doc_ids: keep only these corpus articles (e.g. ``["Normans"]``); ``None`` keeps all.
        doc_id_for: maps a corpus article id to the project's ``doc_id``; by default
            ``"Normans" -> "squad_Normans"`` (the sample document's file stem).

    Raises:
        ValueError: a requested article is not in the file, or an answerable question has
            no answer.
    """
    path = Path(questions_jsonl_path)
    wanted = None if doc_ids is None else set(doc_ids)
    rows = _read_jsonl(path, _SquadRow)
    missing = set() if wanted is None else wanted - {r["doc_id"] for r in rows}
    items: list[QAItem] = []
    for r in _kept(rows, [r["doc_id"] for r in rows], wanted, missing, f"{path}: no questions for doc_ids"):
        spans: list[Span] = []
        texts: list[str] = []
        if not r["is_impossible"]:
            for a in r["answers"]:
                span = (int(a["answer_start"]), int(a["answer_end"]))
                if span not in spans:
                    spans.append(span)
                    texts.append(a["text"])
            if not spans:
                raise ValueError(f"{path}: answerable question {r['id']!r} has no answers")
        meta: JSONObject = {
            "source": "squad_v2",
            "paragraph": [r["paragraph_start"], r["paragraph_end"]],
        }
        if texts:
            meta["answer_texts"] = list(texts)
        items.append(
            QAItem(
                question_id=r["id"],
                doc_id=doc_id_for(r["doc_id"]),
                question=r["question"],
                reference_answer=texts[0] if texts else "",
                reference_spans=tuple(spans),
                is_impossible=bool(r["is_impossible"]),
                meta=meta,
            )
        )
    return items


def _default_cuad_doc_id(contract_file: str) -> str:
    return "cuad_" + safe_doc_id(Path(contract_file).stem)


def cuad_to_qa(
    questions_jsonl_path: str | Path,
    *,
    contracts: Iterable[str] | None = None,
    doc_id_for: Callable[[str], str] = _default_cuad_doc_id,
) -> list[QAItem]:
    """Convert CUAD questions (``cuad_dev/questions.jsonl``) to QA items.

    Each corpus line is ``{id, doc, category, question, is_impossible, answers: [{text,
    answer_start, answer_end, pieces: [[s, e], ...], located}], normalized_answer}`` with
    offsets into ``contracts/<doc>``. Reference spans are the answers' ``pieces`` (sorted,
    duplicates merged); ``reference_answer`` is the answers' texts in document order,
    one per line, with the dataset's ``<omitted>`` marker written as ``[...]``. Answers the
    dataset could not locate (``located: false``) give no span and are counted in
    ``meta["unlocated_answers"]``. ``question_id`` is ``"<doc_id>__<category>"`` (unique,
    as the corpus has one question per contract and category); ``meta`` keeps the
    ``category``, the corpus file name (``source_doc``) and the ``normalized_answer``.

    Args:
        questions_jsonl_path: the corpus questions file.
        contracts: keep only these contract files (names as in ``doc``, the ``.txt`` may
            be left out); ``None`` keeps all.
        doc_id_for: maps a contract file name to the project's ``doc_id``; by default
            ``"cuad_" + safe_doc_id(stem)``.

    Raises:
        ValueError: a requested contract is not in the file.
    """
    path = Path(questions_jsonl_path)
    rows = _read_jsonl(path, _CuadRow)
    wanted: set[str] | None = None
    missing: list[str] = []
    if contracts is not None:
        present = {r["doc"] for r in rows}
        wanted = set()
        for c in contracts:
            name = c if c in present else f"{c}.txt"
            if name not in present:
                missing.append(c)
            wanted.add(name)
    items: list[QAItem] = []
    for r in _kept(rows, [r["doc"] for r in rows], wanted, missing, f"{path}: no questions for contracts"):
        answers = sorted(r["answers"], key=lambda a: (a["answer_start"], a["answer_end"]))
        spans: list[Span] = []
        texts: list[str] = []
        unlocated = 0
        for a in answers:
            text = a["text"].replace("<omitted>", " [...] ").strip()
            if text and text not in texts:
                texts.append(text)
            if not a.get("located", True):
                unlocated += 1
                continue
            for s, e in a.get("pieces") or [[a["answer_start"], a["answer_end"]]]:
                span = (int(s), int(e))
                if span not in spans:
                    spans.append(span)
        spans.sort()
        meta: JSONObject = {
            "source": "cuad_v1",
            "category": r["category"],
            "source_doc": r["doc"],
            "normalized_answer": r.get("normalized_answer", ""),
        }
        if unlocated:
            meta["unlocated_answers"] = unlocated
        impossible = bool(r["is_impossible"])
        if not impossible and not texts:
            raise ValueError(f"{path}: answerable question {r['id']!r} has no answer text")
        doc_id = doc_id_for(r["doc"])
        items.append(
            QAItem(
                question_id=f"{doc_id}__{r['category']}",
                doc_id=doc_id,
                question=r["question"],
                reference_answer="" if impossible else "\n".join(texts),
                reference_spans=() if impossible else tuple(spans),
                is_impossible=impossible,
                meta=meta,
            )
        )
    return items
