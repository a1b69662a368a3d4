"""Resources: project settings (paths, chunking, token model).

Backends (chat, embeddings, LanceDB) join here as ``ConfigurableResource``s with an offline
implementation beside the live one; secrets only ever come from ``EnvVar``.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from ctxwin_dagster.core.documents import DocumentError, doc_id_from_path, list_documents
from ctxwin_dagster.core.splitting import RecursiveSplitter
from ctxwin_dagster.core.tokens import TokenCounter, get_token_counter


class ProjectSettings(dg.ConfigurableResource):
    """Where the documents live and how they are chunked (the paper's defaults).

    Relative paths are taken from the folder Dagster runs in (the repository root with
    ``workspace.yaml``).
    """

    documents_dir: str = "data/documents"
    qa_dir: str = "data/qa"
    cache_dir: str = "data/cache"
    chunk_size: int = 1000
    chunk_overlap: int = 100
    token_model: str = "gpt-4o"

    def documents_path(self) -> Path:
        return Path(self.documents_dir).expanduser()

    def document_ids(self) -> list[str]:
        """doc_ids of the files in the documents folder (files with bad names are skipped here
        and reported by their own partition when materialized)."""
        ids = []
        for path in list_documents(self.documents_path()):
            try:
                ids.append(doc_id_from_path(path))
            except DocumentError:
                continue
        return ids

    def document_file(self, doc_id: str) -> Path:
        """The file behind ``doc_id``; a clear error if it is gone."""
        for path in list_documents(self.documents_path()):
            if path.stem == doc_id:
                return path
        raise DocumentError(
            f"document {doc_id!r} has no file in {str(self.documents_path())!r} any more; "
            "restore the file, or let the documents sensor remove its partition"
        )

    def splitter(self) -> RecursiveSplitter:
        return RecursiveSplitter(chunk_size=self.chunk_size, chunk_overlap=self.chunk_overlap)

    def token_counter(self) -> TokenCounter:
        return get_token_counter(self.token_model)


def _cache(cache_dir: str, name: str):
    from ctxwin_dagster.models.cache import ResponseCache

    folder = Path(cache_dir).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    return ResponseCache(folder / name)


class ChatModelResource(dg.ConfigurableResource):
    """A chat model for one role (contextualizer/summarizer, answerer, judge).

    With ``model`` empty (the default) there is no chat endpoint and the role falls back to
    the extractive engine. Otherwise any OpenAI-compatible server is used, chosen by
    ``base_url`` (empty = OpenAI). The key is never a plain setting: leave ``api_key`` unset to
    read ``OPENAI_API_KEY`` at run time, or bind it with ``dg.EnvVar("MY_KEY")``.
    """

    model: str = ""
    base_url: str = ""
    api_key: str | None = None
    max_concurrency: int = 8
    max_retries: int = 5
    timeout_s: float = 120.0
    cache_dir: str = "data/cache"

    @property
    def configured(self) -> bool:
        return bool(self.model.strip())

    def backend(self):
        """The chat backend, or None when no model is configured (extractive engine)."""
        if not self.configured:
            return None
        from ctxwin_dagster.models.chat import OpenAIChatBackend

        return OpenAIChatBackend(
            model=self.model,
            base_url=self.base_url or None,
            api_key=self.api_key or None,
            cache=_cache(self.cache_dir, "responses.sqlite"),
            max_concurrency=self.max_concurrency,
            max_retries=self.max_retries,
            timeout_s=self.timeout_s,
        )

    def describe(self) -> str:
        return f"{self.model} @ {self.base_url or 'OpenAI'}" if self.configured else "extractive engine (no chat model configured)"


class EmbeddingsResource(dg.ConfigurableResource):
    """The embedder: local ``all-MiniLM-L6-v2`` (default, offline) or an OpenAI-compatible model."""

    provider: str = "local"
    model: str = "all-MiniLM-L6-v2"
    base_url: str = ""
    api_key: str | None = None
    batch_size: int = 64
    cache_dir: str = "data/cache"

    def embedder(self):
        if self.provider == "local":
            from ctxwin_dagster.models.embeddings import LocalEmbedder

            return LocalEmbedder(batch_size=self.batch_size, cache=_cache(self.cache_dir, "embeddings.sqlite"))
        if self.provider == "openai":
            from ctxwin_dagster.models.embeddings import OpenAIEmbedder

            return OpenAIEmbedder(
                model=self.model,
                base_url=self.base_url or None,
                api_key=self.api_key or None,
                cache=_cache(self.cache_dir, "embeddings.sqlite"),
            )
        raise ValueError(f"embeddings provider {self.provider!r} is not known; use 'local' or 'openai'")


class LanceDBResource(dg.ConfigurableResource):
    """Where the per-variant LanceDB tables live: a local folder (default) or ``s3://…``."""

    uri: str = "data/lancedb"

    def index(self):
        from ctxwin_dagster.models.vectorstore import ChunkIndex

        if "://" not in self.uri:
            Path(self.uri).expanduser().mkdir(parents=True, exist_ok=True)
        return ChunkIndex(self.uri)


class PipelineSettings(dg.ConfigurableResource):
    """The paper's settings for summaries and contextualization (all overridable)."""

    summary_max_tokens: int = 4000
    summary_segment_chars: int = 1_000_000
    swb_batch_size: int = 5
    swb_window_chars: int = 20_000
    temperature: float = 0.2
    top_p: float = 0.95
    max_output_tokens: int = 2048
    language: str = ""  # "" = detect from the document
    # The model whose limits the extractive engine's prompts are checked against (the paper
    # contextualized with Gemini 1.5 Flash), and whose prices the plan uses by default.
    reference_model: str = "gemini-1.5-flash"


@contextmanager
def build_tasks(chat: ChatModelResource, embeddings: EmbeddingsResource, pipeline: PipelineSettings):
    """The task engine for a role (the chat model when one is configured, else the extractive
    engine); the chat backend is closed when the block ends."""
    backend = chat.backend()
    if backend is None:
        from ctxwin_dagster.models.tasks import ExtractiveTasks

        yield ExtractiveTasks(embeddings.embedder())
        return
    from ctxwin_dagster.models.tasks import LLMTasks

    try:
        yield LLMTasks(backend, temperature=pipeline.temperature, top_p=pipeline.top_p, max_tokens=pipeline.max_output_tokens)
    finally:
        backend.close()


def task_ledger(tasks):
    """Where a task engine records its calls."""
    chat = getattr(tasks, "chat", None)
    return chat.ledger if chat is not None else tasks.ledger


class EvaluationSettings(dg.ConfigurableResource):
    """How questions are answered and scored, and where an experiment's results go.

    ``experiment`` names the folder of results (``{results_dir}/{experiment}``) and of the report
    (``{reports_dir}/{experiment}``). ``enhance_mode`` is ``none``, ``neighbors`` (with
    ``num_neighbors``), ``budget`` (with ``context_window_size`` characters per hit) or
    ``focus`` (sentence-level re-ranking inside the top chunks; see ``core/enhance.py``).
    """

    experiment: str = "sample"
    results_dir: str = "evaluations/results"
    reports_dir: str = "evaluations/reports"
    k: int = 4
    enhance_mode: str = "none"
    num_neighbors: int = 1
    context_window_size: int = 3000
    max_questions_per_document: int = 0  # 0 = all
    max_failed_share: float = 0.2  # of NaN / failed scores per metric before the check fails
    judge_model: str = ""
    judge_base_url: str = ""

    def results_path(self) -> Path:
        return Path(self.results_dir) / self.experiment

    def reports_path(self) -> Path:
        return Path(self.reports_dir) / self.experiment

    def enhancement(self) -> dict:
        if self.enhance_mode == "none":
            return {"enhance_mode": "none"}
        if self.enhance_mode == "neighbors":
            return {"num_neighbors": self.num_neighbors}
        if self.enhance_mode == "budget":
            return {"context_window_size": self.context_window_size}
        if self.enhance_mode == "focus":
            return {"enhance_mode": "focus"}
        raise ValueError(f"enhance_mode {self.enhance_mode!r} is not known; use 'none', 'neighbors', 'budget' or 'focus'")
