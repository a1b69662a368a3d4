"""The signals of sentence focus: question parts, BM25, hybrid candidates, structure-following
windows, the adaptive budget, and the whole selection of the ``ask`` retrieval setting on a
contract from the repository's sample data."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from ctxwin_dagster.core.retrieval.enhance import enhance
from ctxwin_dagster.core.retrieval.focus import focus_context
from ctxwin_dagster.core.retrieval.lexical import LexicalIndexes, TextBM25, hybrid_hits, reciprocal_rank_fusion
from ctxwin_dagster.core.retrieval.question import (
    QUESTION_SHARE,
    dense_scorer,
    query_texts,
    query_weights,
    question_parts,
)
from ctxwin_dagster.core.retrieval.sentence_focus import focus_windows, structure_starts
from ctxwin_dagster.core.retrieval.settings import RETRIEVAL_PRESETS, RetrievalSettings
from ctxwin_dagster.core.retrieval.window import opening_end
from ctxwin_dagster.core.text.sentences import split_sentences
from ctxwin_dagster.core.text.splitting import Chunk, RecursiveSplitter

DATA = Path(__file__).resolve().parents[3] / "data"
TEMPLATE = (
    'Highlight the parts (if any) of this contract related to "Governing Law" that should be reviewed by a lawyer. '
    "Details: Which state/country's law governs the interpretation of the contract?"
)


def _split(text: str) -> list[Chunk]:
    return RecursiveSplitter(chunk_size=1000, chunk_overlap=100).split(
        text, doc_id="d", doc_sha256=hashlib.sha256(text.encode()).hexdigest()
    )


# ---------------------------------------------------------------- question parts, BM25, fusion


def test_question_parts_keep_what_a_template_varies():
    assert question_parts(TEMPLATE) == [
        "Governing Law",
        "Which state/country's law governs the interpretation of the contract?",
    ]
    assert question_parts("Who ruled the duchy of Normandy?") == ["Who ruled the duchy of Normandy?"]
    assert question_parts('What does "force majeure" mean here?') == ["force majeure"]
    assert question_parts("Context: a lease. Question: who pays the rent?") == ["a lease.", "who pays the rent?"]
    settings = RetrievalSettings.named("ask")
    assert query_texts(TEMPLATE, settings) == [TEMPLATE, *question_parts(TEMPLATE)]
    assert query_texts(TEMPLATE, RetrievalSettings.named("ask", question_parts=False)) == [TEMPLATE]
    assert query_texts("Who ruled the duchy of Normandy?", settings) == ["Who ruled the duchy of Normandy?"]


# One question of each form the parts rule fires on, with the words that carry its meaning.
PARTS_FORMS = {
    "a CUAD template": (TEMPLATE, ["Governing Law", "law governs", "contract"]),
    "a FinanceBench definition": (
        "Based on the information provided primarily in the balance sheet and the statement of income, what is "
        "FY2020 days payable outstanding (DPO) for Corning? DPO is defined as: 365 * (average accounts payable "
        "between FY2019 and FY2020) / (FY2020 COGS + change in inventory between FY2019 and FY2020). Round your "
        "answer to two decimal places.",
        ["Corning", "FY2020", "days payable outstanding", "DPO", "accounts payable"],
    ),
    "a FinanceBench formula": (
        "What is the FY2019 cash conversion cycle (CCC) for General Mills? CCC is defined as: DIO + DSO - DPO. "
        "DIO is defined as: 365 * (average inventory between FY2018 and FY2019) / (FY2019 COGS).",
        ["General Mills", "FY2019", "cash conversion cycle", "DIO + DSO - DPO"],
    ),
    "a SQuAD quote": ('In what year did Edmonds characterize a "good" algorithm?', ["year", "Edmonds", "algorithm"]),
    "a SQuAD title": (
        'Which company published the book "The Structure of Scientific Revolutions" in 1962?',
        ["company", "1962", "The Structure of Scientific Revolutions"],
    ),
}


@pytest.mark.parametrize("form", sorted(PARTS_FORMS))
def test_question_parts_add_weight_and_keep_the_questions_entities(form):
    question, entities = PARTS_FORMS[form]
    texts = query_texts(question, RetrievalSettings.named("ask"))
    assert texts[0] == question and len(texts) > 1, "the question comes first and the rule fired"
    for entity in entities:
        assert entity in texts[0], f"{entity!r} of {form} was dropped"
    weights = query_weights(len(texts))
    assert weights[0] == pytest.approx(QUESTION_SHARE) and weights.sum() == pytest.approx(1.0)
    # The full-text query holds the whole question too.
    assert all(e.lower() in " ".join(texts).lower() for e in entities)


def test_dense_scores_weigh_the_question_and_its_parts():
    vecs = {"q": np.array([1.0, 0.0]), "part": np.array([0.0, 1.0])}
    score = dense_scorer(lambda ts: np.stack([vecs[t] for t in ts]), np.stack([vecs["q"], vecs["part"]]), [0.75, 0.25])
    assert score(["q", "part"]).tolist() == [0.75, 0.25]
    with pytest.raises(ValueError, match="non-negative"):
        dense_scorer(lambda ts: ts, np.eye(2), [1.0])


def test_bm25_scores_by_text_and_ignores_template_words():
    sentences = [
        "This Agreement shall be governed by the laws of the State of Israel.",
        "The Reseller shall pay the fees within thirty days.",
        "Either party may terminate this Agreement on notice.",
    ]
    bm25 = TextBM25(sentences + sentences[:1])  # duplicates share one entry
    assert bm25.size == 3
    score = bm25.scorer(" ".join(question_parts(TEMPLATE)))
    s = score(sentences + ["a sentence that was never indexed"])
    assert s[0] > 0 and s[0] == max(s) and s[3] == 0
    assert not bm25.scores("highlight parts reviewed lawyer").any()  # template words: not in the document
    with pytest.raises(ValueError, match="at least one text"):
        TextBM25([])


def test_reciprocal_rank_fusion_and_hybrid_hits():
    fused = reciprocal_rank_fusion([[1, 2, 3], [3, 1]])
    assert list(fused) == [1, 3, 2] and fused[1] == pytest.approx(1 / 61 + 1 / 62)
    chunks = [
        Chunk(f"c{i}", "d", i, 10 * i, 10 * i + 5, t) for i, t in enumerate(["alpha", "beta", "gamma", "delta law"])
    ]
    vector = [(chunks[0], 0.9), (chunks[1], 0.8), (chunks[2], 0.7)]
    lexical = lambda texts: [2.0 if "law" in t else 0.0 for t in texts]  # noqa: E731
    hits = hybrid_hits(vector, chunks, lexical, k=2, vector_score=lambda c: 0.1)
    assert [c.chunk_id for c, _ in hits] == ["c0", "c3"]  # the chunk only full-text search found enters
    assert dict((c.chunk_id, s) for c, s in hits) == {"c0": 0.9, "c3": 0.1}
    assert [c.chunk_id for c, _ in hybrid_hits(vector, chunks, lambda ts: [0.0] * len(ts), k=2)] == ["c0", "c1"]
    with pytest.raises(ValueError, match="one per text"):
        hybrid_hits(vector, chunks, lambda ts: [0.0], k=2)


# ---------------------------------------------------------------- windows

CLAUSES = (
    "1. Term\nThis Agreement starts on the Effective Date. It runs for two years. It renews each year unless ended.\n\n"
    "2. Governing Law\nThis Agreement is governed by the laws of Israel. The courts of Tel Aviv decide every dispute.\n\n"
    "3. Fees\nThe Reseller pays the fees monthly. Late fees bear interest. Taxes are extra.\n"
)


def _sentences(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"[^.\n]+[.\n]?", text) if m.group().strip()]


def test_structure_starts_find_clauses_and_headings():
    starts = structure_starts(CLAUSES)
    assert [CLAUSES[i : i + 8] for i in starts] == ["1. Term\n", "2. Gover", "3. Fees\n"]
    assert structure_starts("ARTICLE V\nText here.\n(a) first item\n(b) second item") == [0, 21, 36]


def test_structure_windows_cover_their_clause_first():
    chunks = [Chunk("c", "d", 0, 0, len(CLAUSES), CLAUSES)]
    law = CLAUSES.index("The courts of Tel Aviv")  # the clause's last sentence
    score = lambda ts: [1.0 if "courts" in t else 0.0 for t in ts]  # noqa: E731
    kw = dict(
        split_sentences=_sentences, score_sentences=score, doc_texts={"d": CLAUSES}, window_chars=112, budget_chars=112
    )
    plain = focus_windows([(chunks[0], 0.5)], chunks, **kw)[0]
    clause = focus_windows([(chunks[0], 0.5)], chunks, structure=True, **kw)[0]
    start, end = CLAUSES.index("2. Governing Law"), CLAUSES.index("\n\n3.")
    assert plain.start <= law < plain.end and not (plain.start <= start and end <= plain.end)  # cut across clauses
    assert clause.start == start and clause.end >= end - 1 and clause.text == CLAUSES[clause.start : clause.end]


def test_score_drop_stops_early_and_lexical_scores_rerank():
    chunks = [Chunk("c", "d", 0, 0, len(CLAUSES), CLAUSES)]
    sims = {"governed": 0.9, "courts": 0.85}
    score = lambda ts: [max((v for k, v in sims.items() if k in t), default=0.1) for t in ts]  # noqa: E731
    kw = dict(
        split_sentences=_sentences,
        score_sentences=score,
        doc_texts={"d": CLAUSES},
        window_chars=60,
        budget_chars=10_000,
    )
    everything = focus_windows([(chunks[0], 0.0)], chunks, **kw)
    dropped = focus_windows([(chunks[0], 0.0)], chunks, score_drop=0.2, **kw)
    assert len(dropped) == 2 < len(everything) and all(w.score >= 0.9 - 0.2 for w in dropped)
    lex = lambda ts: [5.0 if "Fees" in t or "fees" in t else 0.0 for t in ts]  # noqa: E731
    reranked = focus_windows(
        [(chunks[0], 0.0)], chunks, lexical_scores=lex, lexical_weight=1.0, **dict(kw, budget_chars=60)
    )
    assert "fees" in reranked[0].text.lower()
    with pytest.raises(ValueError, match="lexical_weight needs lexical_scores"):
        focus_windows([(chunks[0], 0.0)], chunks, lexical_weight=0.5, **kw)
    with pytest.raises(ValueError, match="score_drop"):
        focus_windows([(chunks[0], 0.0)], chunks, score_drop=-1.0, **kw)
    with pytest.raises(ValueError, match="structure is an option of enhance_mode='focus'"):
        enhance([(chunks[0], 0.0)], chunks, RetrievalSettings(enhance_mode="none", structure=True))


# ---------------------------------------------------------------- the ask setting, end to end


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{3,}", text.lower())}


def _bow_vectors(texts, vocab: dict[str, int]) -> np.ndarray:
    """A stand-in dense model: L2-normalized bags of words (deterministic and fast)."""
    out = np.zeros((len(texts), len(vocab)), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in _words(t):
            if w in vocab:
                out[i, vocab[w]] = 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms == 0, 1, norms)


TODOS = "cuad_todos_medical_reseller"


def _sample_item(doc_id: str, category: str) -> dict:
    return next(
        json.loads(line)
        for line in (DATA / "qa" / "cuad_sample.jsonl").read_text(encoding="utf-8").splitlines()
        if json.loads(line)["question_id"] == f"{doc_id}__{category}"
    )


def _ask_context(text: str, question: str, settings: RetrievalSettings, lexical: LexicalIndexes | None = None):
    """The focus context of ``question`` over ``text`` under ``settings``, with the bag-of-words
    stand-in for the dense model; also the ranked chunks and the chunks."""
    chunks = _split(text)
    vocab = {w: i for i, w in enumerate(sorted(_words(text) | _words(question)))}
    chunk_vecs = _bow_vectors([c.text for c in chunks], vocab)
    qvec = _bow_vectors([question], vocab)[0]
    sims = chunk_vecs @ qvec
    ranked = [(chunks[i], float(sims[i])) for i in np.argsort(-sims, kind="stable")]
    ctx = focus_context(
        question,
        ranked[: 4 * settings.effective_k],
        chunks,
        settings=settings,
        score_sentences=dense_scorer(
            lambda ts: _bow_vectors(ts, vocab),
            _bow_vectors(query_texts(question, settings), vocab),
            query_weights(len(query_texts(question, settings))),
        ),
        lexical_query=" ".join(query_texts(question, settings)),
        doc_texts={"d": text},
        lexical=lexical if lexical is not None else LexicalIndexes(),
        vector_score=lambda c: float(sims[c.chunk_index]),
    )
    return ctx, ranked, chunks


def test_ask_setting_finds_the_clause_of_a_templated_question_in_a_real_contract():
    text = (DATA / "documents" / f"{TODOS}.txt").read_text(encoding="utf-8")
    item = _sample_item(TODOS, "Governing Law")
    ((s, e),) = item["reference_spans"]
    settings = RetrievalSettings.named("ask")
    lexical = LexicalIndexes()
    ctx, ranked, chunks = _ask_context(text, item["question"], settings, lexical)
    assert ctx.mode == "focus" and ctx.focus["score_drop"] == 0.23 and ctx.focus["lexical_weight"] == 0.2
    assert 0 < ctx.n_chars <= settings.focus_chars + settings.opening_chars
    assert any(w.start <= s and e <= w.end for w in ctx.windows), "the governing-law clause is given whole"
    for w in ctx.windows:
        assert w.text == text[w.start : w.end]
    assert lexical.built == 2 and lexical.build_seconds > 0  # sentences and chunks, built once
    again = focus_context(
        item["question"],
        ranked[:96],
        chunks,
        settings=settings,
        score_sentences=lambda ts: np.zeros(len(ts)),
        lexical_query=" ".join(query_texts(item["question"], settings)),
        doc_texts={"d": text},
        lexical=lexical,
    )
    assert lexical.built == 2 and again.windows
    with pytest.raises(ValueError, match="enhance_mode='focus'"):
        focus_context(
            "q",
            ranked,
            chunks,
            settings=RetrievalSettings.named("paper"),
            score_sentences=lambda ts: np.zeros(len(ts)),
            lexical_query="q",
        )


@pytest.mark.parametrize(
    "category, ranking_finds_it", [("Parties", False), ("Document Name", False), ("Agreement Date", True)]
)
def test_the_documents_opening_gives_its_name_parties_and_date(category, ranking_finds_it):
    # The parties and the name are names in the contract's first lines, which share no words
    # with the question: the ranking alone misses them, the opening holds them.
    text = (DATA / "documents" / f"{TODOS}.txt").read_text(encoding="utf-8")
    item = _sample_item(TODOS, category)
    spans = [tuple(x) for x in item["reference_spans"]]
    assert max(s for s, _ in spans) < 500

    def found(ctx) -> bool:
        return any(w.start <= s and e <= w.end for s, e in spans for w in ctx.windows)

    ask = RetrievalSettings.named("ask")
    with_opening, _, _ = _ask_context(text, item["question"], ask)
    without, _, _ = _ask_context(text, item["question"], RetrievalSettings.named("ask", opening_chars=0))
    assert found(with_opening) and found(without) == ranking_finds_it
    end = opening_end(text, ask.opening_chars)
    # the preamble is one long sentence: the opening ends at the last word within the 500 characters
    assert ask.opening_chars - 50 < end <= ask.opening_chars and text[end].isspace()
    opening = next(w for w in with_opening.windows if w.start == 0)
    assert opening.end >= end and opening.text == text[: opening.end]
    # no document character is given twice, and the opening is counted in the characters
    covered = sorted((w.start, w.end) for w in with_opening.windows)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(covered, covered[1:]))
    assert with_opening.n_chars == sum(e - s for s, e in covered)
    assert "opening, 500 characters" in ask.describe()


def test_opening_end_cuts_at_a_sentence_end_or_white_space():
    assert opening_end("", 500) == 0 and opening_end("Short text.", 500) == len("Short text.")
    assert opening_end("Anything at all", 0) == 0
    text = "First sentence here. " + "word " * 200
    # no sentence ends in the second half of the first 100 characters: cut at white space
    assert opening_end(text, 100) <= 100 and text[opening_end(text, 100) - 1] != " "
    assert text[: opening_end(text, 100)].startswith("First sentence here. word")
    two = "One sentence ends here. Another one ends right here. And a third goes on " + "x" * 300
    assert two[: opening_end(two, 60)] == "One sentence ends here. Another one ends right here."
    with pytest.raises(ValueError, match="opening_chars must be an int >= 0"):
        RetrievalSettings(opening_chars=-1)
    with pytest.raises(ValueError, match="opening_chars is an option of enhance_mode='focus'"):
        RetrievalSettings(enhance_mode="neighbors", opening_chars=500)


def test_named_settings_keep_every_technique_reachable():
    ask = RetrievalSettings.named("ask")
    assert (
        ask.effective_k,
        ask.focus_chars,
        ask.hybrid,
        ask.question_parts,
        ask.lexical_weight,
        ask.score_drop,
        ask.structure,
        ask.opening_chars,
    ) == (24, 8000, True, True, 0.2, 0.23, False, 500)
    assert set(RETRIEVAL_PRESETS) == {"ask", "focus-dense", "paper"}
    dense = RetrievalSettings.named("focus-dense")
    assert (dense.effective_k, dense.focus_chars, dense.hybrid, dense.effective_lexical_weight, dense.score_drop) == (
        16,
        4000,
        False,
        0.0,
        None,
    )
    assert RetrievalSettings.named("ask", structure=True).structure
    neighbours = RetrievalSettings.named("ask", enhance_mode="neighbors")
    assert not neighbours.hybrid and not neighbours.question_parts and neighbours.score_drop is None
    with pytest.raises(ValueError, match="score_drop is an option of enhance_mode='focus'"):
        RetrievalSettings(enhance_mode="none", score_drop=0.3)
    with pytest.raises(ValueError, match="structure is an option of enhance_mode='focus'"):
        RetrievalSettings(enhance_mode="budget", structure=True)
    with pytest.raises(ValueError, match="lexical_weight must be a number >= 0"):
        RetrievalSettings(lexical_weight=-0.1)
    assert "BM25 sentence scores" in ask.describe() and "within 0.23 of the best score" in ask.describe()


def test_sentence_splitter_is_the_one_bm25_indexes():
    text = (DATA / "documents" / "cuad_todos_medical_reseller.txt").read_text(encoding="utf-8")
    lexical = LexicalIndexes()
    index = lexical.sentences("d", text)
    assert index.size == len({text[s:e] for s, e in split_sentences(text)})
