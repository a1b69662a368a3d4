"""Asking questions: retrieval, context window enhancement and sliding-window QA together.

:class:`Asker` answers a question over the LanceDB indexes that ``ctxwin run`` built, in one
of three modes:

``mode="retrieve"``
    search the variant's table (T-RAG, CC-RAG or SWB-RAG) for the top-``k`` chunks, grow them
    into context windows (:func:`ctxwin_dagster.core.enhance.enhance`: none, ±``num_neighbors``
    chunks, or a ``context_window_size`` budget; merged, no text twice) and answer from the
    windows with the answer model, citing them;
``mode="sliding"``
    read the whole document window by window
    (:func:`ctxwin_dagster.core.sliding_qa.sliding_window_qa`) and merge the windows' answers;
``mode="auto"``
    assemble the context as in ``retrieve``; if the answer prompt fits the answer model's
    available prompt tokens (:func:`ctxwin_dagster.core.fit.check_fit`), answer directly, else
    run sliding-window QA over the assembled context.

The answer model is a chat model (:class:`~ctxwin_dagster.models.tasks.llm.LLMTasks`, any
OpenAI-compatible server, every call through the backend's response cache) or, offline, the
extractive engine (:class:`~ctxwin_dagster.models.tasks.extractive.ExtractiveTasks`:
sentence selection with the embedding model, labelled ``extractive``). Chunk rows for neighbour expansion come from
the variant's table; window text is cut from the document file in the documents folder when
it is there (its SHA-256 must match the indexed one), else rebuilt from the chunk rows.

Every answer comes back as an :class:`AskResult`: the answer, ``not_found``, the cited spans
``(chunk_id, doc_id, start, end)``, the windows used with their spans and scores, the call
records with tokens and cost, and the latency.

Example::

    with Asker.open(lancedb="data/lancedb", documents="data/documents") as asker:
    ...     result = asker.ask("Who was the Norse leader?", variant="swb", doc_id="squad_Normans")
    ...     result.answer, result.citations[0].as_tuple()
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.defaults import normalize_variant as _normalize_variant
from ctxwin_dagster.core.documents import DocumentError, list_documents, read_document
from ctxwin_dagster.core.enhance import (
    DEFAULT_FOCUS_CANDIDATES,
    EnhancedContext,
    chunks_from_rows,
    enhance,
    hits_from_rows,
)
from ctxwin_dagster.core.fit import FitReport, check_fit
from ctxwin_dagster.core.limits import ModelLimits, get_model_limits
from ctxwin_dagster.core.retrieval_settings import DEFAULT_K, RETRIEVAL_PRESETS
from ctxwin_dagster.core.prompts import NOT_IN_DOCUMENTS, detect_language, format_passages, get_template
from ctxwin_dagster.core.sliding_qa import (
    DEFAULT_OVERLAP_TOKENS,
    DEFAULT_WAVE_SIZE,
    DEFAULT_WINDOW_TOKENS,
    SlidingAnswer,
    WindowReader,
    sliding_window_qa,
)
from ctxwin_dagster.core.splitting import Chunk
from ctxwin_dagster.core.tokens import TokenCounter, get_token_counter
from ctxwin_dagster.core.windows import Window, span_text
from ctxwin_dagster.models.base import Ledger

__all__ = [
    "ASK_MODES",
    "DEFAULT_ENHANCE",
    "AskError",
    "AskResult",
    "Asker",
    "Citation",
    "StaleIndexError",
    "normalize_variant",
]

AskMode = Literal["retrieve", "sliding", "auto"]
ASK_MODES: tuple[str, ...] = ("retrieve", "sliding", "auto")

#: Enhancement when none is chosen — the ``ask`` retrieval setting that the evaluation measures
#: too (:mod:`ctxwin_dagster.core.retrieval_settings`): sentence focus over the top-16 chunks with
#: a 4,000-character budget, the best hit rate per character measured
#: (evaluations/reports/retrieval_quality.md: 95.6 % of SQuAD answer spans at 3.7 K characters
#: per question, against 92.6 % at 6.7 K for ±1 neighbours).
DEFAULT_ENHANCE: dict[str, Any] = {"mode": RETRIEVAL_PRESETS["ask"].enhance_mode}

#: The model whose limits the auto mode checks against when the answer engine is the
#: extractive one (which has no context limit of its own): the paper's answer model.
DEFAULT_LIMITS_MODEL = PAPER.answer_model



class AskError(ValueError):
    """A question cannot be asked as given; the message names the fix."""


class StaleIndexError(AskError):
    """The document file changed after it was indexed, so the index's offsets no longer hold."""


def normalize_variant(variant: str) -> str:
    """``"t"``/``"cc"``/``"swb"`` (or ``"t_rag"``, ``"T-RAG"``…) → the table variant name.

    Example::

        >>> normalize_variant("swb"), normalize_variant("T-RAG")
        ('swb_rag', 't_rag')
    """
    try:
        return _normalize_variant(variant)
    except ValueError as exc:
        raise AskError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Citation:
    """A cited span of a document: ``text[start:end]`` of ``doc_id``.

    ``chunk_id`` is the indexed chunk the span was cited by (retrieve mode: the best hit of
    the cited window) or the first indexed chunk overlapping it (sliding mode); None when the
    index has no chunk there. ``excerpt`` is the start of the span's text.
    """

    chunk_id: str | None
    doc_id: str
    start: int
    end: int
    excerpt: str = ""

    def as_tuple(self) -> tuple[str | None, str, int, int]:
        return (self.chunk_id, self.doc_id, self.start, self.end)

    def to_dict(self) -> dict[str, Any]:
        return {"chunk_id": self.chunk_id, "doc_id": self.doc_id, "start": self.start, "end": self.end, "excerpt": self.excerpt}


