"""Keeping API keys out of everything ctxwin prints or stores: messages, logs, run events,
metadata and the console.

Keys come only from the environment (or a resource's ``EnvVar``) and travel only in a request's
``Authorization`` header. A server may echo one back in an error body (``500 {"error":
{"message": "… Bearer <key>"}}``); the SDK then puts that body in its exception, and the
exception's text would reach the run's event log, the compute logs and the console. So
redaction is by value, whatever a key looks like:

* :class:`RedactingTransport` (and :class:`RedactingAsyncTransport`) sit under every
  OpenAI-compatible client ctxwin makes (chat, embeddings, the endpoint check, the judge): an
  error response's body has the very key the request sent masked before the SDK reads it;
* :func:`redact` masks, in any text, every key ctxwin was given (:func:`register_secret`, which
  :func:`~ctxwin_dagster.backends.calls.endpoint.resolve_api_key` calls), the values of the
  environment's key-like variables (``*API_KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``),
  any ``Bearer …`` or ``Authorization: …`` value, ``api_key=…`` and anything shaped like
  ``sk-…``.

Example::

    >>> register_secret("tok-1234567890")
    >>> redact('{"message": "bad header Authorization: Bearer tok-1234567890"}')
    '{"message": "bad header Authorization: Bearer ***"}'
    >>> redact("the key tok-1234567890 has no quota")
    'the key *** has no quota'
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence

import httpx

__all__ = [
    "MIN_SECRET_CHARS",
    "RedactingAsyncTransport",
    "RedactingTransport",
    "async_http_client",
    "http_client",
    "redact",
    "register_secret",
]

#: Shorter values are not masked by value (they would mask ordinary words); the patterns still apply.
MIN_SECRET_CHARS = 8
#: Environment variables whose values are secrets.
SECRET_ENV = re.compile(r"API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_MASK = "***"
_VALUE = r"[^\s\"',;&}\]]+"
_PATTERNS = (
    # "Bearer <token>", wherever it stands
    (re.compile(rf"(\bbearer\s+){_VALUE}", re.IGNORECASE), rf"\1{_MASK}"),
    # "Authorization: <scheme> <value>" and "authorization": "<value>"
    (
        re.compile(
            rf"(\bauthorization[\"']?\s*[:=]\s*[\"']?(?:basic\s+|token\s+)?)(?!bearer\b){_VALUE}", re.IGNORECASE
        ),
        rf"\1{_MASK}",
    ),
    # api_key=…, "api-key": "…", x-api-key: …
    (re.compile(rf"(\b(?:x-)?api[_-]?key[\"']?\s*[:=]\s*[\"']?){_VALUE}", re.IGNORECASE), rf"\1{_MASK}"),
    # OpenAI-style keys: keep "sk-" and two characters, so the user can tell which key it was
    (re.compile(r"\b(sk-[A-Za-z0-9_\-*]{2})[A-Za-z0-9_\-*]{4,}"), rf"\1{_MASK}"),
)
_lock = threading.Lock()
_registered: set[str] = set()


def register_secret(value: str | None) -> None:
    """Mask ``value`` wherever :func:`redact` sees it from now on in this process."""
    if value and len(value) >= MIN_SECRET_CHARS:
        with _lock:
            _registered.add(value)


def _secrets(extra: Iterable[str | None]) -> list[str]:
    with _lock:
        found = set(_registered)
    found.update(v for k, v in os.environ.items() if SECRET_ENV.search(k) and len(v) >= MIN_SECRET_CHARS)
    found.update(v for v in extra if v and len(v) >= 4)  # a key named by the caller is masked even when short
    return sorted(found, key=len, reverse=True)  # a key that holds another is masked whole


def redact(text: str, *extra: str | None) -> str:
    """``text`` with every known secret (and ``extra``) and every key-shaped value masked."""
    for secret in _secrets(extra):
        text = text.replace(secret, _MASK)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def _sent_key(request: httpx.Request) -> str | None:
    """The credential the request carried (the value after ``Bearer``, or the header itself)."""
    sent = request.headers.get("authorization") or request.headers.get("api-key") or ""
    return sent.split(None, 1)[-1] if sent else None


_DROPPED_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding"})


def _redacted(response: httpx.Response, request: httpx.Request) -> httpx.Response:
    body = response.content.decode(response.encoding or "utf-8", errors="replace")
    clean = redact(body, _sent_key(request))
    if clean == body:
        return response
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _DROPPED_HEADERS]
    kept = {k: v for k, v in response.extensions.items() if k in ("http_version", "reason_phrase")}
    return httpx.Response(
        response.status_code, headers=headers, content=clean.encode("utf-8"), request=request, extensions=kept
    )


class RedactingTransport(httpx.HTTPTransport):
    """httpx's transport, with the sent key (and every known secret) masked in error bodies."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if response.status_code < 400:
            return response
        try:
            response.read()
        finally:
            response.close()
        return _redacted(response, request)


class RedactingAsyncTransport(httpx.AsyncHTTPTransport):
    """The asynchronous :class:`RedactingTransport`."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if response.status_code < 400:
            return response
        try:
            await response.aread()
        finally:
            await response.aclose()
        return _redacted(response, request)


def _limits() -> httpx.Limits:
    # The openai SDK's own default for its clients (a transport given to a client brings its own limits).
    return httpx.Limits(max_connections=1000, max_keepalive_connections=100)


def http_client() -> httpx.Client:
    """The SDK's default HTTP client (``openai.DefaultHttpxClient``) over a :class:`RedactingTransport`."""
    import openai

    return openai.DefaultHttpxClient(transport=RedactingTransport(limits=_limits()))


#: What an asynchronous client calls with each response it receives.
ResponseHook = Callable[[httpx.Response], Awaitable[None]]


def async_http_client(*, response_hooks: Sequence[ResponseHook] = ()) -> httpx.AsyncClient:
    """The SDK's default asynchronous client over a :class:`RedactingAsyncTransport`; it awaits
    each of ``response_hooks`` with every response."""
    import openai

    return openai.DefaultAsyncHttpxClient(
        transport=RedactingAsyncTransport(limits=_limits()), event_hooks={"response": list(response_hooks)}
    )
