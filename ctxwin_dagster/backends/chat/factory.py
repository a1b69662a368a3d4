"""One place that turns a model name into a chat backend.

``local:NAME`` (or ``local:/path/model.gguf``) is a GGUF model served by llama.cpp on loopback
(:mod:`~ctxwin_dagster.backends.chat.llama_server`) and called like any server, or run in process
(:class:`~ctxwin_dagster.backends.chat.local.LocalChatBackend`) where llama-cpp-python is not
installed; any other name is served by OpenAI or the OpenAI-compatible server at ``base_url``
(:class:`~ctxwin_dagster.backends.chat.backend.OpenAIChatBackend`).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from ctxwin_dagster.backends.chat.local_model import is_local_model

if TYPE_CHECKING:
    from ctxwin_dagster.backends.calls.cache import ResponseCache
    from ctxwin_dagster.backends.calls.null_cache import NullCache
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
            raise ValueError(
                f"{model!r} is served by ctxwin's own llama.cpp server; drop the base URL {base_url!r} "
                "(or name the model your server serves)"
            )
        from ctxwin_dagster.backends.chat.llama_server import local_chat_url
        from ctxwin_dagster.backends.chat.local import DEFAULT_MAX_NEW_TOKENS, LocalChatBackend

        url = local_chat_url(model)
        if url is None:  # CTXWIN_CHAT_SERVER=off, or llama-cpp-python missing: transformers in process
            return LocalChatBackend(
                model=model.strip(), cache=cache, max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS
            )
        return _served_local(
            model.strip(),
            url,
            cache=cache,
            max_new_tokens=max_new_tokens or DEFAULT_MAX_NEW_TOKENS,
            max_retries=max_retries,
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            logger=logger,
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


def _served_local(
    model: str,
    url: str,
    *,
    cache: ResponseCache | NullCache | None,
    max_new_tokens: int,
    max_retries: int,
    timeout_s: float,
    connect_timeout_s: float,
    logger: logging.Logger | None,
) -> OpenAIChatBackend:
    """The client of the llama.cpp server of a local model (:mod:`~ctxwin_dagster.backends.chat.llama_server`).

    The model's own limits and tokenizer count the prompts (registered under its name); replies
    are capped at ``max_new_tokens`` as in process; the cache keys name the weights (file and
    size), not the server's port, so a later command's server reuses them. The server answers
    one request at a time, so two are in flight (one waits there, ready), and a request may wait
    its turn behind the runs' others: the read timeout is at least 10 minutes, with no deadline
    beyond the retries."""
    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
    from ctxwin_dagster.backends.chat.local_model import register_local_model

    spec, limits, _counter = register_local_model(model)
    chat = OpenAIChatBackend(
        model=model,
        base_url=url,
        api_key="local",
        cache=cache,
        limits=limits,
        price_overrides={model: (0.0, 0.0)},
        cache_namespace=f"llama.cpp:{spec.key}",
        max_concurrency=2,
        max_retries=max_retries,
        timeout_s=max(timeout_s, 600.0),
        connect_timeout_s=connect_timeout_s,
        deadline_s=None,
        logger=logger,
        max_reply_tokens=max_new_tokens,
    )
    chat.decodes_any_schema = True  # llama.cpp turns any schema into a grammar
    return chat


def describe_chat_model(model: str, base_url: str | None = None) -> str:
    """``model @ where`` for reports and logs: the server, or that it runs in process."""
    if is_local_model(model):
        from ctxwin_dagster.backends.chat.llama_server import ENV_VAR, available

        if os.environ.get(ENV_VAR, "").strip().lower() == "off" or not available():
            return f"{model} (in process, GGUF via transformers)"
        return f"{model} (llama.cpp server on loopback, GGUF)"
    return f"{model} @ {base_url or 'OpenAI'}"
