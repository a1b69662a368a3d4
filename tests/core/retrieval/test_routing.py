"""Folder routing: the periods a question names, a document's dates, and when routing narrows."""

from __future__ import annotations

import pytest

from ctxwin_dagster.core.retrieval.routing import DocumentCard, DocumentRouter, Periods, question_periods
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
