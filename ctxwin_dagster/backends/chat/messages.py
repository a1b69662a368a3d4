"""What a chat call sends and what it gets back, apart from how it is sent.

* :func:`prepare` — checks a :class:`~ctxwin_dagster.backends.base.ChatRequest` and gives its
  messages, its response-cache key and its input characters (:class:`Prepared`).
* :func:`check_fit` — raises :class:`~ctxwin_dagster.core.budget.fit.ContextOverflowError` for a prompt
  that does not fit the model with ``max_tokens`` reserved for the reply (nothing is sent), after
  a quick upper bound (:func:`token_upper_bound`) that spares tokenizing most prompts.
* :func:`request_body` and :func:`parse_completion` — the JSON body of
  ``POST /chat/completions`` and the reply's text, finish reason, usage and model
  (:data:`Reply`); :func:`max_tokens_param_for` — how the body names the reply's token limit.

Example::

    >>> from ctxwin_dagster.backends.base import ChatRequest
    >>> p = prepare(ChatRequest(messages=({"role": "user", "content": "Hello"},)), backend_id="openai", model="gpt-4o")
    >>> p.input_chars, len(p.key)
    (5, 64)
    >>> body = request_body(p, model="gpt-4o", max_tokens_param="max_tokens")
    >>> body["max_tokens"], body["messages"]
    (2048, [{'role': 'user', 'content': 'Hello'}])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from openai.types.chat import ChatCompletion

from ctxwin_dagster.backends.base import ChatRequest, Message
from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.calls.retry import MalformedResponseError
from ctxwin_dagster.core.budget.fit import ContextOverflowError
from ctxwin_dagster.core.budget.fit import check_fit as fit_report
from ctxwin_dagster.core.budget.limits import ModelLimits
from ctxwin_dagster.core.budget.tokens import TokenCounter
from ctxwin_dagster.core.json_types import JSONValue

__all__ = [
    "Prepared",
    "Reply",
    "check_fit",
    "max_tokens_param_for",
    "parse_completion",
    "prepare",
    "request_body",
    "token_upper_bound",
]

#: What :func:`parse_completion` reads from a reply: its text, finish reason, ``(input, output,
#: cached tokens)`` when the server reports them, and the model that served it.
Reply = tuple[str, str | None, tuple[int, int, int] | None, str]

# Models that take ``max_completion_tokens`` instead of ``max_tokens`` on OpenAI's API.
_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")


@dataclass(frozen=True, slots=True)
class Prepared:
    """A checked request: its messages as plain dicts, its cache key and its input characters."""

    request: ChatRequest
    messages: list[dict[str, JSONValue]]
    key: str
    input_chars: int


def _text_parts(content: JSONValue) -> list[str]:
    """The text of a message's content: a string, or the text parts of a list of parts."""
    if content is None:
        return []
    if isinstance(content, list):
        return [
            str(p["text"]) if isinstance(p, Mapping) else str(p)
            for p in content
            if isinstance(p, str) or (isinstance(p, Mapping) and isinstance(p.get("text"), str))
        ]
    return [content if isinstance(content, str) else str(content)]


