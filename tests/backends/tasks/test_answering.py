"""The extractive answer: ranking, the not-found decision, and lists that come whole."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from ctxwin_dagster.backends.tasks.answer_signals import SIGNALS, answer_signals, not_found_probability
from ctxwin_dagster.backends.tasks.answering import AnswerRule, answer_from_passages, opening_flags
from ctxwin_dagster.core.methods.prompts import NOT_IN_DOCUMENTS

NEVER = (-50.0, (0.0,) * len(SIGNALS))  # a not-found model that never abstains
ALWAYS = (50.0, (0.0,) * len(SIGNALS))


def bag_of_words(texts):
    """Unit vectors of hashed words: texts sharing words are similar (a stand-in embedder)."""
    out = np.zeros((len(texts), 256), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in re.findall(r"\w+", t.lower()):
            out[i, int(hashlib.sha256(w.encode()).hexdigest(), 16) % 256] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


LIST = (
    "Article 5 Prohibited AI practices\n\n"
    "1. The following AI practices shall be prohibited:\n\n"
    "(a) the placing on the market of an AI system that deploys subliminal techniques;\n\n"
    "(b) the use of an AI system that exploits any of the vulnerabilities of a natural person;\n\n"
    "(c) the use of AI systems for the social scoring of natural persons.\n\n"
    "2. The use of remote biometric identification systems shall be authorised only for law enforcement."
)


def test_a_sentence_that_introduces_a_list_brings_its_items():
    res = answer_from_passages(
        "Which AI practices shall be prohibited?", [("c1", LIST)], bag_of_words, rule=AnswerRule(abstain_at=None)
    )
    assert not res.not_found and res.cited == ["c1"]
    assert res.text.startswith("1. The following AI practices shall be prohibited:")
    for item in ("(a) the placing", "(b) the use", "(c) the use of AI systems for the social scoring"):
        assert item in res.text
    assert "list goes on" not in res.text and res.text.endswith("[c1]")
    items = [p for p in res.picks if p.list_item]
    assert len(items) == 3 and all(LIST[p.start : p.end] == p.text for p in res.picks)


def test_a_list_cut_by_the_passage_end_or_the_limit_says_so():
    cut = LIST[: LIST.index("(c)")].rstrip()  # the passage ends on "(b) …;"
    res = answer_from_passages(
        "Which AI practices shall be prohibited?", [("c1", cut)], bag_of_words, rule=AnswerRule(abstain_at=None)
    )
    assert "(b) the use" in res.text and "(the list goes on in the source)" in res.text
    res = answer_from_passages(
        "Which AI practices shall be prohibited?",
        [("c1", LIST)],
        bag_of_words,
        rule=AnswerRule(abstain_at=None, list_items=1),
    )
    assert "(a) the placing" in res.text and "(b)" not in res.text and "list goes on" in res.text


def test_only_sentences_close_to_the_best_answer():
    text = (
        "The Normans conquered England in 1066 under William. "
        "Normandy is a region in the north of France with many apple orchards. "
        "The weather in the region is often rainy and mild in winter."
    )
    res = answer_from_passages(
        "When did the Normans conquer England?", [("p", text)], bag_of_words, rule=AnswerRule(abstain_at=None)
    )
    assert res.text == "The Normans conquered England in 1066 under William. [p]"


def test_the_floor_and_the_not_found_model_decide_nothing_answers():
    passages = [("p", "The Normans conquered England in 1066 under William the Conqueror.")]
    res = answer_from_passages("Quantum chromodynamics gluon colour charge?", passages, bag_of_words)
    assert res.text == NOT_IN_DOCUMENTS and res.reason == "below the floor" and res.cited == []
    always, never = AnswerRule(not_found_model=ALWAYS), AnswerRule(not_found_model=NEVER)
    res = answer_from_passages("When did the Normans conquer England?", passages, bag_of_words, rule=always)
    assert res.not_found and res.reason == "the model" and res.not_found_probability > 0.99
    # the model was fitted on English questions: others are decided by the floor alone
    res = answer_from_passages(
        "When did the Normans conquer England?", passages, bag_of_words, rule=always, english=False
    )
    assert not res.not_found and res.not_found_probability is None
    assert not answer_from_passages(
        "When did the Normans conquer England?", passages, bag_of_words, rule=never
    ).not_found
    assert answer_from_passages("Anything?", [], bag_of_words).reason == "no sentences"


def test_signals_of_an_unanswerable_question():
    sents = ["The Normans conquered England in the eleventh century.", "Normandy lies in France."]
    sims = np.array([0.7, 0.3])
    s = answer_signals("How many times did the Normans not conquer Scotland?", sents, sims, 0)
    assert s["negated"] == 1.0 and s["negation_unmatched"] == 1.0 and s["type_missing"] == 1.0
    assert s["best"] == pytest.approx(0.7) and 0 < s["coverage"] < 1 and s["missing_rarest"] > 0
    s = answer_signals("When did the Normans conquer England?", sents, sims, 0)
    assert s["negated"] == 0.0 and s["type_missing"] == 0.0  # "century" is a date
    assert set(s) == set(SIGNALS)
    assert not_found_probability(s, NEVER) < 1e-9 < 1 - 1e-9 < not_found_probability(s, ALWAYS)


def test_the_rule_refuses_values_out_of_range():
    for bad in (
        {"floor": 2.0},
        {"abstain_at": 0.0},
        {"sentences": 0},
        {"margin": -1.0},
        {"list_chars": -1},
        {"not_found_model": (0.0, (1.0,))},
    ):
        with pytest.raises(ValueError):
            AnswerRule(**bad)


@pytest.mark.slow
def test_the_ai_act_prohibitions_are_answered_with_the_list(embedder, ai_act_text):
    start = ai_act_text.index("1. The following AI practices shall be prohibited:")
    passage = ai_act_text[start - 600 : start + 6000]
    res = answer_from_passages(
        "Which AI practices are prohibited?", [("art5", passage)], lambda t: embedder.embed(list(t))
    )
    assert not res.not_found, res
    assert "1. The following AI practices shall be prohibited:" in res.text
    assert "(a) the placing on the market" in res.text and "(b) the placing on the market" in res.text


def test_the_sentence_model_prefers_the_sentence_that_holds_what_is_asked_and_the_first_passage():
    question = "When did the Normans conquer England?"
    dated = "So the Normans did conquer England in 1066 at last."
    echo = "The Normans did conquer England long ago."  # the question's words, and no date
    plain = AnswerRule(abstain_at=None, sentences=1, ranker=None, margin=0.1)
    one = AnswerRule(abstain_at=None, sentences=1)
    # cosine + BM25 alone: the sentence that echoes the question's words wins
    assert answer_from_passages(question, [("1", dated), ("2", echo)], bag_of_words, rule=plain).cited == ["2"]
    # the model weighs the date asked for, and the first passage (the best retrieved)
    ranked = answer_from_passages(question, [("1", dated), ("2", echo)], bag_of_words, rule=one)
    assert ranked.cited == ["1"] and "1066" in ranked.text


def test_a_ranker_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="one weight per feature"):
        AnswerRule(ranker=(0.0, (1.0, 2.0)))


def test_a_question_about_the_document_itself_is_answered_from_its_opening():
    preamble = (
        "This Agreement is made on 20 December 2018 by and between Todos Medical Ltd. and Provista Diagnostics Inc."
    )
    clause = "Neither party may assign this agreement without the consent of the other party."
    question = "Who are the parties to this agreement?"
    passages = [("1", clause), ("2", preamble)]  # the opening comes last, as ctxwin ask appends it
    one = AnswerRule(abstain_at=None, sentences=1, floor=0.0)
    # offsets unknown: the clause that shares the question's words wins
    assert answer_from_passages(question, passages, bag_of_words, rule=one).cited == ["1"]
    # the preamble starts the document: the sentence that names the parties answers
    found = answer_from_passages(question, passages, bag_of_words, rule=one, starts=[9000, 0])
    assert found.cited == ["2"] and "Todos Medical" in found.text
    # a question not about the document itself keeps the clause
    other = answer_from_passages("May a party assign its rights?", passages, bag_of_words, rule=one, starts=[9000, 0])
    assert other.cited == ["1"]
    assert opening_flags([(0, 0, 10, "x"), (1, 480, 600, "y"), (1, 20, 40, "z")], [9000, 100]) == [False, False, True]
    assert opening_flags([(0, 0, 10, "x")], None) == opening_flags([(0, 0, 10, "x")], [None]) == [False]
