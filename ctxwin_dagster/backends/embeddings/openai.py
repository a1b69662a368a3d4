"""Embeddings from any server speaking the OpenAI embeddings API, chosen by ``base_url``.

OpenAI, vLLM, Ollama, llama.cpp, LM Studio: vectors are normalized and cached like the local
ones, requests are batched and sent with bounded concurrency, and retried with the shared
:class:`~ctxwin_dagster.backends.calls.retry.RetryPolicy` (the SDK's own retries are off). Each
request has a connect and a read timeout and, with its retries, a deadline; a request that fails
for good says which wait ran out (a note on the error).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.calls.endpoint import redact_key, resolve_api_key
from ctxwin_dagster.backends.calls.null_cache import NullCache
from ctxwin_dagster.backends.calls.retry import RetryPolicy, failure_reason, http_timeout
from ctxwin_dagster.backends.calls.secrets import http_client
from ctxwin_dagster.backends.embeddings.cached import CachedEmbedder, ProgressFn
from ctxwin_dagster.core.budget.embedding_window import EmbeddingLimits, EmbeddingTokenizer, get_embedding_limits

if TYPE_CHECKING:
    from openai import OpenAI
    from openai.types import CreateEmbeddingResponse

__all__ = ["OpenAIEmbedder"]

# Known output sizes of OpenAI's embedding models (used when ``dim`` is not given).
_OPENAI_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


class OpenAIEmbedder(CachedEmbedder):
    """Embeddings from an OpenAI-compatible server, normalized and cached like the local ones.

    Args:
        model: the embedding model name the server knows.
        base_url: the server (``http://localhost:11434/v1`` for Ollama …); None = OpenAI.
        api_key: the key; None reads ``OPENAI_API_KEY`` when called, and a local server
            (``base_url`` given) gets a placeholder when that is unset
            (:func:`~ctxwin_dagster.backends.calls.endpoint.resolve_api_key`).
        batch_size: texts per request.
        dim: the vector size. For ``text-embedding-3-*`` it is sent as ``dimensions``; for other
            models it is checked against the server's answer. None: known for OpenAI's models,
            else found from the first answer.
        cache: where vectors are kept between runs.
        max_retries: retries with backoff on 429/5xx/timeouts: the shared
            :class:`~ctxwin_dagster.backends.calls.retry.RetryPolicy` (the SDK's own retries are off).
        timeout_s: the read timeout: seconds a request waits for the server's reply.
        connect_timeout_s: seconds a request waits for the connection to open.
        deadline_s: seconds a request may take with all its retries (None: ``max_retries`` only).
        logger: where retries are logged (default the retry module's logger).
        max_concurrency: requests in flight at once.
        oversize: ``"pool"`` (texts over the window are embedded in pieces and pooled) or
            ``"truncate"`` (the server cuts them; counted in :attr:`stats`).
        max_input_tokens: the model's window when the registry does not know it (see
            :func:`~ctxwin_dagster.core.budget.embedding_window.get_embedding_limits`).

    Example::

        >>> emb = OpenAIEmbedder(model="text-embedding-3-small", api_key="sk-test")
        >>> emb.dim
        1536
    """

    provider = "openai"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int = 256,
        dim: int | None = None,
        cache: ResponseCache | NullCache | None = None,
        max_retries: int = 5,
        timeout_s: float = 60.0,
        max_concurrency: int = 4,
        progress: ProgressFn | None = None,
        oversize: str = "pool",
        max_input_tokens: int | None = None,
        connect_timeout_s: float = 10.0,
        deadline_s: float | None = 600.0,
        logger: logging.Logger | None = None,
    ) -> None:
        if not model or not model.strip():
            raise ValueError("model is empty; pass the embedding model name the server knows")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {batch_size}")
        if dim is not None and dim < 1:
            raise ValueError(f"dim must be >= 1 or None; got {dim}")
        self._timeout = http_timeout(timeout_s, connect_timeout_s)  # both > 0, else a ValueError
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1; got {max_concurrency}")
        if max_input_tokens is not None and max_input_tokens < 1:
            raise ValueError(f"max_input_tokens must be >= 1 or None; got {max_input_tokens}")
        super().__init__(cache, progress, oversize)
        self._limits = get_embedding_limits(model, max_tokens=max_input_tokens)
        self.model = model
        self.base_url = base_url
        self.batch_size = batch_size
        self.retry = RetryPolicy(max_retries=max_retries, deadline_s=deadline_s, log=logger)
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self._api_key = api_key
        self._send_dimensions = dim is not None and model.split("/")[-1].startswith("text-embedding-3")
        self._dim = dim if dim is not None else _OPENAI_DIMS.get(model.split("/")[-1])
        self._client: OpenAI | None = None
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def dim(self) -> int:  # type: ignore[override]
        """The vector size; found with one request when neither given nor known."""
        if self._dim is None:
            probe = self._request(["dimension probe"])
            self._dim = int(probe.shape[1])
        return self._dim

    def _known_dim(self) -> int | None:
        return self._dim

    @property
    def limits(self) -> EmbeddingLimits:
        """The model's window from the registry (8,191 tokens for ``text-embedding-3-*``), or
        ``max_input_tokens``; counts are exact only with the model's own encoding."""
        return self._limits

    def _make_tokenizer(self) -> EmbeddingTokenizer:
        from ctxwin_dagster.backends.embeddings.tokenizers import TiktokenTokenizer

        return TiktokenTokenizer(self.model)

    def _cache_model(self) -> str:
        # Vectors shortened with ``dimensions`` differ from the full ones: keep them apart.
        return f"{self.model}@{self._dim}" if self._send_dimensions else self.model

    @property
    def client(self) -> OpenAI:
        """The ``openai.OpenAI`` client (created on first use)."""
        with self._client_lock:
            if self._client is None:
                from openai import OpenAI

                key = resolve_api_key(self._api_key, self.base_url, what=f"the embedding model {self.model!r}")
                # Retries are self.retry's: the SDK's are off so that they are not doubled.
                self._client = OpenAI(
                    base_url=self.base_url, api_key=key, max_retries=0, timeout=self._timeout, http_client=http_client()
                )
            return self._client

    def _request(self, texts: list[str]) -> np.ndarray:
        dimensions = self._dim if self._send_dimensions else None
        attempts = 0

        def create() -> CreateEmbeddingResponse:
            nonlocal attempts
            attempts += 1
            if dimensions is None:
                return self.client.embeddings.create(model=self.model, input=texts, encoding_format="float")
            return self.client.embeddings.create(
                model=self.model, input=texts, encoding_format="float", dimensions=dimensions
            )

        try:
            response = self.retry.call(create)
        except Exception as exc:
            reason = redact_key(failure_reason(exc), self.client.api_key)
            exc.add_note(f"{self.model} at {self.base_url or 'OpenAI'}: {reason}; {self.retry.outcome(attempts, exc)}")
            raise
        data = sorted(response.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise RuntimeError(
                f"{self.model} at {self.base_url or 'OpenAI'} returned {len(data)} vectors for {len(texts)} texts"
            )
        vecs = np.asarray([d.embedding for d in data], dtype=np.float32)
        if self._dim is not None and vecs.shape[1] != self._dim:
            raise RuntimeError(
                f"{self.model} returned {vecs.shape[1]}-dimensional vectors, expected dim={self._dim}; "
                "pass the model's real dim= (or None to take it from the server)"
            )
        return vecs

    def _encode(self, texts: list[str]) -> np.ndarray:
        batches = [
            [_nonempty(t) for t in texts[i : i + self.batch_size]] for i in range(0, len(texts), self.batch_size)
        ]
        done = 0
        results: list[np.ndarray] = []
        if len(batches) == 1 or self.max_concurrency == 1:
            for b in batches:
                results.append(self._request(b))
                done += len(b)
                if self.progress:
                    self.progress(done, len(texts))
        else:
            with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(batches))) as pool:
                for b, vecs in zip(batches, pool.map(self._request, batches), strict=True):
                    results.append(vecs)
                    done += len(b)
                    if self.progress:
                        self.progress(done, len(texts))
        with self._stats_lock:
            self.stats.batches += len(batches)
        out = np.concatenate(results, axis=0)
        if self._dim is None:  # learnt from the first answer
            self._dim = int(out.shape[1])
        return out


def _nonempty(text: str) -> str:
    """OpenAI rejects empty inputs; an empty text is embedded as a single space."""
    return text if text.strip() else " "
