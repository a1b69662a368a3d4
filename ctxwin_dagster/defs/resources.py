"""Resources: project settings (paths, chunking, token model).

Backends (chat, embeddings, LanceDB) join here as ``ConfigurableResource``s with an offline
implementation beside the live one; secrets only ever come from ``EnvVar``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import dagster as dg
from pydantic import Field, PrivateAttr

from ctxwin_dagster.backends.assembly import CHAT_SPEC_FIELDS, DEFAULT_WAITS, ChatSpec, Sampling, open_chat, task_engine
from ctxwin_dagster.core.budget.embedding_window import (
    DEFAULT_CONTEXT_WEIGHT,
    DEFAULT_ROW_STRATEGY,
    OVERSIZE_MODES,
    ROW_STRATEGIES,
)
from ctxwin_dagster.core.budget.tokens import TokenCounter, get_token_counter
from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.experiment import (
    DEFAULT_CACHE_DIR,
    DEFAULT_DOCUMENTS_DIR,
    DEFAULT_GENERATED_QA_DIR,
    DEFAULT_LANCEDB_URI,
    DEFAULT_QA_DIR,
    DEFAULT_REPORTS_DIR,
    DEFAULT_RESULTS_DIR,
    SAMPLE,
)
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings
from ctxwin_dagster.core.text.documents import DocumentError
from ctxwin_dagster.core.text.folder import DocumentFolder, load_id_registry, save_id_registry, scan_documents
from ctxwin_dagster.core.text.splitting import RecursiveSplitter

if TYPE_CHECKING:
    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
    from ctxwin_dagster.backends.chat.local import LocalChatBackend
    from ctxwin_dagster.backends.embeddings.cached import CachedEmbedder
    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
    from ctxwin_dagster.backends.tasks.results import TaskEngine


class ProjectSettings(dg.ConfigurableResource):
    """Where the documents live and how they are chunked (the paper's defaults).

    Relative paths are taken from the folder Dagster runs in (the repository root with
    ``workspace.yaml``).
    """

    documents_dir: str = Field(
        default=DEFAULT_DOCUMENTS_DIR,
        description="folder of the documents (.txt, .md, .html, .pdf); one partition per file",
    )
    qa_dir: str = Field(default=DEFAULT_QA_DIR, description="folder of the question sets (JSONL, see data/README.md)")
    cache_dir: str = Field(default=DEFAULT_CACHE_DIR, description="folder of the response and vector caches")
    chunk_size: int = Field(default=PAPER.chunk_size, ge=1, description="characters per chunk (the paper: 1,000)")
    chunk_overlap: int = Field(
        default=PAPER.chunk_overlap, ge=0, description="characters shared by neighbouring chunks (the paper: 100)"
    )
    token_model: str = Field(
        default=PAPER.answer_model, description="model whose tokenizer counts the documents' tokens"
    )
    doc_ids_file: str = Field(
        default="",
        description="JSON file that keeps the doc_id each file was given ({file name: doc_id}), so a document's id never "
        "changes because another file was added, emptied or removed; empty: ids are derived from the folder as it is",
    )

    def documents_path(self) -> Path:
        return Path(self.documents_dir).expanduser()

    def document_folder(self) -> DocumentFolder:
        """The documents folder scanned: every file with its doc_id, and the files not taken
        (the ids in ``doc_ids_file``, when set, are kept)."""
        known = load_id_registry(Path(self.doc_ids_file).expanduser()) if self.doc_ids_file else None
        return scan_documents(self.documents_path(), known=known)

    def remember_ids(self, folder: DocumentFolder) -> None:
        """Record ``folder``'s ids in ``doc_ids_file`` (nothing when it is not set)."""
        if self.doc_ids_file:
            path = Path(self.doc_ids_file).expanduser()
            save_id_registry(path, folder, load_id_registry(path))

    def document_ids(self) -> list[str]:
        """doc_ids of the documents in the folder (one partition each; see ``document_folder``)."""
        return self.document_folder().ids()

    def document_file(self, doc_id: str) -> Path:
        """The file behind ``doc_id``; a clear error if it is gone."""
        path = self.document_folder().path_of(doc_id)
        if path is None:
            raise DocumentError(
                f"document {doc_id!r} has no file in {str(self.documents_path())!r} any more; "
                "restore the file, or let the documents sensor remove its partition"
            )
        return path

    def splitter(self) -> RecursiveSplitter:
        return RecursiveSplitter(chunk_size=self.chunk_size, chunk_overlap=self.chunk_overlap)

    def token_counter(self) -> TokenCounter:
        return get_token_counter(self.token_model)


class ServerWaits(dg.ConfigurableResource):
    """How long calls to a model server may wait: the base of the resources that call one. The
    waits change no result (``NOT_RESULT_FIELDS`` in ``defs/staleness.py`` leaves them out)."""

    timeout_s: float = Field(
        default=DEFAULT_WAITS["timeout_s"],
        gt=0,
        description="read timeout: seconds an attempt waits for the server's reply once connected",
    )
    connect_timeout_s: float = Field(
        default=DEFAULT_WAITS["connect_timeout_s"],
        gt=0,
        description="connect timeout: seconds an attempt waits for the connection to open",
    )
    deadline_s: float = Field(
        default=DEFAULT_WAITS["deadline_s"],
        gt=0,
        description="seconds a request may take with all its retries; no retry starts after it",
    )

    def waits(self) -> dict[str, float]:
        """The three waits, as the backends take them."""
        return {"timeout_s": self.timeout_s, "connect_timeout_s": self.connect_timeout_s, "deadline_s": self.deadline_s}


class ChatModelResource(ServerWaits):
    """A chat model for one role (contextualizer/summarizer, answerer, judge).

    With ``model`` empty (the default) there is no chat endpoint and the role is played by the
    offline extractive engine; ``local:smollm2`` (or ``local:/path/model.gguf``) runs a GGUF
    model in process, offline; any other name is served by an OpenAI-compatible server, chosen
    by ``base_url`` (empty = OpenAI). The key is never a plain setting: leave ``api_key`` unset to
    read ``OPENAI_API_KEY`` at run time, or bind it with ``dg.EnvVar("MY_KEY")``. One backend
    (connection pool, response cache, ledger) serves a whole run and is closed after it.
    """

    model: str = Field(default="", description="chat model name; empty: the offline extractive engine plays this role")
    base_url: str = Field(
        default="", description="OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio…); empty: OpenAI"
    )
    api_key: str | None = Field(
        default=None, description="leave unset to read OPENAI_API_KEY at run time, or bind an EnvVar; never stored"
    )
    max_concurrency: int = Field(
        default=ChatSpec.max_concurrency, ge=1, le=256, description="requests in flight at once"
    )
    max_retries: int = Field(
        default=ChatSpec.max_retries,
        ge=0,
        le=20,
        description="retries with backoff on 429, 5xx, timeouts and dropped connections",
    )
    cache_dir: str = Field(default=DEFAULT_CACHE_DIR, description="folder of the response cache (responses.sqlite)")
    max_new_tokens: int = Field(
        default=0, ge=0, description="local models (local:NAME): cap of every reply's tokens (0: 512)"
    )

    _backend: LocalChatBackend | OpenAIChatBackend | None = PrivateAttr(default=None)

    @property
    def configured(self) -> bool:
        return bool(self.model.strip())

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # Retries are logged to the run's log, so a run waiting on a server says so.
        self._backend = self._new_backend(context.log) if self.configured else None

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def spec(self) -> ChatSpec:
        """This role's chat model as :mod:`~ctxwin_dagster.backends.assembly` builds it."""
        return ChatSpec.from_section({name: getattr(self, name) for name in CHAT_SPEC_FIELDS})

    def _new_backend(self, logger: logging.Logger | None = None) -> LocalChatBackend | OpenAIChatBackend:
        chat = open_chat(self.spec(), logger=logger)
        assert chat is not None, "a configured model has a backend"
        return chat

    def backend(self) -> LocalChatBackend | OpenAIChatBackend | None:
        """The run's chat backend (made on first use outside a run), or None when no model is
        configured (extractive engine)."""
        if not self.configured:
            return None
        if self._backend is None:
            self._backend = self._new_backend()
        return self._backend

    def capabilities(self) -> dict[str, Any]:
        """What the model's endpoint can do, asked once and kept in the home
        (:mod:`~ctxwin_dagster.backends.chat.capabilities`); empty for the extractive engine and
        a model run in process."""
        from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
        from ctxwin_dagster.backends.chat.capabilities import endpoint_capabilities

        chat = self.backend()
        return endpoint_capabilities(chat) if isinstance(chat, OpenAIChatBackend) else {}

    def describe(self) -> str:
        from ctxwin_dagster.backends.chat.factory import describe_chat_model

        return (
            describe_chat_model(self.model, self.base_url or None)
            if self.configured
            else "the extractive engine (sentence selection; no chat model configured)"
        )


class QuestionWriterResource(ChatModelResource):
    """The chat model that writes evaluation questions from the documents (the
    ``generated_questions`` asset; ``ctxwin qa generate`` is the same from the command line), and
    how many of which kinds. By default ``local:smollm2``, offline: it runs anywhere, but its
    questions are poor; name a served model for good ones."""

    model: str = Field(default="local:smollm2", description="chat model that writes the questions")
    count: int = Field(default=5, ge=1, le=500, description="questions per document, shared between the kinds")
    kinds: list[str] = Field(
        default_factory=lambda: ["single", "two_passages", "unanswerable"],
        description="kinds of questions: single, two_passages, unanswerable",
    )
    closed_book: bool = Field(default=True, description="drop questions the model answers right without the document")
    out_dir: str = Field(
        default=f"{DEFAULT_GENERATED_QA_DIR}/{SAMPLE}",
        description="QA folder the questions are written to, one <doc_id>.jsonl per document",
    )

    def folder(self) -> Path:
        return Path(self.out_dir)


class EmbeddingsResource(ServerWaits):
    """The embedder: local ``all-MiniLM-L6-v2`` (default, offline) or an OpenAI-compatible model,
    and how index rows fit its window (nothing is cut silently; see ``core/budget/embedding_window.py``)."""

    provider: Literal["local", "openai"] = Field(
        default="local",
        description="'local' (sentence-transformers, offline) or 'openai' (any OpenAI-compatible server)",
    )
    model: str = Field(
        default="all-MiniLM-L6-v2",
        description=(
            "embedding model: for provider 'local' all-MiniLM-L6-v2 or a folder with a "
            "sentence-transformers model; for 'openai' the name the server knows"
        ),
    )
    base_url: str = Field(default="", description="OpenAI-compatible server for provider 'openai' (empty: OpenAI)")
    api_key: str | None = Field(
        default=None, description="leave unset to read OPENAI_API_KEY at run time, or bind an EnvVar"
    )
    batch_size: int = Field(default=64, ge=1, description="texts per forward pass or request")
    cache_dir: str = Field(default=DEFAULT_CACHE_DIR, description="folder of the vector cache (embeddings.sqlite)")
    row_strategy: Literal[ROW_STRATEGIES] = Field(  # type: ignore[valid-type]
        default=DEFAULT_ROW_STRATEGY,
        description="how a contextualized row fits the embedding window: context_budget (context trimmed to what the "
        "whole chunk leaves), chunk_first, separate (chunk and context vectors combined) or pooled (window-sized pieces pooled)",
    )
    oversize: Literal[OVERSIZE_MODES] = Field(  # type: ignore[valid-type]
        default="pool",
        description="a text over the window: 'pool' (embedded in pieces whose vectors are pooled; nothing lost) or "
        "'truncate' (the model cuts it; counted, and the index's window check fails)",
    )
    context_weight: float = Field(
        default=DEFAULT_CONTEXT_WEIGHT,
        ge=0.0,
        lt=1.0,
        description="the context's share of the row vector (row_strategy 'separate')",
    )
    max_input_tokens: int = Field(
        default=0,
        ge=0,
        description="the model's window in tokens when the registry does not know it (0: from the model or the registry)",
    )
    precision: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description="provider 'local': 'auto' (bfloat16 on a CPU that computes it natively, about 2x faster, vectors "
        "within cosine 0.9999 of float32; float32 elsewhere), 'float32' or 'bfloat16'",
    )
    timeout_s: float = Field(
        default=60.0, gt=0, description="provider 'openai': read timeout, seconds an attempt waits for the reply"
    )

    _embedder: CachedEmbedder | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._embedder = self._new_embedder(context.log)

    def embedder(self) -> CachedEmbedder:
        """The run's embedder (one per run, with its vector cache; made on first use outside a run)."""
        if self._embedder is None:
            self._embedder = self._new_embedder()
        return self._embedder

    def _new_embedder(self, logger: logging.Logger | None = None) -> CachedEmbedder:
        from ctxwin_dagster.backends.embeddings.factory import make_embedder

        return make_embedder(
            provider=self.provider,
            model=self.model,
            base_url=self.base_url or None,
            api_key=self.api_key or None,
            batch_size=self.batch_size,
            cache_dir=self.cache_dir,
            oversize=self.oversize,
            max_input_tokens=self.max_input_tokens or None,
            precision=self.precision,
            logger=logger,
            **self.waits(),
        )


