"""What is wrong with QA items' reference spans against the documents' texts: a document that
is not known, a span past the end of its text, a span over white space only.
:func:`~ctxwin_dagster.core.evaluation.qa.items.validate_spans` raises them as one error.

Example::

    >>> from types import SimpleNamespace as Item
    >>> span_problems([Item(question_id="q", doc_id="d", reference_spans=((1, 9),))], {"d": "abc"})
    ["question 'q': reference_spans[0] = [1, 9] ends past the end of document 'd' (3 chars)"]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

__all__ = ["span_problems"]


class _SpannedItem(Protocol):
    """What the checks read of a QA item."""

    @property
    def question_id(self) -> str: ...

    @property
    def doc_id(self) -> str: ...

    @property
    def reference_spans(self) -> tuple[tuple[int, int], ...]: ...


def span_problems(items: Iterable[_SpannedItem], doc_texts: Mapping[str, str]) -> list[str]:
    """One line per problem: every span of a known document that is past its end or covers only
    white space, then every unknown ``doc_id`` (with how many questions name it and the fix)."""
    unknown: dict[str, int] = {}
    problems: list[str] = []
    for item in items:
        text = doc_texts.get(item.doc_id)
        if text is None:
            unknown[item.doc_id] = unknown.get(item.doc_id, 0) + 1
            continue
        for i, (start, end) in enumerate(item.reference_spans):
            if end > len(text):
                problems.append(
                    f"question {item.question_id!r}: reference_spans[{i}] = [{start}, {end}] "
                    f"ends past the end of document {item.doc_id!r} ({len(text)} chars)"
                )
            elif not text[start:end].strip():
                problems.append(
                    f"question {item.question_id!r}: reference_spans[{i}] = [{start}, {end}] "
                    f"covers only white space in document {item.doc_id!r}"
                )
    for doc_id, count in sorted(unknown.items()):
        known = ", ".join(sorted(doc_texts)[:10]) + (" ..." if len(doc_texts) > 10 else "")
        problems.append(
            f"doc_id {doc_id!r} ({count} question(s)) is not a known document; add the file "
            f"{doc_id}.txt to the documents folder or fix the doc_id (known: {known or 'none'})"
        )
    return problems
