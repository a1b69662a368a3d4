"""Where an OpenAI-compatible API is and which key it takes — shared by chat, embeddings and the judge.

* :func:`normalize_base_url` — checks and normalizes a server's API root.
* :func:`resolve_api_key` — the one place a key is chosen: the one given, else the environment
  variable, else a placeholder for a local server; OpenAI itself without a key is an error that
  names the variable to set.
* :func:`redact_key` — takes keys out of text that may end up in a log or an error message
  (see :mod:`~ctxwin_dagster.backends.calls.secrets`).

Example::

    >>> resolve_api_key("sk-given", None, what="the chat model 'gpt-4o'")
    'sk-given'
    >>> resolve_api_key(None, "http://localhost:11434/v1", what="the chat model 'llama3.1:8b'", env="NO_SUCH_VARIABLE")
    'sk-no-key-required'
    >>> redact_key("401: Incorrect API key provided: sk-abcdefghijklmnop", "sk-abcdefghijklmnop")
    '401: Incorrect API key provided: ***'
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from ctxwin_dagster.backends.calls.secrets import redact, register_secret

__all__ = [
    "OPENAI_BASE_URL",
    "PLACEHOLDER_KEY",
    "MissingAPIKeyError",
    "normalize_base_url",
    "redact_key",
    "resolve_api_key",
]

OPENAI_BASE_URL = "https://api.openai.com/v1"
# What a local server (vLLM, Ollama, llama.cpp, LM Studio) gets when no key is set: the SDK needs one.
PLACEHOLDER_KEY = "sk-no-key-required"


class MissingAPIKeyError(ValueError, RuntimeError):
    """No API key for OpenAI. Both a ValueError (a missing setting) and a RuntimeError, so
    callers that catch either see it."""


def normalize_base_url(url: str) -> str:
    """``url`` checked to be http(s), with lower-case scheme and host and no trailing slash.

    Example::

        >>> normalize_base_url(" HTTP://LocalHost:11434/v1/ ")
        'http://localhost:11434/v1'
    """
    raw = url.strip()
    parts = urlsplit(raw)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"base_url must be an http(s) URL such as 'http://localhost:8000/v1' (vLLM) or "
            f"'http://localhost:11434/v1' (Ollama); got {url!r}"
        )
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), parts.query, ""))


def resolve_api_key(api_key: str | None, base_url: str | None, *, what: str, env: str = "OPENAI_API_KEY") -> str:
    """The key to send: ``api_key``, else the environment variable ``env``, else (for a local
    server) :data:`PLACEHOLDER_KEY`.

    Args:
        api_key: the key given explicitly; None or empty reads ``env``.
        base_url: the server; None (or OpenAI's own URL) means OpenAI, which needs a key.
        what: what the key is for, named in the error (``"the chat model 'gpt-4o'"``).
        env: the environment variable that holds the key.

    Raises:
        MissingAPIKeyError: no key for OpenAI; the message names ``env``.
    """
    key = api_key or os.environ.get(env)
    if key:
        register_secret(key)  # masked in every message and log line of this process from now on
        return key
    if base_url is None or base_url.strip().rstrip("/").lower() == OPENAI_BASE_URL:
        raise MissingAPIKeyError(
            f"no API key for {what} on OpenAI: set the {env} environment variable or pass api_key=…; "
            "for a local server that needs none, pass base_url= (e.g. 'http://localhost:11434/v1')"
        )
    return PLACEHOLDER_KEY


def redact_key(text: str, key: str | None = None) -> str:
    """``text`` with ``key`` (when it is a real key), every key ctxwin knows of and any key-shaped
    value masked (:func:`~ctxwin_dagster.backends.calls.secrets.redact`)."""
    return redact(text, key if key != PLACEHOLDER_KEY else None)
