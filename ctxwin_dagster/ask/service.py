"""The asking service: :class:`Asker` (see the package docstring of :mod:`ctxwin_dagster.ask`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ctxwin_dagster.ask.indexed_documents import IndexedDocuments
from ctxwin_dagster.ask.results import (
    AskError,
    AskResult,
    Citation,
    _window_dict,
    cite_sentences,
    normalize_variant,
    sliding_result,
)
from ctxwin_dagster.ask.retriever import Retriever
from ctxwin_dagster.ask.session import ASK_MODES
from ctxwin_dagster.core.budget.fit import FitReport, check_fit
from ctxwin_dagster.core.budget.limits import ModelLimits, get_model_limits
from ctxwin_dagster.core.budget.tokens import TokenCounter, get_token_counter
from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.experiment import DEFAULT_CACHE_DIR, DEFAULT_DOCUMENTS_DIR, DEFAULT_LANCEDB_URI
from ctxwin_dagster.core.methods.prompts import NOT_IN_DOCUMENTS, detect_language, format_passages, get_template
from ctxwin_dagster.core.methods.sliding_qa import (
    DEFAULT_OVERLAP_TOKENS,
    DEFAULT_WAVE_SIZE,
    DEFAULT_WINDOW_TOKENS,
    SlidingAnswer,
    WindowReader,
    sliding_window_qa,
)
from ctxwin_dagster.core.retrieval.around_hits import span_text
from ctxwin_dagster.core.retrieval.enhance import EnhancedContext
from ctxwin_dagster.core.retrieval.routing import routing_note
from ctxwin_dagster.core.retrieval.settings import RETRIEVAL_PRESETS, RetrievalSettings
from ctxwin_dagster.core.retrieval.window import Window
from ctxwin_dagster.core.text.splitting import Chunk

if TYPE_CHECKING:
    from ctxwin_dagster.backends.base import Embedder
    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
    from ctxwin_dagster.backends.tasks.results import TaskEngine

__all__ = ["Asker"]

AskMode = Literal["retrieve", "sliding", "auto"]

#: The model whose limits the auto mode checks against when the answer engine is the
#: extractive one (which has no context limit of its own): the paper's answer model.
DEFAULT_LIMITS_MODEL = PAPER.answer_model


class Asker:
    """Answers questions over the per-variant indexes (see the module docstring).

    Args:
        index: the :class:`~ctxwin_dagster.backends.index.vectorstore.ChunkIndex` (None: only
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
        doc_ids_file: the experiment's record of the id each file was given (the home's
            ``ctxwin_doc_ids.json``), so a file is found under the id its runs gave it; None:
            ids are derived from the folder as it is now.
        closers: what :meth:`close` calls, last first (the chat backend :meth:`open` made).
    """

    def __init__(
        self,
        *,
        index: ChunkIndex | None,
        embedder: Embedder | None,
        tasks: TaskEngine,
        reader: WindowReader | None = None,
        documents_dir: str | Path | None = None,
        limits: ModelLimits | None = None,
        counter: TokenCounter | None = None,
        doc_ids_file: str | Path | None = None,
        closers: Sequence[Callable[[], None]] = (),
    ) -> None:
        from ctxwin_dagster.backends.tasks.results import TaskEngine

        if not isinstance(tasks, TaskEngine):
            missing = [n for n in dir(TaskEngine) if not n.startswith("_") and not hasattr(tasks, n)]
            raise TypeError(
                f"tasks must be a task engine (LLMTasks, ExtractiveTasks); {type(tasks).__name__} lacks {missing}"
            )
        self.documents = IndexedDocuments(index, documents_dir, doc_ids_file=doc_ids_file)
        self.retriever = Retriever(index, embedder, self.documents)
        self.index = index
        self.embedder = embedder
        self.tasks = tasks
        self.engine = tasks.engine
        self.model = tasks.model
        self.documents_dir = self.documents.documents_dir
        self.limits = limits or tasks.limits or get_model_limits(DEFAULT_LIMITS_MODEL)
        self.counter = counter or tasks.counter or get_token_counter(DEFAULT_LIMITS_MODEL)
        self._reader = reader
        self._closers: list[Callable[[], None]] = list(closers)

    # ----------------------------------------------------------------- construction
    @classmethod
    def open(
        cls,
        *,
        lancedb: str | Path = DEFAULT_LANCEDB_URI,
        documents: str | Path | None = DEFAULT_DOCUMENTS_DIR,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        cache_dir: str | Path | None = DEFAULT_CACHE_DIR,
        embedder: Embedder | None = None,
        embeddings: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
        max_tokens: int | None = None,
        doc_ids_file: str | Path | None = None,
        chat_options: Mapping[str, Any] | None = None,
        sampling: Mapping[str, Any] | None = None,
    ) -> Asker:
        """An asker over the indexes at ``lancedb`` with the documents in ``documents``.

        With ``model`` the answers come from that chat model (OpenAI, or the OpenAI-compatible
        server at ``base_url``; responses cached in ``cache_dir/responses.sqlite``); without
        it from the extractive engine (no network); ``local:smollm2`` runs a GGUF model in process.
        ``max_tokens`` caps each answer's tokens (default the paper's 2,048, and a local model's 512). Question vectors are cached in
        ``cache_dir/embeddings.sqlite`` (None: no caches). ``chat_options`` are the chat model's
        other settings, as an experiment's ``answerer`` section names them
        (:class:`~ctxwin_dagster.backends.assembly.ChatSpec`: the waits on its server
        ``timeout_s``, ``connect_timeout_s``, ``deadline_s``, and ``max_retries``,
        ``max_new_tokens``); ``sampling`` is the experiment's ``pipeline`` section (its
        ``temperature``, ``top_p`` and ``max_output_tokens``). The chat model and the answer engine
        are built by :mod:`~ctxwin_dagster.backends.assembly`, as the evaluation builds its own.

        Questions are embedded by ``embedder``, else by the one ``embeddings`` describes (the
        keys of the ``EmbeddingsResource``'s fields: ``provider``, ``model``, ``base_url``,
        ``api_key``, ``batch_size``, ``cache_dir``, ``oversize``, ``max_input_tokens``, ``precision``;
        ``row_strategy`` and ``context_weight`` are accepted and change nothing here), built by
        :func:`~ctxwin_dagster.backends.embeddings.factory.make_embedder` as the index assets
        build theirs; with neither, the local ``all-MiniLM-L6-v2``. A search with another model
        than the one that built the index is refused (:class:`AskError` naming both).

        Raises:
            AskError: there is no index at ``lancedb``, or ``embeddings`` is not valid.
        """
        from ctxwin_dagster.ask.opening import open_asker

        return open_asker(
            cls,
            lancedb=lancedb,
            documents=documents,
            model=model,
            base_url=base_url,
            api_key=api_key,
            cache_dir=cache_dir,
            embedder=embedder,
            embeddings=embeddings,
            max_concurrency=max_concurrency,
            max_tokens=max_tokens,
            doc_ids_file=doc_ids_file,
            chat_options=chat_options,
            sampling=sampling,
        )

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
            from ctxwin_dagster.backends.tasks.extractive import DEFAULT_ANSWER_THRESHOLD
            from ctxwin_dagster.backends.tasks.window_readers import ExtractiveWindowReader, LLMWindowReader

            tasks = self.tasks
            if tasks.chat is not None:
                self._reader = LLMWindowReader(tasks.chat, limits=self.limits, counter=self.counter)
            else:
                embedder = tasks.embedder or self.embedder
                if embedder is None:
                    raise AskError("sliding-window QA with the extractive engine needs an embedder; pass embedder=")
                self._reader = ExtractiveWindowReader(
                    embedder,
                    ledger=tasks.ledger,
                    counter=self.counter,
                    threshold=tasks.answer_threshold
                    if tasks.answer_threshold is not None
                    else DEFAULT_ANSWER_THRESHOLD,
                )
        return self._reader

    # ----------------------------------------------------------------- documents and retrieval
    def document_text(self, doc_id: str, *, expected_sha256: str | None = None) -> str | None:
        """The text of ``doc_id`` from the documents folder (None when there is no file).

        Raises:
            StaleIndexError: ``expected_sha256`` (the indexed one) differs from the file's.
        """
        return self.documents.text(doc_id, expected_sha256=expected_sha256)

    def indexed_chunks(self, variant: str, doc_id: str) -> list[Chunk]:
        """The chunks of ``doc_id`` as the ``variant`` table holds them, in document order."""
        self.retriever.check_doc(normalize_variant(variant), doc_id)
        return self.documents.chunks(normalize_variant(variant), [doc_id])[0]

    def retrieve(
        self,
        question: str,
        *,
        variant: str = "swb_rag",
        doc_id: str | None = None,
        retrieval: RetrievalSettings | str | None = None,
    ) -> list[dict[str, Any]]:
        """The top-``k`` index rows for ``question`` before any enhancement, best first: each
        with ``score`` (cosine similarity), and ``rrf_score`` when the settings' search is hybrid.
        ``retrieval``: the settings or a named one (default ``ask``)."""
        return self.retriever.top_rows(
            question, _settings(retrieval), variant=normalize_variant(variant), doc_id=doc_id
        )

    def assemble(
        self,
        question: str,
        *,
        variant: str = "swb_rag",
        doc_id: str | None = None,
        retrieval: RetrievalSettings | str | None = None,
    ) -> EnhancedContext:
        """Retrieve and enhance: the merged context windows for ``question``, best first, as
        ``retrieval`` says (the settings or a named one; default ``ask``)."""
        return self.retriever.context(question, _settings(retrieval), variant=variant, doc_id=doc_id)

    # ----------------------------------------------------------------- asking
    def ask(
        self,
        question: str,
        *,
        variant: str = "swb_rag",
        doc_id: str | None = None,
        mode: AskMode = "retrieve",
        retrieval: RetrievalSettings | str | None = None,
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
            retrieval: how the context is retrieved and enhanced: a
                :class:`~ctxwin_dagster.core.retrieval.settings.RetrievalSettings` (e.g.
                ``RetrievalSettings.named("ask", num_neighbors=2)``) or the name of one; default
                ``ask``, hybrid sentence focus over the top-24 chunks, at most 8,000 characters.
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
        settings = _settings(retrieval)
        sliding = _Sliding(window_tokens, overlap_tokens, summary, early_stop, wave_size, progress)
        started = time.perf_counter()
        if mode == "sliding":
            if not doc_id:
                raise AskError("mode='sliding' reads one whole document: pass doc_id= (--doc ID)")
            result = self._ask_sliding_document(question, sliding, variant=variant, doc_id=doc_id)
        else:
            v = normalize_variant(variant)
            ctx = self.retriever.context(question, settings, variant=v, doc_id=doc_id)
            fit = self._fit(question, ctx) if mode == "auto" and ctx.windows else None
            if fit is not None and not fit.fits:
                result = self._ask_sliding_context(question, ctx, sliding, variant=v, doc_id=doc_id, fit=fit)
            else:
                result = self._answer_context(question, ctx, variant=v, doc_id=doc_id, mode=mode)
                result.fit = fit
        result.latency_s = time.perf_counter() - started
        return result

    def _passages(self, ctx: EnhancedContext) -> tuple[list[tuple[str, str]], dict[str, tuple[Window, str]]]:
        """Passages labelled by the best hit in each window, and label -> (window, its chunk id).

        Labels are unique: several sentence windows can come from one chunk, and a citation must
        name the window it quotes. A window whose best chunk labels an earlier window takes its
        next chunk, else the chunk id with ``~2``, ``~3`` … after it.
        """
        rank = {cid: i for i, (cid, _) in enumerate(ctx.hits)}
        passages: list[tuple[str, str]] = []
        by_label: dict[str, tuple[Window, str]] = {}
        for w in ctx.windows:
            ordered = sorted(w.chunk_ids, key=lambda c: (rank.get(c, len(rank)), w.chunk_ids.index(c)))
            chunk = next((c for c in ordered if c not in by_label), ordered[0])
            label, k = chunk, 1
            while label in by_label:
                k += 1
                label = f"{chunk}~{k}"
            passages.append((label, w.text))
            by_label[label] = (w, chunk)
        return passages, by_label

    def _fit(self, question: str, ctx: EnhancedContext) -> FitReport:
        passages, _ = self._passages(ctx)
        lang = detect_language(question + "\n" + " ".join(t for _, t in passages[:2]))
        msgs = get_template("answer", lang).render(question=question, passages=format_passages(passages))
        most = self.tasks.max_tokens if self.tasks.max_tokens is not None else self.limits.max_completion_tokens
        reserved = min(int(most), self.limits.max_completion_tokens)
        return check_fit(msgs, limits=self.limits, reserved_completion=reserved, counter=self.counter)

    def _answer_context(
        self, question: str, ctx: EnhancedContext, *, variant: str, doc_id: str | None, mode: str
    ) -> AskResult:
        notes: list[str] = []
        if ctx.routed_to:
            notes.append(routing_note(question, ctx.routed_to))
        if not ctx.exact and ctx.windows:
            notes.append(
                "window text rebuilt from the index rows (no document file); white space between chunks may differ"
            )
        if not ctx.windows:
            return AskResult(
                question,
                NOT_IN_DOCUMENTS,
                True,
                [],
                [],
                mode,
                "retrieve",
                variant,
                doc_id,
                self.engine,
                self.model,
                notes=notes + ["the search returned no chunks"],
                context=ctx,
            )
        passages, by_label = self._passages(ctx)
        dropped_before = self.tasks.stats["answer_passages_dropped"]
        # one passage per window, in order: each window's offset in its document
        res = self.tasks.answer(question, passages, doc_id=doc_id or "", starts=[w.start for w in ctx.windows])
        dropped = self.tasks.stats["answer_passages_dropped"] - dropped_before
        if dropped:
            notes.append(
                f"{dropped} of {len(passages)} windows did not fit {self.model} and were left out (the least relevant)"
            )
        citations: list[Citation] = []
        answer = res.text
        if not res.not_found:
            answer, cited = cite_sentences(res.text, {label: w for label, (w, _) in by_label.items()})
            citations = [dataclasses.replace(c, chunk_id=by_label[c.chunk_id][1]) for c in cited if c.chunk_id]
            if not citations:
                notes.append("the answer cites none of the passages")
        if res.unknown_citations:
            notes.append(f"the answer cites unknown ids: {list(res.unknown_citations)}")
        return AskResult(
            question=question,
            answer=answer,
            not_found=bool(res.not_found),
            citations=citations,
            windows=[_window_dict(w) for w in ctx.windows],
            mode=mode,
            mode_used="retrieve",
            variant=variant,
            doc_id=doc_id,
            engine=res.engine or self.engine,
            model=res.model or self.model,
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

    def _run_sliding(
        self, question: str, source: str | Sequence[Window], sliding: _Sliding, *, doc_id: str
    ) -> SlidingAnswer:
        enc = self.counter.encoding
        size = self._window_tokens(sliding.window_tokens, sliding.summary, question)
        try:
            return sliding_window_qa(
                question,
                source,
                reader=self.reader,
                encode=enc.encode_ordinary,
                decode=enc.decode,
                doc_id=doc_id,
                window_tokens=size,
                overlap_tokens=sliding.overlap_tokens,
                summary=sliding.summary,
                early_stop=sliding.early_stop,
                wave_size=sliding.wave_size,
                progress=sliding.progress,
            )
        except ValueError as exc:
            if isinstance(exc, AskError):
                raise
            raise AskError(str(exc)) from exc

    def _ask_sliding_document(self, question: str, sliding: _Sliding, *, variant: str, doc_id: str) -> AskResult:
        notes: list[str] = []
        chunks: list[Chunk] = []
        v: str | None = None
        if self.index is not None:
            v = normalize_variant(variant)
            if self.index.count(v, doc_id=doc_id):
                chunks, texts = self.retriever.chunks(v, [doc_id])
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
            notes.append(
                "document text rebuilt from the index rows (no document file); white space between chunks may differ"
            )
        run = self._run_sliding(question, text, sliding, doc_id=doc_id)
        return sliding_result(
            question, run, mode="sliding", variant=v, doc_id=doc_id, texts=texts, chunks=chunks, notes=notes
        )

    def _ask_sliding_context(
        self,
        question: str,
        ctx: EnhancedContext,
        sliding: _Sliding,
        *,
        variant: str,
        doc_id: str | None,
        fit: FitReport,
    ) -> AskResult:
        notes = [
            f"the assembled context ({fit.prompt_tokens:,} prompt tokens) does not fit {self.limits.model} "
            f"(limit {fit.limit:,}, over by {fit.overflow:,}): sliding-window QA over it"
        ]
        run = self._run_sliding(question, ctx.windows, sliding, doc_id=doc_id or "")
        texts: dict[str, None] = {}
        for w in ctx.windows:
            texts.setdefault(w.doc_id, None)
        doc_texts: dict[str, str] = {}
        for d in texts:
            t = self.document_text(d)
            if t is not None:
                doc_texts[d] = t
        chunks, _ = self.retriever.chunks(variant, list(texts)) if self.index is not None else ([], {})
        result = sliding_result(
            question, run, mode="auto", variant=variant, doc_id=doc_id, texts=doc_texts, chunks=chunks, notes=notes
        )
        result.fit = fit
        result.context = ctx
        return result


@dataclass(frozen=True)
class _Sliding:
    """The sliding-window options of one :meth:`Asker.ask` call."""

    window_tokens: int | None
    overlap_tokens: int
    summary: str | None
    early_stop: float | None
    wave_size: int
    progress: Callable[[int, int], None] | None


def _settings(retrieval: RetrievalSettings | str | None) -> RetrievalSettings:
    """The retrieval settings of a call: as given, the named ones, or ``ask``'s."""
    if retrieval is None:
        return RETRIEVAL_PRESETS["ask"]
    if isinstance(retrieval, str):
        try:
            return RetrievalSettings.named(retrieval)
        except ValueError as exc:
            raise AskError(str(exc)) from exc
    if not isinstance(retrieval, RetrievalSettings):
        raise AskError(f"retrieval= takes a RetrievalSettings or the name of one; got {type(retrieval).__name__}")
    return retrieval
