"""Merging the answers of several windows: where a window's quote is in the document
(:func:`locate_evidence`), the best-supported answer among several (:func:`best_supported`, the
extractive reader's merge), and the merge prompt's list of answers and the windows its reply
cites (:func:`format_findings`, :func:`parse_synthesis`, the LLM reader's merge).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxwin_dagster.core.methods.prompts import NOT_IN_DOCUMENTS
from ctxwin_dagster.core.methods.sliding_findings import Synthesis, WindowFinding
from ctxwin_dagster.core.retrieval.window import Window

__all__ = ["best_supported", "format_findings", "locate_evidence", "parse_synthesis"]

_WS = re.compile(r"\s+")


def locate_evidence(evidence: str, window: Window) -> tuple[int, int] | None:
    """Document offsets of a quote in ``window``: exact match first, then ignoring white space
    and case; None when the quote is not in the window (a paraphrase).

    Example::

        >>> locate_evidence("brown  fox", Window("d", 100, 119, "The quick brown fox"))
        (110, 119)
    """
    quote = evidence.strip().strip("\"'“”„‘’").strip()
    if len(quote) < 3:
        return None
    i = window.text.find(quote)
    if i >= 0:
        return (window.start + i, window.start + i + len(quote))
    words = [re.escape(w) for w in quote.split()]
    if not words:
        return None
    m = re.search(r"\s+".join(words), window.text, flags=re.IGNORECASE)
    if m is None:
        return None
    return (window.start + m.start(), window.start + m.end())


def _overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def best_supported(findings: Sequence[WindowFinding]) -> tuple[WindowFinding, list[WindowFinding]]:
    """The best-supported answer among ``findings`` (those with ``found``) and its support.

    The answer with the highest confidence wins; ties go to the answer more windows agree on
    (same normalized answer text, or overlapping evidence spans), then to the earlier window.
    Returns the winner and every finding that agrees with it (the winner first).

    Example::

        >>> fs = [WindowFinding(1, "d", 0, 10, True, "A", 0.6, evidence_span=(5, 9)),
        ...       WindowFinding(2, "d", 8, 20, True, "A", 0.6, evidence_span=(5, 9)),
        ...       WindowFinding(3, "d", 18, 30, True, "B", 0.6)]
        >>> win, support = best_supported(fs)
        >>> win.window, [f.window for f in support]
        (1, [1, 2])
    """
    found = [f for f in findings if f.found]
    if not found:
        raise ValueError("best_supported needs at least one finding with found=True")

    def agrees(a: WindowFinding, b: WindowFinding) -> bool:
        return _norm(a.answer) == _norm(b.answer) or _overlap(a.evidence_span, b.evidence_span)

    support = {f.window: [g for g in found if agrees(f, g)] for f in found}
    best = min(found, key=lambda f: (-round(f.confidence, 6), -len(support[f.window]), f.window))
    agreeing = [best] + [g for g in support[best.window] if g is not best]
    return best, agreeing


def _norm(text: str) -> str:
    return _WS.sub(" ", text.strip().lower())


def format_findings(findings: Sequence[WindowFinding]) -> str:
    """The ``{answers}`` of :data:`~ctxwin_dagster.core.methods.prompts.SYNTHESIZE_TEMPLATES`: one block per window.

    Example::

        >>> print(format_findings([WindowFinding(3, "d", 0, 9, True, "Yes.", 0.9, "it is so")]))
        [W3] (confidence 0.90)
        Answer: Yes.
        Quote: "it is so"
    """
    blocks = []
    for f in findings:
        lines = [f"[W{f.window}] (confidence {f.confidence:.2f})", f"Answer: {f.answer}"]
        if f.evidence:
            lines.append(f'Quote: "{f.evidence}"')
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


_W_CITATION = re.compile(r"\[\s*(W\s*\d+(?:\s*[,;]\s*W?\s*\d+)*)\s*\]", re.IGNORECASE)


def parse_synthesis(text: str, windows: Sequence[int]) -> Synthesis:
    """The window numbers a merged answer cites (``[W3]``, ``[W3, W7]``), and the not-found sentinel.

    Numbers that name no given window are ignored.

    Example::

        >>> parse_synthesis("Paris [W2], not Lyon [W5, W9].", [2, 5]).windows
        (2, 5)
        >>> parse_synthesis("NOT_IN_DOCUMENTS", [1]).not_found
        True
    """
    clean = text.strip()
    bare = clean.strip(" \t\n.\"'`*")
    if bare.upper().replace(" ", "_") == NOT_IN_DOCUMENTS:
        return Synthesis(NOT_IN_DOCUMENTS, (), (), True)
    allowed = set(windows)
    cited: dict[int, None] = {}
    for m in _W_CITATION.finditer(clean):
        for num in re.findall(r"\d+", m.group(1)):
            if int(num) in allowed:
                cited.setdefault(int(num), None)
    return Synthesis(clean, tuple(cited))
