"""QA sets: questions with reference answers and reference spans, in one JSONL format.

One line per question, one JSON object per line (UTF-8)::

    {"question_id": "q1", "doc_id": "squad_Normans",
     "question": "In what country is Normandy located?", "reference_answer": "France",
     "reference_spans": [[159, 165]], "is_impossible": false, "meta": {"source": "squad_v2"}}

(shown wrapped here; in the file each object is on one line).

Fields:

* ``question_id`` (str, required, non-empty): unique within the set.
* ``doc_id`` (str, required): the document the question is about: its doc_id, its file name
  (``Acme, Inc. - Supply Agreement.txt``) or the file's stem. The evaluation resolves it
  against the documents folder (:meth:`~ctxwin_dagster.core.text.folder.DocumentFolder.resolve`).
* ``question`` (str, required, non-empty).
* ``reference_answer`` (str, required): the expected answer; ``""`` for an unanswerable
  question.
* ``reference_spans`` (list of ``[start, end]`` ints, optional, default ``[]``): where the
  answer is in the document, as character offsets into the document text
  (``text[start:end]``, ``0 <= start < end <= len(text)``); ``[]`` for an unanswerable
  question.
* ``is_impossible`` (bool, optional): ``true`` for a question the document does not answer.
  When absent it is ``true`` exactly when ``reference_answer`` is ``""`` and
  ``reference_spans`` is ``[]``.
* ``meta`` (object, optional): anything else (source, category, titles...).

Any other top-level key is kept under ``meta`` (as CUAD and FinanceBench exports carry a
``category``), with one :class:`QAExtraFieldsWarning` per file naming the keys moved. A key that
is a near miss of a known one (``reference_span``, ``questionid``) is still an error that names
the field meant, so a typo is never silently ignored.

Importers of the SQuAD and CUAD corpus files are in :mod:`ctxwin_dagster.core.evaluation.qa.corpora`.

Plain Python only: this module imports neither dagster, ragas nor lancedb.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ctxwin_dagster.core.evaluation.qa.span_problems import span_problems
from ctxwin_dagster.core.json_types import JSONObject

__all__ = [
    "QAItem",
    "QAFormatError",
    "QAExtraFieldsWarning",
    "REQUIRED_FIELDS",
    "OPTIONAL_FIELDS",
    "Span",
    "load_qa_jsonl",
    "load_qa_folder",
    "write_qa_jsonl",
    "validate_spans",
]


class QAExtraFieldsWarning(UserWarning):
    """A QA file has top-level fields the format does not define; they were kept under ``meta``."""


def _near_miss(key: str) -> str | None:
    """The known field ``key`` is most likely a typo of (case, separators or one letter off), or None."""
    import difflib

    squash = "".join(ch for ch in key.lower() if ch.isalnum())
    for known in _ALL_FIELDS:
        if squash == known.replace("_", ""):
            return known
    close = difflib.get_close_matches(key.lower(), _ALL_FIELDS, n=1, cutoff=0.85)
    return close[0] if close else None


REQUIRED_FIELDS: tuple[str, ...] = ("question_id", "doc_id", "question", "reference_answer")
OPTIONAL_FIELDS: tuple[str, ...] = ("reference_spans", "is_impossible", "meta")
_ALL_FIELDS = REQUIRED_FIELDS + OPTIONAL_FIELDS

_UNANSWERABLE_HINT = (
    'for an unanswerable question set "reference_answer": "", "reference_spans": [] and "is_impossible": true'
)
_MAX_PROBLEMS_SHOWN = 20


class QAFormatError(ValueError):
    """A QA item or QA file is malformed; the message says where and how to fix it."""


Span = tuple[int, int]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _normalize_spans(spans: object) -> tuple[Span, ...]:
    if not isinstance(spans, (list, tuple)):
        raise QAFormatError(
            "field 'reference_spans' must be a list of [start, end] character offsets, "
            f"got {type(spans).__name__}; use [] when there is no span"
        )
    out: list[Span] = []
    for i, span in enumerate(spans):
        if not isinstance(span, (list, tuple)) or len(span) != 2 or not _is_int(span[0]) or not _is_int(span[1]):
            raise QAFormatError(f"field 'reference_spans[{i}]' must be a pair of integers [start, end], got {span!r}")
        start, end = span
        if not 0 <= start < end:
            raise QAFormatError(
                f"field 'reference_spans[{i}]' = [{start}, {end}] must satisfy "
                "0 <= start < end (end is exclusive: text[start:end] is the answer)"
            )
        out.append((start, end))
    return tuple(out)


def _text_field(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise QAFormatError(f"field {name!r} must be a non-empty string, got {value!r}")
    return value


def _checked(fields: Mapping[str, object]) -> tuple[str, str, str, str, tuple[Span, ...], bool, JSONObject]:
    """The fields of a :class:`QAItem`, given by name, checked and in order (spans normalized,
    ``is_impossible`` inferred when None or left out); raises :class:`QAFormatError` naming the
    first field at fault and the fix."""
    question_id = _text_field("question_id", fields["question_id"])
    doc_id = _text_field("doc_id", fields["doc_id"])
    question = _text_field("question", fields["question"])
    reference_answer = fields["reference_answer"]
    if any(ch in doc_id for ch in "\n\r\t\x00"):
        raise QAFormatError(
            f"field 'doc_id' = {doc_id!r} holds a line break, tab or NUL; give the "
            "document's file name, its stem or its doc_id"
        )
    if not isinstance(reference_answer, str):
        raise QAFormatError(
            f"field 'reference_answer' must be a string, got {type(reference_answer).__name__}; {_UNANSWERABLE_HINT}"
        )
    spans = _normalize_spans(fields.get("reference_spans", []))
    meta = fields.get("meta")
    if not isinstance(meta, dict):
        raise QAFormatError(f"field 'meta' must be a JSON object (dict), got {type(meta).__name__}")
    is_impossible = fields.get("is_impossible")
    if is_impossible is None:
        is_impossible = reference_answer == "" and not spans
    elif not isinstance(is_impossible, bool):
        raise QAFormatError(f"field 'is_impossible' must be true or false, got {is_impossible!r}")
    if is_impossible and (reference_answer != "" or spans):
        raise QAFormatError(
            "field 'is_impossible' is true but the item has a reference_answer or "
            f"reference_spans; {_UNANSWERABLE_HINT}, or set is_impossible to false"
        )
    if not is_impossible and not reference_answer.strip():
        raise QAFormatError(
            "field 'reference_answer' is empty but the question is answerable; give the "
            f"expected answer text, or {_UNANSWERABLE_HINT}"
        )
    return question_id, doc_id, question, reference_answer, spans, is_impossible, meta


@dataclass(frozen=True)
class QAItem:
    """One question about one document.

    ``reference_spans`` are character offsets into the document's text
    (``doc.text[start:end]``); lists are accepted and normalized to tuples.

    >>> item = QAItem("q1", "doc", "Who?", "Rollo", [[10, 15]])
    >>> item.reference_spans, item.is_impossible
    (((10, 15),), False)
    >>> QAItem("q2", "doc", "Why?", "", ()).is_impossible   # inferred
    True

    ``source`` and ``line`` tell where an item was read (:func:`load_qa_jsonl` sets them; ""
    and 0 for items made in code). They are not part of the item: not compared, not written.
    """

    question_id: str
    doc_id: str
    question: str
    reference_answer: str
    reference_spans: tuple[Span, ...] = ()
    is_impossible: bool | None = None
    meta: JSONObject = field(default_factory=dict, hash=False)
    source: str = field(default="", compare=False, repr=False)
    line: int = field(default=0, compare=False, repr=False)

    @property
    def where(self) -> str:
        """Where the item was read (``qa/set.jsonl, line 3``), or its question id when not from a file."""
        if not self.source:
            return f"question {self.question_id!r}"
        return f"{self.source}, line {self.line}" if self.line else self.source

    def __post_init__(self) -> None:
        checked = _checked(vars(self))
        object.__setattr__(self, "reference_spans", checked[4])
        object.__setattr__(self, "is_impossible", checked[5])

    def to_dict(self) -> JSONObject:
        """The JSONL representation (spans as lists; ``meta`` omitted when empty)."""
        data: JSONObject = {
            "question_id": self.question_id,
            "doc_id": self.doc_id,
            "question": self.question,
            "reference_answer": self.reference_answer,
            "reference_spans": [[s, e] for s, e in self.reference_spans],
            "is_impossible": bool(self.is_impossible),
        }
        if self.meta:
            data["meta"] = self.meta
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> QAItem:
        """Build an item from one parsed JSONL object; raises :class:`QAFormatError`."""
        if not isinstance(data, Mapping):
            raise QAFormatError(f"each line must be a JSON object, got {type(data).__name__}")
        unknown = [k for k in data if k not in _ALL_FIELDS]
        typos = {k: near for k in unknown if (near := _near_miss(str(k)))}
        if typos:
            raise QAFormatError(
                "unknown field(s) "
                + ", ".join(f"{k!r} (did you mean {v!r}?)" for k, v in typos.items())
                + f"; the fields are {', '.join(_ALL_FIELDS)} (anything else is kept under 'meta')"
            )
        meta = data.get("meta", {})
        if unknown and isinstance(meta, Mapping):
            meta = {**{str(k): data[k] for k in unknown}, **meta}
        missing = [k for k in REQUIRED_FIELDS if k not in data]
        if missing:
            raise QAFormatError(
                f"missing required field(s) {', '.join(repr(k) for k in missing)}; every "
                f"line needs {', '.join(REQUIRED_FIELDS)}"
            )
        return cls(*_checked({**data, "meta": meta}))


def load_qa_jsonl(path: str | Path) -> list[QAItem]:
    """Load and validate a QA JSONL file (format in this module's docstring).

    Blank lines are skipped. Errors name the file, the line number, the field and the fix.

    Raises:
        QAFormatError: invalid JSON, a malformed item, a duplicate ``question_id``, bytes
            that are not UTF-8, or a file without any question.
        FileNotFoundError: the file does not exist.
    """
    p = Path(path)
    try:
        content = p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise QAFormatError(f"{p}: not valid UTF-8 at byte {exc.start}; re-save the file as UTF-8") from None
    items: list[QAItem] = []
    seen: dict[str, int] = {}
    extra: dict[str, int] = {}
    for lineno, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{p}, line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise QAFormatError(
                f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); each line must be one complete JSON object"
            ) from None
        try:
            item = QAItem.from_dict(obj)
        except QAFormatError as exc:
            raise QAFormatError(f"{where}: {exc}") from None
        for key in obj:
            if key not in _ALL_FIELDS:
                extra[str(key)] = extra.get(str(key), 0) + 1
        if item.question_id in seen:
            raise QAFormatError(
                f"{where}: field 'question_id' = {item.question_id!r} is already used on "
                f"line {seen[item.question_id]}; question ids must be unique"
            )
        seen[item.question_id] = lineno
        object.__setattr__(item, "source", str(p))
        object.__setattr__(item, "line", lineno)
        items.append(item)
    if not items:
        raise QAFormatError(f"{p}: holds no questions; add one JSON object per line or remove the file")
    if extra:
        import warnings

        fields = ", ".join(f"{k!r} ({n} line{'s' if n != 1 else ''})" for k, n in sorted(extra.items()))
        warnings.warn(
            f"{p}: fields the QA format does not define were kept under 'meta': {fields}",
            QAExtraFieldsWarning,
            stacklevel=2,
        )
    return items


def load_qa_folder(folder: str | Path) -> list[QAItem]:
    """Load every ``*.jsonl`` file in ``folder`` (sorted by name, hidden files skipped).

    ``question_id`` must be unique across all the files.
    """
    root = Path(folder)
    if not root.is_dir():
        raise QAFormatError(f"QA folder {str(root)!r} does not exist; create it and put .jsonl QA files in it")
    items: list[QAItem] = []
    origin: dict[str, Path] = {}
    for p in sorted(root.glob("*.jsonl"), key=lambda q: q.name):
        if p.name.startswith(".") or not p.is_file():
            continue
        for item in load_qa_jsonl(p):
            if item.question_id in origin:
                raise QAFormatError(
                    f"{p}: question_id {item.question_id!r} is also used in "
                    f"{origin[item.question_id]}; question ids must be unique across files"
                )
            origin[item.question_id] = p
            items.append(item)
    return items


def write_qa_jsonl(items: Iterable[QAItem], path: str | Path) -> Path:
    """Write items as QA JSONL (UTF-8, ``\\n`` line ends), atomically; returns the path.

    Raises:
        QAFormatError: two items share a ``question_id``.
    """
    p = Path(path)
    seen: set[str] = set()
    lines: list[str] = []
    for item in items:
        if item.question_id in seen:
            raise QAFormatError(f"{p}: question_id {item.question_id!r} appears twice; ids must be unique")
        seen.add(item.question_id)
        lines.append(json.dumps(item.to_dict(), ensure_ascii=False))
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the usual file mode
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write("".join(line + "\n" for line in lines))
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def validate_spans(items: Iterable[QAItem], doc_texts: Mapping[str, str]) -> None:
    """Check that every item's document exists and every span lies inside it.

    Args:
        items: QA items.
        doc_texts: ``doc_id -> document text`` (as read by
            :func:`ctxwin_dagster.core.text.documents.read_text_document`).

    Raises:
        QAFormatError: listing every problem (up to 20 shown, with the total): unknown
            ``doc_id`` s, spans past the end of the text, spans covering only white space.

    >>> validate_spans([QAItem("q", "d", "?", "b", [[1, 2]])], {"d": "abc"})
    """
    problems = span_problems(items, doc_texts)
    if problems:
        shown = problems[:_MAX_PROBLEMS_SHOWN]
        more = len(problems) - len(shown)
        tail = f"\n  ... and {more} more" if more else ""
        raise QAFormatError(
            f"{len(problems)} reference-span problem(s):\n  "
            + "\n  ".join(shown)
            + tail
            + "\nOffsets are character offsets into the document text read as UTF-8."
        )
