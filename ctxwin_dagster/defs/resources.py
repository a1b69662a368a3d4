"""Resources: where the documents live and how they are chunked, where the index lives, the
paper's settings of summaries and contextualization, and how questions are answered and scored;
:class:`ProjectResources` is the whole set, by resource key.

The resources that call models (chat, embeddings, judge) are in
:mod:`ctxwin_dagster.defs.model_resources`; secrets only ever come from ``EnvVar``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import dagster as dg
from pydantic import Field, PrivateAttr

from ctxwin_dagster.backends.assembly import Sampling, task_engine
from ctxwin_dagster.core.budget.tokens import TokenCounter, get_token_counter
from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.experiment import (
    DEFAULT_CACHE_DIR,
    DEFAULT_DOCUMENTS_DIR,
    DEFAULT_LANCEDB_URI,
    DEFAULT_QA_DIR,
    DEFAULT_REPORTS_DIR,
    DEFAULT_RESULTS_DIR,
    SAMPLE,
)
from ctxwin_dagster.core.retrieval.options import RETRIEVAL_OPTIONS, option_of, settings_from
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings
from ctxwin_dagster.core.text.documents import DocumentError
from ctxwin_dagster.core.text.folder import (
    DocumentFolder,
    load_id_registry,
    registered_file,
    save_id_registry,
    scan_documents,
)
from ctxwin_dagster.core.text.splitting import RecursiveSplitter
from ctxwin_dagster.defs.model_resources import (
    ChatModelResource,
    EmbeddingsResource,
    JudgeResource,
    QuestionWriterResource,
)

if TYPE_CHECKING:
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
        """The file behind ``doc_id``; a clear error if it is gone. A file the ids registry names
        is found without scanning the folder (the scan's answer, at a cost that does not grow
        with the folder)."""
        known = load_id_registry(Path(self.doc_ids_file).expanduser()) if self.doc_ids_file else {}
        path = registered_file(self.documents_path(), known, doc_id) or self.document_folder().path_of(doc_id)
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


def _retrieval_field(field: str) -> Any:
    """The resource field of a retrieval option: unset keeps the named setting's value."""
    option = option_of(field)
    return Field(default=None, ge=option.minimum, description=option.help)


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
    # The retrieval options, from the one table of them (ctxwin ask's flags come from it too).
    k: int | None = _retrieval_field("k")
    focus_chars: int | None = _retrieval_field("focus_chars")
    num_neighbors: int | None = _retrieval_field("num_neighbors")
    context_window_size: int | None = _retrieval_field("context_window_size")
    opening_chars: int | None = _retrieval_field("opening_chars")
    hybrid: bool | None = _retrieval_field("hybrid")
    route_to: int | None = _retrieval_field("route_to")
    question_parts: bool | None = _retrieval_field("question_parts")
    lexical_weight: float | None = _retrieval_field("lexical_weight")
    score_drop: float | None = _retrieval_field("score_drop")
    structure: bool | None = _retrieval_field("structure")
    statements: bool | None = _retrieval_field("statements")
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
        values = {o.field: getattr(self, o.field) for o in RETRIEVAL_OPTIONS}
        return settings_from(values, retrieval=self.retrieval, by_field=True, enhance_mode=self.enhance_mode or None)


class ProjectResources(TypedDict):
    """The resources of the project's definitions, by resource key."""

    settings: ProjectSettings
    pipeline: PipelineSettings
    contextualizer: ChatModelResource
    answerer: ChatModelResource
    evaluation: EvaluationSettings
    judge: JudgeResource
    embeddings: EmbeddingsResource
    lancedb: LanceDBResource
    question_writer: QuestionWriterResource
    io_manager: dg.ConfigurableIOManagerFactory
