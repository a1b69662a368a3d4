"""One assembly of the backends: from an experiment's settings, the chat client and the task engine.

The evaluation (the Dagster resources of ``defs/resources.py``), ``ctxwin ask`` (``ask/opening.py``)
and the question writer of ``ctxwin qa`` all build their chat model and task engine here, so the
comparison measures what ``ctxwin ask`` gives: the same client settings, the same sampling, the
same response caches.

- :class:`ChatSpec`: one role's chat model (contextualizer, answerer, judge, question writer), with
  the defaults the experiment's sections start from.
- :class:`Sampling`: temperature, top-p and the reply budget of the task engine (the experiment's
  ``pipeline`` section).
- :func:`open_chat`: the chat backend of a spec, or None when it names no model.
- :func:`task_engine`: the LLM engine over that backend, or the offline extractive engine.

Example::

    >>> spec = ChatSpec.from_section({"model": "", "max_concurrency": 4})
    >>> spec.configured, spec.max_concurrency
    (False, 4)
    >>> Sampling.from_section({"temperature": 0.0, "language": "en"})
    Sampling(temperature=0.0, top_p=0.95, max_tokens=2048)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.evaluation.record_values import as_float, as_int

if TYPE_CHECKING:
    from ctxwin_dagster.backends.base import ChatBackend, Embedder
    from ctxwin_dagster.backends.calls.cache import ResponseCache
    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
    from ctxwin_dagster.backends.chat.local import LocalChatBackend
    from ctxwin_dagster.backends.tasks.results import TaskEngine

__all__ = [
    "CHAT_SPEC_FIELDS",
    "DEFAULT_WAITS",
    "RESPONSES_FILE",
    "ChatSpec",
    "Sampling",
    "open_chat",
    "response_cache",
    "task_engine",
]

#: The response cache's file in a cache folder: the chat models' replies and the extractive engine's.
RESPONSES_FILE = "responses.sqlite"
#: The waits on a model's server, with their defaults (seconds): read, connect, all retries.
DEFAULT_WAITS: Mapping[str, float] = {"timeout_s": 120.0, "connect_timeout_s": 10.0, "deadline_s": 600.0}


def response_cache(cache_dir: str | Path | None) -> ResponseCache | None:
    """The response cache in ``cache_dir`` (made if missing), or None without a folder."""
    from ctxwin_dagster.backends.calls.cache import cache_in

    return cache_in(cache_dir, RESPONSES_FILE)


@dataclass(frozen=True)
class ChatSpec:
    """One role's chat model. ``model`` empty: no chat model (the extractive engine plays the
    role). ``api_key`` None reads ``OPENAI_API_KEY`` when the client is made; it is never stored."""

    model: str = ""
    base_url: str = ""
    api_key: str | None = field(default=None, repr=False)
    cache_dir: str | None = None
    max_concurrency: int = 8
    max_retries: int = 5
    #: Local models: the cap of every reply's tokens (None: the backend's 512).
    max_new_tokens: int | None = None
    timeout_s: float = DEFAULT_WAITS["timeout_s"]
    connect_timeout_s: float = DEFAULT_WAITS["connect_timeout_s"]
    deadline_s: float = DEFAULT_WAITS["deadline_s"]

    @property
    def configured(self) -> bool:
        return bool(self.model.strip())

    @classmethod
    def from_section(cls, section: Mapping[str, object], **given: object) -> ChatSpec:
        """The spec of an experiment's section for a role (``answerer``, ``contextualizer``…):
        its keys that are fields here, then ``given`` (values None are left out). Other keys of
        the section (``count``, ``kinds``…) are another part's."""
        # The section's values as its reader gave them (the spec's fields check nothing more).
        values: dict[str, Any] = {k: v for k, v in section.items() if k in CHAT_SPEC_FIELDS and v is not None}
        values.update({k: v for k, v in given.items() if v is not None})
        if not values.get("max_new_tokens"):
            values["max_new_tokens"] = None  # the resources' 0: the backend's default
        for key in ("model", "base_url"):
            values[key] = str(values.get(key) or "").strip()
        return cls(**values)

    def waits(self) -> dict[str, float]:
        return {"timeout_s": self.timeout_s, "connect_timeout_s": self.connect_timeout_s, "deadline_s": self.deadline_s}


#: The settings of a role's chat model, as an experiment's section and the resources name them.
CHAT_SPEC_FIELDS = tuple(f.name for f in fields(ChatSpec))


@dataclass(frozen=True)
class Sampling:
    """How the LLM task engine samples and how long its replies may be (the paper's defaults)."""

    temperature: float = PAPER.temperature
    top_p: float = PAPER.top_p
    max_tokens: int = PAPER.max_output_tokens

    @classmethod
    def from_section(cls, pipeline: Mapping[str, object], *, max_tokens: int | None = None) -> Sampling:
        """From an experiment's ``pipeline`` section (``temperature``, ``top_p``,
        ``max_output_tokens``); ``max_tokens`` wins over the section's budget."""
        budget = max_tokens or pipeline.get("max_output_tokens") or PAPER.max_output_tokens
        return cls(
            temperature=as_float(pipeline.get("temperature", PAPER.temperature)),
            top_p=as_float(pipeline.get("top_p", PAPER.top_p)),
            max_tokens=as_int(budget),
        )


def open_chat(spec: ChatSpec, *, logger: logging.Logger | None = None) -> LocalChatBackend | OpenAIChatBackend | None:
    """The chat backend of ``spec`` (its replies cached in ``spec.cache_dir``), or None when the
    spec names no model. The caller closes it.

    Raises:
        ValueError: a local model with a base URL, or an unknown local model.
    """
    if not spec.configured:
        return None
    from ctxwin_dagster.backends.chat.factory import make_chat_backend

    return make_chat_backend(
        spec.model,
        base_url=spec.base_url or None,
        api_key=spec.api_key or None,
        cache=response_cache(spec.cache_dir),
        max_concurrency=spec.max_concurrency,
        max_retries=spec.max_retries,
        max_new_tokens=spec.max_new_tokens,
        logger=logger,
        **spec.waits(),
    )


def task_engine(
    chat: ChatBackend | None, embedder: Embedder, *, sampling: Sampling, cache_dir: str | Path | None
) -> TaskEngine:
    """The task engine of a role: the LLM engine over ``chat`` with ``sampling``, or, without a
    chat model, the extractive engine over ``embedder`` (its replies cached in ``cache_dir``)."""
    if chat is None:
        from ctxwin_dagster.backends.tasks.extractive import ExtractiveTasks

        return ExtractiveTasks(embedder, cache=response_cache(cache_dir))
    from ctxwin_dagster.backends.tasks.llm import LLMTasks

    return LLMTasks(chat, temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens)
