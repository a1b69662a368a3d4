"""Folder routing: the periods a question names, a document's dates, the kind of document a
question points at ("this agreement"), and when routing narrows."""

from __future__ import annotations

import pytest

from ctxwin_dagster.core.retrieval.routing import (
    DocumentCard,
    DocumentRouter,
    Periods,
    question_kind,
    question_periods,
    routing_note,
)
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings


@pytest.mark.parametrize(
    "question, years, quarters",
    [
        ("What is the FY2018 capital expenditure amount (in USD millions) for 3M?", (2018,), set()),
        ("Is Verizon a capital intensive business based on FY 2022 data?", (2022,), set()),
        ("Did Pfizer grow its PPNE between FY20 and FY21?", (2020, 2021), set()),
        ("Was there any drop in Cash & Cash equivalents between FY 2023 and Q2 of FY2024?", (2023, 2024), {2}),
        ("Which geographic region had the biggest drop in Q22023 year over year revenues?", (2023,), {2}),
        ("As of Q2'2023, is Pfizer spinning off any large business segments?", (2023,), {2}),
        ("Which of JPM's business segments had the lowest net revenue in 2021 Q1?", (2021,), {1}),
        ("Did the risk decrease in the second fiscal quarter of 2023?", (2023,), {2}),
        # amounts and percentages are not years; a plain question names no period
        ("Did revenue pass $2019 million, or 2,019 units, or grow 2020%?", (), set()),
        ("Who was the Norse leader?", (), set()),
    ],
)
def test_question_periods_read_each_way_a_year_or_quarter_is_written(question, years, quarters):
    assert question_periods(question) == Periods(years, frozenset(quarters))


def test_a_documents_dates_come_from_its_name_and_its_opening():
    annual = DocumentCard.of("acme-annual", "ACME Corp. Form 10-K for the fiscal year ended December 31, 2018.")
    assert annual.years == {2018} and not annual.quarterly
    quarter = DocumentCard.of(
        "report", "Form 10-Q. For the quarterly period ended July 29, 2023.", name="BESTBUY_2024Q2_10Q.txt"
    )
    assert quarter.years == {2023, 2024} and quarter.quarterly and quarter.quarters == {2}
    assert DocumentCard.of("Normans", "The Normans were the people who gave their name to Normandy.").years == set()
    assert "3M 2018 10K" in DocumentCard.of("3M_2018_10K", "").text  # names and years as words for BM25


def _filings() -> DocumentRouter:
    return DocumentRouter(
        [
            DocumentCard.of("ACME_2018_10K", "ACME Corp. Annual report for the fiscal year ended December 31, 2018"),
            DocumentCard.of("ACME_2022_10K", "ACME Corp. Annual report for the fiscal year ended December 31, 2022"),
            DocumentCard.of("ACME_2023Q2_10Q", "ACME Corp. Report for the quarterly period ended June 30, 2023"),
            DocumentCard.of("Globex_2022_10K", "Globex Inc. Annual report for the fiscal year ended June 30, 2022"),
        ]
    )


def test_the_year_named_picks_among_near_copies_even_when_another_years_chunk_ranks_first():
    router = _filings()
    # the 2018 filing's best chunk is the closest: its statements read like the 2022 one's
    best = {"ACME_2018_10K": 0.62, "ACME_2022_10K": 0.60, "Globex_2022_10K": 0.55, "ACME_2023Q2_10Q": 0.50}
    assert router.route("What was ACME's FY2022 capital expenditure?", best, 1) == ["ACME_2022_10K"]
    quarter = {**best, "ACME_2023Q2_10Q": 0.58}
    assert router.route("What was ACME's capital expenditure in Q2 2023?", quarter, 1) == ["ACME_2023Q2_10Q"]
    # the company named keeps the other company's filing of the same year behind
    assert router.route("What was Globex's revenue in 2022?", best, 1) == ["Globex_2022_10K"]
    assert router.route("What was ACME's FY2022 revenue?", best, 2)[0] == "ACME_2022_10K"


def test_the_period_named_outranks_a_closer_chunk_and_card_of_another_period():
    # A question that names no company: another company's filing, of the wrong period, has both
    # the closest chunk and the closest card; the one quarterly report of the period asked for
    # still comes first (fused as three equal votes, it came second).
    router = DocumentRouter(
        [
            DocumentCard.of(
                "AMCOR_2023Q4_EARNINGS",
                "Amcor reports fourth quarter and fiscal 2023 results. Cash and cash equivalents",
            ),
            DocumentCard.of(
                "BESTBUY_2024Q2_10Q", "Best Buy Co. Form 10-Q for the quarterly period ended July 29, 2023"
            ),
            DocumentCard.of("BESTBUY_2017_10K", "Best Buy Co. Form 10-K for the fiscal year ended January 28, 2017"),
        ]
    )
    best = {"AMCOR_2023Q4_EARNINGS": 0.71, "BESTBUY_2017_10K": 0.64, "BESTBUY_2024Q2_10Q": 0.55}
    question = "Was there any drop in Cash & Cash equivalents between FY 2023 and Q2 of FY2024?"
    assert router.route(question, best, 1) == ["BESTBUY_2024Q2_10Q"]
    # an annual question prefers the annual report of that year to the quarter's release
    annual = DocumentRouter(
        [
            DocumentCard.of("AMCOR_2023Q4_EARNINGS", "Amcor reports fourth quarter and fiscal 2023 results"),
            DocumentCard.of("AMCOR_2023_10K", "Amcor plc Form 10-K for the fiscal year ended June 30, 2023"),
        ]
    )
    margin = {"AMCOR_2023Q4_EARNINGS": 0.66, "AMCOR_2023_10K": 0.60}
    assert annual.route("Does AMCOR have an improving gross margin profile as of FY2023?", margin, 1) == [
        "AMCOR_2023_10K"
    ]


