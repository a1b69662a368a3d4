"""The extractive engine: the tasks done by selecting sentences with an embedding model.

:class:`ExtractiveTasks` is the offline default: deterministic, no network, cost 0, and
labelled ``engine="extractive"`` everywhere. It still renders and counts the exact prompts the
LLM engine would send — the SWB batch prompts come from
:func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts`, the function the LLM engine sends — so
input volumes (tokens, characters) are reported the same way offline.

:class:`ExtractiveTasks` holds the settings (the tasks' interface is :mod:`.interface`'s); the
work of each task is in its module, beside the LLM engine's (:mod:`.summaries`,
:mod:`.cc_contexts`, :mod:`.swb_contexts`, :mod:`.answers`), and what the tasks have in common is
:mod:`.extractive_work`'s.

Example (offline)::

    from ctxwin_dagster.backends.embeddings.local import LocalEmbedder
    tasks = ExtractiveTasks(LocalEmbedder())
    summary = tasks.summarize(text, doc_id="ai_act", max_tokens=500)
    ctx = tasks.contextualize_swb(text, chunks, summary.text, doc_id="ai_act")
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING

from ctxwin_dagster.backends.base import Embedder, Ledger
from ctxwin_dagster.backends.tasks.answer_signals import NOT_FOUND_MODEL
from ctxwin_dagster.backends.tasks.answering import AnswerRule
from ctxwin_dagster.backends.tasks.answers import ExtractiveAnswers
from ctxwin_dagster.backends.tasks.cc_contexts import ExtractiveCCContexts
from ctxwin_dagster.backends.tasks.interface import EngineTasks
from ctxwin_dagster.backends.tasks.memo import TaskMemo, extractive_record
from ctxwin_dagster.backends.tasks.summaries import ExtractiveSummaries
from ctxwin_dagster.backends.tasks.swb_contexts import ExtractiveSWBContexts
from ctxwin_dagster.core.budget.tokens import PromptMeter, TokenCounter, get_token_counter

if TYPE_CHECKING:
    from ctxwin_dagster.backends.calls.cache import ResponseCache
    from ctxwin_dagster.backends.calls.null_cache import NullCache

__all__ = ["DEFAULT_ANSWER_THRESHOLD", "ExtractiveTasks", "extractive_record"]

#: Cosine similarity (all-MiniLM-L6-v2) between a question and the best sentence of the
#: passages below which :class:`ExtractiveTasks` answers "not in the documents". Calibrated on
#: 2,000 SQuAD 2.0 dev questions (random sample, seed 0: 951 answerable, 1,049 unanswerable),
#: passages = the top-4 chunks (1,000/100) of the question's own article: at 0.40, 97.9 % of the
#: answerable questions are answered, and the same questions asked against another article's
#: top-4 chunks (unrelated passages) are rejected 98.0 % of the time — about the equal-error
#: point (0.35: 99.1 % / 93.3 %; 0.45: 96.8 % / 99.8 %). SQuAD's adversarial unanswerable
#: questions, written to resemble their paragraph, are rejected only 5.3 % of the time:
#: similarity cannot tell those apart; that needs a reader model (the LLM engine).
DEFAULT_ANSWER_THRESHOLD = 0.40


class ExtractiveTasks(ExtractiveSummaries, ExtractiveCCContexts, ExtractiveSWBContexts, ExtractiveAnswers, EngineTasks):
    """The tasks done by selecting sentences with an embedding model (offline, deterministic).

    * **summarize** — sentences split and embedded once per document; per segment the
      sentences closest to the segment's centroid are picked with MMR (diversity) until the
      token budget is reached, and given in document order; with several segments the
      overview is picked the same way from the segment summaries' sentences.
    * **contextualize_cc** — per chunk, up to ``context_sentences`` sentences (≤
      ``context_tokens`` tokens) of the *whole document* most similar to the chunk, excluding
      the chunk's own sentences, prefixed with the document title (when passed) and the chunk's
      section (when known).
    * **contextualize_swb** — the same, drawing only from the summary and the batch's
      before/after window (and the batch's other chunks) — what the SWB prompt shows the model.
    * **answer** — the passage sentences that answer the question, each group citing its chunk id
      in brackets, with the list a picked sentence introduces;
      :data:`~ctxwin_dagster.core.methods.prompts.NOT_IN_DOCUMENTS` when the passages do not hold
      the answer (:mod:`.answering` says how both are decided, on a tuning split).

    Every task also renders the prompt the LLM engine would send and records a
    :class:`CallRecord` (``backend="extractive"``, cost 0) with its counted input tokens and
    characters, and output tokens counted from the extractive output, in :attr:`ledger`.

    ``answer_threshold`` default (:data:`DEFAULT_ANSWER_THRESHOLD` = 0.40) is the floor of the
    answer rule: on 2,000 SQuAD 2.0 dev questions with the top-4 chunks (1,000/100) of their own
    article as passages, the best question–sentence cosine is ≥ 0.40 for 97.9 % of the answerable
    questions, while the same questions against another article's chunks (unrelated passages)
    fall below it 98.0 % of the time. Above it, the rule's not-found model decides (SQuAD's
    unanswerable questions are adversarial, written against the paragraph, and 95 % of them
    pass the floor).

    Args:
        embedder: an :class:`~ctxwin_dagster.backends.base.Embedder` (e.g. ``LocalEmbedder``).
        counter: the token counter for prompts, budgets and outputs; default
            ``cl100k_base`` (the offline encoding).
        model_label: the ``model`` of results and records.
        answer_threshold: see above (the rule's ``floor``).
        answer_sentences: at most this many sentences answer (the rule's ``sentences``).
        answer_rule: the whole :class:`~.answering.AnswerRule`; its ``floor`` and ``sentences``
            are ``answer_threshold`` and ``answer_sentences``.
        context_sentences / context_tokens: the size of a context.
        mmr_lambda: relevance vs. diversity in MMR (1 = relevance only).
        ledger: where records go; a new :class:`Ledger` when None.
        cache: a :class:`~ctxwin_dagster.backends.calls.cache.ResponseCache` keeping every task's
            result by content (see :mod:`.memo`); a rerun on the same content reuses it and
            records the work as cache hits. None: nothing kept.
    """

    engine = "extractive"
    #: No chat model, so no window and no replies of one (see :class:`~.results.TaskEngine`).
    chat = None
    limits = None
    max_tokens = None

    def __init__(
        self,
        embedder: Embedder,
        *,
        counter: TokenCounter | None = None,
        model_label: str = "extractive/all-MiniLM-L6-v2",
        answer_threshold: float = DEFAULT_ANSWER_THRESHOLD,
        context_sentences: int = 3,
        context_tokens: int = 100,
        answer_sentences: int = 3,
        answer_rule: AnswerRule | None = None,
        mmr_lambda: float = 0.7,
        ledger: Ledger | None = None,
        max_cached_documents: int = 4,
        max_cached_vectors: int = 50_000,
        cache: ResponseCache | NullCache | None = None,
    ) -> None:
        if not -1 <= answer_threshold <= 1:
            raise ValueError(f"answer_threshold is a cosine similarity in [-1, 1]; got {answer_threshold}")
        if context_sentences < 1 or context_tokens < 1 or answer_sentences < 1:
            raise ValueError("context_sentences, context_tokens and answer_sentences must be >= 1")
        if not 0 <= mmr_lambda <= 1:
            raise ValueError(f"mmr_lambda must be in [0, 1]; got {mmr_lambda}")
        self.embedder = embedder
        self.counter = counter or get_token_counter(None)
        self.meter = PromptMeter(self.counter)
        self.model = model_label
        self.model_label = model_label
        self.answer_threshold = answer_threshold
        self.context_sentences = context_sentences
        self.context_tokens = context_tokens
        self.answer_sentences = answer_sentences
        self.answer_rule = replace(answer_rule or AnswerRule(), floor=answer_threshold, sentences=answer_sentences)
        self.mmr_lambda = mmr_lambda
        self.ledger = ledger if ledger is not None else Ledger()
        self.max_cached_documents = max(1, max_cached_documents)
        self._docs = OrderedDict()
        self._vectors = OrderedDict()
        self.max_cached_vectors = max(0, max_cached_vectors)
        self._lock = threading.Lock()
        self.stats = Counter()
        # Results by content, in the project's response cache (see memo.py); None: not kept.
        self.memo = TaskMemo(
            cache,
            [
                model_label,
                answer_threshold,
                context_sentences,
                context_tokens,
                answer_sentences,
                repr(self.answer_rule),
                NOT_FOUND_MODEL,
                mmr_lambda,
                self.counter.info.name,
                embedder.model,
            ],
        )

    def __repr__(self) -> str:
        return f"ExtractiveTasks(model={self.model!r}, answer_threshold={self.answer_threshold})"
