"""Which document each question is about, when questions name documents as users do.

A question's ``doc_id`` field may hold the document's doc_id, its file name or the file's stem
(see :mod:`ctxwin_dagster.core.text.folder`). :func:`resolve_questions` rewrites each item to
the doc_id of its document (keeping what the file said under ``meta["doc_ref"]``) and reports
the names that match no document, or several. :func:`check_reference_spans` then checks every
reference span against its document's text, naming the QA file and line: before any run (``ctxwin
evaluate``, ``ctxwin run --qa``), and in the ``qa_sets`` asset for the runs no command checked.

Plain Python only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from ctxwin_dagster.core.evaluation.qa.items import QAFormatError, QAItem
from ctxwin_dagster.core.text.documents import DocumentError
from ctxwin_dagster.core.text.folder import DocumentFolder

__all__ = ["ResolvedQuestions", "check_reference_spans", "resolve_questions"]

_MAX_SPAN_PROBLEMS_SHOWN = 20


@dataclass(frozen=True)
class ResolvedQuestions:
    """Questions by doc_id, and the document names that could not be resolved.

    Attributes:
        by_doc: doc_id -> its questions (each with ``doc_id`` set to that id).
        unknown: a name that matches no document -> how many questions use it.
        ambiguous: a name that fits several files (``x`` for ``x.txt`` and ``x.pdf``) -> count.
    """

    by_doc: dict[str, list[QAItem]] = field(default_factory=dict)
    unknown: Counter[str] = field(default_factory=Counter)
    ambiguous: Counter[str] = field(default_factory=Counter)

    def report_lines(self) -> list[str]:
        """Lines naming the questions left out and the fix."""
        lines = []
        if self.unknown:
            shown = ", ".join(f"{ref!r} ({n})" for ref, n in self.unknown.most_common(10))
            lines.append(
                f"{sum(self.unknown.values())} question(s) name no document in the folder: {shown}; "
                "give the file's name, its stem or its doc_id, or add the file"
            )
        if self.ambiguous:
            shown = ", ".join(f"{ref!r} ({n})" for ref, n in self.ambiguous.most_common(10))
            lines.append(
                f"{sum(self.ambiguous.values())} question(s) name a document that fits several files: {shown}; "
                "use the file name with its type (x.txt) or the doc_id"
            )
        return lines


def resolve_questions(items: Iterable[QAItem], folder: DocumentFolder) -> ResolvedQuestions:
    """Group ``items`` by the doc_id their ``doc_id`` field names in ``folder``."""
    out = ResolvedQuestions()
    for item in items:
        ref = item.doc_id
        doc_id, ambiguous = folder.lookup(ref)
        if doc_id is None:
            (out.ambiguous if ambiguous else out.unknown)[ref] += 1
            continue
        if doc_id != ref:
            item = replace(item, doc_id=doc_id, meta={**item.meta, "doc_ref": ref})
        out.by_doc.setdefault(doc_id, []).append(item)
    return out


def check_reference_spans(resolved: ResolvedQuestions, read_text: Callable[[str], str]) -> list[str]:
    """Check that every reference span lies inside its document's text (``0 <= start <= end <=
    len(text)``), before any run uses the offsets.

    Args:
        resolved: the questions by doc_id (:func:`resolve_questions`).
        read_text: ``doc_id -> the document's text`` as the pipeline reads it (the project's
            reader); called once per document that has spans. A document it cannot read
            (:class:`~ctxwin_dagster.core.text.documents.DocumentError`, ``OSError``) is not checked
            here: its own run fails with the reason.

    Returns:
        The doc_ids that could not be read (so not checked).

    Raises:
        QAFormatError: listing every span outside its document (up to 20 shown, with the
            total), each with the QA file, the line number and the fix.

    >>> r = ResolvedQuestions(by_doc={"d": [QAItem("q", "d", "?", "b", [[1, 2]])]})
    >>> check_reference_spans(r, lambda doc_id: "abc")
    []
    """
    problems: list[str] = []
    unread: list[str] = []
    for doc_id, items in resolved.by_doc.items():
        with_spans = [item for item in items if item.reference_spans]
        if not with_spans:
            continue
        try:
            text = read_text(doc_id)
        except (DocumentError, OSError):
            unread.append(doc_id)
            continue
        n = len(text)
        for item in with_spans:
            for i, (start, end) in enumerate(item.reference_spans):
                if 0 <= start <= end <= n:
                    continue
                who = f"{item.where}: question {item.question_id!r}" if item.source else item.where
                problems.append(
                    f"{who}: reference_spans[{i}] = [{start}, {end}] lies outside "
                    f"document {doc_id!r} ({n} characters; a span needs 0 <= start <= end <= {n}); fix the offsets "
                    "(character offsets into the document's text as read, e.g. text.find(answer)), or remove the span"
                )
    if problems:
        shown = problems[:_MAX_SPAN_PROBLEMS_SHOWN]
        more = f"\n  ... and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        raise QAFormatError(
            f"{len(problems)} reference span(s) outside their document:\n  " + "\n  ".join(shown) + more
        )
    return unread
