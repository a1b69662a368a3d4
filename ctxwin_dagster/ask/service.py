"""The asking service: :class:`Asker` (see the package docstring of :mod:`ctxwin_dagster.ask`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwin_dagster.ask.answering import ContextAnswers
from ctxwin_dagster.ask.indexed_documents import IndexedDocuments
from ctxwin_dagster.ask.modes import ASK_MODES, AskMode
from ctxwin_dagster.ask.results import (
    AskError,
    AskResult,
    normalize_variant,
)
from ctxwin_dagster.ask.retriever import Retriever
from ctxwin_dagster.ask.sliding import SlidingAnswers, SlidingOptions
from ctxwin_dagster.core.budget.limits import ModelLimits, get_model_limits
from ctxwin_dagster.core.budget.tokens import TokenCounter, get_token_counter
from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.experiment import DEFAULT_CACHE_DIR, DEFAULT_DOCUMENTS_DIR, DEFAULT_LANCEDB_URI
from ctxwin_dagster.core.methods.sliding_qa import (
    DEFAULT_OVERLAP_TOKENS,
    DEFAULT_WAVE_SIZE,
    WindowReader,
)
from ctxwin_dagster.core.retrieval.enhance import EnhancedContext
from ctxwin_dagster.core.retrieval.settings import RETRIEVAL_PRESETS, RetrievalSettings
from ctxwin_dagster.core.text.splitting import Chunk

if TYPE_CHECKING:
    from ctxwin_dagster.backends.base import Embedder
    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
    from ctxwin_dagster.backends.tasks.results import TaskEngine

__all__ = ["Asker"]


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
        self.answers = ContextAnswers(tasks, limits=self.limits, counter=self.counter)
        self.sliding = SlidingAnswers(
            tasks=tasks,
            embedder=embedder,
            documents=self.documents,
            index=index,
            limits=self.limits,
            counter=self.counter,
            reader=reader,
        )
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
        sliding = SlidingOptions(window_tokens, overlap_tokens, summary, early_stop, wave_size, progress)
        started = time.perf_counter()
        if mode == "sliding":
            if not doc_id:
                raise AskError("mode='sliding' reads one whole document: pass doc_id= (--doc ID)")
            result = self.sliding.ask_document(question, sliding, variant=variant, doc_id=doc_id)
        else:
            v = normalize_variant(variant)
            ctx = self.retriever.context(question, settings, variant=v, doc_id=doc_id)
            fit = self.answers.fit(question, ctx) if mode == "auto" and ctx.windows else None
            if fit is not None and not fit.fits:
                result = self.sliding.ask_context(question, ctx, sliding, variant=v, doc_id=doc_id, fit=fit)
            else:
                result = self.answers.answer(question, ctx, variant=v, doc_id=doc_id, mode=mode)
                result.fit = fit
        result.latency_s = time.perf_counter() - started
        return result


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
