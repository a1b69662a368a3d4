"""The LLM engine: summaries, CC/SWB contexts and answers from a chat model.

:class:`LLMTasks` talks to a chat model behind :class:`~ctxwin_dagster.backends.base.ChatBackend`
(OpenAI or any OpenAI-compatible server). Prompts come from :mod:`ctxwin_dagster.core.methods.prompts`
(the SWB batch prompts from :func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts`, the same
function the extractive engine meters), batches go through ``complete_many``, prompts are made
to fit the model (or refused with an error naming the fix), SWB replies are parsed, repaired,
retried once and, failing that, replaced per chunk by a single-chunk call over the batch's
window — every retry and fallback counted (:attr:`LLMTasks.stats`) and marked on the result.

:class:`LLMTasks` holds the settings (the tasks' interface is :mod:`.interface`'s); the work of
each task is in its module, beside the extractive engine's (:mod:`.summaries`,
:mod:`.cc_contexts`, :mod:`.swb_contexts`, :mod:`.answers`), and the calls they make are
:mod:`.llm_calls`'s.

Example::

    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
    with OpenAIChatBackend(model="gpt-4o-mini") as chat:
        tasks = LLMTasks(chat)
        summary = tasks.summarize(text, doc_id="ai_act")
        contexts = tasks.contextualize_swb(text, chunks, summary.text, doc_id="ai_act")
"""

from __future__ import annotations

from collections import Counter

from ctxwin_dagster.backends.base import ChatBackend, Ledger, chat_concurrency, chat_limits
from ctxwin_dagster.backends.tasks.answers import LLMAnswers
from ctxwin_dagster.backends.tasks.cc_contexts import LLMCCContexts
from ctxwin_dagster.backends.tasks.interface import EngineTasks
from ctxwin_dagster.backends.tasks.summaries import LLMSummaries
from ctxwin_dagster.backends.tasks.swb_contexts import LLMSWBContexts
from ctxwin_dagster.core.budget.limits import ModelLimits
from ctxwin_dagster.core.budget.tokens import PromptMeter, TokenCounter, get_token_counter
from ctxwin_dagster.core.defaults import PAPER

__all__ = ["LLMTasks", "check_sampling"]


def check_sampling(temperature: float, top_p: float) -> None:
    """Raise ``ValueError`` unless ``temperature`` is in [0, 2] and ``top_p`` in (0, 1] (the API's ranges)."""
    if not 0 <= temperature <= 2:
        raise ValueError(f"temperature must be between 0 and 2; got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1]; got {top_p}")


class LLMTasks(LLMSummaries, LLMCCContexts, LLMSWBContexts, LLMAnswers, EngineTasks):
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
        self.limits = chat_limits(chat, limits)
        if not isinstance(self.limits, ModelLimits):
            raise TypeError(f"limits must be a ModelLimits; got {type(self.limits).__name__}")
        self.max_tokens = min(max_tokens, self.limits.max_completion_tokens)
        self.counter = counter or get_token_counter(chat.model)
        self.meter = PromptMeter(self.counter)
        self.wave_size = wave_size or max(16, 4 * chat_concurrency(chat))
        self.stats = Counter()

    @property
    def ledger(self) -> Ledger:
        """Every call's record: the chat backend's ledger."""
        return self.chat.ledger

    def __repr__(self) -> str:
        return f"LLMTasks(model={self.model!r}, temperature={self.temperature}, top_p={self.top_p}, max_tokens={self.max_tokens})"
