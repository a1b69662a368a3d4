"""Asking a whole folder of near copies: one company's annual reports of two years and another
company's, indexed with the real local embedder. A question that names a year is answered from
that year's report; the CLI's ``--route-to 0`` searches every report. And a folder of different
kinds (a contract, a law, an article): a question about "this agreement" is answered from the
contract, not from the law's clauses on agreements."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from ctxwin_dagster.ask import Asker
from ctxwin_dagster.backends.tasks.extractive import ExtractiveTasks
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings

pytestmark = pytest.mark.slow

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "documents"

BODY = """\
Item 7. Management's Discussion and Analysis of Financial Condition and Results of Operations

Total revenue was ${revenue} million, compared with ${prior} million in the prior year. The increase
came from higher volumes in the industrial segment and from price increases in the consumer segment.

Capital expenditures were ${capex} million, mainly for new production lines and for the renewal of
the distribution centers. The Company expects to fund its capital expenditures from operating cash.

Item 8. Financial Statements and Supplementary Data

The Company's independent auditor has audited the consolidated balance sheets and the related
statements of income, comprehensive income, equity and cash flows.
"""

REPORTS = {
    # name: (cover, revenue, prior, capex)
    "ACME_2018_annual_report": ("ACME Corp.", "fiscal year ended December 31, 2018", 412, 398, 57),
    "ACME_2022_annual_report": ("ACME Corp.", "fiscal year ended December 31, 2022", 530, 501, 81),
    "Globex_2022_annual_report": ("Globex Inc.", "fiscal year ended June 30, 2022", 1210, 1144, 140),
}


def _index_folder(root: Path, embedder, chunk_size: int) -> dict:
    """Index every file of ``root / "documents"`` (T-RAG rows) with the real embedder."""
    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
    from ctxwin_dagster.core.text.splitting import RecursiveSplitter

    docs = root / "documents"
    index = ChunkIndex(str(root / "lancedb"))
    splitter = RecursiveSplitter(chunk_size=chunk_size, chunk_overlap=chunk_size // 10)
    for path in sorted(docs.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        chunks = splitter.split(text, doc_id=path.stem, doc_sha256=sha)
        rows = [
            {**c.to_dict(), "doc_sha256": sha, "context": "", "context_engine": "", "embedded_text": c.text}
            for c in chunks
        ]
        index.replace_document("t_rag", path.stem, rows, embedder.embed([c.text for c in chunks]), doc_sha256=sha)
    asker = Asker(index=index, embedder=embedder, tasks=ExtractiveTasks(embedder), documents_dir=docs)
    return {"root": root, "documents": docs, "lancedb": root / "lancedb", "asker": asker}


@pytest.fixture(scope="module")
def filings(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("filings")
    (root / "documents").mkdir()
    for doc_id, (company, period, revenue, prior, capex) in REPORTS.items():
        text = f"{company}\nAnnual Report on Form 10-K for the {period}\n\n" + BODY.format(
            revenue=revenue, prior=prior, capex=capex
        )
        (root / "documents" / f"{doc_id}.txt").write_text(text, encoding="utf-8")
    return _index_folder(root, embedder, 400)


@pytest.fixture(scope="module")
def kinds(tmp_path_factory, embedder):
    """The sample's Todos contract and Normans article, and the AI Act's opening with its clause on
    bodies established "under the law of a third country with which the Union has concluded an
    agreement" (the passage a folder-wide search found for the contract's governing law)."""
    root = tmp_path_factory.mktemp("kinds")
    docs = root / "documents"
    docs.mkdir()
    for name in ("cuad_todos_medical_reseller.txt", "squad_Normans.txt"):
        shutil.copy(SAMPLE / name, docs / name)
    act = (SAMPLE / "eu_ai_act_2024_1689_EN.txt").read_text(encoding="utf-8")
    clause = act.index("Conformity assessment bodies established under the law of a third country")
    (docs / "eu_ai_act_excerpt.txt").write_text(
        act[:3000] + "\n\n" + act[clause - 1500 : clause + 1500], encoding="utf-8"
    )
    return _index_folder(root, embedder, 1000)