class LanceDBResource(dg.ConfigurableResource):
    """Where the per-variant LanceDB tables live: a local folder (default) or ``s3://…``."""

    uri: str = Field(
        default=DEFAULT_LANCEDB_URI,
        description="a local folder or an object-store URI (s3://bucket/prefix); credentials and endpoint from the environment "
        "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT for an S3-compatible server)",
    )
    ann_min_rows: int = Field(
        default=20_000,
        ge=256,
        description="train the ANN vector index once a table holds this many rows (below: exact flat search)",
    )
    ann_retrain_growth: float = Field(
        default=0.5,
        gt=0,
        description="retrain the ANN index when the table has grown by this fraction since its last training",
    )
    index_append_rows: int = Field(
        default=5_000,
        ge=1,
        description="append new rows to the indexes (LanceDB optimize) once this many are unindexed",
    )

    _index: ChunkIndex | None = PrivateAttr(default=None)

    def index(self) -> ChunkIndex:
        """The run's connection to the tables (one per run; made on first use)."""
        if self._index is None:
            from ctxwin_dagster.backends.index.vectorstore import ChunkIndex, IndexPolicy

            if "://" not in self.uri:
                Path(self.uri).expanduser().mkdir(parents=True, exist_ok=True)
            policy = IndexPolicy(
                ann_min_rows=self.ann_min_rows,
                retrain_growth=self.ann_retrain_growth,
                append_rows=self.index_append_rows,
            )
            self._index = ChunkIndex(self.uri, policy=policy)
        return self._index


