"""Recursive text splitting with exact character offsets.

The algorithm is LangChain's ``RecursiveCharacterTextSplitter`` (the splitter the SWB-RAG
paper used: 1,000 characters, 100 overlap, separators ``["\\n\\n", "\\n", " ", ""]``,
separators kept at the start of the following piece, chunks stripped of surrounding
whitespace), re-implemented on ``(start, end)`` offsets instead of strings. Working on offsets
means every chunk's position is known by construction — no ``text.find`` that can land on an
earlier copy of a repeated passage — so ``chunk.text == text[chunk.start:chunk.end]`` always
holds. On any text the chunk texts equal LangChain's output, except that a chunk LangChain
emits wholly inside its neighbour (possible only around whitespace-only pieces) is dropped,
which keeps chunk starts strictly increasing; and with a length function other than ``len``
(e.g. a token counter) a chunk whose own measured length exceeds ``chunk_size`` is split
again (LangChain adds up the pieces' counts, and a token count of joined pieces can be a
token or two larger). On the EU AI Act texts with the paper's settings the output is
identical to LangChain's (757 chunks in German, 752 in English).

Guarantees for every text:

* ``chunk.text == text[chunk.start:chunk.end]``;
* starts strictly increase and ends never decrease;
* every non-whitespace character lies in at least one chunk (only whitespace at chunk
  boundaries is dropped);
* no chunk is longer than ``chunk_size`` (by ``length_function``) unless one piece that no
  separator can split forces it (with ``""`` as the last separator nothing is unsplittable);
* consecutive chunks overlap by at most ``chunk_overlap``.

Example::

    >>> splitter = RecursiveSplitter(chunk_size=12, chunk_overlap=6)
    >>> text = "alpha beta gamma\\n\\ndelta"
    >>> splitter.split_text(text)
    [(0, 10), (6, 16), (18, 23)]
    >>> [text[s:e] for s, e in splitter.split_text(text)]
    ['alpha beta', 'beta gamma', 'delta']
    >>> chunks = splitter.split(text, doc_id="demo", doc_sha256="00")
    >>> chunks[2].chunk_index, chunks[2].text
    (2, 'delta')
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from ctxwin_dagster.core.arguments import callable_name, check_count, require_int
from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.text.pieces import append_stripped, cut_pieces, drop_contained, merge_pieces
from ctxwin_dagster.core.text.sections import detect_sections, section_at

if TYPE_CHECKING:
    from ctxwin_dagster.core.text.documents import Document

__all__ = ["DEFAULT_SEPARATORS", "Chunk", "RecursiveSplitter", "make_chunk_id", "with_pages"]

#: LangChain's default separators: paragraphs, lines, words, characters.
DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", " ", "")


def make_chunk_id(doc_id: str, doc_sha256: str, start: int, end: int) -> str:
    """Stable id of the span ``[start, end)`` of the document ``doc_id`` whose text hashes to ``doc_sha256``.

    The first 32 hex characters of ``sha256(f"{doc_id}:{doc_sha256}:{start}:{end}")``: the same
    document and span always give the same id, so re-indexing replaces rows instead of
    duplicating them. The document's id is part of it: two files with the same text are two
    documents, and each keeps its own index rows (rows are merged on ``chunk_id``).

    Example::

        >>> make_chunk_id("d", "abc", 0, 10) == make_chunk_id("d", "abc", 0, 10)
        True
        >>> make_chunk_id("d", "abc", 0, 10) == make_chunk_id("d", "abc", 0, 11)
        False
        >>> make_chunk_id("note", "abc", 0, 10) == make_chunk_id("copy_of_note", "abc", 0, 10)
        False
        >>> len(make_chunk_id("d", "abc", 0, 10))
        32
    """
    return hashlib.sha256(f"{doc_id}:{doc_sha256}:{start}:{end}".encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Chunk:
    """A span of a document: ``text == document_text[start:end]``.

    ``chunk_index`` is the chunk's position among its document's chunks (0-based);
    ``section`` is the heading path in force at ``start`` (e.g. ``"CHAPTER II > Article 5"``)
    or None; ``doc_sha256`` the hash of the document text the offsets refer to (the
    ``chunk_id`` is made from it and ``doc_id``), empty when not known.

    Example::

        >>> c = Chunk(chunk_id="x", doc_id="d", chunk_index=0, start=0, end=5, text="hello")
        >>> c.to_dict()["end"]
        5
    """

    chunk_id: str
    doc_id: str
    chunk_index: int
    start: int
    end: int
    text: str
    section: str | None = None
    doc_sha256: str = ""

    def to_dict(self) -> JSONObject:
        """The chunk as a plain dict (e.g. for a DataFrame or a LanceDB row)."""
        return asdict(self)


class RecursiveSplitter:
    """Recursive splitter (LangChain's algorithm) that returns exact character offsets.

    The text is cut at the first separator that occurs in it (the separator stays at the start
    of the following piece); pieces shorter than ``chunk_size`` are merged greedily into chunks
    of at most ``chunk_size``, each chunk starting with up to ``chunk_overlap`` of the previous
    chunk's tail; pieces of ``chunk_size`` or more are split again with the next separators.
    Chunks are stripped of surrounding whitespace and whitespace-only chunks are dropped.

    Args:
        chunk_size: largest chunk, in the unit of ``length_function`` (characters by default,
            tokens when a token counter is injected). Must be >= 1.
        chunk_overlap: most of the previous chunk repeated at the start of the next, same
            unit; 0 <= chunk_overlap < chunk_size.
        length_function: measures a piece of text; ``len`` or e.g. a
            :class:`ctxwin_dagster.core.budget.tokens.TokenCounter`.
        separators: literal strings tried in order; default ``["\\n\\n", "\\n", " ", ""]``.
            End with ``""`` so that any text can be cut to size.

    Raises:
        ValueError: invalid settings, with the fix in the message.

    Example::

        >>> RecursiveSplitter(chunk_size=5, chunk_overlap=0).split_text("aaa bbb ccc")
        [(0, 3), (4, 7), (8, 11)]
        >>> RecursiveSplitter(chunk_size=100, chunk_overlap=100)
        Traceback (most recent call last):
        ...
        ValueError: chunk_overlap (100) must be smaller than chunk_size (100); lower chunk_overlap or raise chunk_size
    """

    __slots__ = ("_chunk_size", "_chunk_overlap", "_length_function", "_separators", "_is_len")

    def __init__(
        self,
        *,
        chunk_size: int = 1000,
        chunk_overlap: int = 100,
        length_function: Callable[[str], int] = len,
        separators: Sequence[str] | None = None,
    ) -> None:
        require_int("chunk_size", chunk_size, show_type=True)
        require_int("chunk_overlap", chunk_overlap, show_type=True)
        check_count("chunk_size", chunk_size, minimum=1, fix="pass chunk_size >= 1")
        check_count("chunk_overlap", chunk_overlap, minimum=0, fix="pass chunk_overlap=0 for no overlap")
        if chunk_overlap >= chunk_size:
            raise ValueError(
                f"chunk_overlap ({chunk_overlap}) must be smaller than chunk_size ({chunk_size}); "
                "lower chunk_overlap or raise chunk_size"
            )
        if not callable(length_function):
            raise TypeError(
                f"length_function must be a callable str -> int (e.g. len or a token counter); got {length_function!r}"
            )
        if separators is None:
            seps: tuple[str, ...] = DEFAULT_SEPARATORS
        else:
            if isinstance(separators, str):
                raise ValueError(
                    f"separators must be a sequence of strings, not one string ({separators!r}); "
                    f"pass a list such as {list(DEFAULT_SEPARATORS)!r}"
                )
            seps = tuple(separators)
            if not seps:
                raise ValueError(
                    "separators must not be empty; pass None for the defaults "
                    f"{list(DEFAULT_SEPARATORS)!r} or a list ending with '' so any text can be split"
                )
            bad = [s for s in seps if not isinstance(s, str)]
            if bad:
                raise ValueError(f"separators must all be strings; remove {bad!r}")
        self._chunk_size = chunk_size
        self._chunk_overlap = chunk_overlap
        self._length_function = length_function
        self._separators = seps
        self._is_len = length_function is len

    @property
    def chunk_size(self) -> int:
        return self._chunk_size

    @property
    def chunk_overlap(self) -> int:
        return self._chunk_overlap

    @property
    def separators(self) -> tuple[str, ...]:
        return self._separators

    def __repr__(self) -> str:
        name = callable_name(self._length_function)
        return (
            f"RecursiveSplitter(chunk_size={self._chunk_size}, chunk_overlap={self._chunk_overlap}, "
            f"length_function={self._length_function if name is None else name!r}, "
            f"separators={list(self._separators)!r})"
        )

    # -- public API --------------------------------------------------------------------

    def split_text(self, text: str) -> list[tuple[int, int]]:
        """Split ``text`` and return the chunks' ``(start, end)`` character offsets.

        Example::

            >>> RecursiveSplitter(chunk_size=12, chunk_overlap=0).split_text("one two\\n\\nthree four")
            [(0, 7), (9, 19)]
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str; got {type(text).__name__}")
        if not text:
            return []
        raw: list[tuple[int, int]] = []
        self._split(text, 0, len(text), 0, raw)
        if not self._is_len:
            raw = self._enforce_size(text, raw)
        return drop_contained(raw)

    def split(
        self,
        text: str,
        *,
        doc_id: str,
        doc_sha256: str,
        sections: bool = True,
    ) -> list[Chunk]:
        """Split ``text`` into :class:`Chunk` objects with stable ids and section paths.

        Args:
            text: the document text.
            doc_id: the document's id, copied onto every chunk.
            doc_sha256: the sha256 of the document text; with ``doc_id`` and the offsets it
                makes ``chunk_id`` (see :func:`make_chunk_id`).
            sections: detect headings (:func:`detect_sections`) and set ``Chunk.section``.

        Example::

            >>> text = "# Intro\\n\\nSome words here.\\n\\n# Usage\\n\\nMore words."
            >>> chunks = RecursiveSplitter(chunk_size=22, chunk_overlap=0).split(
            ...     text, doc_id="d", doc_sha256="00")
            >>> [(c.text, c.section) for c in chunks]
            [('# Intro', 'Intro'), ('Some words here.', 'Intro'), ('# Usage\\n\\nMore words.', 'Usage')]
        """
        spans = self.split_text(text)
        found = detect_sections(text) if sections else []
        return [
            Chunk(
                chunk_id=make_chunk_id(doc_id, doc_sha256, s, e),
                doc_id=doc_id,
                chunk_index=i,
                start=s,
                end=e,
                text=text[s:e],
                section=section_at(found, s) if found else None,
                doc_sha256=doc_sha256,
            )
            for i, (s, e) in enumerate(spans)
        ]

    # -- algorithm ---------------------------------------------------------------------

    def _enforce_size(self, text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Re-split chunks whose own measured length exceeds ``chunk_size``.

        The merge adds up the lengths of the pieces, as LangChain does; with ``len`` that is the
        chunk's length, but a token count of joined pieces can exceed the sum by a token or two.
        Such a chunk is split again with a smaller size (by the excess) until each part fits.
        """
        out: list[tuple[int, int]] = []
        for s, e in spans:
            self._fit(text, s, e, out)
        return out

    def _fit(self, text: str, s: int, e: int, out: list[tuple[int, int]]) -> None:
        size = self._chunk_size
        n = self._length_function(text[s:e])
        if n <= size:
            out.append((s, e))
            return
        target = size - (n - size)
        if target < 1:
            target = max(1, size // 2)
        sub_splitter = RecursiveSplitter(
            chunk_size=target,
            chunk_overlap=min(self._chunk_overlap, target - 1),
            length_function=self._length_function,
            separators=self._separators,
        )
        sub: list[tuple[int, int]] = []
        sub_splitter._split(text, s, e, 0, sub)
        if not sub or sub == [(s, e)]:
            out.append((s, e))  # a single piece no separator can split
            return
        for ss, se in sub:
            self._fit(text, ss, se, out)

    def _merge(self, text: str, pieces: list[tuple[int, int, int]], out: list[tuple[int, int]]) -> None:
        sep_len = 0 if self._is_len else self._length_function("")
        merge_pieces(text, pieces, out, size=self._chunk_size, overlap=self._chunk_overlap, sep_len=sep_len)

    def _measure(self, text: str, s: int, e: int) -> int:
        return e - s if self._is_len else self._length_function(text[s:e])

    def _split(self, text: str, start: int, end: int, sep_index: int, out: list[tuple[int, int]]) -> None:
        """LangChain's ``_split_text`` on the span ``[start, end)``; appends stripped spans to ``out``."""
        seps = self._separators
        # The first separator present in the span ("" always matches and ends the search).
        separator = seps[-1]
        next_index = len(seps)
        for i in range(sep_index, len(seps)):
            s_ = seps[i]
            if not s_:
                separator = s_
                next_index = len(seps)
                break
            if text.find(s_, start, end) != -1:
                separator = s_
                next_index = i + 1
                break
        pieces = cut_pieces(text, start, end, separator)
        size = self._chunk_size
        good: list[tuple[int, int, int]] = []  # (start, end, length)
        for ps, pe in pieces:
            n = self._measure(text, ps, pe)
            if n < size:
                good.append((ps, pe, n))
                continue
            if good:
                self._merge(text, good, out)
                good = []
            if next_index >= len(seps):
                append_stripped(text, ps, pe, out)
            else:
                self._split(text, ps, pe, next_index, out)
        if good:
            self._merge(text, good, out)


def with_pages(chunks: Sequence[Chunk], document: Document) -> list[Chunk]:
    """Chunks whose ``section`` starts with the page they begin on (``"page 12"`` or
    ``"page 12 > Article 5"``), for documents that have pages (PDFs; ``document.page_at``), so
    a citation can name the page.

    >>> from ctxwin_dagster.core.text.documents import Document
    >>> doc = Document("d", "00", "one\\n\\ntwo\\n", "one", "d.pdf", 9, pages=((1, 0), (2, 5)))
    >>> [c.section for c in with_pages([Chunk("a", "d", 0, 0, 3, "one"), Chunk("b", "d", 1, 5, 8, "two", "Art. 1")], doc)]
    ['page 1', 'page 2 > Art. 1']
    """
    out = []
    for c in chunks:
        page = document.page_at(c.start)
        if page is None:
            out.append(c)
            continue
        label = f"page {page}"
        out.append(replace(c, section=f"{label} > {c.section}" if c.section else label))
    return out