@dataclass(slots=True)
class AskResult:
    """One answered question (see the module docstring).

    Attributes:
        question, answer: the question and the answer text (``NOT_IN_DOCUMENTS`` when not found).
        not_found: True when the documents (as given to the model) do not hold the answer.
        citations: the cited spans.
        windows: the context windows used (retrieve) or read (sliding): ``doc_id``, ``start``,
            ``end``, ``score``, ``chunk_ids``, ``n_chars``.
        mode: the mode asked for; ``mode_used``: ``"retrieve"`` or ``"sliding"``.
        variant, doc_id: the index table and the document searched (None: all documents).
        engine, model: the answer engine (``"llm"`` or ``"extractive"``) and its model.
        records: the call records (answer calls, window calls, merge call).
        latency_s: wall time of the whole ask (retrieval included).
        fit: the fit check of the assembled context (auto mode), else None.
        notes: what the caller should know (text rebuilt from the index, context too long…).
        context: the enhanced context (retrieve/auto), else None.
        sliding: the sliding-window run (sliding, or auto when it did not fit), else None.
    """

    question: str
    answer: str
    not_found: bool
    citations: list[Citation]
    windows: list[dict[str, Any]]
    mode: str
    mode_used: str
    variant: str | None
    doc_id: str | None
    engine: str
    model: str
    records: list[Any] = field(default_factory=list)
    latency_s: float = 0.0
    fit: FitReport | None = None
    notes: list[str] = field(default_factory=list)
    context: EnhancedContext | None = None
    sliding: SlidingAnswer | None = None

    @property
    def cited_spans(self) -> list[tuple[str | None, str, int, int]]:
        """The citations as ``(chunk_id, doc_id, start, end)`` tuples."""
        return [c.as_tuple() for c in self.citations]

    @property
    def totals(self) -> dict[str, Any]:
        """Calls, cache hits, tokens, characters and cost over :attr:`records`."""
        return Ledger.summarize(self.records)

    @property
    def input_tokens(self) -> int:
        return int(self.totals["input_tokens"])

    @property
    def output_tokens(self) -> int:
        return int(self.totals["output_tokens"])

    @property
    def cost_usd(self) -> float | None:
        """The cost of the work in USD (cache hits at the cost of the call they reuse), None
        when a model's price is unknown."""
        t = self.totals
        return float(t["cost_usd"]) if t["cost_known"] else None

    @property
    def paid_usd(self) -> float | None:
        """What answering paid in USD in this run (cache hits are free), None when a model's
        price is unknown."""
        t = self.totals
        return float(t["paid_usd"]) if t["cost_known"] else None

    @property
    def context_chars(self) -> int:
        return sum(int(w["n_chars"]) for w in self.windows)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        totals = self.totals
        return {
            "question": self.question,
            "answer": self.answer,
            "not_found": self.not_found,
            "citations": [c.to_dict() for c in self.citations],
            "windows": self.windows,
            "mode": self.mode,
            "mode_used": self.mode_used,
            "variant": self.variant,
            "doc_id": self.doc_id,
            "engine": self.engine,
            "model": self.model,
            "latency_s": round(self.latency_s, 3),
            "calls": totals["calls"],
            "cache_hits": totals["cache_hits"],
            "input_tokens": totals["input_tokens"],
            "output_tokens": totals["output_tokens"],
            "input_chars": totals["input_chars"],
            "cost_usd": self.cost_usd,
            "paid_usd": self.paid_usd,
            "fit": None if self.fit is None else self.fit.to_dict(),
            "notes": list(self.notes),
            "sliding": None if self.sliding is None else self.sliding.to_dict(),
        }

    def to_record(self, *, question_id: str, reference_answer: str = "", reference_spans: Sequence[Sequence[int]] = (), is_impossible: bool | None = None) -> dict[str, Any]:
        """An answer record in the format of :mod:`ctxwin_dagster.core.metrics`."""
        totals = self.totals
        rec: dict[str, Any] = {
            "question_id": question_id,
            "doc_id": self.doc_id,
            "variant": self.variant or self.mode_used,
            "question": self.question,
            "answer": self.answer,
            "not_found": self.not_found,
            "reference_answer": reference_answer,
            "reference_spans": [list(s) for s in reference_spans],
            "retrieved": [],
            "contexts": [],
            "context_spans": [[w["start"], w["end"], w["doc_id"]] for w in self.windows],
            "latency_s": self.latency_s,
            "input_tokens": totals["input_tokens"],
            "output_tokens": totals["output_tokens"],
            "input_chars": totals["input_chars"],
            "calls": totals["calls"],
            "cache_hits": totals["cache_hits"],
            "cost_usd": self.cost_usd,
            "paid_usd": self.paid_usd,
        }
        if self.context is not None:
            rec["contexts"] = [w.text for w in self.context.windows]
        elif self.sliding is not None:
            rec["contexts"] = [w.text for w in self.sliding.windows[: self.sliding.n_read]]
        if is_impossible is not None:
            rec["is_impossible"] = is_impossible
        return rec


def _excerpt(text: str, n: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 1].rstrip() + "…"


def _cited_excerpt(window_text: str, answer: str, label: str) -> str:
    """The window's text where the answer's statement citing ``label`` is found (an extractive
    answer quotes it), else the window's start."""
    import re

    marker = f"[{label}"
    i = answer.find(marker)
    while i >= 0:
        before = answer[:i]
        cut = max(before.rfind("]"), 0)
        statement = before[cut:].strip(" ]\n")
        probe = statement[:60].strip()
        if len(probe) >= 12:
            words = [re.escape(x) for x in probe.split()]
            m = re.search(r"\s+".join(words), window_text)
            if m is not None:
                return _excerpt(window_text[m.start() :])
        i = answer.find(marker, i + 1)
    return _excerpt(window_text)


