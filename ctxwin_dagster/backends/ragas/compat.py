"""Importing ragas, and what ctxwin hands it: embeddings and a string similarity.

RAGAS 0.4.3 and current langchain-community: ``ragas.llms.base`` imports
``langchain_community.chat_models.vertexai``, which langchain-community no longer ships, so
``import ragas`` fails (ragas issues #2745, #2753, #2995). :func:`import_ragas` registers a
placeholder module for that one import when it is missing (ragas uses the class only in an
``isinstance`` list for legacy LangChain LLMs, which ctxwin never passes). It also sets
``RAGAS_DO_NOT_TRACK=true`` unless the variable is set, so ragas sends no usage analytics.

:func:`ragas_embeddings` wraps any ctxwin embedder as a ragas embedding.

RAGAS's default string similarity for the non-LLM metrics is Levenshtein from ``rapidfuzz``,
which is not a ctxwin dependency: :func:`string_measure` with ``"auto"`` uses it when installed
and ``difflib.SequenceMatcher`` otherwise, and says which.
"""

from __future__ import annotations

import asyncio
import difflib
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Mapping
from typing import Any

import numpy as np

from ctxwin_dagster.backends.base import Embedder

__all__ = ["STRING_DISTANCES", "import_ragas", "ragas_embeddings", "string_measure"]

#: The choices of :func:`string_measure`.
STRING_DISTANCES = ("auto", "levenshtein", "difflib")

_IMPORT_LOCK = threading.Lock()
_RAGAS: types.SimpleNamespace | None = None


def _install_vertexai_placeholder() -> bool:
    """Register ``langchain_community.chat_models.vertexai`` when langchain-community lacks it."""
    name = "langchain_community.chat_models.vertexai"
    if name in sys.modules:
        return False
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community warns on import
            if importlib.util.find_spec(name) is not None:
                return False
    except (ImportError, ValueError):
        pass
    module = types.ModuleType(name)
    module.__doc__ = "Placeholder registered by ctxwin: langchain-community no longer ships this module."

    class ChatVertexAI:  # noqa: D401 - a placeholder, never instantiated
        """Placeholder: ragas 0.4.3 imports it only for an isinstance check."""

    module.ChatVertexAI = ChatVertexAI  # type: ignore[attr-defined]
    sys.modules[name] = module
    return True


def import_ragas() -> types.SimpleNamespace:
    """Import the parts of ragas ctxwin uses (once), working around ragas 0.4.3's broken import.

    Returns a namespace with ``SingleTurnSample``, ``BaseRagasEmbedding``, ``SingleTurnMetric``,
    ``MetricType``, ``llm_factory``, the non-LLM metric classes and the collections metrics.
    """
    global _RAGAS
    with _IMPORT_LOCK:
        if _RAGAS is not None:
            return _RAGAS
        os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
        placeholder = _install_vertexai_placeholder()
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import ragas
            from ragas.dataset_schema import SingleTurnSample
            from ragas.embeddings.base import BaseRagasEmbedding
            from ragas.llms.base import llm_factory
            from ragas.metrics._context_precision import IDBasedContextPrecision, NonLLMContextPrecisionWithReference
            from ragas.metrics._context_recall import IDBasedContextRecall, NonLLMContextRecall
            from ragas.metrics.base import MetricType, SingleTurnMetric
            from ragas.metrics.collections import (
                AnswerCorrectness,
                AnswerRelevancy,
                ContextPrecision,
                ContextRecall,
                Faithfulness,
            )
        # instructor warns on every structured call because it compares against a deprecated mode.
        warnings.filterwarnings("ignore", message="FUNCTIONS is deprecated", category=DeprecationWarning)
        _RAGAS = types.SimpleNamespace(
            version=ragas.__version__,
            vertexai_placeholder=placeholder,
            SingleTurnSample=SingleTurnSample,
            BaseRagasEmbedding=BaseRagasEmbedding,
            SingleTurnMetric=SingleTurnMetric,
            MetricType=MetricType,
            llm_factory=llm_factory,
            NonLLMContextPrecisionWithReference=NonLLMContextPrecisionWithReference,
            NonLLMContextRecall=NonLLMContextRecall,
            IDBasedContextPrecision=IDBasedContextPrecision,
            IDBasedContextRecall=IDBasedContextRecall,
            Faithfulness=Faithfulness,
            AnswerRelevancy=AnswerRelevancy,
            ContextRecall=ContextRecall,
            ContextPrecision=ContextPrecision,
            AnswerCorrectness=AnswerCorrectness,
        )
        return _RAGAS