def test_a_question_naming_a_year_is_answered_from_that_years_report(filings):
    asker = filings["asker"]
    question = "What were ACME's capital expenditures in FY2022?"
    routed = asker.ask(question, variant="t")
    assert {w.doc_id for w in routed.context.windows} == {"ACME_2022_annual_report"}
    assert "$81 million" in routed.answer and "$57 million" not in routed.answer
    assert routed.context.routed_to == ["ACME_2022_annual_report"]
    assert any(n.startswith("searched ACME_2022_annual_report only") for n in routed.notes)
    # every report searched: the 2018 report's identical sentence comes along
    everything = asker.ask(question, variant="t", retrieval=RetrievalSettings.named("ask", route_to=0))
    assert "ACME_2018_annual_report" in {w.doc_id for w in everything.context.windows}
    assert everything.context.routed_to is None and not any(n.startswith("searched") for n in everything.notes)
    # the year picks the report in the other enhancement modes too
    rows = asker.retrieve(question, variant="t", retrieval=RetrievalSettings.named("paper", route_to=1))
    assert rows and {r["doc_id"] for r in rows} == {"ACME_2022_annual_report"}
    # without the files, each report's card is rebuilt from its indexed chunks
    indexed_only = Asker(
        index=asker.retriever.index, embedder=asker.retriever.embedder, tasks=asker.tasks, documents_dir=None
    )
    assert indexed_only.ask(question, variant="t").context.routed_to == ["ACME_2022_annual_report"]
    # naming the document still searches only it, whatever year is named
    own = asker.ask(question, variant="t", doc_id="ACME_2018_annual_report")
    assert {w.doc_id for w in own.context.windows} == {"ACME_2018_annual_report"}


def test_a_question_without_a_period_searches_every_report(filings):
    result = filings["asker"].ask("What were ACME's capital expenditures?", variant="t")
    assert {"ACME_2018_annual_report", "ACME_2022_annual_report"} <= {w.doc_id for w in result.context.windows}


def test_cli_route_to_zero_searches_every_report(filings, capsys):
    from ctxwin_dagster.cli import main

    base = [
        "ask",
        "What were ACME's capital expenditures in FY2022?",
        "--variant",
        "t",
        "--lancedb",
        str(filings["lancedb"]),
        "--documents",
        str(filings["documents"]),
        "--cache-dir",
        str(filings["root"] / "cache"),
        "--json",
    ]
    assert main(base) == 0
    routed = json.loads(capsys.readouterr().out)
    assert {c["doc_id"] for c in routed["citations"]} == {"ACME_2022_annual_report"}
    assert any("--route-to 0 searches every document" in n for n in routed["notes"])
    assert main([*base, "--route-to", "0"]) == 0
    everything = json.loads(capsys.readouterr().out)
    assert "ACME_2018_annual_report" in {w["doc_id"] for w in everything["windows"]}


def test_a_question_about_this_agreement_is_answered_from_the_folders_contract(kinds):
    asker = kinds["asker"]
    question = "Which country's law governs this agreement?"
    routed = asker.ask(question, variant="t")
    assert routed.context.routed_to == ["cuad_todos_medical_reseller"]
    assert {w.doc_id for w in routed.context.windows} == {"cuad_todos_medical_reseller"}
    assert "governed by and construed in accordance with the laws of the State of Israel" in routed.answer
    assert any('of the kind it points at ("this agreement")' in n for n in routed.notes), routed.notes
    # every document searched: the law's clause on agreements comes along
    everything = asker.ask(question, variant="t", retrieval=RetrievalSettings.named("ask", route_to=0))
    assert "eu_ai_act_excerpt" in {w.doc_id for w in everything.context.windows}
    # a question that does not point at a document of a kind searches the whole folder
    plain = asker.ask("When did the Normans conquer England?", variant="t")
    assert plain.context.routed_to is None and "1066" in plain.answer
