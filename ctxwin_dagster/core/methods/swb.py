"""SWB-RAG's text work: summary segments, batches of chunks, their windows and their prompts.

The SWB-RAG paper (Danter & Mühle, AHFE 2025) contextualizes chunks in batches: each batch
prompt carries the global summary, the text before the batch, the batch's chunks and the text
after it. For a batch of ``batch_size`` consecutive chunks (document order) the text before is
``document[max(0, batch_start - window_chars):batch_start]`` and the text after is
``document[batch_end:batch_end + window_chars]``, where ``batch_start`` is the first chunk's
``start`` and ``batch_end`` the last chunk's ``end`` (the paper's settings by default: batches
of 5, ±20,000 characters).

:func:`swb_batch_prompts` builds those prompts — the one place they are made. The LLM engine
sends them and the extractive engine meters them, so the offline engine counts exactly what a
chat model would receive. A batch's call is shared by its chunks: :func:`batch_shares` splits
a call's totals evenly (remainders to the first chunks), so sums over chunks equal the totals
of the calls. The global summary is made from segments of a long document
(:func:`split_segments`).

Chunks are duck-typed: anything with ``chunk_id``, ``start``, ``end``, ``text`` (and optionally
``section``) works, e.g. :class:`ctxwin_dagster.core.text.splitting.Chunk`.

Plain Python only: no Dagster, RAGAS or LanceDB.

Example::

    >>> from ctxwin_dagster.core.text.splitting import RecursiveSplitter
    >>> text = "First part. " * 30 + "Second part. " * 30
    >>> chunks = RecursiveSplitter(chunk_size=100, chunk_overlap=0).split(text, doc_id="d", doc_sha256="0")
    >>> swb = swb_batch_prompts(text, chunks, "A short summary.", batch_size=3, window_chars=50)
    >>> swb.template.id, len(swb.batches), [len(b.chunks) for b in swb.batches][:2]
    ('swb_batch.en.v1', 3, [3, 3])
    >>> b = swb.batches[1]
    >>> b.before == text[b.window[0] : b.chunks[0].start] and len(b.before) == 50
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.methods.prompts import PromptTemplate, detect_language, format_chunk_batch, get_template

__all__ = [
    "ChunkLike",
    "SWBBatch",
    "SWBPrompts",
    "batch_shares",
    "check_chunks",
    "split_segments",
    "swb_batch_prompts",
    "swb_batches",
]


class ChunkLike(Protocol):
    """What the contextualizers read of a chunk: a :class:`~ctxwin_dagster.core.text.splitting.Chunk`,
    or any object with these attributes (:func:`check_chunks` checks them at run time)."""

    @property
    def chunk_id(self) -> str: ...

    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...

    @property
    def text(self) -> str: ...


def split_segments(text: str, segment_chars: int) -> list[tuple[int, int]]:
    """Cut ``text`` into consecutive ``(start, end)`` spans of at most ``segment_chars``.

    Cuts fall after a blank line, else a line break, else a sentence end, else a space, in the
    second half of the span; a text that fits is one segment. The spans cover the whole text.

    Example::

        >>> split_segments("aaa\\n\\nbbb\\n\\nccc", 7)
        [(0, 5), (5, 10), (10, 13)]
    """
    if segment_chars < 1:
        raise ValueError(f"segment_chars must be >= 1; got {segment_chars}")
    n = len(text)
    spans: list[tuple[int, int]] = []
    start = 0
    while n - start > segment_chars:
        limit = start + segment_chars
        cut = -1
        for sep in ("\n\n", "\n", ". ", " "):
            pos = text.rfind(sep, start + segment_chars // 2, limit)
            if pos != -1:
                cut = pos + len(sep)
                break
        if cut <= start:
            cut = limit
        spans.append((start, cut))
        start = cut
    spans.append((start, n))
    return spans


def check_chunks(document_text: str, chunks: Sequence[ChunkLike]) -> None:
    """Raise unless every chunk has ``chunk_id``, ``start``, ``end`` and ``text``, lies inside
    the document and has an id of its own."""
    seen: set[str] = set()
    for c in chunks:
        for attr in ("chunk_id", "start", "end", "text"):
            if not hasattr(c, attr):
                raise TypeError(
                    f"chunks need .chunk_id, .start, .end and .text; got {type(c).__name__} without .{attr}"
                )
        if not (0 <= c.start <= c.end <= len(document_text)):
            raise ValueError(
                f"chunk {c.chunk_id} spans [{c.start}, {c.end}) outside the document of {len(document_text)} chars; "
                "pass the chunks of this document"
            )
        if c.chunk_id in seen:
            raise ValueError(f"chunk id {c.chunk_id} appears twice; chunk ids must be unique")
        seen.add(c.chunk_id)


def swb_batches(chunks: Sequence[ChunkLike], batch_size: int) -> list[list[ChunkLike]]:
    """Consecutive batches of ``batch_size`` chunks (in document order)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size}")
    ordered = sorted(chunks, key=lambda c: (c.start, c.end))
    return [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]


