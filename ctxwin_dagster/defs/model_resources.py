"""The resources that call models: the chat model of each role (contextualizer, answerer), the
question writer, the embedder and the judge, and how long their calls to a server may wait.

With ``model`` empty a chat role is played by the offline extractive engine, and there is no
judge; secrets only ever come from the environment (``EnvVar``, or a variable named by the
resource), never from a stored setting.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import dagster as dg
from pydantic import Field, PrivateAttr

from ctxwin_dagster.backends.assembly import DEFAULT_WAITS, ChatSpec, open_chat
from ctxwin_dagster.core.budget.embedding_rows import DEFAULT_CONTEXT_WEIGHT, DEFAULT_ROW_STRATEGY, ROW_STRATEGIES
from ctxwin_dagster.core.budget.embedding_window import OVERSIZE_MODES
from ctxwin_dagster.core.experiment import DEFAULT_CACHE_DIR, DEFAULT_GENERATED_QA_DIR, SAMPLE
from ctxwin_dagster.core.json_types import JSONObject

if TYPE_CHECKING:
    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
    from ctxwin_dagster.backends.chat.local import LocalChatBackend
    from ctxwin_dagster.backends.embeddings.cached import CachedEmbedder
    from ctxwin_dagster.backends.ragas.judge import JudgeConfig


class ServerWaits(dg.ConfigurableResource):
    """How long calls to a model server may wait: the base of the resources that call one. The
    waits change no result (``NOT_RESULT_FIELDS`` in ``defs/versions.py`` leaves them out)."""

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
        return ChatSpec.from_section(dict(self))

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

    def capabilities(self) -> JSONObject:
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

    def config(self) -> JudgeConfig | None:
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
