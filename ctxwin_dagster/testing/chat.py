"""A chat backend on :class:`~ctxwin_dagster.testing.server.FakeOpenAIServer`, for tests.

:func:`chat_request` makes a one-message request; :func:`loopback_chat` an
:class:`~ctxwin_dagster.backends.chat.backend.OpenAIChatBackend` on the server with short
backoffs, so a test of retries takes milliseconds.
"""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

from ctxwin_dagster.backends.base import CallTags, ChatRequest
from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
from ctxwin_dagster.core.methods.prompts.schemas import ReplySchema
from ctxwin_dagster.testing.server import FakeOpenAIServer

__all__ = ["FAST_BACKOFF", "TEST_MODEL", "chat_request", "loopback_chat"]

TEST_MODEL = "test-model"
#: Backoffs of a few milliseconds: retries are tested, not waited for.
FAST_BACKOFF: dict[str, float] = {"backoff_base_s": 0.01, "backoff_max_s": 0.05}


class RequestSettings(TypedDict, total=False):
    """The settings of a :class:`~ctxwin_dagster.backends.base.ChatRequest` besides its messages."""

    temperature: float
    top_p: float
    max_tokens: int
    json_mode: bool
    prompt_version: str
    tags: CallTags
    schema: ReplySchema | None


def chat_request(text: str, **kw: Unpack[RequestSettings]) -> ChatRequest:
    """A request of one user message."""
    return ChatRequest(messages=({"role": "user", "content": text},), **kw)


def loopback_chat(server: FakeOpenAIServer, **kw: Any) -> OpenAIChatBackend:
    """A backend of :data:`TEST_MODEL` on ``server`` with :data:`FAST_BACKOFF` (``kw`` overrides)."""
    return OpenAIChatBackend(**{"model": TEST_MODEL, "base_url": server.base_url, **FAST_BACKOFF, **kw})
