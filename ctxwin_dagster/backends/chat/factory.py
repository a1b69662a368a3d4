"""One place that turns a model name into a chat backend.

``local:NAME`` (or ``local:/path/model.gguf``) is a GGUF model run in process
(:class:`~ctxwin_dagster.backends.chat.local.LocalChatBackend`); any other name is served by
OpenAI or the OpenAI-compatible server at ``base_url``
(:class:`~ctxwin_dagster.backends.chat.backend.OpenAIChatBackend`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ctxwin_dagster.backends.chat.local_model import is_local_model

if TYPE_CHECKING:
    from ctxwin_dagster.backends.calls.cache import NullCache, ResponseCache
    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
    from ctxwin_dagster.backends.chat.local import LocalChatBackend

__all__ = ["describe_chat_model", "is_local_model", "make_chat_backend"]


def make_chat_backend(
    model: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    cache: ResponseCache | NullCache | None = None,
    max_concurrency: int = 8,
    max_retries: int = 5,
    timeout_s: float = 120.0,
    max_new_tokens: int | None = None,
    connect_timeout_s: float = 10.0,
    deadline_s: float | None = 600.0,
    logger: logging.Logger | None = None,
) -> LocalChatBackend | OpenAIChatBackend:
    """The chat backend for ``model``.

    ``max_new_tokens`` caps every reply of a local model (None: the backend's default, 512);
    a server's replies are capped by each request's ``max_tokens``. ``timeout_s`` (read),
    ``connect_timeout_s``, ``deadline_s`` and ``logger`` (where retries are logged) are the
    server's (see :class:`~ctxwin_dagster.backends.chat.backend.OpenAIChatBackend`); a local
    model has no network to wait for.

    Raises:
        ValueError: a local model with a ``base_url`` (it runs in process), or an unknown local model.
    """
    if is_local_model(model):
        if base_url:
            raise ValueError(f"{model!r} runs in this process; drop the base URL {base_url!r} (or name a served model)")
        from ctxwin_dagster.backends.chat.local import DEFAULT_MAX_NEW_TOKENS, LocalChatBackend

        return LocalChatBackend(
            model=model.strip(), cache=cache, max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        )
    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend

    return OpenAIChatBackend(
        model=model,
        base_url=base_url or None,
        api_key=api_key or None,
        cache=cache,
        max_concurrency=max_concurrency,
        max_retries=max_retries,
        timeout_s=timeout_s,
        connect_timeout_s=connect_timeout_s,
        deadline_s=deadline_s,
        logger=logger,
    )


def describe_chat_model(model: str, base_url: str | None = None) -> str:
    """``model @ where`` for reports and logs: the server, or that it runs in process."""
    if is_local_model(model):
        return f"{model} (in process, GGUF via transformers)"
    return f"{model} @ {base_url or 'OpenAI'}"