class PipelineSettings(dg.ConfigurableResource):
    """The paper's settings for summaries and contextualization (all overridable)."""

    summary_max_tokens: int = Field(
        default=PAPER.summary_max_tokens, ge=1, description="the global summary's budget in tokens (the paper: 4,000)"
    )
    summary_segment_chars: int = Field(
        default=PAPER.summary_segment_chars,
        ge=1,
        description="characters per summarized segment (the paper: 1,000,000)",
    )
    swb_batch_size: int = Field(
        default=PAPER.swb_batch_size, ge=1, description="SWB-RAG: chunks contextualized per call (the paper: 5)"
    )
    swb_window_chars: int = Field(
        default=PAPER.swb_window_chars,
        ge=0,
        description="SWB-RAG: characters of the document before and after a batch (the paper: 20,000)",
    )
    temperature: float = Field(
        default=PAPER.temperature, ge=0.0, le=2.0, description="contextualization temperature (the paper: 0.2)"
    )
    top_p: float = Field(default=PAPER.top_p, gt=0.0, le=1.0, description="contextualization top-p (the paper: 0.95)")
    max_output_tokens: int = Field(
        default=PAPER.max_output_tokens, ge=1, description="output tokens per contextualization call (the paper: 2,048)"
    )
    language: str = Field(default="", description="prompt language ('en' or 'de'); empty: detected from the document")
    reference_model: str = Field(
        default=PAPER.contextualizer_model,
        description="model whose limits the extractive engine's prompts are checked against, and whose prices the plan uses (the paper's Gemini 1.5 Flash)",
    )

    def sampling(self) -> Sampling:
        """Temperature, top-p and reply budget of the LLM task engine."""
        return Sampling(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_output_tokens)


