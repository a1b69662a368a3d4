"""Asking questions: retrieval, context window enhancement and sliding-window QA together.

:class:`Asker` answers a question over the LanceDB indexes that ``ctxwin run`` built, in one
of three modes:

``mode="retrieve"``
    search the variant's table (T-RAG, CC-RAG or SWB-RAG) and assemble context windows from the
    hits as one :class:`~ctxwin_dagster.core.retrieval.settings.RetrievalSettings` says (by
    default ``ask``'s: hybrid search, sentence focus over the top-24 chunks, at most 8,000
    characters; or the hits grown by ±``num_neighbors`` chunks, to a ``context_window_size``
    budget, or as they are), done by the asker's :class:`~ctxwin_dagster.ask.retriever.Retriever`;
    then answer from the windows with the answer model, citing them;
``mode="sliding"``
    read the whole document window by window
    (:func:`ctxwin_dagster.core.methods.sliding_qa.sliding_window_qa`) and merge the windows' answers;
``mode="auto"``
    assemble the context as in ``retrieve``; if the answer prompt fits the answer model's
    available prompt tokens (:func:`ctxwin_dagster.core.budget.fit.check_fit`), answer directly, else
    run sliding-window QA over the assembled context.

The answer model is a chat model (:class:`~ctxwin_dagster.backends.tasks.llm.LLMTasks`, any
OpenAI-compatible server, every call through the backend's response cache) or, offline, the
extractive engine (:class:`~ctxwin_dagster.backends.tasks.extractive.ExtractiveTasks`: sentence selection
with the embedding model, labelled ``extractive``). Chunk rows for neighbour expansion come from
the variant's table; window text is cut from the document file in the documents folder when
it is there (its SHA-256 must match the indexed one), else rebuilt from the chunk rows.

Every answer comes back as an :class:`AskResult`: the answer, ``not_found``, the cited spans
``(chunk_id, doc_id, start, end)``, the windows used with their spans and scores, the call
records with tokens and cost, and the latency.

Example::

    with Asker.open(lancedb="data/lancedb", documents="data/documents") as asker:
    ...     result = asker.ask("Who was the Norse leader?", variant="swb", doc_id="squad_Normans")
    ...     result.answer, result.citations[0].as_tuple()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxwin_dagster.ask.modes import ASK_MODES
    from ctxwin_dagster.ask.results import AskError, AskResult, Citation, StaleIndexError, normalize_variant
    from ctxwin_dagster.ask.retriever import Retriever
    from ctxwin_dagster.ask.service import Asker

__all__ = [
    "ASK_MODES",
    "AskError",
    "AskResult",
    "Asker",
    "Citation",
    "Retriever",
    "StaleIndexError",
    "normalize_variant",
]

#: Where each public name lives. They are imported on first use, so a module of this package
#: (the ask server's client, say) can be imported without the retrieval and model stack.
_HOMES = {
    "ASK_MODES": "modes",
    "Asker": "service",
    "Retriever": "retriever",
    **dict.fromkeys(("AskError", "AskResult", "Citation", "StaleIndexError", "normalize_variant"), "results"),
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
