"""What a failed chat call raises: :class:`ChatBackendError`, and :func:`chat_error`, which turns
the SDK's exception into an error that says what went wrong and what to check.

Whether a failure is retried is decided by :func:`~ctxwin_dagster.backends.calls.retry.is_transient`;
:func:`chat_error` explains a transient failure that outlasted the retries and a final one at
once (unknown model, rejected key, no quota, a prompt the server finds too long …). A transient
one says which wait ran out: "no reply within 120 s (read timeout)" from a server that took the
connection and never answered, "could not connect … within 10 s" (connect timeout), "cannot
reach" a server that refused or dropped the connection, and, when the request's deadline ended
the retries, "gave up after the 600 s deadline (N attempts)". Error messages never contain the
API key.

Example::

    >>> import httpx, openai
    >>> from ctxwin_dagster.core.budget.limits import get_model_limits
    >>> response = httpx.Response(404, request=httpx.Request("POST", "http://localhost:11434/v1/chat/completions"))
    >>> exc = openai.NotFoundError("not found", response=response, body={"message": "model 'llama3' not found"})
    >>> err = chat_error(exc, attempts=1, base_url="http://localhost:11434/v1", model="llama3",
    ...                  timeout_s=120, limits=get_model_limits("llama3"))
    >>> err.kind, err.status, err.attempts
    ('model_not_found', 404, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

import openai

from ctxwin_dagster.backends.calls.endpoint import redact_key
from ctxwin_dagster.backends.calls.retry import attempts_text, error_code, failure_reason, is_transient, timed_out
from ctxwin_dagster.core.budget.fit import ContextOverflowError
from ctxwin_dagster.core.budget.limits import ModelLimits

__all__ = ["ChatBackendError", "ErrorKind", "chat_error"]

ErrorKind = Literal[
    "unreachable",
    "timeout",
    "rate_limited",
    "server_error",
    "malformed",
    "model_not_found",
    "auth",
    "permission",
    "quota",
    "bad_request",
]


class ChatBackendError(RuntimeError):
    """A chat call failed for good; the message says what to check.

    Attributes:
        kind: ``"unreachable"``, ``"timeout"``, ``"rate_limited"``, ``"server_error"``,
            ``"malformed"``, ``"model_not_found"``, ``"auth"``, ``"permission"``, ``"quota"`` or
            ``"bad_request"``.
        base_url: the server's base URL.
        model: the model asked for.
        status: the HTTP status, when there was one.
        attempts: how many times the request was sent.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind,
        base_url: str,
        model: str,
        status: int | None = None,
        attempts: int = 0,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.base_url = base_url
        self.model = model
        self.status = status
        self.attempts = attempts

    def __reduce__(  # picklable across processes (keyword-only init)
        self,
    ) -> tuple[Callable[..., ChatBackendError], tuple[str, ErrorKind, str, str, int | None, int]]:
        return (_rebuild_error, (str(self), self.kind, self.base_url, self.model, self.status, self.attempts))


def _rebuild_error(
    message: str, kind: ErrorKind, base_url: str, model: str, status: int | None, attempts: int
) -> ChatBackendError:
    return ChatBackendError(message, kind=kind, base_url=base_url, model=model, status=status, attempts=attempts)


def server_message(exc: openai.APIStatusError) -> str:
    """The server's own explanation in an error response, with any key it quotes masked."""
    body = exc.body
    message = str(exc.message or "")
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and inner.get("message"):
            message = str(inner["message"])
        elif body.get("message"):
            message = str(body["message"])
    return redact_key(message)


#: What the error says when a wait ran out on every attempt, by the wait's phase (``{within}``:
#: its seconds); a timeout of any other phase (write, pool) says :data:`_OTHER_TIMEOUT`.
_TIMEOUTS: dict[str, str] = {
    "connect": (
        "could not connect to the chat server at {base_url} {within} (connect timeout; model {model!r}); "
        "{tries}. Check host and port of base_url and that no firewall or proxy drops the connection, or "
        "raise connect_timeout_s"
    ),
    "read": (
        "no reply {within} (read timeout) from the chat server at {base_url} (model {model!r}); {tries}. "
        "The server took the connection and sent nothing back: check that it is serving (its logs, its "
        "load), lower max_concurrency, or raise timeout_s"
    ),
}
_OTHER_TIMEOUT = (
    "the chat server at {base_url} {reason} (model {model!r}); {tries}. Check the server's load and the network, "
    "or raise timeout_s"
)

#: A refusal that no retry mends, by its HTTP status: the kind of error and what it says
#: (``{where}``: the server and model, ``{detail}``: the server's message). A 429 that is not
#: transient is an account out of quota.
_REFUSALS: dict[int, tuple[ErrorKind, str]] = {
    429: (
        "quota",
        "{where} says the account is out of quota (429 insufficient_quota): check the plan and billing of the "
        "API key. Server: {detail}",
    ),
    401: (
        "auth",
        "{where} rejected the API key (401 Unauthorized): set OPENAI_API_KEY (or pass api_key=) to a valid key "
        "for this server",
    ),
    403: (
        "permission",
        "{where} refused the request (403 Forbidden): the API key has no access to this model or endpoint. "
        "Server: {detail}",
    ),
    404: (
        "model_not_found",
        "model {model!r} not found at {base_url} (404): check the model name the server serves (GET "
        "{base_url}/models lists them; for Ollama run `ollama pull {model}`) and that base_url ends with the "
        "API root such as /v1. Server: {detail}",
    ),
}
#: Any other refusal.
_BAD_REQUEST: tuple[ErrorKind, str] = (
    "bad_request",
    "{where} rejected the request ({status}): {detail}. Check the request settings the server supports "
    "(temperature, top_p, max_tokens, response_format)",
)
#: The statuses of a refused request, and the words of the server's message, that say the prompt
#: is longer than the model's context.
_OVERFLOW_STATUSES = (400, 413, 422)
_OVERFLOW_WORDS = ("context length", "context window", "maximum context", "too many tokens")