@contextmanager
def build_tasks(
    chat: ChatModelResource, embeddings: EmbeddingsResource, pipeline: PipelineSettings
) -> Iterator[TaskEngine]:
    """The task engine for a role, as :func:`~ctxwin_dagster.backends.assembly.task_engine` builds
    it for ``ctxwin ask`` too: the chat model when one is configured (its backend is the
    resource's, closed when the run ends), else the extractive engine."""
    yield task_engine(chat.backend(), embeddings.embedder(), sampling=pipeline.sampling(), cache_dir=chat.cache_dir)


class JudgeResource(dg.ConfigurableResource):
    """The model that judges answers for the paper's five RAGAS metrics (faithfulness, answer
    relevancy, answer correctness, context precision, context recall).

    Its own resource, so a new judge reruns the scores only, never the answers. With ``model``
    empty (the default) there is no judge and the scores are the non-LLM and ID-based metrics;
    ``local:smollm2`` judges in process, offline; any other name is served by an
    OpenAI-compatible server (``base_url``; empty: OpenAI). The key is read at run time from the
    environment variable ``api_key_env``, never stored (a local server needs none).
    """

    model: str = Field(default="", description="judge model name; empty: no judge, non-LLM metrics only")
    base_url: str = Field(default="", description="OpenAI-compatible server of the judge (empty: OpenAI)")
    api_key_env: str = Field(
        default="OPENAI_API_KEY",
        description="environment variable holding the judge's key (read at run time, never stored)",
    )
    metrics: list[str] = Field(
        default=["faithfulness", "answer_relevancy", "context_recall", "context_precision", "answer_correctness"],
        description="which of the paper's five LLM metrics to judge (default all five)",
    )
    max_tokens: int = Field(default=2048, ge=1, description="most tokens of one judge reply")
    attempts: int = Field(default=3, ge=1, description="tries per judge call when its reply does not parse")
    max_concurrency: int = Field(default=4, ge=1, le=256, description="judge calls in flight at once")
    max_retries: int = Field(default=3, ge=0, le=20, description="retries with backoff on 429, 5xx and timeouts")
    timeout_s: float = Field(default=120.0, gt=0, description="seconds before a request times out")

    @property
    def configured(self) -> bool:
        return bool(self.model.strip())

    def config(self):
        """The :class:`~ctxwin_dagster.backends.ragas.JudgeConfig` (None without a judge)."""
        if not self.configured:
            return None
        from ctxwin_dagster.backends.ragas.judge import JudgeConfig

        return JudgeConfig(
            model=self.model.strip(),
            base_url=self.base_url or None,
            api_key_env=self.api_key_env,
            metrics=tuple(self.metrics),
            max_tokens=self.max_tokens,
            attempts=self.attempts,
            max_concurrency=self.max_concurrency,
            max_retries=self.max_retries,
            timeout_s=self.timeout_s,
        )

    def describe(self) -> str:
        """The judge for the report ("" without one)."""
        if not self.configured:
            return ""
        from ctxwin_dagster.backends.chat.factory import describe_chat_model

        return describe_chat_model(self.model.strip(), self.base_url or None)


