"""Importing the question sets users already have into the project's QA format.

* **SQuAD 2.0 JSON** (``{"version": "v2.0", "data": [{"title", "paragraphs": [{"context", "qas":
  [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}``): one
  document per article, its paragraphs joined by a blank line, offsets moved accordingly.
* **CUAD JSON** (``CUAD_v1.json``, the same layout: one paragraph per contract, question ids
  ``"<contract>__<category>"``): one document per contract; the category goes to ``meta``; the
  several clauses of an answer are all reference spans, their texts one per line.
* **CSV or JSONL tables** with a question, an answer and a document column (``doc_id``,
  ``document``, ``doc``, ``file``, ``filename`` or ``source``; an ``id`` column is optional):
  the answer is located in the document's text, exactly or with white space normalized, and
  every question whose answer is not found, or is found more than once, is reported.

Every import returns an :class:`ImportResult`: the documents to write (for the JSON formats,
which carry the texts), the QA items, and an :class:`ImportReport` that counts how each span
was found. SQuAD and CUAD offsets are checked against the text: an offset that does not hold
its answer is searched for and counted as moved, never trusted blindly.

Plain Python only.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ctxwin_dagster.core.evaluation.qa.items import QAFormatError, QAItem, Span
from ctxwin_dagster.core.evaluation.record_values import as_int, mappings
from ctxwin_dagster.core.json_types import JSONObject

__all__ = [
    "DOCUMENT_COLUMNS",
    "ImportReport",
    "ImportResult",
    "detect_format",
    "import_squad_json",
    "import_table",
    "locate_answer",
]

#: Column names taken as "the document" in CSV/JSONL tables, in order of preference.
DOCUMENT_COLUMNS = ("doc_id", "document", "doc", "file", "filename", "source")
_QUESTION_COLUMNS = ("question", "query", "q")
_ANSWER_COLUMNS = ("answer", "reference_answer", "answers", "a")
_ID_COLUMNS = ("question_id", "id", "qid")
_MAX_LISTED = 20


def _listed(what: str, entries: list[str]) -> list[str]:
    """Report lines: how many ``entries`` are ``what``, then the first of them; none when empty."""
    if not entries:
        return []
    out = [f"  {len(entries)} {what}:"] + [f"    {x}" for x in entries[:_MAX_LISTED]]
    if len(entries) > _MAX_LISTED:
        out.append(f"    ... and {len(entries) - _MAX_LISTED} more")
    return out


@dataclass
class ImportReport:
    """How the import went; ``lines()`` is what the command prints."""

    source: str
    questions: int = 0
    answerable: int = 0
    documents: int = 0
    spans_exact: int = 0
    spans_whitespace: int = 0
    spans_moved: int = 0
    not_found: list[str] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)
    unknown_documents: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [
            f"{self.source}: {self.questions} questions ({self.answerable} answerable) about {self.documents} documents",
            f"  answers located: {self.spans_exact} exactly, {self.spans_whitespace} with white space normalized"
            + (f", {self.spans_moved} at another offset than the file gave" if self.spans_moved else ""),
        ]
        out += _listed("answer(s) not found in their document (kept, without a reference span)", self.not_found)
        out += _listed("answer(s) found more than once (every occurrence is a reference span)", self.ambiguous)
        if self.unknown_documents:
            shown = ", ".join(f"{k!r} ({n})" for k, n in sorted(self.unknown_documents.items())[:10])
            out.append(f"  questions about documents not in the folder (left out): {shown}")
        return out


@dataclass
class ImportResult:
    """Documents to write (file name -> text; empty for tables), the items, and the report."""

    documents: dict[str, str]
    items: list[QAItem]
    report: ImportReport


def locate_answer(text: str, answer: str) -> tuple[list[Span], str]:
    """Every place ``answer`` occurs in ``text``, and how it was found.

    ``(spans, "exact")`` for verbatim occurrences; otherwise ``"whitespace"`` when it occurs
    with runs of white space (line breaks, double spaces) in other places; ``"none"`` when it
    does not occur.

    >>> locate_answer("The fee is EUR 500.\\nThe fee  is\\nEUR 500.", "fee is EUR 500")
    ([(4, 18)], 'exact')
    >>> locate_answer("The fee  is\\nEUR 500.", "fee is EUR 500")
    ([(4, 19)], 'whitespace')
    """
    answer = answer.strip()
    if not answer:
        return [], "none"
    spans: list[Span] = []
    start = text.find(answer)
    while start != -1:
        spans.append((start, start + len(answer)))
        start = text.find(answer, start + 1)
    if spans:
        return spans, "exact"
    pattern = r"\s+".join(re.escape(tok) for tok in answer.split())
    spans = [(m.start(), m.end()) for m in re.finditer(pattern, text)]
    return (spans, "whitespace") if spans else ([], "none")


def _describe(qid: str, doc: str, answer: str) -> str:
    short = " ".join(answer.split())
    return f"{qid} ({doc}): {short[:80]!r}" + ("…" if len(short) > 80 else "")


def detect_format(path: str | Path) -> str:
    """``squad``, ``cuad``, ``csv`` or ``jsonl`` from the file's type and content."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix == ".jsonl":
        return "jsonl"
    if suffix == ".json":
        with p.open(encoding="utf-8-sig") as fh:
            head = fh.read(4096)
        if '"data"' in head:
            return "cuad" if ('"aok' in head or "Highlight the parts" in head) else "squad"
        raise QAFormatError(
            f"{p}: a .json file without a top-level 'data' list is neither SQuAD nor CUAD JSON; give --format"
        )
    raise QAFormatError(
        f"{p}: cannot tell the format from the type {p.suffix!r}; give --format squad, cuad, csv or jsonl"
    )