def prepare(request: ChatRequest, *, backend_id: str, model: str) -> Prepared:
    """``request`` checked, with its response-cache key: everything that determines the answer
    (backend, model, messages, temperature, top_p, max_tokens, JSON mode, reply schema, prompt
    version) and nothing else (not its tags)."""
    if not isinstance(request, ChatRequest):
        raise TypeError(f"expected a ChatRequest; got {type(request).__name__}")
    if isinstance(request.messages, str | bytes) or not request.messages:
        raise ValueError("ChatRequest.messages must be a non-empty sequence of {'role', 'content'} dicts")
    messages: list[dict[str, JSONValue]] = []
    for i, m in enumerate(request.messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise ValueError(f"ChatRequest.messages[{i}] must be a mapping with 'role' and 'content'; got {m!r}")
        messages.append(dict(m))
    if not isinstance(request.max_tokens, int) or request.max_tokens < 1:
        raise ValueError(f"ChatRequest.max_tokens must be an int >= 1; got {request.max_tokens!r}")
    if not 0 <= request.temperature <= 2:
        raise ValueError(f"ChatRequest.temperature must be between 0 and 2; got {request.temperature!r}")
    if not 0 < request.top_p <= 1:
        raise ValueError(f"ChatRequest.top_p must be in (0, 1]; got {request.top_p!r}")
    parts: list[object] = [
        "chat",
        backend_id,
        model,
        messages,
        request.temperature,
        request.top_p,
        request.max_tokens,
        request.json_mode,
        request.prompt_version,
    ]
    if request.schema is not None:  # keys of requests without a schema stay as they were
        parts.append(request.schema.dumps())
    key = ResponseCache.make_key(*parts)
    chars = sum(len(t) for m in messages for t in _text_parts(m.get("content")))
    return Prepared(request, messages, key, chars)


def token_upper_bound(messages: Sequence[Message], counter: TokenCounter) -> int:
    """An upper bound of ``counter.count_messages(messages)`` (a byte-level BPE token covers at
    least one byte)."""
    overhead = counter.overhead
    total = overhead.reply_priming
    for m in messages:
        total += overhead.per_message
        for key, value in m.items():
            if value is None:
                continue
            if key == "content":
                total += sum(len(t.encode("utf-8")) for t in _text_parts(value))
            elif key in ("role", "name"):
                total += len(str(value).encode("utf-8")) + (overhead.per_name if key == "name" else 0)
    return total


def check_fit(p: Prepared, *, model: str, limits: ModelLimits, counter: TokenCounter) -> None:
    """Raise unless ``p``'s prompt fits ``model`` with its ``max_tokens`` reserved for the reply.

    Raises:
        ValueError: ``max_tokens`` is over the model's completion limit.
        ContextOverflowError: the prompt is too long; the message says by how much.
    """
    if p.request.max_tokens > limits.max_completion_tokens:
        raise ValueError(
            f"max_tokens={p.request.max_tokens} exceeds {model!r}'s max completion of "
            f"{limits.max_completion_tokens} tokens (limits from {limits.source}); lower max_tokens"
            + ("" if limits.known else ", or pass limits=ModelLimits(...) with the model's real limits")
        )
    limit = limits.available_prompt_tokens(p.request.max_tokens)
    if token_upper_bound(p.messages, counter) <= limit:
        return  # fits for sure, without tokenizing
    report = fit_report(p.messages, limits=limits, reserved_completion=p.request.max_tokens, counter=counter)
    if not report.fits:
        hint = (
            ""
            if limits.known
            else (
                f"; the limits of {model!r} are defaults for an unknown model — pass "
                "limits=ModelLimits(...) with its real context length"
            )
        )
        raise ContextOverflowError(
            f"prompt of {report.prompt_tokens} tokens does not fit {model!r}: the limit is {report.limit} "
            f"(context {report.context_length} minus {report.reserved_completion} reserved for the reply), "
            f"over by {report.overflow}. Shorten the prompt (ensure_fit), lower max_tokens, or use a model "
            f"with a larger context{hint}. Nothing was sent."
        )


def max_tokens_param_for(model: str, *, is_openai: bool) -> Literal["max_tokens", "max_completion_tokens"]:
    """How the request body names the reply's token limit: ``max_completion_tokens`` for OpenAI's
    reasoning models (o1/o3/o4/gpt-5) on OpenAI's API (``is_openai``), ``max_tokens`` otherwise.

    >>> max_tokens_param_for("o3-mini", is_openai=True), max_tokens_param_for("o3-mini", is_openai=False)
    ('max_completion_tokens', 'max_tokens')
    """
    bare = model.split("/")[-1].lower()
    return "max_completion_tokens" if is_openai and bare.startswith(_REASONING_PREFIXES) else "max_tokens"


def request_body(p: Prepared, *, model: str, max_tokens_param: str, reply_format: str = "schema") -> dict[str, object]:
    """The JSON body of ``POST /chat/completions`` for ``p``.

    ``reply_format`` is what the endpoint accepts for a request with a schema: ``schema``
    (``response_format`` of type ``json_schema``, strict), ``grammar`` (``json_object`` with the
    schema beside it, llama.cpp's form), ``json_object``, or ``text`` (none).
    """
    r = p.request
    body: dict[str, object] = {
        "model": model,
        "messages": p.messages,
        "temperature": r.temperature,
        "top_p": r.top_p,
        max_tokens_param: r.max_tokens,
    }
    if r.schema is not None and reply_format == "schema":
        body["response_format"] = r.schema.response_format()
    elif r.schema is not None and reply_format == "grammar":
        body["response_format"] = {"type": "json_object", "schema": dict(r.schema.schema)}
    elif (r.json_mode or r.schema is not None) and reply_format != "text":
        body["response_format"] = {"type": "json_object"}
    return body


def parse_completion(response: ChatCompletion) -> Reply:
    """``(text, finish_reason, (input, output, cached tokens) or None, served model)`` of a reply.

    The SDK builds the reply without validating it, so a field a server left out is missing:
    each is read with a default.

    Raises:
        MalformedResponseError: the reply has no choice, no message, or content that is not text.
    """
    choices = getattr(response, "choices", None)
    if not choices:
        raise MalformedResponseError(f"the response has no choices: {str(response)[:200]!r}")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise MalformedResponseError("the first choice has no message")
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        raise MalformedResponseError(f"message content is a {type(content).__name__}, not text")
    usage = getattr(response, "usage", None)
    counts = None
    if usage is not None and isinstance(getattr(usage, "prompt_tokens", None), int):
        details = getattr(usage, "prompt_tokens_details", None)
        cached = getattr(details, "cached_tokens", None) if details is not None else None
        counts = (usage.prompt_tokens, int(getattr(usage, "completion_tokens", 0) or 0), int(cached or 0))
    return content or "", getattr(choice, "finish_reason", None), counts, str(getattr(response, "model", "") or "")