def test_routing_stands_aside_when_the_dates_tell_nothing_apart():
    router = _filings()
    best = {"ACME_2018_10K": 0.62, "ACME_2022_10K": 0.60}
    assert router.route("What was ACME's capital expenditure?", best, 1) is None  # no period named
    assert router.route("What was ACME's revenue in 1999?", best, 1) is None  # no document of that year
    articles = DocumentRouter(
        [
            DocumentCard.of("squad_Normans", "The Normans were the people who in the 10th and 11th centuries gave"),
            DocumentCard.of("squad_Amazon", "The Amazon rainforest covers most of the Amazon basin"),
        ]
    )
    assert articles.route("What did the Normans do in 1066?", {"squad_Normans": 0.7}, 1) is None  # undated
    with pytest.raises(ValueError, match="at least one document"):
        router.route("FY2022?", best, 0)


def test_route_to_is_a_retrieval_setting_kept_across_modes():
    assert RetrievalSettings.named("ask").route_to == 1
    assert RetrievalSettings.named("ask", route_to=0).route_to == 0
    assert RetrievalSettings.named("ask", num_neighbors=2).route_to == 1  # another mode keeps the routing
    assert RetrievalSettings.named("paper").route_to == 0
    assert "routed to its 3 likeliest documents" in RetrievalSettings.named("ask", route_to=3).describe()
    assert "names a period routed to its likeliest document" in RetrievalSettings.named("ask").describe()
    with pytest.raises(ValueError, match="route_to must be an int >= 0"):
        RetrievalSettings.named("ask", route_to=-1)


@pytest.mark.parametrize(
    "question, kind",
    [
        ("Which country's law governs this agreement?", "contract"),
        ("Highlight the parts (if any) of this contract related to Governing Law", "contract"),
        ("Can this License be assigned?", "contract"),
        ("Which AI practices are prohibited by this Regulation?", "regulation"),
        # a kind named without pointing at the document, or a word that only starts like one
        ("What agreement ended the French and Indian War?", None),
        ("When was the agreement signed?", None),
        ("What does this agreements clause say?", "contract"),
        ("Is this contractor paid monthly?", None),
    ],
)
def test_question_kind_is_read_from_this_and_a_kind_word(question, kind):
    assert question_kind(question) == kind


def _mixed_folder(*extra: DocumentCard) -> DocumentRouter:
    return DocumentRouter(
        [
            DocumentCard.of("eu_ai_act", "REGULATION (EU) 2024/1689 OF THE EUROPEAN PARLIAMENT AND OF THE COUNCIL"),
            DocumentCard.of("reseller", "Exhibit 4.10 MARKETING AND RESELLER AGREEMENT (the Agreement) is made"),
            DocumentCard.of("squad_Normans", "The Normans were the people who gave their name to Normandy"),
            *extra,
        ]
    )


def test_a_question_about_this_agreement_searches_the_folders_contracts_only():
    question = "Which country's law governs this agreement?"
    # the regulation's clause on third countries' law is the closest chunk, yet it is no agreement
    best = {"eu_ai_act": 0.71, "reseller": 0.52, "squad_Normans": 0.20}
    assert _mixed_folder().route(question, best, 1) == ["reseller"]
    # every contract of the folder is searched; the file name alone can say "agreement"
    services = DocumentCard.of("FEDERATED-EX-99-SERVICES AGREEMENT", "Federated Government Income Securities, Inc.")
    assert services.kinds == {"contract"}
    two = _mixed_folder(services)
    assert set(two.route(question, {**best, services.doc_id: 0.6}, 1)) == {services.doc_id, "reseller"}
    assert two.route("Which AI practices are prohibited by this Regulation?", best, 1) == ["eu_ai_act"]
    # a period and a kind: the first document of the best-fitting period among those of the kind
    dated = _mixed_folder(DocumentCard.of("lease_2019", "LEASE AGREEMENT dated March 1, 2019"))
    assert dated.route("What rent does this lease set for 2019?", best, 1) == ["lease_2019"]
    assert routing_note("What rent does this lease set for 2019?", ["lease_2019"]).startswith(
        "searched lease_2019 only: the document most likely asked about, of those dated by the year or quarter "
        'the question names and of the kind it points at ("this lease")'
    )


def test_the_kind_stands_aside_when_it_tells_nothing_apart():
    best = {"reseller": 0.52}
    assert _mixed_folder().route("Which country's law governs the agreement?", best, 1) is None  # not "this"
    contracts = DocumentRouter(
        [
            DocumentCard.of("reseller", "MARKETING AND RESELLER AGREEMENT"),
            DocumentCard.of("cobranding", "CO-BRANDING AGREEMENT"),
        ]
    )
    assert contracts.route("Which country's law governs this agreement?", best, 1) is None  # all contracts
    articles = DocumentRouter(
        [DocumentCard.of("squad_Normans", "The Normans were"), DocumentCard.of("squad_Warsaw", "Warsaw is")]
    )
    assert articles.route("Which country's law governs this agreement?", {}, 1) is None  # no contract at all
