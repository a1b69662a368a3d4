"""Context window enhancement: modes, merging without repeated text, exact spans; properties."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ctxwin_dagster.core.retrieval.enhance import (
    EnhancedContext,
    enhance,
    focus_windows,
)
from ctxwin_dagster.core.retrieval.rows import chunk_from_row, chunks_from_rows, hits_from_rows
from ctxwin_dagster.core.retrieval.settings import (
    DEFAULT_CONTEXT_WINDOW_SIZE,
    DEFAULT_FOCUS_BUDGET_CHARS,
    MODES,
    RetrievalSettings,
)
from ctxwin_dagster.core.text.splitting import RecursiveSplitter

DOCS = Path(__file__).resolve().parents[3] / "data" / "documents"


@pytest.fixture(scope="module")
def normans() -> tuple[str, list]:
    text = (DOCS / "squad_Normans.txt").read_text(encoding="utf-8")
    chunks = RecursiveSplitter(chunk_size=1000, chunk_overlap=100).split(
        text, doc_id="squad_Normans", doc_sha256=hashlib.sha256(text.encode()).hexdigest()
    )
    return text, chunks


def _check_windows(ctx: EnhancedContext, texts: dict[str, str], hits) -> None:
    """The invariants every enhanced context must satisfy."""
    by_doc: dict[str, list] = {}
    for w in ctx.windows:
        assert w.text == texts[w.doc_id][w.start : w.end]  # exact document text
        by_doc.setdefault(w.doc_id, []).append(w)
    for ws in by_doc.values():  # merged: no two windows of a document overlap or touch
        ws = sorted(ws, key=lambda w: w.start)
        for a, b in zip(ws, ws[1:]):
            assert a.end < b.start
    scores = [w.score for w in ctx.windows]
    assert scores == sorted(scores, reverse=True)  # best first
    for chunk, score in hits:  # every hit lies in exactly one window that carries at least its score
        holders = [w for w in ctx.windows if w.doc_id == chunk.doc_id and w.start <= chunk.start and chunk.end <= w.end]
        assert len(holders) == 1
        assert holders[0].score >= score and chunk.chunk_id in holders[0].chunk_ids
    if hits:
        assert max(scores) == max(s for _, s in hits)


def test_modes_on_a_real_article(normans):
    text, chunks = normans
    hits = [(chunks[1], 0.9), (chunks[2], 0.7), (chunks[10], 0.8), (chunks[0], 0.5)]
    texts = {"squad_Normans": text}
    none = enhance(hits, chunks, RetrievalSettings(enhance_mode="none"), doc_texts=texts)
    nb1 = enhance(hits, chunks, RetrievalSettings(enhance_mode="neighbors", num_neighbors=1), doc_texts=texts)
    nb2 = enhance(hits, chunks, RetrievalSettings(enhance_mode="neighbors", num_neighbors=2), doc_texts=texts)
    budget = enhance(hits, chunks, RetrievalSettings(enhance_mode="budget", context_window_size=2500), doc_texts=texts)
    for ctx in (none, nb1, nb2, budget):
        _check_windows(ctx, texts, hits)
        assert ctx.exact and ctx.hits == [(c.chunk_id, s) for c, s in hits]
    # chunks 1 and 2 overlap (a paragraph split with 100 characters of overlap): one window, text once
    assert chunks[2].start < chunks[1].end
    assert [(w.start, w.end) for w in none.windows] == [
        (chunks[1].start, chunks[2].end),
        (chunks[10].start, chunks[10].end),
        (chunks[0].start, chunks[0].end),
    ]
    assert none.n_chars < sum(len(c.text) for c, _ in hits)
    # ±1: chunks 0..2, 1..3, 9..11 and 0..1 -> 0..3 and 9..11
    assert [(w.start, w.end, w.score) for w in nb1.windows] == [
        (chunks[0].start, chunks[3].end, 0.9),
        (chunks[9].start, chunks[11].end, 0.8),
    ]
    assert nb2.n_chars >= nb1.n_chars >= none.n_chars
    assert nb1.text == "\n\n".join(w.text for w in nb1.windows)
    assert nb1.to_dict(include_text=False)["windows"][0].keys() == {"doc_id", "start", "end", "score", "chunk_ids"}
    assert budget.context_window_size == 2500 and budget.num_neighbors is None
    assert (
        enhance(hits, chunks, RetrievalSettings(enhance_mode="budget")).context_window_size
        == DEFAULT_CONTEXT_WINDOW_SIZE
    )


def test_without_document_text_windows_are_rebuilt_from_chunks(normans):
    text, chunks = normans
    hits = [(chunks[5], 0.6), (chunks[7], 0.4)]
    ctx = enhance(hits, chunks, RetrievalSettings(enhance_mode="neighbors", num_neighbors=1))
    assert not ctx.exact
    for w in ctx.windows:
        assert len(w.text) == w.end - w.start
        assert w.text.split() == text[w.start : w.end].split()  # only splitter-dropped white space may differ


def test_options_are_checked(normans):
    text, chunks = normans
    hits = [(chunks[1], 0.5)]
    with pytest.raises(ValueError, match="enhance_mode must be one of"):
        enhance(hits, chunks, RetrievalSettings(enhance_mode="window"))
    with pytest.raises(ValueError, match="num_neighbors is an option of enhance_mode='neighbors', not 'budget'"):
        enhance(hits, chunks, RetrievalSettings(enhance_mode="budget", num_neighbors=1))
    with pytest.raises(ValueError, match="context_window_size is an option of enhance_mode='budget'"):
        enhance(hits, chunks, RetrievalSettings(enhance_mode="neighbors", context_window_size=100))
    with pytest.raises(ValueError, match=">= 0"):
        enhance(hits, chunks, RetrievalSettings(enhance_mode="neighbors", num_neighbors=-1))
    with pytest.raises(ValueError, match="document changed since it was indexed"):
        enhance(hits, chunks, RetrievalSettings(enhance_mode="neighbors"), doc_texts={"squad_Normans": "x" + text})
    with pytest.raises(ValueError, match="not in chunks"):
        enhance(hits, chunks[2:], RetrievalSettings(enhance_mode="none"))


def test_rows_round_trip(normans):
    _, chunks = normans
    rows = [{**c.to_dict(), "score": 1.0 - i / 10, "vector": [0.0], "context": "ctx"} for i, c in enumerate(chunks[:3])]
    assert chunks_from_rows(reversed(rows)) == chunks[:3]
    assert [(c.chunk_id, s) for c, s in hits_from_rows(rows)] == [
        (c.chunk_id, 1.0 - i / 10) for i, c in enumerate(chunks[:3])
    ]
    with pytest.raises(ValueError, match="lacks"):
        chunk_from_row({k: v for k, v in rows[0].items() if k != "chunk_index"})
    with pytest.raises(ValueError, match="re-index"):
        chunk_from_row({**rows[0], "end": rows[0]["end"] + 1})
    with pytest.raises(ValueError, match="has no 'score'"):
        hits_from_rows([{k: v for k, v in rows[0].items() if k != "score"}])


# --------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------

_WORDS = st.lists(
    st.sampled_from(["alpha", "beta", "gamma", "delta", "x", "yy", "\n", "\n\n", "  "]), min_size=1, max_size=120
)


@st.composite
def cases(draw):
    n_docs = draw(st.integers(1, 2))
    texts, chunks = {}, []
    for d in range(n_docs):
        text = " ".join(draw(_WORDS))
        assume(text.strip())
        size = draw(st.integers(8, 60))
        overlap = draw(st.integers(0, size // 2))
        doc_id = f"doc{d}"
        texts[doc_id] = text
        chunks += RecursiveSplitter(chunk_size=size, chunk_overlap=overlap).split(
            text, doc_id=doc_id, doc_sha256=str(d)
        )
    assume(chunks)
    picked = draw(st.lists(st.sampled_from(chunks), min_size=0, max_size=6, unique_by=lambda c: c.chunk_id))
    scores = draw(st.lists(st.floats(-1, 1, allow_nan=False), min_size=len(picked), max_size=len(picked)))
    mode = draw(st.sampled_from([m for m in MODES if m != "focus"]))
    opts = {}
    if mode == "neighbors":
        opts["num_neighbors"] = draw(st.integers(0, 3))
    elif mode == "budget":
        opts["context_window_size"] = draw(st.integers(1, 200))
    return texts, chunks, list(zip(picked, scores)), mode, opts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
def test_property_merged_windows_are_exact_disjoint_and_cover_every_hit(case):
    texts, chunks, hits, mode, opts = case
    ctx = enhance(hits, chunks, RetrievalSettings(enhance_mode=mode, **opts), doc_texts=texts)
    _check_windows(ctx, texts, hits)
    # no text twice: the characters given equal the union of the windows' spans
    assert ctx.n_chars == sum(w.end - w.start for w in ctx.windows)
    if mode == "neighbors":  # every neighbour within reach is inside the hit's window
        n = opts["num_neighbors"]
        for chunk, _ in hits:
            for c in chunks:
                if c.doc_id == chunk.doc_id and abs(c.chunk_index - chunk.chunk_index) <= n:
                    assert any(w.doc_id == c.doc_id and w.start <= c.start and c.end <= w.end for w in ctx.windows)
    # without document texts the same spans come out, with the same non-white-space text
    rebuilt = enhance(hits, chunks, RetrievalSettings(enhance_mode=mode, **opts))
    assert [(w.doc_id, w.start, w.end, w.score) for w in rebuilt.windows] == [
        (w.doc_id, w.start, w.end, w.score) for w in ctx.windows
    ]
    for a, b in zip(rebuilt.windows, ctx.windows):
        assert a.text.split() == b.text.split()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases(), st.integers(0, 4))
def test_property_more_neighbours_never_give_less_text(case, n):
    texts, chunks, hits, _, _ = case
    small = enhance(hits, chunks, RetrievalSettings(enhance_mode="neighbors", num_neighbors=n), doc_texts=texts)
    big = enhance(hits, chunks, RetrievalSettings(enhance_mode="neighbors", num_neighbors=n + 1), doc_texts=texts)
    assert big.n_chars >= small.n_chars
    for w in small.windows:  # every small window lies inside a big one
        assert any(b.doc_id == w.doc_id and b.start <= w.start and w.end <= b.end for b in big.windows)


# --------------------------------------------------------------------------------------
# Sentence focus
# --------------------------------------------------------------------------------------

_SENT = re.compile(r"[^.\n]+(?:\.|$)", re.MULTILINE)


def _split(text: str) -> list[tuple[int, int]]:
    out = []
    for m in _SENT.finditer(text):
        s, e = m.start(), m.end()
        while s < e and text[s].isspace():
            s += 1
        if e > s:
            out.append((s, e))
    return out


def _score(texts):
    return [((sum(map(ord, t)) * 7919) % 101) / 100 for t in texts]


def test_focus_on_a_real_article(normans):
    text, chunks = normans
    rollo = text.index("Rollo")
    hits = [(next(c for c in chunks if c.start <= rollo < c.end), 0.6), (chunks[20], 0.5), (chunks[30], 0.4)]
    score = lambda ts: [1.0 if "Rollo" in t else 0.1 for t in ts]  # noqa: E731
    ctx = enhance(
        hits,
        chunks,
        RetrievalSettings(enhance_mode="focus", focus_chars=1200),
        split_sentences=_split,
        score_sentences=score,
        doc_texts={"squad_Normans": text},
        window_chars=400,
    )
    assert ctx.focus == {
        "window_chars": 400,
        "budget_chars": 1200,
        "chunk_weight": 0.5,
        "lexical_weight": 0.0,
        "structure": False,
        "score_drop": None,
    }
    assert ctx.windows[0].start <= rollo < ctx.windows[0].end and ctx.windows[0].score == 1.0 + 0.5 * 0.6
    assert ctx.n_chars <= 1200
    for w in ctx.windows:
        assert w.text == text[w.start : w.end] and w.chunk_ids
    default = enhance(
        hits,
        chunks,
        RetrievalSettings(enhance_mode="focus"),
        split_sentences=_split,
        score_sentences=score,
        doc_texts={"squad_Normans": text},
    )
    assert default.n_chars <= DEFAULT_FOCUS_BUDGET_CHARS < sum(len(c.text) for c in chunks)
    with pytest.raises(ValueError, match="pass split_sentences="):
        enhance(hits, chunks, RetrievalSettings(enhance_mode="focus"))
    with pytest.raises(ValueError, match="focus_chars is an option of enhance_mode='focus'"):
        enhance(hits, chunks, RetrievalSettings(enhance_mode="neighbors", focus_chars=100))
    with pytest.raises(ValueError, match="window_chars apply to the focus mode only"):
        enhance(hits, chunks, RetrievalSettings(enhance_mode="neighbors"), window_chars=100)
    with pytest.raises(ValueError, match="one per text"):
        enhance(
            hits,
            chunks,
            RetrievalSettings(enhance_mode="focus"),
            split_sentences=_split,
            score_sentences=lambda ts: [0.0],
        )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases(), st.integers(5, 120), st.integers(1, 300), st.floats(0, 2))
def test_property_focus_windows_stay_in_budget_and_around_the_hits(case, window_chars, budget_chars, weight):
    texts, chunks, hits, _, _ = case
    assume(hits)
    raw = focus_windows(
        hits,
        chunks,
        split_sentences=_split,
        score_sentences=_score,
        doc_texts=texts,
        window_chars=window_chars,
        budget_chars=budget_chars,
        chunk_weight=weight,
    )
    assert raw
    hit_spans = [(c.doc_id, c.start, c.end) for c, _ in hits]
    for w in raw:
        assert w.text == texts[w.doc_id][w.start : w.end]
        # a window is its centre sentence (which overlaps a hit) grown within window_chars
        sents = [(w.doc_id, s, e) for s, e in _split(texts[w.doc_id])]
        inside = [(d, s, e) for d, s, e in sents if w.start <= s and e <= w.end]
        assert any(any(d == hd and s < he and hs < e for hd, hs, he in hit_spans) for d, s, e in inside) or len(
            raw
        ) == len(hits)
        assert len(w) <= window_chars or len(inside) <= 1
    ctx = enhance(
        hits,
        chunks,
        RetrievalSettings(enhance_mode="focus", focus_chars=budget_chars),
        split_sentences=_split,
        score_sentences=_score,
        doc_texts=texts,
        window_chars=window_chars,
        chunk_weight=weight,
    )
    _check_merged(ctx, texts)
    assert ctx.n_chars <= max(budget_chars, len(raw[0]))  # the first window always goes in


def _check_merged(ctx, texts):
    by_doc = {}
    for w in ctx.windows:
        assert w.text == texts[w.doc_id][w.start : w.end]
        by_doc.setdefault(w.doc_id, []).append(w)
    for ws in by_doc.values():
        ws.sort(key=lambda w: w.start)
        for a, b in zip(ws, ws[1:]):
            assert a.end < b.start
    scores = [w.score for w in ctx.windows]
    assert scores == sorted(scores, reverse=True)