def batch_shares(n: int, *totals: int) -> list[tuple[int, ...]]:
    """Each total split into ``n`` integer shares that sum to it (remainders to the first).

    Returns one tuple per chunk, with its share of every total in the order given.

    Example::

        >>> batch_shares(3, 10, 2)
        [(4, 1), (3, 1), (3, 0)]
    """
    split = []
    for total in totals:
        base, rem = divmod(total, n)
        split.append([base + (1 if i < rem else 0) for i in range(n)])
    return list(zip(*split, strict=True))


@dataclass(frozen=True, slots=True)
class SWBBatch:
    """One batch of consecutive chunks, the text around it and the prompt that situates them.

    ``window`` is the span ``(max(0, start - window_chars), end + window_chars)`` the batch's
    prompt draws on (``start``/``end``: the first chunk's start, the last chunk's end; the end
    may lie past the document's end); ``before`` and ``after`` are the document text in it
    before and after the chunks.
    """

    index: int
    chunks: tuple[ChunkLike, ...]
    before: str
    after: str
    window: tuple[int, int]
    messages: list[dict[str, str]]


@dataclass(frozen=True, slots=True)
class SWBPrompts:
    """The SWB prompts of one document: the template, its language and the batches."""

    template: PromptTemplate
    language: str
    summary: str
    batches: list[SWBBatch]

    def render(self, chunks: Sequence[ChunkLike], before: str, after: str) -> list[dict[str, str]]:
        """The batch prompt for ``chunks`` with the given surrounding text (e.g. cut to fit a model)."""
        return self.template.render(
            summary=self.summary,
            before=before,
            chunks=format_chunk_batch([(c.chunk_id, c.text) for c in chunks]),
            after=after,
            n=len(chunks),
        )


def swb_batch_prompts(
    document_text: str,
    chunks: Sequence[ChunkLike],
    summary: str,
    *,
    batch_size: int = PAPER.swb_batch_size,
    window_chars: int = PAPER.swb_window_chars,
    language: str | None = None,
) -> SWBPrompts:
    """The ``swb_batch`` prompts of a document: one per batch of ``batch_size`` chunks, ±``window_chars``.

    The chunks are checked (:func:`check_chunks`) and put in document order; the language is
    ``language`` or the document's (:func:`~ctxwin_dagster.core.methods.prompts.detect_language`).
    Both task engines call this: the LLM engine sends these messages (cutting a batch's
    windows only when the prompt does not fit its model) and the extractive engine meters them.

    Raises:
        ValueError: ``window_chars`` < 0, ``batch_size`` < 1, or chunks that are not this
            document's (outside it, or with an id twice).
        TypeError: chunks without ``chunk_id``, ``start``, ``end`` or ``text``.
    """
    if window_chars < 0:
        raise ValueError(f"window_chars must be >= 0; got {window_chars}")
    chunks = list(chunks)
    check_chunks(document_text, chunks)
    lang = language or detect_language(document_text)
    prompts = SWBPrompts(get_template("swb_batch", lang), lang, summary, [])
    for k, batch in enumerate(swb_batches(chunks, batch_size)):
        start, end = batch[0].start, batch[-1].end
        lo = max(0, start - window_chars)
        before, after = document_text[lo:start], document_text[end : end + window_chars]
        messages = prompts.render(batch, before, after)
        prompts.batches.append(SWBBatch(k, tuple(batch), before, after, (lo, end + window_chars), messages))
    return prompts