def _window_dict(w: Window) -> dict[str, Any]:
    return {"doc_id": w.doc_id, "start": w.start, "end": w.end, "score": round(float(w.score), 6), "chunk_ids": list(w.chunk_ids), "n_chars": len(w.text)}


class Asker:
    """Answers questions over the per-variant indexes (see the module docstring).

    Args:
        index: the :class:`~ctxwin_dagster.models.vectorstore.ChunkIndex` (None: only
            ``mode="sliding"`` over document files is possible).
        embedder: embeds questions for search (the embedder the index was built with).
        tasks: the answer engine: an ``LLMTasks`` or ``ExtractiveTasks`` (anything with
            ``answer(question, passages, doc_id=)``).
        reader: the sliding-window reader; default an ``LLMWindowReader`` over ``tasks.chat``
            for an LLM engine, else an ``ExtractiveWindowReader`` over ``tasks.embedder``.
        documents_dir: the documents folder (window text is cut from the files); None: text is
            rebuilt from the index rows.
        limits: the answer model's limits for the auto mode's fit check; default
            ``tasks.limits``, or :data:`DEFAULT_LIMITS_MODEL`'s for the extractive engine.
        counter: the token counter of fit checks and sliding windows; default ``tasks.counter``.
    """

    def __init__(
        self,
        *,
        index: Any | None,
        embedder: Any | None,
        tasks: Any,
        reader: WindowReader | None = None,
        documents_dir: str | Path | None = None,
        limits: ModelLimits | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        if not callable(getattr(tasks, "answer", None)):
            raise TypeError(f"tasks must have answer(question, passages, doc_id=); got {type(tasks).__name__}")
        if index is not None and embedder is None:
            raise ValueError("an index needs the embedder it was built with; pass embedder=LocalEmbedder() (or the index's)")
        self.index = index
        self.embedder = embedder
        self.tasks = tasks
        self.engine = getattr(tasks, "engine", "")
        self.model = getattr(tasks, "model", "")
        self.documents_dir = None if documents_dir is None else Path(documents_dir).expanduser()
        self.limits = limits or getattr(tasks, "limits", None) or get_model_limits(DEFAULT_LIMITS_MODEL)
        self.counter = counter or getattr(tasks, "counter", None) or get_token_counter(DEFAULT_LIMITS_MODEL)
        self._reader = reader
        self._closers: list[Callable[[], None]] = []
        self._doc_cache: dict[str, tuple[float, str, str]] = {}

    # ----------------------------------------------------------------- construction
    @classmethod
    def open(
        cls,
        *,
        lancedb: str | Path = "data/lancedb",
        documents: str | Path | None = "data/documents",
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        cache_dir: str | Path | None = "data/cache",
        embedder: Any | None = None,
        max_concurrency: int = 8,
    ) -> Asker:
        """An asker over the indexes at ``lancedb`` with the documents in ``documents``.

        With ``model`` the answers come from that chat model (OpenAI, or the OpenAI-compatible
        server at ``base_url``; responses cached in ``cache_dir/responses.sqlite``); without
        it from the extractive engine (no network). Question vectors are cached in
        ``cache_dir/embeddings.sqlite`` (None: no caches).

        Raises:
            AskError: there is no index at ``lancedb``.
        """
        from ctxwin_dagster.models.cache import ResponseCache
        from ctxwin_dagster.models.embeddings import LocalEmbedder
        from ctxwin_dagster.models.tasks.extractive import ExtractiveTasks
        from ctxwin_dagster.models.tasks.llm import LLMTasks
        from ctxwin_dagster.models.vectorstore import ChunkIndex

        uri = str(lancedb)
        if "://" not in uri and not Path(uri).expanduser().is_dir():
            raise AskError(
                f"no index at {uri!r}: build it with `ctxwin run` (it writes data/lancedb), or pass the folder "
                "that holds the *_chunks.lance tables (--lancedb)"
            )
        cache_folder = None if cache_dir is None else Path(cache_dir).expanduser()
        if embedder is None:
            emb_cache = None if cache_folder is None else ResponseCache(cache_folder / "embeddings.sqlite")
            embedder = LocalEmbedder(cache=emb_cache)
        closers: list[Callable[[], None]] = []
        if model:
            from ctxwin_dagster.models.chat import OpenAIChatBackend

            chat = OpenAIChatBackend(
                model=model,
                base_url=base_url or None,
                api_key=api_key,
                cache=None if cache_folder is None else ResponseCache(cache_folder / "responses.sqlite"),
                max_concurrency=max_concurrency,
            )
            closers.append(chat.close)
            tasks: Any = LLMTasks(chat)
        else:
            tasks = ExtractiveTasks(embedder)
        asker = cls(index=ChunkIndex(uri), embedder=embedder, tasks=tasks, documents_dir=documents)
        asker._closers.extend(closers)
        return asker

    def close(self) -> None:
        """Close the chat backend this asker opened (if any)."""
        while self._closers:
            self._closers.pop()()

    def __enter__(self) -> Asker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def reader(self) -> WindowReader:
        """The sliding-window reader (built on first use)."""
        if self._reader is None:
            from ctxwin_dagster.models.sliding_qa import ExtractiveWindowReader, LLMWindowReader

            chat = getattr(self.tasks, "chat", None)
            if chat is not None:
                self._reader = LLMWindowReader(chat, limits=self.limits, counter=self.counter)
            else:
                embedder = getattr(self.tasks, "embedder", None) or self.embedder
                if embedder is None:
                    raise AskError("sliding-window QA with the extractive engine needs an embedder; pass embedder=")
                self._reader = ExtractiveWindowReader(
                    embedder, ledger=getattr(self.tasks, "ledger", None), counter=self.counter,
                    threshold=getattr(self.tasks, "answer_threshold", 0.40),
                )
        return self._reader

    # ----------------------------------------------------------------- documents and rows
    def _require_index(self) -> Any:
        if self.index is None:
            raise AskError("this asker has no index; open one with Asker.open(lancedb=...) or use mode='sliding' with doc_id=")
        if self.embedder is None:
            raise AskError("searching needs the embedder the index was built with; pass embedder=")
        return self.index

    def _check_doc(self, variant: str, doc_id: str) -> None:
        index = self._require_index()
        if index.count(variant, doc_id=doc_id) == 0:
            known = sorted({r["doc_id"] for r in index.rows(variant, columns=["doc_id"])})
            if not known:
                raise AskError(
                    f"the {variant} table in {index.uri} is empty or missing; materialize it with `ctxwin run` "
                    f"(or `ctxwin run --job {variant}_job`)"
                )
            raise AskError(f"document {doc_id!r} is not in the {variant} index; known documents: {', '.join(known)}")

    def _doc_file(self, doc_id: str) -> Path | None:
        if self.documents_dir is None or not self.documents_dir.is_dir():
            return None
        for p in list_documents(self.documents_dir):
            if p.stem == doc_id:
                return p
        return None

    def document_text(self, doc_id: str, *, expected_sha256: str | None = None) -> str | None:
        """The text of ``doc_id`` from the documents folder (None when there is no file).

        Raises:
            StaleIndexError: ``expected_sha256`` (the indexed one) differs from the file's.
        """
        path = self._doc_file(doc_id)
        if path is None:
            return None
        mtime = path.stat().st_mtime
        cached = self._doc_cache.get(doc_id)
        if cached is None or cached[0] != mtime:
            try:
                doc = read_document(path)
            except DocumentError as exc:
                raise AskError(str(exc)) from None
            cached = (mtime, doc.sha256, doc.text)
            self._doc_cache[doc_id] = cached
        _, sha, text = cached
        if expected_sha256 and sha != expected_sha256:
            raise StaleIndexError(
                f"{path} changed after it was indexed (sha256 {sha[:12]}… vs {expected_sha256[:12]}… in the index), so "
                f"the index's offsets no longer fit it; re-index it with `ctxwin run --doc {doc_id}`, or pass "
                "documents=None (--documents '') to answer from the indexed text"
            )
        return text

    def _chunks(self, variant: str, doc_ids: Sequence[str]) -> tuple[list[Chunk], dict[str, str]]:
        """Every indexed chunk of ``doc_ids`` and their texts from the documents folder."""
        index = self._require_index()
        chunks: list[Chunk] = []
        texts: dict[str, str] = {}
        cols = ["chunk_id", "doc_id", "chunk_index", "start", "end", "text", "section", "doc_sha256"]
        for d in doc_ids:
            rows = index.rows(variant, doc_id=d, columns=cols)
            chunks.extend(chunks_from_rows(rows))
            shas = {r.get("doc_sha256") for r in rows if r.get("doc_sha256")}
            text = self.document_text(d, expected_sha256=next(iter(shas)) if len(shas) == 1 else None)
            if text is not None:
                texts[d] = text
        return chunks, texts

    # ----------------------------------------------------------------- retrieval
    def retrieve(
        self,
        question: str,
        *,
        variant: str = "swb_rag",
        doc_id: str | None = None,
        k: int = DEFAULT_K,
        hybrid: bool = False,
    ) -> list[dict[str, Any]]:
        """The top-``k`` index rows for ``question`` (each with ``score``, cosine similarity;
        with ``hybrid=True`` fused with full-text search, ``rrf_score`` added), best first."""
        return self._search(question, self._embed_question(question), variant=variant, doc_id=doc_id, k=k, hybrid=hybrid)

    def _embed_question(self, question: str) -> Any:
        if not isinstance(question, str) or not question.strip():
            raise AskError("question is empty; pass the question to answer")
        self._require_index()
        return self.embedder.embed([question])[0]

    def _search(self, question: str, vector: Any, *, variant: str, doc_id: str | None, k: int, hybrid: bool) -> list[dict[str, Any]]:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise AskError(f"k must be an int >= 1; got {k!r}")
        variant = normalize_variant(variant)
        index = self._require_index()
        if doc_id:
            self._check_doc(variant, doc_id)
        elif index.count(variant) == 0:
            raise AskError(f"the {variant} table in {index.uri} is empty or missing; materialize it with `ctxwin run`")
        return index.search(variant, vector, k=k, doc_id=doc_id or None, query_text=question, hybrid=hybrid)

    def assemble(
        self,
        question: str,
        *,
        variant: str = "swb_rag",
        doc_id: str | None = None,
        k: int | None = None,
        hybrid: bool = False,
        num_neighbors: int | None = None,
        context_window_size: int | None = None,
        focus_chars: int | None = None,
        enhance_mode: str | None = None,
    ) -> EnhancedContext:
        """Retrieve and enhance: the merged context windows for ``question``, best first.

        ``k`` defaults to 16 candidates in focus mode and 4 otherwise."""
        mode, opts = _enhance_options(enhance_mode, num_neighbors, context_window_size, focus_chars)
        if k is None:
            k = DEFAULT_FOCUS_CANDIDATES if mode == "focus" else DEFAULT_K
        vector = self._embed_question(question)
        rows = self._search(question, vector, variant=variant, doc_id=doc_id, k=k, hybrid=hybrid)
        if not rows:
            return EnhancedContext([], mode)
        score_key = "rrf_score" if hybrid and all("rrf_score" in r for r in rows) else "score"
        hits = hits_from_rows(rows, score_key=score_key)
        doc_ids = list(dict.fromkeys(c.doc_id for c, _ in hits))
        chunks, texts = self._chunks(normalize_variant(variant), doc_ids)
        if mode == "focus":
            from ctxwin_dagster.core.sentences import split_sentences

            embedder = self.embedder

            def score_sentences(sentences: Sequence[str]) -> Any:
                return embedder.embed(list(sentences)) @ vector

            opts.update(split_sentences=split_sentences, score_sentences=score_sentences)
        return enhance(hits, chunks, mode=mode, doc_texts=texts, **opts)

    # ----------------------------------------------------------------- asking
    def ask(
        self,
        question: str,
        *,
        variant: str = "swb_rag",
        doc_id: str | None = None,
        mode: AskMode = "retrieve",
        k: int | None = None,
        hybrid: bool = False,
        num_neighbors: int | None = None,
        context_window_size: int | None = None,
        focus_chars: int | None = None,
        enhance_mode: str | None = None,
        window_tokens: int | None = None,
        overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
        summary: str | None = None,
        early_stop: float | None = None,
        wave_size: int = DEFAULT_WAVE_SIZE,
        progress: Callable[[int, int], None] | None = None,
    ) -> AskResult:
        """Answer ``question`` (see the module docstring for the modes).

        Args:
            question: the question.
            variant: ``"t"``/``"cc"``/``"swb"`` (or ``t_rag``…): the index table.
            doc_id: search (and, in sliding mode, read) only this document; None searches all.
            mode: ``"retrieve"``, ``"sliding"`` or ``"auto"``.
            k, hybrid: retrieval depth (default 16 candidates in focus mode, else 4); fuse with
                full-text search.
            num_neighbors / context_window_size / focus_chars / enhance_mode: the enhancement
                (``"neighbors"`` with ``num_neighbors``, ``"budget"`` with
                ``context_window_size``, ``"focus"`` with a ``focus_chars`` budget, or
                ``enhance_mode="none"``); default :data:`DEFAULT_ENHANCE` (focus, 4,000 chars).
            window_tokens, overlap_tokens: sliding windows (default: 4,000 tokens, capped by
                what fits the answer model, and 200).
            summary: a global summary for every window prompt.
            early_stop: stop sliding after a wave with a window at least this confident.
            wave_size: windows per wave (read in parallel).
            progress: ``fn(windows_read, windows_total)`` during sliding runs.

        Raises:
            AskError: an invalid option, an unknown document or variant, a missing index.
        """
        if mode not in ASK_MODES:
            raise AskError(f"mode must be one of {ASK_MODES}; got {mode!r}")
        if not isinstance(question, str) or not question.strip():
            raise AskError("question is empty; pass the question to answer")
        started = time.perf_counter()
        if mode == "sliding":
            if not doc_id:
                raise AskError("mode='sliding' reads one whole document: pass doc_id= (--doc ID)")
            _enhance_options(enhance_mode, num_neighbors, context_window_size, focus_chars)  # reject bad options early
            result = self._ask_sliding_document(
                question, variant=variant, doc_id=doc_id, window_tokens=window_tokens, overlap_tokens=overlap_tokens,
                summary=summary, early_stop=early_stop, wave_size=wave_size, progress=progress,
            )
        else:
            v = normalize_variant(variant)
            ctx = self.assemble(
                question, variant=v, doc_id=doc_id, k=k, hybrid=hybrid, num_neighbors=num_neighbors,
                context_window_size=context_window_size, focus_chars=focus_chars, enhance_mode=enhance_mode,
            )
            fit = self._fit(question, ctx) if mode == "auto" and ctx.windows else None
            if fit is not None and not fit.fits:
                result = self._ask_sliding_context(
                    question, ctx, variant=v, doc_id=doc_id, fit=fit, window_tokens=window_tokens,
                    overlap_tokens=overlap_tokens, summary=summary, early_stop=early_stop, wave_size=wave_size,
                    progress=progress,
                )
            else:
                result = self._answer_context(question, ctx, variant=v, doc_id=doc_id, mode=mode)
                result.fit = fit
        result.latency_s = time.perf_counter() - started
        return result

    def _passages(self, ctx: EnhancedContext) -> tuple[list[tuple[str, str]], dict[str, tuple[Window, str]]]:
        """Passages labelled by the best hit in each window, and label -> (window, label)."""
        rank = {cid: i for i, (cid, _) in enumerate(ctx.hits)}
        passages: list[tuple[str, str]] = []
        by_label: dict[str, tuple[Window, str]] = {}
        for w in ctx.windows:
            inside = [c for c in w.chunk_ids if c in rank]
            label = min(inside, key=rank.__getitem__) if inside else w.chunk_ids[0]
            passages.append((label, w.text))
            by_label[label] = (w, label)
        return passages, by_label

    def _fit(self, question: str, ctx: EnhancedContext) -> FitReport:
        passages, _ = self._passages(ctx)
        lang = detect_language(question + "\n" + " ".join(t for _, t in passages[:2]))
        msgs = get_template("answer", lang).render(question=question, passages=format_passages(passages))
        reserved = min(int(getattr(self.tasks, "max_tokens", self.limits.max_completion_tokens)), self.limits.max_completion_tokens)
        return check_fit(msgs, limits=self.limits, reserved_completion=reserved, counter=self.counter)

    def _answer_context(self, question: str, ctx: EnhancedContext, *, variant: str, doc_id: str | None, mode: str) -> AskResult:
        notes: list[str] = []
        if not ctx.exact and ctx.windows:
            notes.append("window text rebuilt from the index rows (no document file); white space between chunks may differ")
        if not ctx.windows:
            return AskResult(question, NOT_IN_DOCUMENTS, True, [], [], mode, "retrieve", variant, doc_id, self.engine, self.model, notes=notes + ["the search returned no chunks"], context=ctx)
        passages, by_label = self._passages(ctx)
        dropped_before = _dropped(self.tasks)
        res = self.tasks.answer(question, passages, doc_id=doc_id or "")
        dropped = _dropped(self.tasks) - dropped_before
        if dropped:
            notes.append(f"{dropped} of {len(passages)} windows did not fit {self.model} and were left out (the least relevant)")
        citations: list[Citation] = []
        if not res.not_found:
            for cid in res.cited_chunk_ids:
                if cid in by_label:
                    w, label = by_label[cid]
                    citations.append(Citation(label, w.doc_id, w.start, w.end, _cited_excerpt(w.text, res.text, label)))
            if not citations:
                notes.append("the answer cites none of the passages")
        if getattr(res, "unknown_citations", None):
            notes.append(f"the answer cites unknown ids: {list(res.unknown_citations)}")
        return AskResult(
            question=question,
            answer=res.text,
            not_found=bool(res.not_found),
            citations=citations,
            windows=[_window_dict(w) for w in ctx.windows],
            mode=mode,
            mode_used="retrieve",
            variant=variant,
            doc_id=doc_id,
            engine=getattr(res, "engine", self.engine) or self.engine,
            model=getattr(res, "model", self.model) or self.model,
            records=list(res.records),
            notes=notes,
            context=ctx,
        )

    def _window_tokens(self, requested: int | None, summary: str | None, question: str) -> int:
        if requested is not None:
            return requested
        limit = getattr(self.reader, "window_token_limit", None)
        most = limit(summary=summary, question=question) if callable(limit) else None
        size = DEFAULT_WINDOW_TOKENS if most is None else min(DEFAULT_WINDOW_TOKENS, most)
        if size <= DEFAULT_OVERLAP_TOKENS:
            raise AskError(
                f"{self.reader.model} leaves room for only {size} tokens of text per window; use a model with a longer "
                "context, a shorter summary, or pass window_tokens= and overlap_tokens= explicitly"
            )
        return size

    def _run_sliding(self, question: str, source: str | Sequence[Window], *, doc_id: str, window_tokens: int | None, overlap_tokens: int, summary: str | None, early_stop: float | None, wave_size: int, progress: Callable[[int, int], None] | None) -> SlidingAnswer:
        enc = self.counter.encoding
        size = self._window_tokens(window_tokens, summary, question)
        try:
            return sliding_window_qa(
                question, source, reader=self.reader, encode=enc.encode_ordinary, decode=enc.decode, doc_id=doc_id,
                window_tokens=size, overlap_tokens=overlap_tokens, summary=summary, early_stop=early_stop,
                wave_size=wave_size, progress=progress,
            )
        except ValueError as exc:
            if isinstance(exc, AskError):
                raise
            raise AskError(str(exc)) from exc

    def _sliding_result(self, question: str, run: SlidingAnswer, *, mode: str, variant: str | None, doc_id: str | None, texts: Mapping[str, str], chunks: Sequence[Chunk], notes: list[str]) -> AskResult:
        by_doc: dict[str, list[Chunk]] = {}
        for c in chunks:
            by_doc.setdefault(c.doc_id, []).append(c)
        citations = []
        for f in run.sources:
            d, s, e = f.span
            cid = next((c.chunk_id for c in by_doc.get(d, []) if c.start < e and s < c.end), None)
            text = texts.get(d, "")
            excerpt = _excerpt(text[s:e]) if text else _excerpt(f.evidence or f.answer)
            citations.append(Citation(cid, d, s, e, excerpt))
        if run.stopped_early:
            notes.append(f"stopped early after {run.n_read} of {run.n_windows} windows (a window reached the confidence threshold)")
        if run.errors:
            notes.append(f"{len(run.errors)} windows gave no usable reply: {run.errors[0]}")
        windows = [
            {"doc_id": f.doc_id, "start": f.start, "end": f.end, "score": round(f.confidence, 6), "chunk_ids": [], "n_chars": f.end - f.start, "window": f.window, "found": f.found}
            for f in run.findings
        ]
        return AskResult(
            question=question,
            answer=run.text,
            not_found=run.not_found,
            citations=citations,
            windows=windows,
            mode=mode,
            mode_used="sliding",
            variant=variant,
            doc_id=doc_id,
            engine=run.engine,
            model=run.model,
            records=list(run.records),
            notes=notes,
            sliding=run,
        )

    def _ask_sliding_document(self, question: str, *, variant: str, doc_id: str, window_tokens: int | None, overlap_tokens: int, summary: str | None, early_stop: float | None, wave_size: int, progress: Callable[[int, int], None] | None) -> AskResult:
        notes: list[str] = []
        chunks: list[Chunk] = []
        v: str | None = None
        if self.index is not None:
            v = normalize_variant(variant)
            if self.index.count(v, doc_id=doc_id):
                chunks, texts = self._chunks(v, [doc_id])
            else:
                texts = {}
                t = self.document_text(doc_id)
                if t is not None:
                    texts[doc_id] = t
        else:
            t = self.document_text(doc_id)
            texts = {doc_id: t} if t is not None else {}
        text = texts.get(doc_id)
        if text is None:
            if not chunks:
                where = f" in {self.documents_dir}" if self.documents_dir else ""
                raise AskError(
                    f"no text for document {doc_id!r}: no file{where} and no indexed chunks; put the file in the documents "
                    "folder (--documents) or index it with `ctxwin run`"
                )
            text = span_text(chunks, 0, max(c.end for c in chunks))
            texts = {doc_id: text}
            notes.append("document text rebuilt from the index rows (no document file); white space between chunks may differ")
        run = self._run_sliding(question, text, doc_id=doc_id, window_tokens=window_tokens, overlap_tokens=overlap_tokens, summary=summary, early_stop=early_stop, wave_size=wave_size, progress=progress)
        return self._sliding_result(question, run, mode="sliding", variant=v, doc_id=doc_id, texts=texts, chunks=chunks, notes=notes)

    def _ask_sliding_context(self, question: str, ctx: EnhancedContext, *, variant: str, doc_id: str | None, fit: FitReport, window_tokens: int | None, overlap_tokens: int, summary: str | None, early_stop: float | None, wave_size: int, progress: Callable[[int, int], None] | None) -> AskResult:
        notes = [
            f"the assembled context ({fit.prompt_tokens:,} prompt tokens) does not fit {self.limits.model} "
            f"(limit {fit.limit:,}, over by {fit.overflow:,}): sliding-window QA over it"
        ]
        run = self._run_sliding(question, ctx.windows, doc_id=doc_id or "", window_tokens=window_tokens, overlap_tokens=overlap_tokens, summary=summary, early_stop=early_stop, wave_size=wave_size, progress=progress)
        texts = {}
        for w in ctx.windows:
            texts.setdefault(w.doc_id, None)
        doc_texts: dict[str, str] = {}
        for d in texts:
            t = self.document_text(d)
            if t is not None:
                doc_texts[d] = t
        chunks, _ = self._chunks(variant, list(texts)) if self.index is not None else ([], {})
        result = self._sliding_result(question, run, mode="auto", variant=variant, doc_id=doc_id, texts=doc_texts, chunks=chunks, notes=notes)
        result.fit = fit
        result.context = ctx
        return result


def _dropped(tasks: Any) -> int:
    stats = getattr(tasks, "stats", None)
    return int(stats.get("answer_passages_dropped", 0)) if stats is not None else 0


def _enhance_options(mode: str | None, num_neighbors: int | None, context_window_size: int | None, focus_chars: int | None = None) -> tuple[str, dict[str, Any]]:
    """The enhancement mode and its option from the caller's arguments."""
    given = {k: v for k, v in (("num_neighbors", num_neighbors), ("context_window_size", context_window_size), ("focus_chars", focus_chars)) if v is not None}
    if len(given) > 1:
        raise AskError(f"pass one of num_neighbors (--neighbors), context_window_size (--window-chars) or focus_chars (--focus-chars), not both {sorted(given)}")
    implied = {"num_neighbors": "neighbors", "context_window_size": "budget", "focus_chars": "focus"}
    if mode is None:
        mode = implied[next(iter(given))] if given else DEFAULT_ENHANCE["mode"]
    if mode not in ("none", "neighbors", "budget", "focus"):
        raise AskError(f"enhance_mode must be 'none', 'neighbors', 'budget' or 'focus'; got {mode!r}")
    for name in given:
        if implied[name] != mode:
            raise AskError(f"{name} is for enhance_mode={implied[name]!r}, not {mode!r}; drop it or change the mode")
    opts = {k: v for k, v in DEFAULT_ENHANCE.items() if k != "mode"} if mode == DEFAULT_ENHANCE["mode"] and not given else {}
    if "focus_chars" in given:
        opts["budget_chars"] = given["focus_chars"]
    elif given:
        opts.update(given)
    return mode, opts

# --------------------------------------------------------------------------------------
# Command line: ``ctxwin ask``
# --------------------------------------------------------------------------------------


def add_ask_arguments(parser: Any) -> None:
    """The options of ``ctxwin ask`` (an ``argparse`` parser)."""
    parser.add_argument("question", nargs="?", help="the question; without it, questions are read from standard input until EOF or 'quit'")
    parser.add_argument("--variant", default="swb", help="index to search: t, cc or swb (default swb)")
    parser.add_argument("--doc", help="only this document (doc_id, the file stem); needed for --mode sliding")
    parser.add_argument("--mode", default="retrieve", choices=ASK_MODES, help="retrieve (default), sliding (read the whole document) or auto")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--focus-chars", type=int, help="sentence focus (the default): windows around the best sentences of the hits, N characters in all (default 4000)")
    group.add_argument("--neighbors", type=int, help="add N chunks on each side of every hit")
    group.add_argument("--window-chars", type=int, help="grow every hit with adjacent chunks up to N characters")
    group.add_argument("--no-enhance", action="store_true", help="give the retrieved chunks only")
    parser.add_argument("--k", type=int, help="chunks to retrieve (default 16 for sentence focus, else 4)")
    parser.add_argument("--hybrid", action="store_true", help="fuse vector search with full-text search")
    parser.add_argument("--window-tokens", type=int, help="sliding-window size in tokens (default 4000, capped by the model)")
    parser.add_argument("--overlap-tokens", type=int, default=DEFAULT_OVERLAP_TOKENS, help="sliding-window overlap in tokens (default 200)")
    parser.add_argument("--early-stop", type=float, help="stop sliding after a window answers with at least this confidence (0-1)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--lancedb", default="data/lancedb", help="index folder (default data/lancedb)")
    parser.add_argument("--documents", default="data/documents", help="documents folder (default data/documents; '' to use the indexed text)")
    parser.add_argument("--cache-dir", default="data/cache", help="response and embedding caches (default data/cache)")
    parser.add_argument("--model", help="answer chat model (default: none, the extractive engine, offline)")
    parser.add_argument("--base-url", help="OpenAI-compatible server for --model (default OpenAI; key from OPENAI_API_KEY)")


def format_result(result: AskResult, *, width: int = 100) -> str:
    """A human-readable rendering: the answer, the cited spans with excerpts, the cost."""
    import textwrap

    lines = [f"Answer ({result.variant or '-'} · {result.mode_used} · {result.engine}: {result.model}):"]
    body = result.answer if not result.not_found else f"{NOT_IN_DOCUMENTS} — the documents given to the model do not hold the answer"
    for para in body.splitlines() or [""]:
        lines.extend(textwrap.wrap(para, width=width, initial_indent="  ", subsequent_indent="  ") or ["  "])
    if result.citations:
        lines.append("Cited spans:")
        for i, c in enumerate(result.citations, 1):
            chunk = f" [chunk {c.chunk_id[:12]}]" if c.chunk_id else ""
            lines.append(f"  [{i}] {c.doc_id}:{c.start}-{c.end}{chunk}")
            if c.excerpt:
                lines.append(f"      \"{c.excerpt}\"")
    if result.fit is not None:
        f = result.fit
        lines.append(f"Fit: {f.prompt_tokens:,} prompt tokens of {f.limit:,} available for {f.model} ({'fits' if f.fits else f'over by {f.overflow:,}'})")
    if result.mode_used == "sliding" and result.sliding is not None:
        s = result.sliding
        lines.append(f"Windows: {s.n_read} of {s.n_windows} read, {s.n_found} held an answer{' (stopped early)' if s.stopped_early else ''}")
    else:
        lines.append(f"Context: {len(result.windows)} windows, {result.context_chars:,} characters")
    t = result.totals
    cost, paid = result.cost_usd, result.paid_usd
    if cost is None:
        cost_text = "cost unknown (no price for the model)"
    elif paid is not None and abs(cost - paid) > 5e-7:
        cost_text = f"cost of the work ${cost:.4f}, paid ${paid:.4f}"
    else:
        cost_text = f"${cost:.4f}"
    if result.engine == "extractive":
        cost_text += " (extractive engine, offline)"
    lines.append(
        f"Cost: {cost_text} · {t['calls']} call{'' if t['calls'] == 1 else 's'}, {t['cache_hits']} cached · {t['input_tokens']:,} input / "
        f"{t['output_tokens']:,} output tokens · {result.latency_s:.2f} s"
    )
    for note in result.notes:
        lines.append(f"Note: {note}")
    return "\n".join(lines)


def _ask_kwargs(args: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "variant": args.variant,
        "doc_id": args.doc or None,
        "mode": args.mode,
        "k": args.k,
        "hybrid": args.hybrid,
        "window_tokens": args.window_tokens,
        "overlap_tokens": args.overlap_tokens,
        "early_stop": args.early_stop,
    }
    if args.no_enhance:
        kwargs["enhance_mode"] = "none"
    elif args.neighbors is not None:
        kwargs["num_neighbors"] = args.neighbors
    elif args.window_chars is not None:
        kwargs["context_window_size"] = args.window_chars
    elif args.focus_chars is not None:
        kwargs["focus_chars"] = args.focus_chars
    return kwargs


def run_cli(args: Any, *, stdin: Any = None, stdout: Any = None, stderr: Any = None) -> int:
    """``ctxwin ask``: answer one question, or every question read from ``stdin``."""
    import json
    import sys

    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    kwargs = _ask_kwargs(args)
    try:
        normalize_variant(kwargs["variant"])
        asker = Asker.open(
            lancedb=args.lancedb,
            documents=args.documents or None,
            model=args.model,
            base_url=args.base_url,
            cache_dir=args.cache_dir or None,
        )
    except (AskError, ValueError) as exc:
        print(f"ctxwin ask: {exc}", file=stderr)
        return 2

    def progress(done: int, total: int) -> None:
        print(f"\r  reading windows {done}/{total}…", end="" if done < total else "\n", file=stderr, flush=True)

    def one(question: str) -> bool:
        try:
            result = asker.ask(question, progress=progress, **kwargs)
        except (AskError, ValueError) as exc:
            print(f"ctxwin ask: {exc}", file=stderr)
            return False
        if args.json:
            print(json.dumps(result.to_dict(), ensure_ascii=False), file=stdout, flush=True)
        else:
            print(format_result(result), file=stdout, flush=True)
        return True

    with asker:
        try:
            return _loop(args, one, stdin, stdout, stderr)
        except BrokenPipeError:  # e.g. `ctxwin ask … | head`: the reader went away
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0


def _loop(args: Any, one: Callable[[str], bool], stdin: Any, stdout: Any, stderr: Any) -> int:
    """One question from the arguments, or every question read from ``stdin``."""
    if args.question:
        return 0 if one(args.question) else 1
    interactive = hasattr(stdin, "isatty") and stdin.isatty()
    if interactive:
        print("Ask about the documents (empty line skips; 'quit' or Ctrl-D ends).", file=stderr)
    failures = 0
    while True:
        if interactive:
            print("ask> ", end="", file=stderr, flush=True)
        line = stdin.readline()
        if not line:
            break
        question = line.strip()
        if not question:
            continue
        if question.lower() in ("quit", "exit", ":q"):
            break
        failures += 0 if one(question) else 1
        if not args.json:
            print("", file=stdout, flush=True)
    return 1 if failures else 0
