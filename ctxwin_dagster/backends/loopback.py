"""What the project's own HTTP servers on loopback share: the embedding server
(:mod:`ctxwin_dagster.backends.embeddings.server`) and the ask server (:mod:`ctxwin_dagster.ask.server`).

* :class:`LoopbackServer`: a thread per connection, so a slow client or a long request does not
  hold up the others, and a listen backlog of :data:`LISTEN_BACKLOG` connections. http.server's
  default backlog is 5: of 50 clients connecting at once, about half had their connection dropped
  and waited a second for their system to try again (or were reset, where the system does that).
* :func:`read_json_object`: a request body is read only when its ``Content-Length`` is within
  the server's limit; a larger one gets a 413 naming the limit before a byte of it is read. The
  body must be one JSON object; anything else is a :class:`RequestError` (a 4xx) saying what was
  wrong, never a server error. After a 413 the server lets the client finish sending (it throws
  up to :data:`DISCARD_BYTES` away) before closing, since a connection closed under a client
  still sending is reset and the client would see a broken pipe instead of the reason.
* :func:`send_error`: errors are JSON in OpenAI's shape,
  ``{"error": {"message", "type", "param", "code"}}``, so an OpenAI client shows the message.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar, overload

from ctxwin_dagster.core.json_types import JSONObject, JSONValue

__all__ = [
    "LISTEN_BACKLOG",
    "LoopbackServer",
    "RequestError",
    "check_field",
    "limit_from_env",
    "read_json_object",
    "send_error",
    "send_json",
]

#: Connections the system holds for a server before it accepts them.
LISTEN_BACKLOG = 128
#: The most of a refused body read and thrown away after the refusal (see the module docstring).
DISCARD_BYTES = 256 * 1024 * 1024

T = TypeVar("T")


class LoopbackServer(ThreadingHTTPServer):
    """A thread per connection (daemon threads: they never keep the process alive) and a real backlog."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG


class RequestError(Exception):
    """A request the server refuses: its HTTP status (4xx) and what to send instead."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None, unread: int = 0
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.unread = unread  # bytes of the body still on their way (a refusal before reading it)


def limit_from_env(name: str, default: int) -> int:
    """The whole number > 0 in the environment variable ``name``, else ``default``.

    Raises:
        ValueError: the variable is set to something else (the message names it).
    """
    raw = os.environ.get(name, "").strip().replace("_", "")
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{name} must be a whole number > 0; got {os.environ[name]!r}")
    return value


def send_json(handler: BaseHTTPRequestHandler, status: int, body: object, *, close: bool = False) -> None:
    """Reply ``body`` (what :func:`json.dumps` takes) as JSON; ``close`` ends the connection after it (a body left unread)."""
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    if close:
        handler.send_header("Connection", "close")
        handler.close_connection = True
    handler.end_headers()
    handler.wfile.write(data)


def send_error(handler: BaseHTTPRequestHandler, error: RequestError, *, close: bool = False) -> None:
    """Reply ``error`` in OpenAI's error shape."""
    kind = "invalid_request_error" if error.status < 500 else "server_error"
    body = {"error": {"message": error.message, "type": kind, "param": error.param, "code": error.code}}
    send_json(handler, error.status, body, close=close or error.unread > 0)
    if error.unread > 0:
        _discard(handler, error.unread)


def _discard(handler: BaseHTTPRequestHandler, length: int) -> None:
    """Read and throw away what the client still sends of a refused body (its reply is out and
    the connection closed for writing), up to ``length`` or :data:`DISCARD_BYTES`."""
    with contextlib.suppress(OSError):
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_WR)
        handler.connection.settimeout(10.0)
        left = min(length, DISCARD_BYTES)
        while left > 0 and (chunk := handler.connection.recv(min(left, 1 << 20))):
            left -= len(chunk)


def read_json_object(handler: BaseHTTPRequestHandler, *, max_bytes: int, setting: str) -> JSONObject:
    """The request's body, one JSON object of at most ``max_bytes`` bytes (``setting``: the
    environment variable that changes the limit, named in the refusal).

    Raises:
        RequestError: no ``Content-Length`` (411), a body over the limit (413, nothing read), an
            empty body, a body that is not UTF-8 JSON or not a JSON object (400).
    """
    if handler.headers.get("Transfer-Encoding"):
        raise RequestError(411, "send the body with a Content-Length header; chunked bodies are not read")
    declared = handler.headers.get("Content-Length")
    if declared is None:
        raise RequestError(411, "a POST needs a Content-Length header and a JSON object as its body")
    try:
        length = int(declared)
    except ValueError:
        length = -1
    if length < 0:
        raise RequestError(400, f"Content-Length {declared!r} is not a number of bytes")
    if length > max_bytes:
        raise RequestError(
            413,
            f"the body is {length:,} bytes; this server reads at most {max_bytes:,} bytes a request "
            f"(the environment variable {setting} when it starts changes that)",
            code="body_too_large",
            unread=length,
        )
    data = handler.rfile.read(length) if length else b""
    if not data.strip():
        raise RequestError(400, "the body is empty; send a JSON object")
    if len(data) < length:
        raise RequestError(400, f"the body ended after {len(data):,} of its {length:,} bytes")
    try:
        body = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise RequestError(400, "the body is not UTF-8 text; send a JSON object") from None
    except ValueError as exc:
        raise RequestError(400, f"the body is not JSON ({exc}); send a JSON object") from None
    if not isinstance(body, dict):
        raise RequestError(400, f"the body must be a JSON object; got a JSON {_json_kind(body)}")
    return body


@overload
def check_field(body: Mapping[str, JSONValue], name: str, kinds: type[T], what: str) -> T | None: ...


@overload
def check_field(body: Mapping[str, JSONValue], name: str, kinds: tuple[type, ...], what: str) -> JSONValue: ...


def check_field(body: Mapping[str, JSONValue], name: str, kinds: type | tuple[type, ...], what: str) -> object:
    """``body[name]`` (None when absent or null) when it is one of ``kinds``.

    Raises:
        RequestError: (400) it is of another type; ``what`` says what it must be.
    """
    value = body.get(name)
    if value is None:
        return None
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in _as_tuple(kinds))
    if not ok:
        raise RequestError(400, f"{name} must be {what}; got a JSON {_json_kind(value)}", param=name)
    return value


def _as_tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _json_kind(value: object) -> str:
    """The JSON name of a parsed value's type (``array``, ``string`` …)."""
    for kind, name in ((bool, "boolean"), (dict, "object"), (list, "array"), (str, "string"), (type(None), "null")):
        if isinstance(value, kind):
            return name
    return "number"
