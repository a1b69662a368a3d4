"""Task engines: the extractive engine on the real AI Act, the LLM engine against a fake server."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.tasks.extractive import ExtractiveTasks
from ctxwin_dagster.backends.tasks.results import Answerer, Contextualizer, Summarizer, TaskEngine
from ctxwin_dagster.core.budget.tokens import PromptMeter, get_token_counter
from ctxwin_dagster.core.methods.prompts import NOT_IN_DOCUMENTS, get_template
from ctxwin_dagster.core.methods.swb import split_segments, swb_batches
from ctxwin_dagster.core.text.sentences import split_sentences
from ctxwin_dagster.core.text.splitting import RecursiveSplitter

AI_ACT_DE = Path(__file__).resolve().parents[2] / "fixtures" / "eu_ai_act" / "eu_ai_act_2024_1689_DE.txt"
# Articles 1-10 of the AI Act (Article 5, "Prohibited AI practices", lies inside).
ARTICLES_START, ARTICLES_END = 228_229, 280_657
EMOTIONS = "to infer emotions of a natural person in the areas of workplace and education institutions"


@pytest.fixture(scope="module")
def full_text(ai_act_text) -> str:
    return ai_act_text


@pytest.fixture(scope="module")
def doc(full_text) -> str:
    return full_text[ARTICLES_START:ARTICLES_END]


@pytest.fixture(scope="module")
def chunks(doc):
    return RecursiveSplitter(chunk_size=1000, chunk_overlap=100).split(doc, doc_id="ai_act", doc_sha256="test")


@pytest.fixture(scope="module")
def art5(chunks):
    """The chunk of Article 5 holding the emotion-recognition prohibition."""
    return next(c for c in chunks if EMOTIONS in c.text)


@pytest.fixture(scope="module")
def extractive(embedder) -> ExtractiveTasks:
    return ExtractiveTasks(embedder)


@pytest.fixture(scope="module")
def summary(extractive, doc):
    return extractive.summarize(doc, doc_id="ai_act", max_tokens=400)


def _decompose(text: str, pieces: set[str]) -> list[str]:
    """Split ``text`` into members of ``pieces`` joined by single spaces (fails if impossible)."""
    out, pos = [], 0
    by_len = sorted(pieces, key=len, reverse=True)
    while pos < len(text):
        match = next((p for p in by_len if text.startswith(p, pos)), None)
        assert match is not None, f"text at {pos} is not a document sentence: {text[pos : pos + 80]!r}"
        out.append(match)
        pos += len(match)
        if pos < len(text):
            assert text[pos] == " "
            pos += 1
    return out


def _sentences(text: str) -> set[str]:
    return {text[s:e] for s, e in split_sentences(text)}


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def test_split_segments_cover_the_text_within_the_limit(doc):
    spans = split_segments(doc, 10_000)
    assert spans[0][0] == 0 and spans[-1][1] == len(doc)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert all(e - s <= 10_000 for s, e in spans) and len(spans) >= 6
    assert all(doc[e - 1] == "\n" for _, e in spans[:-1])  # cut at line ends
    assert split_segments("short", 1_000_000) == [(0, 5)]


def test_split_sentences_offsets_and_lengths(doc):
    spans = split_sentences(doc)
    assert all(0 <= s < e <= len(doc) for s, e in spans)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert max(e - s for s, e in spans) <= 600
    texts = [doc[s:e] for s, e in spans]
    assert "Prohibited AI practices" in texts
    assert not any(t.endswith((" No.", " Art.")) for t in texts)


def test_split_sentences_reads_through_pdf_line_wraps():
    de = AI_ACT_DE.read_text(encoding="utf-8")
    start = de.index("(42) Im Einklang")
    excerpt = de[start : start + 3_000]
    texts = [excerpt[s:e] for s, e in split_sentences(excerpt)]
    assert texts[0] == (
        "(42) Im Einklang mit der Unschuldsvermutung sollten natürliche Personen in der Union stets nach ihrem "
        "tatsächlichen\nVerhalten beurteilt werden."
    )
    assert texts[1].startswith("Natürliche Personen sollten niemals") and texts[1].endswith("stattfindet.")


def test_prompt_meter_counts_exactly_like_the_token_counter(full_text, art5):
    counter = get_token_counter(None)
    meter = PromptMeter(counter)
    msgs = get_template("cc_context").render(document=full_text, chunk=art5.text)
    assert meter.count_messages(msgs) == counter.count_messages(msgs)
    msgs2 = get_template("cc_context").render(document=full_text, chunk="Another chunk.\n(a) item")
    assert meter.count_messages(msgs2) == counter.count_messages(msgs2)


def test_swb_batches_are_consecutive(chunks):
    batches = swb_batches(list(reversed(chunks)), 5)
    assert [c.chunk_id for b in batches for c in b] == [c.chunk_id for c in chunks]
    assert all(len(b) == 5 for b in batches[:-1])


# --------------------------------------------------------------------------------------
# Extractive engine on the real AI Act
# --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_extractive_implements_the_task_protocols(extractive):
    assert (
        isinstance(extractive, Summarizer)
        and isinstance(extractive, Contextualizer)
        and isinstance(extractive, Answerer)
    )
    assert (
        isinstance(extractive, TaskEngine)
        and extractive.chat is None
        and extractive.limits is None
        and extractive.max_tokens is None
    )


def test_the_asker_takes_only_a_task_engine(extractive):
    from ctxwin_dagster.ask import Asker

    class AnswersOnly:
        engine = model = "stub"

        def answer(self, question, passages, doc_id="", starts=None):
            raise AssertionError("not reached")

    with pytest.raises(
        TypeError,
        match=(
            r"AnswersOnly lacks \['answer_threshold', 'chat', 'contextualize_cc', 'contextualize_swb', "
            r"'counter', 'embedder', 'ledger', 'limits', 'max_tokens', 'stats', 'summarize'\]"
        ),
    ):
        Asker(index=None, embedder=None, tasks=AnswersOnly())
    assert Asker(index=None, embedder=None, tasks=extractive).engine == "extractive"


@pytest.mark.slow
def test_extractive_summary_within_budget_made_of_document_sentences(extractive, doc, summary):
    counter = get_token_counter(None)
    assert 300 <= summary.n_tokens <= 400 and counter.count(summary.text) == summary.n_tokens
    parts = _decompose(summary.text, _sentences(doc))
    positions = [doc.index(p) for p in parts]
    assert positions == sorted(positions), "summary sentences are in document order"
    assert summary.engine == "extractive" and summary.segments == [summary.text]
    (rec,) = summary.records
    prompt = get_template("summarize_segment").render(part=1, parts=1, text=doc, max_tokens=400)
    assert rec.backend == "extractive" and rec.cost_usd == 0.0 and rec.tags.stage == "summary"
    assert rec.input_tokens == counter.count_messages(prompt)
    assert rec.input_chars == sum(len(m["content"]) for m in prompt)
    assert rec.output_tokens == summary.n_tokens and rec.prompt_version == "summarize_segment.en.v1"


@pytest.mark.slow
def test_extractive_summary_segments_then_overview(extractive, doc):
    res = extractive.summarize(doc, doc_id="ai_act", max_tokens=150, segment_chars=20_000)
    assert len(res.segments) == 3 and len(res.records) == 4
    assert [r.prompt_version for r in res.records] == ["summarize_segment.en.v1"] * 3 + ["summarize_overview.en.v1"]
    assert res.n_tokens <= 150 and res.text
    seg_sentences = set().union(*(_decompose(s, _sentences(doc)) for s in res.segments))
    assert set(_decompose(res.text, _sentences(doc))) <= seg_sentences


@pytest.mark.slow
def test_extractive_cc_context_for_an_article_5_chunk(extractive, embedder, doc, chunks, art5):
    results = extractive.contextualize_cc(doc, chunks, doc_id="ai_act")
    assert [r.chunk_id for r in results] == [c.chunk_id for c in chunks]
    r = results[chunks.index(art5)]
    assert (
        r.engine == "extractive" and r.model == "extractive/all-MiniLM-L6-v2" and r.prompt_version == "cc_context.en.v1"
    )
    assert r.context.startswith("Section: CHAPTER II > Article 5. ")
    body = r.context.removeprefix("Section: CHAPTER II > Article 5. ")
    parts = _decompose(body, _sentences(doc))
    assert 1 <= len(parts) <= 3
    assert all(p not in art5.text for p in parts), "a CC context never repeats the chunk's own sentences"
    assert r.output_tokens <= 100
    # Input volume: exactly the prompt the LLM engine would send.
    prompt = get_template("cc_context").render(document=doc, chunk=art5.text)
    assert r.input_tokens == get_token_counter(None).count_messages(prompt)
    assert r.input_chars == len(prompt[0]["content"])
    assert all(c.context for c in results) and not any(c.fallback or c.error for c in results)
    # Deterministic: a new engine (same vectors) gives the same contexts.
    again = ExtractiveTasks(embedder).contextualize_cc(doc, chunks, doc_id="ai_act")
    assert [x.context for x in again] == [x.context for x in results]


@pytest.mark.slow
def test_extractive_cc_embeds_the_document_once_not_per_chunk(embedder, doc, chunks):
    class Counting:
        model, dim = embedder.model, embedder.dim

        def __init__(self):
            self.texts = 0
            self.calls = 0

        def embed(self, texts):
            self.texts += len(texts)
            self.calls += 1
            return embedder.embed(texts)

    counting = Counting()
    tasks = ExtractiveTasks(counting)
    tasks.contextualize_cc(doc, chunks, doc_id="ai_act")
    n_sentences = len(split_sentences(doc))
    assert counting.calls == 2 and counting.texts <= n_sentences + len(chunks)
    tasks.contextualize_swb(doc, chunks, "A short summary of the regulation.", doc_id="ai_act")
    assert counting.texts <= n_sentences + len(chunks) + 1  # only the summary sentence is new


@pytest.mark.slow
def test_extractive_swb_context_from_summary_and_window(extractive, doc, chunks, art5, summary):
    window = 5_000
    results = extractive.contextualize_swb(doc, chunks, summary.text, doc_id="ai_act", window_chars=window)
    assert [r.chunk_id for r in results] == [c.chunk_id for c in chunks]
    r = results[chunks.index(art5)]
    assert r.prompt_version == "swb_batch.en.v1" and r.engine == "extractive" and not r.fallback
    body = r.context.removeprefix("Section: CHAPTER II > Article 5. ")
    assert body != r.context
    batch = next(b for b in swb_batches(chunks, 5) if art5 in b)
    lo, hi = max(0, batch[0].start - window), batch[-1].end + window
    allowed = _sentences(summary.text) | {doc[s:e] for s, e in split_sentences(doc) if s >= lo and e <= hi}
    parts = _decompose(body, allowed)
    assert 1 <= len(parts) <= 3 and all(p not in art5.text for p in parts)
    # The batch's chunks share the counted batch prompt.
    before, after = doc[lo : batch[0].start], doc[batch[-1].end : hi]
    from ctxwin_dagster.core.methods.prompts import format_chunk_batch

    prompt = get_template("swb_batch").render(
        summary=summary.text,
        before=before,
        chunks=format_chunk_batch([(c.chunk_id, c.text) for c in batch]),
        after=after,
        n=len(batch),
    )
    shares = [x for x in results if x.chunk_id in {c.chunk_id for c in batch}]
    assert sum(x.input_tokens for x in shares) == get_token_counter(None).count_messages(prompt)
    assert sum(x.input_chars for x in shares) == sum(len(m["content"]) for m in prompt)
    batch_record = [
        rec
        for rec in extractive.ledger.records
        if rec.tags.variant == "swb" and rec.input_chars == sum(x.input_chars for x in shares)
    ]
    assert len(batch_record) >= 1 and batch_record[0].prompt_version == "swb_batch.en.v1"
    again = extractive.contextualize_swb(doc, chunks, summary.text, doc_id="ai_act", window_chars=window)
    assert [x.context for x in again] == [x.context for x in results]


@pytest.mark.slow
def test_extractive_german_document_uses_german_prompts_and_labels(extractive):
    de = AI_ACT_DE.read_text(encoding="utf-8")
    start = de.index("(42) Im Einklang")
    text = de[start : start + 8_000]
    chunks = RecursiveSplitter(chunk_size=1000, chunk_overlap=100).split(text, doc_id="de", doc_sha256="de")
    chunks = [type(c)(**{**c.to_dict(), "section": "KAPITEL II > Artikel 5"}) for c in chunks]
    cc = extractive.contextualize_cc(text, chunks, doc_id="de")
    swb = extractive.contextualize_swb(
        text, chunks, "Die Verordnung regelt künstliche Intelligenz in der Union.", doc_id="de"
    )
    assert {r.prompt_version for r in cc} == {"cc_context.de.v1"} and {r.prompt_version for r in swb} == {
        "swb_batch.de.v1"
    }
    assert all(r.context.startswith("Abschnitt: KAPITEL II > Artikel 5. ") for r in cc + swb)
    assert (
        extractive.summarize(text, doc_id="de", max_tokens=100).records[0].prompt_version == "summarize_segment.de.v1"
    )


@pytest.mark.slow
def test_extractive_answer_cites_the_chunk_holding_the_answer(extractive, embedder, chunks, art5):
    question = "Is it allowed to use AI systems to infer the emotions of employees at the workplace?"
    q = embedder.embed([question])[0]
    top = np.argsort(-(embedder.embed([c.text for c in chunks]) @ q))[:4]
    passages = [(chunks[i].chunk_id, chunks[i].text) for i in top]
    assert art5.chunk_id in [p[0] for p in passages]
    res = extractive.answer(question, passages, doc_id="ai_act")
    assert not res.not_found and art5.chunk_id in res.cited_chunk_ids
    assert f"[{art5.chunk_id}]" in res.text and "emotions" in res.text
    cited_in_text = re.findall(r"\[([0-9a-f]{32})\]", res.text)
    assert set(cited_in_text) == set(res.cited_chunk_ids)
    (rec,) = res.records
    prompt = get_template("answer").render(question=question, passages="\n\n".join(f"[{c}]\n{t}" for c, t in passages))
    assert rec.input_tokens == get_token_counter(None).count_messages(prompt) and rec.backend == "extractive"
    assert res.engine == "extractive" and res.score is not None and res.score >= extractive.answer_threshold


@pytest.mark.slow
def test_extractive_answer_unrelated_question_is_not_found(extractive, chunks, art5):
    passages = [(c.chunk_id, c.text) for c in chunks[:3]] + [(art5.chunk_id, art5.text)]
    res = extractive.answer("At what temperature does water boil at sea level?", passages)
    assert res.not_found and res.text == NOT_IN_DOCUMENTS and res.cited_chunk_ids == []
    assert res.score is not None and res.score < extractive.answer_threshold
    assert extractive.answer("Anything?", []).not_found


def test_extractive_work_is_reused_by_content_and_counted_as_cache_hits(embedder, doc, chunks, tmp_path):
    cache = ResponseCache(tmp_path / "responses.sqlite")
    part = chunks[:12]
    passages = [(c.chunk_id, c.text) for c in part[:4]]
    question = "Which practices involving emotion recognition are prohibited?"

    def work(tasks):
        summary = tasks.summarize(doc, doc_id="ai_act", max_tokens=300)
        cc = tasks.contextualize_cc(doc, part, doc_id="ai_act")
        swb = tasks.contextualize_swb(doc, part, summary.text, doc_id="ai_act")
        answer = tasks.answer(question, passages, doc_id="ai_act")
        return summary, cc, swb, answer

    first = ExtractiveTasks(embedder, cache=cache)
    cold = work(first)
    assert first.ledger.records and not any(r.cache_hit for r in first.ledger.records)
    second = ExtractiveTasks(embedder, cache=cache)
    warm = work(second)
    # The same results, every record a cache hit with the same counted volumes.
    assert (
        warm[0].text == cold[0].text
        and warm[3].text == cold[3].text
        and warm[3].cited_chunk_ids == cold[3].cited_chunk_ids
    )
    assert [c.context for c in warm[1]] == [c.context for c in cold[1]] and all(c.cached for c in warm[1] + warm[2])
    assert [c.context for c in warm[2]] == [c.context for c in cold[2]]
    assert len(second.ledger.records) == len(first.ledger.records) and all(r.cache_hit for r in second.ledger.records)
    assert [r.input_tokens for r in second.ledger.records] == [r.input_tokens for r in first.ledger.records]
    # Changed content is not served from the memo: another question is worked out again.
    second.answer("Who supervises the market?", passages, doc_id="ai_act")
    assert not second.ledger.records[-1].cache_hit
    # Another setting (threshold) is another key.
    other = ExtractiveTasks(embedder, cache=cache, answer_threshold=0.5)
    other.answer(question, passages, doc_id="ai_act")
    assert not other.ledger.records[-1].cache_hit
