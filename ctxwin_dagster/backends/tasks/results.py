"""What the task engines return, and the protocols they implement.

Three small protocols — :class:`Summarizer`, :class:`Contextualizer`, :class:`Answerer` — and
their results, and :class:`TaskEngine`: all three with what the pipeline and the asker read of
an engine (its name and model, token counter, call ledger, counts, and the answer model's
window). The engines — :class:`~ctxwin_dagster.backends.tasks.llm.LLMTasks` (any chat model: an
OpenAI-compatible server or the local GGUF model behind its chat backend) and
:class:`~ctxwin_dagster.backends.tasks.extractive.ExtractiveTasks` — implement it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

from ctxwin_dagster.backends.base import CallRecord, ChatBackend, Embedder, Ledger
from ctxwin_dagster.core.budget.limits import ModelLimits
from ctxwin_dagster.core.budget.tokens import TokenCounter
from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.evaluation.record_values import as_int
from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.methods.swb import ChunkLike

__all__ = [
    "STAGE_ANSWER",
    "STAGE_CONTEXT",
    "STAGE_SUMMARY",
    "AnswerResult",
    "Answerer",
    "ContextResult",
    "Contextualizer",
    "Summarizer",
    "SummaryResult",
    "TaskEngine",
]

#: The ``stage`` tags of the engines' calls (:class:`~ctxwin_dagster.backends.base.CallTags`).
STAGE_SUMMARY = "summary"
STAGE_CONTEXT = "contextualize"
STAGE_ANSWER = "answer"


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """A global summary: the overview ``text``, the per-segment summaries and the calls made.

    ``notes`` lists everything cut to fit a model or a budget (empty when nothing was).
    """

    text: str
    segments: list[str]
    records: list[CallRecord]
    language: str = "en"
    engine: str = ""
    model: str = ""
    n_tokens: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ContextResult:
    """The situating context of one chunk and how it was made.

    ``cached`` is True when every call behind it was answered from the cache; ``fallback`` when
    it did not come from its own batch (SWB per-chunk fallback); ``error`` says what went wrong
    (None when nothing did).
    """

    chunk_id: str
    context: str
    engine: str
    model: str
    prompt_version: str
    input_tokens: int
    output_tokens: int
    input_chars: int
    cached: bool
    fallback: bool = False
    error: str | None = None

    def to_dict(self) -> JSONObject:
        data: JSONObject = asdict(self)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ContextResult:
        """The result :meth:`to_dict` gave."""
        error = data.get("error")
        return cls(
            str(data["chunk_id"]),
            str(data["context"]),
            str(data["engine"]),
            str(data["model"]),
            str(data["prompt_version"]),
            as_int(data["input_tokens"]),
            as_int(data["output_tokens"]),
            as_int(data["input_chars"]),
            bool(data["cached"]),
            bool(data.get("fallback", False)),
            None if error is None else str(error),
        )


@dataclass(frozen=True, slots=True)
class AnswerResult:
    """An answer: its text, the chunk ids it cites, and whether the passages lacked the answer.

    ``text`` is :data:`~ctxwin_dagster.core.methods.prompts.NOT_IN_DOCUMENTS` when ``not_found``.
    ``unknown_citations`` are bracketed ids in the reply that match no passage; ``score`` is the
    extractive engine's best question–sentence similarity (None for the LLM engine).
    """

    text: str
    cited_chunk_ids: list[str]
    not_found: bool
    records: list[CallRecord]
    engine: str = ""
    model: str = ""
    prompt_version: str = ""
    unknown_citations: list[str] = field(default_factory=list)
    score: float | None = None


@runtime_checkable
class Summarizer(Protocol):
    def summarize(
        self,
        text: str,
        *,
        doc_id: str,
        max_tokens: int = PAPER.summary_max_tokens,
        segment_chars: int = PAPER.summary_segment_chars,
        language: str | None = None,
    ) -> SummaryResult: ...


@runtime_checkable
class Contextualizer(Protocol):
    def contextualize_cc(
        self, document_text: str, chunks: Sequence[ChunkLike], *, doc_id: str
    ) -> list[ContextResult]: ...

    def contextualize_swb(
        self,
        document_text: str,
        chunks: Sequence[ChunkLike],
        summary: str,
        *,
        doc_id: str,
        batch_size: int = PAPER.swb_batch_size,
        window_chars: int = PAPER.swb_window_chars,
    ) -> list[ContextResult]: ...


@runtime_checkable
class Answerer(Protocol):
    def answer(
        self,
        question: str,
        passages: Sequence[tuple[str, str]],
        *,
        doc_id: str = "",
        starts: Sequence[int | None] | None = None,
    ) -> AnswerResult:
        """An answer from ``passages`` (``(chunk id, text)``, best first); ``starts`` are their
        offsets in their documents when known (the extractive engine reads a document's opening
        from them)."""
        ...


@runtime_checkable
class TaskEngine(Summarizer, Contextualizer, Answerer, Protocol):
    """A task engine: the three tasks, and what the pipeline and the asker read of it.

    Attributes:
        engine: ``"llm"`` or ``"extractive"`` (in every record and report).
        model: the model's name, as the records give it.
        counter: counts the model's tokens (the extractive engine meters the prompts an LLM would get).
        stats: counts of what happened (unusable replies, repairs, passages dropped, ...).
        ledger: every call's record.
        chat: the chat backend (None: no chat model, the extractive engine).
        limits: the chat model's window (None: the extractive engine has none).
        max_tokens: most tokens of a reply (None: no model replies).
        embedder: the embedder the engine selects sentences with (None: the LLM engine).
        answer_threshold: the similarity under which the extractive engine finds no answer
            (None: the LLM engine decides itself).
    """

    # Read-only members (properties), so an engine may narrow them: the extractive engine's
    # ``chat`` is always None, the LLM engine's always a backend.
    @property
    def engine(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def counter(self) -> TokenCounter: ...
    @property
    def stats(self) -> Counter[str]: ...
    @property
    def ledger(self) -> Ledger: ...
    @property
    def chat(self) -> ChatBackend | None: ...
    @property
    def limits(self) -> ModelLimits | None: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def embedder(self) -> Embedder | None: ...
    @property
    def answer_threshold(self) -> float | None: ...