#: ``(message, kind, HTTP status)`` of a :class:`ChatBackendError`.
_Explained = tuple[str, ErrorKind, int | None]


def chat_error(
    exc: BaseException,
    *,
    attempts: int,
    base_url: str,
    model: str,
    timeout_s: float,
    limits: ModelLimits,
    api_key: str | None = None,
    deadline_s: float | None = None,
) -> BaseException:
    """The error to raise for a call to ``model`` at ``base_url`` that failed for good with ``exc``
    after ``attempts`` attempts: a :class:`ChatBackendError` (with ``attempts`` set), a
    :class:`~ctxwin_dagster.core.budget.fit.ContextOverflowError` when the server finds the prompt too
    long, or ``exc`` itself when it is not an API error (a bug: nothing to explain).
    ``api_key`` is masked wherever the server's message quotes it. ``timeout_s`` is the read
    timeout, named when the request does not carry its own; ``deadline_s`` is given when the
    request's deadline is what ended the retries."""
    explained: _Explained | ContextOverflowError
    if is_transient(exc):  # retries exhausted
        explained = _outlasted_retries(exc, base_url, model, timeout_s, attempts_text(attempts, deadline_s))
    elif isinstance(exc, openai.APIStatusError):
        explained = _refused(exc, base_url, model, limits, api_key)
    else:
        return exc  # a bug or an unexpected error
    if isinstance(explained, ContextOverflowError):
        return explained
    message, kind, status = explained
    return ChatBackendError(message, kind=kind, base_url=base_url, model=model, status=status, attempts=attempts)


def _outlasted_retries(exc: BaseException, base_url: str, model: str, timeout_s: float, tries: str) -> _Explained:
    """What a transient failure says once the retries are spent: which wait ran out, or what the
    server kept doing."""
    timeout = timed_out(exc)
    if timeout is not None:
        phase, seconds = timeout
        within = f"within {seconds if seconds is not None else timeout_s:g} s"
        fields = {"base_url": base_url, "model": model, "tries": tries, "within": within}
        return _TIMEOUTS.get(phase, _OTHER_TIMEOUT).format(reason=failure_reason(exc), **fields), "timeout", None
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return (
            f"cannot reach the chat server at {base_url} ({tries}; {type(cause).__name__}: {cause}). "
            "Check that the server is running and listening there (`vllm serve …`, `ollama serve`, "
            "llama.cpp `llama-server`, LM Studio's server), that host, port and the /v1 path of base_url "
            "are right, and that no firewall or proxy is in the way",
            "unreachable",
            None,
        )
    if isinstance(exc, openai.APIStatusError) and exc.status_code == 429:
        return (
            f"{base_url} kept rate-limiting model {model!r} (429, {tries}): lower max_concurrency, "
            "raise max_retries or backoff_max_s, or check the key's rate limits",
            "rate_limited",
            429,
        )
    if isinstance(exc, openai.APIStatusError):
        return (
            f"{base_url} kept failing for model {model!r} ({exc.status_code}, {tries}): "
            f"{server_message(exc)[:300]}. Check the server's logs and health",
            "server_error",
            exc.status_code,
        )
    return (
        f"{base_url} sent malformed responses for model {model!r} ({tries}; {redact_key(str(exc))}). "
        "Check that base_url points at an OpenAI-compatible API root (usually ending in /v1)",
        "malformed",
        None,
    )


def _refused(
    exc: openai.APIStatusError, base_url: str, model: str, limits: ModelLimits, api_key: str | None
) -> _Explained | ContextOverflowError:
    """What a refusal no retry mends says (:data:`_REFUSALS`), or the overflow of a prompt the
    server finds too long."""
    status = exc.status_code
    where = f"{base_url} (model {model!r})"
    detail = redact_key(server_message(exc), api_key)
    lowered = detail.lower()
    if status in _OVERFLOW_STATUSES and (
        error_code(exc) == "context_length_exceeded" or any(words in lowered for words in _OVERFLOW_WORDS)
    ):
        return ContextOverflowError(
            f"{where} says the prompt is too long for the model ({status}): {detail}. The local limits "
            f"({limits.context_length} tokens context, source {limits.source}) are larger than the "
            "server's; pass limits=ModelLimits(...) with the server's real context length (e.g. vLLM "
            "--max-model-len, Ollama num_ctx)"
        )
    kind, template = _REFUSALS.get(status, _BAD_REQUEST)
    message = template.format(where=where, detail=detail, model=model, base_url=base_url, status=status)
    return message, kind, status