class EvaluationSettings(dg.ConfigurableResource):
    """How questions are answered and scored, and where an experiment's results go.

    Retrieval is ``ctxwin ask``'s by default (``retrieval="ask"``: hybrid sentence focus over the
    top-24 chunks, at most 8,000 characters), so the evaluation measures what users get;
    ``retrieval="paper"`` is the SWB-RAG paper's protocol (top-4 chunks, no enhancement). Every
    option of ``ctxwin ask`` can change the named setting (unset fields keep it; an option of
    another mode picks that mode, see :meth:`RetrievalSettings.named`). ``experiment``
    names the folder of results (``{results_dir}/{experiment}``) and of the report
    (``{reports_dir}/{experiment}``).
    """

    experiment: str = Field(default=SAMPLE, description="name of the experiment: the folder of its results and report")
    results_dir: str = Field(
        default=DEFAULT_RESULTS_DIR, description="where answers and scores are exported (JSONL per document)"
    )
    reports_dir: str = Field(default=DEFAULT_REPORTS_DIR, description="where the comparison report is written")
    retrieval: Literal["ask", "focus-dense", "paper"] = Field(
        default="ask",
        description="named retrieval setting: 'ask' (ctxwin ask's default, hybrid sentence focus), 'focus-dense' (the earlier "
        "vectors-only focus) or 'paper' (top-4 chunks, no enhancement)",
    )
    enhance_mode: Literal["", "focus", "neighbors", "budget", "none"] = Field(
        default="", description="change the enhancement: focus, neighbors, budget or none (empty: the named setting's)"
    )
    k: int | None = Field(
        default=None, ge=1, description="chunks to retrieve (unset: the named setting's, 24 for ask's focus, else 4)"
    )
    focus_chars: int | None = Field(
        default=None,
        ge=1,
        description="focus mode: at most this many characters of context in all (unset: the named setting's, 8,000 for ask)",
    )
    opening_chars: int | None = Field(
        default=None,
        ge=0,
        description="focus mode: also give each document's first N characters (unset: the named setting's, 500 for ask; 0: none)",
    )
    num_neighbors: int | None = Field(
        default=None, ge=0, description="neighbors mode: chunks added on each side of a hit (unset: 1)"
    )
    context_window_size: int | None = Field(
        default=None, ge=1, description="budget mode: characters per hit (unset: 3,000)"
    )
    hybrid: bool | None = Field(
        default=None, description="fuse vector search with full-text search (unset: the named setting's, off)"
    )
    max_questions_per_document: int = Field(
        default=0, ge=0, description="answer at most this many questions per document (0: all)"
    )
    max_failed_share: float = Field(
        default=0.2,
        ge=0.0,
        le=1.0,
        description="share of NaN or failed scores per metric above which the scores check fails",
    )

    def results_path(self) -> Path:
        return Path(self.results_dir) / self.experiment

    def reports_path(self) -> Path:
        return Path(self.reports_dir) / self.experiment

    def retrieval_settings(self) -> RetrievalSettings:
        """The named retrieval setting with this resource's changes (a clear error if they clash)."""
        return RetrievalSettings.named(
            self.retrieval,
            enhance_mode=self.enhance_mode or None,
            k=self.k,
            focus_chars=self.focus_chars,
            opening_chars=self.opening_chars,
            num_neighbors=self.num_neighbors,
            context_window_size=self.context_window_size,
            hybrid=self.hybrid,
        )
