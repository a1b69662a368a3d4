"""The errors of the fake OpenAI-compatible server (:mod:`.server`): the faults it injects, the
``response_format`` it refuses, and the error replies it sends (:class:`ErrorReply`).

Faults are a queue consumed one per chat request, in order:

``"ok"``         a normal answer
``"429"``        rate limited, with a ``Retry-After`` header (``retry_after_s``, ``None`` for none)
``"500"``        a server error (any 3-digit status works: ``"401"``, ``"503"`` …)
``"timeout"``    sleeps ``timeout_sleep_s`` before answering (longer than the client's timeout)
``"malformed"``  a 200 whose body is not JSON
``"truncated"``  a valid answer cut mid-way with ``finish_reason="length"``
``"overflow"``   a 400 ``context_length_exceeded``, as OpenAI and vLLM send for a too-long prompt

Example::

    >>> fault_error("429", retry_after_s=2.5).headers
    {'Retry-After': '2.5'}
    >>> fault_error("truncated", retry_after_s=0) is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxwin_dagster.core.json_types import JSONObject, JSONValue

__all__ = [
    "FAULTS",
    "MALFORMED_BODY",
    "STRUCTURED",
    "ErrorReply",
    "bad_request",
    "check_fault",
    "fault_error",
    "format_refusal",
    "model_not_found",
]

FAULTS = ("ok", "429", "500", "timeout", "malformed", "truncated", "overflow")
#: What the server does with ``response_format``: ``schema`` honours ``json_schema`` and
#: ``json_object``; ``grammar`` refuses ``json_schema`` and honours a ``json_object`` with a
#: ``schema`` beside it (llama.cpp's servers); ``json_object`` refuses ``json_schema`` and any
#: ``schema`` beside ``json_object`` (400) like a server without structured output; ``none``
#: refuses any ``response_format``; ``ignore`` takes ``json_schema`` and replies as if it had
#: not been sent (a server that accepts the field and does not enforce it).
STRUCTURED = ("schema", "grammar", "json_object", "none", "ignore")
#: The body of a ``"malformed"`` fault: a 200 cut inside its JSON.
MALFORMED_BODY = b'{"id": "chatcmpl-broken", "choices": [{"mess'


def check_fault(fault: str) -> None:
    """Raises ValueError when ``fault`` is neither one of :data:`FAULTS` nor a 3-digit status."""
    if fault not in FAULTS and not (isinstance(fault, str) and len(fault) == 3 and fault.isdigit()):
        raise ValueError(f"unknown fault {fault!r}; use one of {FAULTS} or an HTTP status code like '503'")


@dataclass(frozen=True)
class ErrorReply:
    """An error the server sends in OpenAI's shape: its status, message, type, code and headers."""

    status: int
    message: str
    type: str
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def bad_request(message: str, status: int = 400, code: str | None = None) -> ErrorReply:
    """An ``invalid_request_error``: a 400 unless ``status`` says otherwise."""
    return ErrorReply(status, message, "invalid_request_error", code)


def model_not_found(model: JSONValue) -> ErrorReply:
    """The 404 of a model the server does not serve."""
    return bad_request(f"The model `{model}` does not exist or you do not have access to it.", 404, "model_not_found")


def fault_error(fault: str, *, retry_after_s: float | None) -> ErrorReply | None:
    """The error a chat request gets in place of its answer under ``fault``; None for a fault
    that answers (``ok``, ``truncated``, and ``malformed``, which sends :data:`MALFORMED_BODY`)."""
    if fault == "429":
        headers = {} if retry_after_s is None else {"Retry-After": _fmt_seconds(retry_after_s)}
        return ErrorReply(429, "Rate limit reached; please retry.", "requests", "rate_limit_exceeded", headers)
    if fault.isdigit():
        return ErrorReply(
            int(fault), f"Fake fault {fault}.", "server_error" if fault >= "500" else "invalid_request_error"
        )
    if fault == "overflow":
        return bad_request(
            "This model's maximum context length is 4096 tokens. However, your messages resulted in "
            "5000 tokens. Please reduce the length of the messages.",
            code="context_length_exceeded",
        )
    return None


def format_refusal(structured: str, response_format: JSONObject) -> ErrorReply | None:
    """The 400 of a server that does ``structured`` (see :data:`STRUCTURED`) and refuses
    ``response_format``; None when it takes it."""
    fmt = response_format.get("type")
    if fmt and (
        structured == "none"
        or (fmt == "json_schema" and structured in ("json_object", "grammar"))
        or ("schema" in response_format and structured == "json_object")
    ):
        return bad_request(f"response_format of type '{fmt}' is not supported by this server")
    return None


def _fmt_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