_ADAPTER_CLASS: type | None = None


def ragas_embeddings(embedder: Embedder) -> Any:
    """Wrap a ctxwin embedder (``embed(texts) -> (n, dim) array``) as a ragas ``BaseRagasEmbedding``.

    Works with :class:`~ctxwin_dagster.backends.embeddings.local.LocalEmbedder` (offline
    all-MiniLM-L6-v2) and :class:`~ctxwin_dagster.backends.embeddings.openai.OpenAIEmbedder`; their
    caches and stats keep working. Async calls run the embedder in a worker thread.
    """
    global _ADAPTER_CLASS
    if not isinstance(embedder, Embedder):
        raise TypeError(f"embedder must have embed(texts) -> array (a ctxwin Embedder); got {type(embedder).__name__}")
    r = import_ragas()
    if _ADAPTER_CLASS is None:

        class CtxwinRagasEmbeddings(r.BaseRagasEmbedding):  # type: ignore[name-defined, misc]  # ragas, imported lazily
            """A ctxwin embedder seen by ragas."""

            def __init__(self, inner: Embedder) -> None:
                super().__init__(cache=None)
                self.inner = inner
                self.model = inner.model

            def embed_text(self, text: str, **kwargs: object) -> list[float]:
                vector: list[float] = np.asarray(self.inner.embed([text]), dtype=float)[0].tolist()
                return vector

            async def aembed_text(self, text: str, **kwargs: object) -> list[float]:
                return await asyncio.to_thread(self.embed_text, text)

            def embed_texts(self, texts: list[str], **kwargs: object) -> list[list[float]]:
                vectors: list[list[float]] = np.asarray(self.inner.embed(list(texts)), dtype=float).tolist()
                return vectors

            async def aembed_texts(self, texts: list[str], **kwargs: object) -> list[list[float]]:
                return await asyncio.to_thread(self.embed_texts, texts)

            def __repr__(self) -> str:
                return f"CtxwinRagasEmbeddings({self.inner!r})"

        _ADAPTER_CLASS = CtxwinRagasEmbeddings
    return _ADAPTER_CLASS(embedder)


def _difflib_similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def string_distance_name(choice: str) -> str:
    """The string distance ``choice`` (one of :data:`STRING_DISTANCES`) stands for here:
    ``"levenshtein"`` (rapidfuzz, ragas's default) or ``"difflib"``; without importing ragas."""
    if choice not in STRING_DISTANCES:
        raise ValueError(f"string_distance must be one of {STRING_DISTANCES}; got {choice!r}")
    has_rapidfuzz = importlib.util.find_spec("rapidfuzz") is not None
    if choice == "levenshtein" and not has_rapidfuzz:
        raise RuntimeError(
            "string_distance='levenshtein' needs rapidfuzz (ragas's default string distance): "
            "pip install rapidfuzz, or use string_distance='difflib'"
        )
    return "levenshtein" if choice == "levenshtein" or (choice == "auto" and has_rapidfuzz) else "difflib"


def string_measure(choice: str) -> tuple[Any, str]:
    """A ragas non-LLM ``SingleTurnMetric`` scoring ``reference`` vs ``response`` in [0, 1]."""
    name = string_distance_name(choice)
    r = import_ragas()
    if name == "levenshtein":
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from ragas.metrics._string import NonLLMStringSimilarity
        return NonLLMStringSimilarity(), "levenshtein"

    from dataclasses import dataclass as _dc
    from dataclasses import field as _field

    @_dc
    class DifflibSimilarity(r.SingleTurnMetric):  # type: ignore[name-defined, misc]  # ragas, imported lazily
        """``difflib.SequenceMatcher(autojunk=False).ratio()`` of reference and response."""

        name: str = "difflib_similarity"
        _required_columns: dict[object, set[str]] = _field(
            default_factory=lambda: {r.MetricType.SINGLE_TURN: {"reference", "response"}}
        )

        def init(self, run_config: object) -> None:
            pass

        async def _single_turn_ascore(self, sample: Any, callbacks: object) -> float:
            return _difflib_similarity(str(sample.reference or ""), str(sample.response or ""))

        async def _ascore(self, row: Mapping[str, object], callbacks: object) -> float:
            return _difflib_similarity(str(row.get("reference") or ""), str(row.get("response") or ""))

    return DifflibSimilarity(), "difflib"
