"""Sliding-window QA: planning, waves and early stop, merging; the extractive and the LLM readers
over the whole EU AI Act (answers located in Article 5)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
from ctxwin_dagster.backends.tasks.window_readers import ExtractiveWindowReader, LLMWindowReader
from ctxwin_dagster.core.budget.limits import ModelLimits
from ctxwin_dagster.core.budget.tokens import get_token_counter
from ctxwin_dagster.core.methods.prompts import NO_ANSWER, NOT_IN_DOCUMENTS
from ctxwin_dagster.core.methods.sliding_qa import (
    SlidingAnswer,
    Synthesis,
    WindowFinding,
    best_supported,
    locate_evidence,
    no_answer_finding,
    parse_synthesis,
    plan_windows,
    sliding_window_qa,
)
from ctxwin_dagster.core.retrieval.window import Window
from ctxwin_dagster.testing import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[3]
SECTIONS = ROOT / "tests" / "fixtures" / "eu_ai_act" / "eu_ai_act_sections_EN.jsonl"
ENC = get_token_counter("gpt-4o").encoding


def _sections() -> dict[str, tuple[int, int]]:
    rows = [json.loads(line) for line in SECTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["id"]: (r["start"], r["end"]) for r in rows}


ARTICLE_5 = _sections()["article_5"]


@pytest.fixture(scope="module")
def act(ai_act_text) -> str:
    text = ai_act_text
    assert text[ARTICLE_5[0] : ARTICLE_5[0] + 40].startswith("Article 5")
    return text


def _in_article_5(start: int, end: int) -> bool:
    return ARTICLE_5[0] <= start and end <= ARTICLE_5[1]


# --------------------------------------------------------------------------------------
# The engine with a scripted reader
# --------------------------------------------------------------------------------------


class ScriptedReader:
    """Finds an answer in windows containing ``needle``, confidence by a fixed table."""

    engine, model = "scripted", "scripted-1"

    def __init__(self, needle: str, confidence: float = 0.9, limit: int | None = None) -> None:
        self.needle, self.confidence, self.limit = needle, confidence, limit
        self.waves: list[list[int]] = []
        self.synth_calls: list[list[int]] = []

    def window_token_limit(self, *, summary=None, question=""):
        return self.limit

    def read(self, question, windows, *, numbers, total, summary=None):
        self.waves.append(list(numbers))
        out = []
        for w, n in zip(windows, numbers):
            i = w.text.find(self.needle)
            if i < 0:
                out.append(no_answer_finding(w, n, records=(f"call{n}",)))
            else:
                span = (w.start + i, w.start + i + len(self.needle))
                out.append(
                    WindowFinding(
                        n,
                        w.doc_id,
                        w.start,
                        w.end,
                        True,
                        self.needle,
                        self.confidence,
                        self.needle,
                        span,
                        None,
                        (f"call{n}",),
                    )
                )
        return out

    def synthesize(self, question, findings, *, summary=None):
        self.synth_calls.append([f.window for f in findings])
        return Synthesis(f"{findings[0].answer} [W{findings[0].window}]", (findings[0].window,), ("synth",))


def test_plan_windows_token_mode_maps_offsets():
    text = "Article 1\nScope. " * 300
    windows = plan_windows(
        text, window_tokens=100, overlap_tokens=20, encode=ENC.encode_ordinary, decode=ENC.decode, doc_id="d"
    )
    assert windows[0].start == 0 and windows[-1].end == len(text)
    for a, b in zip(windows, windows[1:]):
        assert b.start < a.end  # overlapping
        assert len(ENC.encode_ordinary(a.text)) <= 100
    assert all(w.text == text[w.start : w.end] for w in windows)
    blocks = [Window("d", 1000, 1000 + 600, text[1000:1600], 0.5), Window("e", 0, 50, text[:50], 0.3)]
    planned = plan_windows(blocks, window_tokens=60, overlap_tokens=10, encode=ENC.encode_ordinary, decode=ENC.decode)
    assert {w.doc_id for w in planned} == {"d", "e"}
    assert all(w.text == text[w.start : w.end] for w in planned if w.doc_id == "d")
    assert planned[0].start == 1000 and [w for w in planned if w.doc_id == "e"] == [Window("e", 0, 50, text[:50], 0.3)]
    with pytest.raises(ValueError, match="overlap"):
        plan_windows(text, window_tokens=10, overlap_tokens=10, encode=ENC.encode_ordinary, decode=ENC.decode)


def test_waves_early_stop_and_merge():
    filler = "Nothing to see here. " * 400
    text = filler + "The answer is forty-two. " + filler + "The answer is forty-two. " + filler
    kw = dict(encode=ENC.encode_ordinary, decode=ENC.decode, doc_id="d", window_tokens=300, overlap_tokens=30)
    reader = ScriptedReader("The answer is forty-two.")
    full = sliding_window_qa("What is the answer?", text, reader=reader, wave_size=4, **kw)
    assert full.n_read == full.n_windows and not full.stopped_early
    assert reader.waves[0] == [1, 2, 3, 4] and all(len(w) <= 4 for w in reader.waves)
    assert full.n_found == 2 and full.synthesized and len(reader.synth_calls) == 1
    assert full.text.startswith("The answer is forty-two.") and not full.not_found
    assert len(full.records) == full.n_windows + 1  # one per window plus the merge
    assert all(text[s:e] == "The answer is forty-two." for _, s, e in (f.span for f in full.sources))

    reader2 = ScriptedReader("The answer is forty-two.")
    seen = []
    early = sliding_window_qa(
        "What is the answer?",
        text,
        reader=reader2,
        wave_size=4,
        early_stop=0.8,
        progress=lambda d, t: seen.append((d, t)),
        **kw,
    )
    assert early.stopped_early and early.n_read < early.n_windows and early.n_read % 4 == 0
    assert early.n_found == 1 and not early.synthesized and early.text == "The answer is forty-two."
    assert seen[-1] == (early.n_read, early.n_windows)

    none = sliding_window_qa("What is the answer?", filler, reader=ScriptedReader("absent"), **kw)
    assert none.not_found and none.text == NOT_IN_DOCUMENTS and none.sources == []
    assert isinstance(none, SlidingAnswer) and none.to_dict()["n_found"] == 0


def test_settings_are_checked():
    kw = dict(encode=ENC.encode_ordinary, decode=ENC.decode, doc_id="d")
    with pytest.raises(ValueError, match="window_tokens <= 50"):
        sliding_window_qa(
            "q?", "text " * 100, reader=ScriptedReader("x", limit=50), window_tokens=100, overlap_tokens=10, **kw
        )
    with pytest.raises(ValueError, match="early_stop"):
        sliding_window_qa("q?", "text", reader=ScriptedReader("x"), early_stop=2.0, **kw)
    with pytest.raises(ValueError, match="question is empty"):
        sliding_window_qa(" ", "text", reader=ScriptedReader("x"), **kw)

    class Broken(ScriptedReader):
        def read(self, *a, **k):
            return []

    with pytest.raises(ValueError, match="one per window"):
        sliding_window_qa("q?", "text", reader=Broken("x"), **kw)


def test_merge_helpers():
    w = Window("d", 10, 43, "The Commission shall  adopt acts.")
    assert locate_evidence('"The Commission shall adopt acts."', w) == (10, 43)  # white space ignored
    assert locate_evidence("shall  adopt", w) == (25, 37)
    assert locate_evidence("SHALL adopt", w) == (25, 37)
    assert locate_evidence("a paraphrase of it", w) is None
    a = WindowFinding(1, "d", 0, 10, True, "X", 0.7, evidence_span=(2, 5))
    b = WindowFinding(2, "d", 5, 20, True, "Y", 0.9)
    c = WindowFinding(3, "d", 15, 30, True, "y", 0.9)
    best, support = best_supported([a, b, c])
    assert best.window == 2 and [f.window for f in support] == [2, 3]
    assert parse_synthesis("It is Y [W2][w3] and [W9].", [2, 3]).windows == (2, 3)
    assert parse_synthesis("not_in_documents.", [2]).not_found


# --------------------------------------------------------------------------------------
# The extractive reader over the whole AI Act
# --------------------------------------------------------------------------------------


PROHIBITED_Q = "Is it prohibited to use AI systems to infer the emotions of a natural person in the workplace?"
SHALL_Q = "Which AI practices shall be prohibited?"
FINES_Q = "What is the maximum fine for non-compliance with the prohibition of AI practices?"


def _run(question, act, reader, **kw):
    return sliding_window_qa(
        question,
        act,
        reader=reader,
        encode=ENC.encode_ordinary,
        decode=ENC.decode,
        doc_id="eu_ai_act_2024_1689_EN",
        window_tokens=4000,
        overlap_tokens=200,
        **kw,
    )


@pytest.mark.slow
def test_extractive_sliding_qa_over_the_ai_act_finds_article_5(act, embedder):
    reader = ExtractiveWindowReader(embedder)
    seen = []
    result = _run(SHALL_Q, act, reader, progress=lambda d, t: seen.append(d))
    assert result.engine == "extractive" and result.model.startswith("extractive/")
    assert result.n_read == result.n_windows >= 28  # the whole act, ~113 K tokens
    assert seen[-1] == result.n_windows
    assert not result.not_found and result.sources
    best = result.sources[0]
    assert best.evidence_span is not None and _in_article_5(*best.evidence_span), (best.evidence, best.evidence_span)
    assert (
        best.evidence
        == act[best.evidence_span[0] : best.evidence_span[1]]
        == "1. The following AI practices shall be prohibited:"
    )
    assert "shall be prohibited" in result.text
    # every window was recorded as a (free, offline) call with the counted window prompt
    assert len(result.records) == result.n_windows + (1 if result.synthesized else 0)
    assert all(
        r.backend == "extractive" and r.cost_usd == 0.0 and r.input_tokens > 3000
        for r in result.records[: result.n_windows]
    )
    # on a law about AI practices every window has a related sentence; the confidences rank them
    assert max(result.findings, key=lambda f: f.confidence) is best

    # early stop: no window before Article 5 holds a sentence as close to the question
    early = _run(SHALL_Q, act, reader, wave_size=4, early_stop=best.confidence - 1e-6)
    assert early.stopped_early and early.n_read < early.n_windows
    assert _in_article_5(*early.sources[0].evidence_span)

    # another article-level answer: the penalties for prohibited practices are in Article 99(3)
    fines = _run(FINES_Q, act, reader)
    art99 = _sections()["article_99"]
    s, e = fines.sources[0].evidence_span
    assert art99[0] <= s and e <= art99[1] and "Article 5" in fines.sources[0].evidence


@pytest.mark.slow
def test_extractive_sliding_qa_reports_every_window_with_an_answer(act, embedder):
    """For the emotion-recognition ban the sentence most similar to the question is recital 44,
    not Article 5(1)(f): similarity cannot tell a recital from the operative article (an LLM
    reader can). The window holding Article 5 still answers from Article 5(1)(f), and the run
    lists it with its span."""
    result = _run(PROHIBITED_Q, act, ExtractiveWindowReader(embedder))
    assert not result.not_found
    art5_findings = [f for f in result.findings if f.found and f.evidence_span and _in_article_5(*f.evidence_span)]
    assert art5_findings, [(f.window, f.evidence[:60]) for f in result.findings if f.found]
    assert "emotion" in art5_findings[0].evidence.lower()
    assert result.sources[0].evidence_span[1] <= ARTICLE_5[0] - 20_000  # the winner is a recital (preamble)


@pytest.mark.slow
def test_extractive_reader_says_no_answer_for_an_absent_topic(act, embedder):
    reader = ExtractiveWindowReader(embedder)
    part = act[ARTICLE_5[0] : ARTICLE_5[1]]
    result = sliding_window_qa(
        "What is the best recipe for sourdough bread?",
        part,
        reader=reader,
        encode=ENC.encode_ordinary,
        decode=ENC.decode,
        doc_id="act",
        window_tokens=1000,
        overlap_tokens=100,
    )
    assert result.not_found and result.text == NOT_IN_DOCUMENTS and result.sources == []
    assert all(f.answer == NO_ANSWER for f in result.findings)


# --------------------------------------------------------------------------------------
# The LLM reader against a fake OpenAI-compatible server
# --------------------------------------------------------------------------------------

ART5_HEADING = "Article 5\n\nProhibited AI practices"
EMOTIONS = "to infer emotions of a natural person in the areas of workplace and education institutions"


def responder(body):
    """A model that answers from windows holding Article 5, and merges by citing every window."""
    system = body["messages"][0]["content"] if body["messages"][0]["role"] == "system" else ""
    user = body["messages"][-1]["content"]
    if "combine partial answers" in system:
        nums = sorted(set(re.findall(r"\[W(\d+)\]", user)), key=int)
        return "Inferring emotions at work is prohibited by Article 5(1)(f) " + " ".join(f"[W{n}]" for n in nums)
    window = user.split("<window>\n", 1)[1].split("\n</window>", 1)[0]
    if "Your previous reply could not be used" not in user and "window 2 of" in user:
        return "Sorry, I cannot produce JSON."  # a bad first reply for window 2: retried once
    if EMOTIONS in window:
        quote = EMOTIONS
        conf = 0.95 if ART5_HEADING in window else 0.6
        return json.dumps(
            {
                "answer": "Yes: Article 5(1)(f) prohibits it, except for medical or safety reasons.",
                "confidence": conf,
                "evidence": quote,
            }
        )
    return json.dumps({"answer": NO_ANSWER, "confidence": 0.05, "evidence": ""})


@pytest.mark.slow
def test_llm_sliding_qa_over_the_ai_act(act, tmp_path):
    cache = ResponseCache(tmp_path / "responses.sqlite")
    limits = ModelLimits("fake-model", context_length=16_000, max_completion_tokens=1_000)
    with FakeOpenAIServer(responder=responder) as server:
        chat = OpenAIChatBackend(
            model="fake-model",
            base_url=server.base_url,
            cache=cache,
            limits=limits,
            price_overrides={"fake-model": (1.0, 2.0)},
            max_concurrency=8,
        )
        reader = LLMWindowReader(chat)
        assert 15_000 < reader.window_token_limit(question=PROHIBITED_Q) < 16_000 - 512
        kw = dict(
            reader=reader,
            encode=ENC.encode_ordinary,
            decode=ENC.decode,
            doc_id="act",
            window_tokens=8000,
            overlap_tokens=400,
        )
        result = sliding_window_qa(PROHIBITED_Q, act, **kw)
        n = result.n_windows
        assert n >= 14 and result.n_read == n
        assert reader.stats["retried"] == 1 and not result.errors  # window 2's bad reply was retried and parsed
        # That reply broke the schema the server had accepted: counted, not used.
        assert reader.stats["schema_enforced"] == n and reader.stats["schema_ignored"] == 1
        assert server.request_count == n + 1 + 1  # windows, one retry, one merge
        assert not result.not_found and "Article 5(1)(f)" in result.text
        assert result.sources and all(s.evidence_span for s in result.sources)
        assert any(_in_article_5(*s.evidence_span) for s in result.sources)
        assert result.sources[0].confidence == 0.95 and _in_article_5(*result.sources[0].evidence_span)
        requests = server.requests
        # Window answers are held to their strict schema; the synthesis is free text.
        assert all(
            r["response_format"]["type"] == "json_schema"
            and r["response_format"]["json_schema"]["name"] == "window_answer"
            and r["response_format"]["json_schema"]["strict"] is True
            for r in requests[:-1]
        )
        assert all(r["temperature"] == 0.0 for r in requests)
        totals = chat.ledger.totals()
        assert totals["calls"] == n + 2 and totals["cost_usd"] > 0

        # the same run again is answered from the response cache: nothing is sent
        again = sliding_window_qa(PROHIBITED_Q, act, **kw)
        assert server.request_count == n + 2
        assert again.text == result.text and all(r.cache_hit for r in again.records)

        # with a summary in every prompt and an early stop
        early = sliding_window_qa(
            PROHIBITED_Q, act, summary="The AI Act regulates AI systems.", early_stop=0.9, wave_size=4, **kw
        )
        assert early.stopped_early and early.n_read < n
        assert "Summary of the whole document" in server.requests[-1]["messages"][-1]["content"]
        chat.close()
