"""Which document each question is about, when questions name documents as users do.

A question's ``doc_id`` field may hold the document's doc_id, its file name or the file's stem
(see :mod:`ctxwin_dagster.core.document_folder`). :func:`resolve_questions` rewrites each item to
the doc_id of its document (keeping what the file said under ``meta["doc_ref"]``) and reports
the names that match no document, or several.

Plain Python only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ctxwin_dagster.core.document_folder import DocumentFolder

from .items import QAItem

__all__ = ["ResolvedQuestions", "resolve_questions"]


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
