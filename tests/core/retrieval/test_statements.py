"""Financial statements found by their titles, for questions that name one."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from ctxwin_dagster.core.retrieval.focus import focus_context
from ctxwin_dagster.core.retrieval.lexical import LexicalIndexes
from ctxwin_dagster.core.retrieval.question import dense_scorer, query_texts, query_weights
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings
from ctxwin_dagster.core.retrieval.statements import named_statements, statement_chunks, statement_titles
from ctxwin_dagster.core.text.splitting import RecursiveSplitter

MDA = (
    "Capital expenditures are expected to be between $1.0 and $1.2 billion in the coming year, as the Company "
    "invests in capacity and in the renewal of its plants. Capital expenditure plans are reviewed each quarter "
    "by the Board, and the Company expects to fund its capital expenditure from operating cash. "
)
FILING = (
    "ACME Corp.\nAnnual Report on Form 10-K for the fiscal year ended December 31, 2022\n\n"
    "Index to Financial Statements\nConsolidated Statements of Income 52\nConsolidated Balance Sheets 53\n"
    "Consolidated Statements of Cash Flows 54\n\n"
    "Item 7. Management's Discussion and Analysis\n\n"
    + "\n\n".join(MDA for _ in range(8))
    + "\nThe consolidated statements of cash flows are presented on page 54 and show how the cash was used.\n\n"
    "Item 8. Financial Statements and Supplementary Data\n\n"
    "CONSOLIDATED BALANCE SHEETS (Unaudited)\nAssets\nCash and equivalents 1,204\nInventories 3,117\n"
    "Total current assets 9,876\n\n"
    "Consolidated Statement of Cash Flow s\nYears ended December 31\n(Millions)\n"
    "Net income 5,921\nDepreciation and amortization 1,488\nPurchases of property, plant and equipment (PP&E) (1,577)\n"
    "Proceeds from sale of PP&E 262\nNet cash used in investing activities (222)\n"
)


def test_a_question_names_the_statements_it_relies_on():
    assert named_statements("What is the FY2018 capex? Rely on the details shown in the cash flow statement.") == (
        "cash_flows",
    )
    assert named_statements("Answer from the balance sheet and the statement of income.") == ("balance_sheet", "income")
    assert named_statements("Use the statement of financial position") == ("balance_sheet",)
    assert named_statements("What is the P&L impact?") == ("income",)
    assert named_statements("Who was the Norse leader?") == ()


def test_titles_are_lines_of_their_own_and_not_the_contents_or_a_sentence():
    titles = statement_titles(FILING)
    found = [(name, FILING[offset : offset + 30]) for offset, name in titles]
    assert found == [
        ("balance_sheet", "CONSOLIDATED BALANCE SHEETS (U"),
        ("cash_flows", "Consolidated Statement of Cash"),  # "Flow s": a PDF's broken word still counts
    ]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]{3,}", text.lower()))


def test_the_named_statement_joins_the_candidates_and_its_rows_reach_the_context():
    chunks = RecursiveSplitter(chunk_size=500, chunk_overlap=50).split(
        FILING, doc_id="acme", doc_sha256=hashlib.sha256(FILING.encode()).hexdigest()
    )
    (titled,) = statement_chunks(FILING, chunks, ["cash_flows"])
    assert "Statement of Cash Flow s" in titled.text
    question = "What is the FY2022 capital expenditure amount for ACME? Rely on the cash flow statement."
    vocab = {w: i for i, w in enumerate(sorted(_words(FILING) | _words(question)))}

    def vectors(texts) -> np.ndarray:  # a stand-in dense model: bags of words
        out = np.zeros((len(texts), len(vocab)), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in _words(t):
                out[i, vocab[w]] = 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    sims = vectors([c.text for c in chunks]) @ vectors([question])[0]
    ranked = [(chunks[i], float(sims[i])) for i in np.argsort(-sims, kind="stable")][:4]
    assert titled.chunk_id not in {c.chunk_id for c, _ in ranked}  # the vectors alone miss the statement
    row = FILING.index("Purchases of property")

    def context(statements: bool):
        settings = RetrievalSettings.named("ask", k=4, hybrid=False, statements=statements)
        texts = query_texts(question, settings)
        return focus_context(
            question,
            ranked,
            chunks,
            settings=settings,
            score_sentences=dense_scorer(vectors, vectors(texts), query_weights(len(texts))),
            lexical_query=" ".join(texts),
            doc_texts={"acme": FILING},
            lexical=LexicalIndexes(),
        )

    assert any(w.start <= row < w.end for w in context(True).windows)
    assert not any(w.start <= row < w.end for w in context(False).windows)
    assert RetrievalSettings.named("ask").statements and not RetrievalSettings.named("paper").statements
    with pytest.raises(ValueError, match="statements is an option of enhance_mode='focus'"):
        RetrievalSettings(enhance_mode="none", statements=True)