def _safe_file_name(title: str) -> str:
    name = re.sub(r"[/\\\x00-\x1f]+", "_", title).strip().strip(".") or "document"
    return name[:200] + ".txt"


def import_squad_json(path: str | Path, *, kind: str = "squad") -> ImportResult:
    """Import SQuAD 2.0 JSON (``kind="squad"``) or CUAD JSON (``kind="cuad"``); see the module."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise QAFormatError(f"{p}: not valid UTF-8 JSON ({exc}); export it again") from None
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise QAFormatError(f"{p}: no top-level 'data' list; is this SQuAD or CUAD JSON?")
    report = ImportReport(source=f"{p.name} ({kind} JSON)")
    documents: dict[str, str] = {}
    items: list[QAItem] = []
    for a_no, article in enumerate(articles):
        title = str(article.get("title") or f"article_{a_no + 1}")
        paragraphs = article.get("paragraphs") or []
        contexts = [str(par.get("context", "")) for par in paragraphs]
        offsets, pos = [], 0
        for ctx in contexts:
            offsets.append(pos)
            pos += len(ctx) + 2
        text = "\n\n".join(contexts)
        file_name = _safe_file_name(title)
        if file_name in documents:
            raise QAFormatError(f"{p}: two articles are titled {title!r}; their documents would share a file")
        documents[file_name] = text
        for par, base in zip(paragraphs, offsets):
            for qa in par.get("qas") or []:
                items.append(_squad_item(qa, text, base, file_name, kind, report))
    report.documents = len(documents)
    return ImportResult(documents, items, report)


def _squad_item(
    qa: Mapping[str, object], text: str, base: int, file_name: str, kind: str, report: ImportReport
) -> QAItem:
    qid = str(qa.get("id") or "")
    answers = [a for a in mappings(qa.get("answers")) if str(a.get("text", "")).strip()]
    impossible = bool(qa.get("is_impossible", not answers)) or not answers
    report.questions += 1
    meta: JSONObject = {"source": "squad_v2" if kind == "squad" else "cuad_v1"}
    if kind == "cuad" and "__" in qid:
        meta["category"] = qid.rsplit("__", 1)[1]
    if impossible:
        return QAItem(qid, file_name, str(qa.get("question", "")), "", (), True, meta)
    report.answerable += 1
    spans: list[Span] = []
    texts: list[str] = []
    for a in answers:
        answer = str(a["text"])
        start = base + as_int(a.get("answer_start", -1))
        if start >= 0 and text[start : start + len(answer)] == answer:
            found, how = [(start, start + len(answer))], "exact"
        else:
            found, how = locate_answer(text, answer)
            if how == "exact":
                report.spans_moved += 1
                if len(found) > 1:
                    report.ambiguous.append(_describe(qid, file_name, answer))
            elif how == "none":
                report.not_found.append(_describe(qid, file_name, answer))
        if how == "whitespace":
            report.spans_whitespace += 1
        elif how == "exact":
            report.spans_exact += 1
        spans += [s for s in found if s not in spans]
        if answer.strip() not in texts:
            texts.append(answer.strip())
    spans.sort()
    if kind == "cuad":
        order = {t: min((s for s, e in spans if text[s:e] == t), default=0) for t in texts}
        reference = "\n".join(sorted(texts, key=lambda t: order[t]))
    else:
        reference = texts[0]
    return QAItem(qid, file_name, str(qa.get("question", "")), reference, tuple(spans), False, meta)


def _pick(row: Mapping[str, object], names: tuple[str, ...], what: str, where: str, columns: list[str]) -> str:
    lowered = {k.strip().lower(): k for k in row}
    for name in names:
        if name in lowered:
            return lowered[name]
    raise QAFormatError(
        f"{where}: no {what} column; the columns are {columns}; name one of them {' or '.join(repr(n) for n in names)}"
    )


def _read_table(p: Path) -> list[JSONObject]:
    try:
        content = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise QAFormatError(f"{p}: not valid UTF-8 at byte {exc.start}; re-save it as UTF-8") from None
    if p.suffix.lower() == ".jsonl":
        rows: list[JSONObject] = []
        for lineno, line in enumerate(content.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise QAFormatError(f"{p}, line {lineno}: not valid JSON ({exc.msg})") from None
        return rows
    dialect = csv.excel_tab if p.suffix.lower() == ".tsv" else csv.excel
    return list(csv.DictReader(content.splitlines(), dialect=dialect))


def import_table(
    path: str | Path, resolve: Callable[[str], str | None], read_text: Callable[[str], str]
) -> ImportResult:
    """Import a CSV/TSV/JSONL table of questions and answers about documents in a folder.

    Args:
        path: the table.
        resolve: maps the document column's value (a file name, stem or doc_id) to a doc_id,
            or None when the folder has no such document (e.g. ``DocumentFolder.resolve``).
        read_text: the text of a doc_id (answers are located in it).
    """
    p = Path(path)
    rows = _read_table(p)
    if not rows:
        raise QAFormatError(f"{p}: holds no rows; add a header and one question per row")
    columns = list(rows[0])
    doc_col = _pick(rows[0], DOCUMENT_COLUMNS, "document", str(p), columns)
    q_col = _pick(rows[0], _QUESTION_COLUMNS, "question", str(p), columns)
    a_col = _pick(rows[0], _ANSWER_COLUMNS, "answer", str(p), columns)
    id_col = next((c for c in columns if c.strip().lower() in _ID_COLUMNS), None)
    report = ImportReport(source=f"{p.name} (table)")
    items: list[QAItem] = []
    texts: dict[str, str] = {}
    used = set()
    for n, row in enumerate(rows, 1):
        ref = str(row.get(doc_col) or "").strip()
        doc_id = resolve(ref) if ref else None
        if doc_id is None:
            report.unknown_documents[ref] = report.unknown_documents.get(ref, 0) + 1
            continue
        if doc_id not in texts:
            texts[doc_id] = read_text(doc_id)
        qid = str(row.get(id_col) or "").strip() if id_col else ""
        qid = qid or f"{p.stem}_{n}"
        if qid in used:
            raise QAFormatError(f"{p}, row {n}: question id {qid!r} is used twice; ids must be unique")
        used.add(qid)
        answer = row.get(a_col)
        if isinstance(answer, list):
            answer = answer[0] if answer else ""
        answer = str(answer or "").strip()
        extra = {k: v for k, v in row.items() if k not in (doc_col, q_col, a_col, id_col) and v not in (None, "")}
        meta: JSONObject = {"source": p.name, **extra}
        report.questions += 1
        if not answer:
            items.append(QAItem(qid, ref, str(row.get(q_col) or ""), "", (), True, meta))
            continue
        report.answerable += 1
        spans, how = locate_answer(texts[doc_id], answer)
        if how == "exact":
            report.spans_exact += 1
        elif how == "whitespace":
            report.spans_whitespace += 1
        else:
            report.not_found.append(_describe(qid, ref, answer))
        if len(spans) > 1:
            report.ambiguous.append(_describe(qid, ref, answer) + f" ({len(spans)} places)")
        items.append(QAItem(qid, ref, str(row.get(q_col) or ""), answer, tuple(spans), False, meta))
    report.documents = len(texts)
    return ImportResult({}, items, report)
