"""The financial statements of a filing, found by their titles, for questions that name one.

An analyst's question often names the statement its answer is in: "… by relying on the details
shown in the cash flow statement", "… primarily using the balance sheet". The statement is a
table whose rows ("Purchases of property, plant and equipment (1,577)") share few words with
the question and embed far from it, so neither vectors nor BM25 find it reliably. Its title
does: a line of its own, "Consolidated Statement of Cash Flows", "CONDENSED CONSOLIDATED BALANCE
SHEETS (Unaudited)".

* :func:`named_statements` — the statements a question names (cash flows, balance sheet,
  income statement, comprehensive income, shareholders' equity);
* :func:`statement_chunks` — the chunks of a document that hold one of their titles as a line
  of its own (a table of contents' line ends with a page number, and a sentence that mentions
  the statement is no title, so neither counts).

Sentence focus (``RetrievalSettings.statements``) adds those chunks to the question's candidates,
ahead of the vector hits; the sentences then picked from them are scored like any others.
Chosen on FinanceBench dev's tuning companies (evaluations/financebench_retrieval.py).

Example::

    >>> named_statements("What is the FY2018 capex for 3M? Use the cash flow statement.")
    ('cash_flows',)
    >>> text = "Contents\\nConsolidated Balance Sheets 55\\n\\nConsolidated Balance Shee t\\nAssets 1,000"
    >>> statement_titles(text)
    ((41, 'balance_sheet'),)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from ctxwin_dagster.core.text.splitting import Chunk

__all__ = ["STATEMENTS", "named_statements", "statement_chunks", "statement_titles"]

#: Each statement: how a question names it, and its title with letters only, lower case (so
#: "Balance Shee t", a PDF's broken word, is still "balancesheet").
STATEMENTS: dict[str, tuple[re.Pattern[str], str]] = {
    "cash_flows": (
        re.compile(r"cash[- ]?flows?\s+statements?|statements?\s+of\s+cash\s+flows?", re.IGNORECASE),
        r"statements?ofcashflows?|cashflowsstatements?",
    ),
    "balance_sheet": (
        re.compile(r"balance\s+sheets?|statements?\s+of\s+financial\s+position", re.IGNORECASE),
        r"balancesheets?|statements?offinancialposition|statements?ofcondition",
    ),
    "income": (
        re.compile(
            r"income\s+statements?|statements?\s+of\s+(?:income|operations|earnings)|\bP&L\b|profit\s+and\s+loss",
            re.IGNORECASE,
        ),
        r"statements?of(?:consolidated)?(?:income|operations|earnings)|incomestatements?",
    ),
    "comprehensive_income": (
        re.compile(r"statements?\s+of\s+comprehensive\s+income", re.IGNORECASE),
        r"statements?of(?:consolidated)?comprehensive(?:income|loss)",
    ),
    "equity": (
        re.compile(
            r"statements?\s+of\s+(?:changes\s+in\s+)?(?:shareholders|stockholders|shareowners)['’]?\s+equity",
            re.IGNORECASE,
        ),
        r"statements?of(?:changesin)?(?:shareholders|stockholders|shareowners)equity",
    ),
}

#: A title line: its statement's title, perhaps with "condensed", "consolidated" or "combined"
#: before it and "(unaudited)" or "(continued)" after it, and nothing else.
_TITLE = re.compile(
    r"^(?:condensed|consolidated|combined)*("
    + "|".join(f"(?P<{name}>{title})" for name, (_, title) in STATEMENTS.items())
    + r")(?:unaudited|continued)*$"
)
_LETTERS = re.compile(r"[^a-z]")
#: A title line is short; longer lines are sentences that mention a statement.
_MAX_TITLE_CHARS = 120


def named_statements(question: str) -> tuple[str, ...]:
    """The statements ``question`` names, in :data:`STATEMENTS` order."""
    return tuple(name for name, (asked, _) in STATEMENTS.items() if asked.search(question))


@lru_cache(maxsize=64)
def statement_titles(text: str) -> tuple[tuple[int, str], ...]:
    """``(offset, statement)`` of every title line in ``text`` (kept for the last 64 texts)."""
    out: list[tuple[int, str]] = []
    pos = 0
    for line in text.split("\n"):
        stripped = line.strip()
        if 8 <= len(stripped) <= _MAX_TITLE_CHARS and not stripped[-1].isdigit():
            m = _TITLE.match(_LETTERS.sub("", stripped.lower()))
            if m:
                out.append((pos + line.index(stripped[0]), next(k for k, v in m.groupdict().items() if v)))
        pos += len(line) + 1
    return tuple(out)


def statement_chunks(text: str, chunks: Sequence[Chunk], statements: Sequence[str]) -> list[Chunk]:
    """The chunks of one document (``chunks``, cut from ``text``) holding a title line of one
    of ``statements``, in document order, each once."""
    wanted = set(statements)
    offsets = [offset for offset, name in statement_titles(text) if name in wanted]
    if not offsets:
        return []
    ordered = sorted(chunks, key=lambda c: c.start)
    found: dict[str, Chunk] = {}
    for offset in offsets:
        for c in ordered:
            if c.start <= offset < c.end:
                found.setdefault(c.chunk_id, c)
                break
    return list(found.values())
