"""The LLM engine: summaries, CC/SWB contexts and answers from a chat model.

:class:`LLMTasks` talks to a chat model behind :class:`~ctxwin_dagster.backends.base.ChatBackend`
(OpenAI or any OpenAI-compatible server). Prompts come from :mod:`ctxwin_dagster.core.methods.prompts`
(the SWB batch prompts from :func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts`, the same
function the extractive engine meters), batches go through ``complete_many``, prompts are made
to fit the model (or refused with an error naming the fix), SWB replies are parsed, repaired,
retried once and, failing that, replaced per chunk by a single-chunk call over the batch's
window — every retry and fallback counted (:attr:`LLMTasks.stats`) and marked on the result.

:class:`LLMTasks` holds the settings and the tasks' interface; the work of each task is in its
module, beside the extractive engine's (:mod:`.summaries`, :mod:`.cc_contexts`,
:mod:`.swb_contexts`, :mod:`.answers`), and the calls they make are :mod:`.llm_calls`'s.

Example::

    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
    with OpenAIChatBackend(model="gpt-4o-mini") as chat:
        tasks = LLMTasks(chat)
        summary = tasks.summarize(text, doc_id="ai_act")
        contexts = tasks.contextualize_swb(text, chunks, summary.text, doc_id="ai_act")
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ctxwin_dagster.backends.base import ChatBackend, Ledger
from ctxwin_dagster.backends.tasks.answers import LLMAnswers
from ctxwin_dagster.backends.tasks.cc_contexts import LLMCCContexts
from ctxwin_dagster.backends.tasks.results import AnswerResult, ContextResult, SummaryResult
from ctxwin_dagster.backends.tasks.summaries import LLMSummaries
from ctxwin_dagster.backends.tasks.swb_contexts import LLMSWBContexts
from ctxwin_dagster.core.budget.limits import ModelLimits, get_model_limits
from ctxwin_dagster.core.budget.tokens import PromptMeter, TokenCounter, get_token_counter
from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.methods.swb import ChunkLike

__all__ = ["LLMTasks", "check_sampling"]


def check_sampling(temperature: float, top_p: float) -> None:
    """Raise ``ValueError`` unless ``temperature`` is in [0, 2] and ``top_p`` in (0, 1] (the API's ranges)."""
    if not 0 <= temperature <= 2:
        raise ValueError(f"temperature must be between 0 and 2; got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1]; got {top_p}")


class LLMTasks(LLMSummaries, LLMCCContexts, LLMSWBContexts, LLMAnswers):
    """Summaries, CC/SWB contexts and answers from a chat model.

    Args:
        chat: a :class:`ChatBackend` (e.g. ``OpenAIChatBackend``); its ``ledger`` gets every call.
        temperature, top_p, max_tokens: sampling settings of every request (the paper's
            contextualization settings by default); ``max_tokens`` is capped by the model's
            maximum completion.
        counter: token counter for fitting prompts; default the model's.
        limits: the model's limits; default ``chat.limits`` or the registry's.
        wave_size: requests handed to ``complete_many`` at once (a CC prompt holds the whole
            document, so all of a long document's CC prompts at once would not fit in memory);
            default ``4 * max_concurrency``.

    Attributes:
        stats: a :class:`collections.Counter` of events: ``swb_batches``, ``swb_invalid``
            (first replies unusable), ``swb_repaired`` (usable replies that needed repair: a code
            fence, prose, another JSON shape, abbreviated ids), ``swb_retried``, ``swb_retry_invalid``,
            ``swb_fallback_chunks``, ``swb_fallback_failed``, ``swb_windows_shrunk``,
            ``swb_schema_enforced`` (first replies held to their schema by the backend),
            ``swb_schema_ignored`` (of those, replies that still did not parse: a server that
            ignored the schema, or a reply cut at ``max_tokens``),
            ``summary_truncations``, ``answer_passages_dropped``, ``empty_contexts``.
    """

    engine = "llm"
    #: Sentences are not selected by an embedder, and the model decides itself when there is no answer.
    embedder = None
    answer_threshold = None

    def __init__(
        self,
        chat: ChatBackend,
        *,
        temperature: float = PAPER.temperature,
        top_p: float = PAPER.top_p,
        max_tokens: int = PAPER.max_output_tokens,
        counter: TokenCounter | None = None,
        limits: ModelLimits | None = None,
        wave_size: int | None = None,
    ) -> None:
        check_sampling(temperature, top_p)
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1; got {max_tokens}")
        if wave_size is not None and wave_size < 1:
            raise ValueError(f"wave_size must be >= 1; got {wave_size}")
        self.chat = chat
        self.model = chat.model
        self.temperature = temperature
        self.top_p = top_p
        self.limits = limits or getattr(chat, "limits", None) or get_model_limits(chat.model)
        if not isinstance(self.limits, ModelLimits):
            raise TypeError(f"limits must be a ModelLimits; got {type(self.limits).__name__}")
        self.max_tokens = min(max_tokens, self.limits.max_completion_tokens)
        self.counter = counter or get_token_counter(chat.model)
        self.meter = PromptMeter(self.counter)
        self.wave_size = wave_size or max(16, 4 * int(getattr(chat, "max_concurrency", 8)))
        self.stats = Counter()

    @property
    def ledger(self) -> Ledger:
        """Every call's record: the chat backend's ledger."""
        return self.chat.ledger

    def __repr__(self) -> str:
        return f"LLMTasks(model={self.model!r}, temperature={self.temperature}, top_p={self.top_p}, max_tokens={self.max_tokens})"

    # ----------------------------------------------------------------- summary
    def summarize(
        self,
        text: str,
        *,
        doc_id: str,
        max_tokens: int = PAPER.summary_max_tokens,
        segment_chars: int = PAPER.summary_segment_chars,
        language: str | None = None,
    ) -> SummaryResult:
        """Map (one summary per segment of ≤ ``segment_chars``), then reduce to an overview of ≤ ``max_tokens``.

        A document of one segment needs one call. A segment too long for the model is cut in
        its middle to fit, and the cut is listed in ``notes``; an overview longer than
        ``max_tokens`` is cut at its end (also noted).
        """
        return self._summarize(text, doc_id, max_tokens, segment_chars, language)

    # ----------------------------------------------------------------- CC
    def contextualize_cc(self, document_text: str, chunks: Sequence[ChunkLike], *, doc_id: str) -> list[ContextResult]:
        """One call per chunk with the whole document (Anthropic's contextual retrieval).

        Raises:
            ContextOverflowError: the document does not fit the model — nothing is cut, since
                CC-RAG is defined by the whole document; the message names the fixes.
        """
        return self._contextualize_cc(document_text, list(chunks), doc_id)

    # ----------------------------------------------------------------- SWB
    def contextualize_swb(
        self,
        document_text: str,
        chunks: Sequence[ChunkLike],
        summary: str,
        *,
        doc_id: str,
        batch_size: int = PAPER.swb_batch_size,
        window_chars: int = PAPER.swb_window_chars,
    ) -> list[ContextResult]:
        """One call per batch of ``batch_size`` chunks with the summary and ±``window_chars``.

        Replies are parsed as JSON (code fences, prose around the object, a bare list and ids
        abbreviated to a unique prefix or given as the chunk's number are repaired). A batch
        whose reply is still unusable is retried once with a reminder (and a new prompt version,
        so the cache cannot return the same reply); chunks still without a context then get a
        single-chunk ``cc_context`` call over the batch's window (not the whole document), with
        ``fallback=True`` and the reason in ``error``. All of it is counted in :attr:`stats`.

        The batch prompts are :func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts`'s, sent as
        they are unless one does not fit the model: then its windows are cut (far ends first).
        """
        return self._contextualize_swb(document_text, list(chunks), summary, doc_id, batch_size, window_chars)

    # ----------------------------------------------------------------- answer
    def answer(
        self,
        question: str,
        passages: Sequence[tuple[str, str]],
        *,
        doc_id: str = "",
        starts: Sequence[int | None] | None = None,
    ) -> AnswerResult:
        """An answer from ``passages`` citing their chunk ids, or ``NOT_IN_DOCUMENTS``.

        Passages that do not fit the model are dropped from the end (the least relevant when
        they come ranked) and counted in ``stats["answer_passages_dropped"]``. The model reads
        the passages themselves, so ``starts`` is not used.
        """
        return self.answer_many([(question, passages, doc_id)])[0]

    def answer_many(self, items: Sequence[tuple[str, Sequence[tuple[str, str]], str]]) -> list[AnswerResult]:
        """:meth:`answer` for many ``(question, passages, doc_id)`` at once (concurrent calls)."""
        return self._answer_many(items)
