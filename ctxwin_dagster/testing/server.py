"""A fake OpenAI-compatible HTTP server for tests and benchmarks, on 127.0.0.1 only.

It speaks enough of the OpenAI API for the real ``openai`` client: ``POST /v1/chat/completions``,
``POST /v1/embeddings`` (float or base64 vectors) and ``GET /v1/models``. It runs in a background
thread on an ephemeral port (one thread per connection, so many slow requests are served at
once) and records what it received, how many requests were in flight at the peak, and injects
faults on demand: a queue consumed one per chat request, in order (see :mod:`.faults`: rate
limits, server errors, timeouts, malformed or truncated replies, context overflows). Its replies
are made by :mod:`.replies`.

With ``silent=True`` the server takes every connection and request and never answers any (a
hung server): each request waits until :meth:`~FakeOpenAIServer.stop`.

Example::

    >>> from openai import OpenAI
    >>> with FakeOpenAIServer(faults=["429"]) as server:
    ...     client = OpenAI(base_url=server.base_url, api_key="x", max_retries=1)
    ...     reply = client.chat.completions.create(
    ...         model="m", messages=[{"role": "user", "content": "hi"}])
    ...     server.request_count, reply.choices[0].finish_reason
    (2, 'stop')
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar

from ctxwin_dagster.core.json_types import JSONObject, JSONValue
from ctxwin_dagster.testing.faults import (
    MALFORMED_BODY,
    STRUCTURED,
    ErrorReply,
    bad_request,
    check_fault,
    fault_error,
    format_refusal,
    model_not_found,
)
from ctxwin_dagster.testing.replies import (
    Responder,
    chat_reply,
    default_responder,
    embeddings_reply,
    json_object,
    model_list,
)

__all__ = ["FakeOpenAIServer"]

_Number = TypeVar("_Number", int, float)


def _at_least(name: str, value: _Number, low: int, alternative: str = "") -> _Number:
    """``value``, checked to be ``low`` or more (the error names the setting and its other choice)."""
    if value < low:
        raise ValueError(f"{name} must be >= {low}{alternative}; got {value}")
    return value


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 128
    owner: FakeOpenAIServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real server
    counted = False  # whether the current request counts as in flight
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - silence stderr
        pass

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def do_GET(self) -> None:  # noqa: N802
        self.server.owner._handle(self, "GET")

    def do_POST(self) -> None:  # noqa: N802
        self.server.owner._handle(self, "POST")


class FakeOpenAIServer:
    """An OpenAI-compatible server on ``127.0.0.1`` for tests (see the module docstring).

    Args:
        latency_s: seconds every chat and embeddings request sleeps before answering.
        responder: ``fn(request_body) -> assistant content``; default
            :func:`~.replies.default_responder`.
        faults: chat-request faults consumed in order (see :data:`~.faults.FAULTS`, or any status code).
        models: model names served; another model gets a 404 ``model_not_found``. None = any.
        embed_dim: dimension of ``/v1/embeddings`` vectors (a request's ``dimensions`` wins).
        retry_after_s: ``Retry-After`` value sent with a ``"429"`` fault (None: no header).
        timeout_sleep_s: how long a ``"timeout"`` fault sleeps.
        api_key: when set, requests without ``Authorization: Bearer <api_key>`` get a 401.
        report_usage: include ``usage`` in chat responses (False to test counting fallbacks).
        cached_tokens: ``usage.prompt_tokens_details.cached_tokens`` to report (capped).
        structured: what it does with ``response_format`` (see :data:`~.faults.STRUCTURED`).
        silent: take connections and requests and never answer (chat requests are still
            recorded and counted).
        echo_key: every error reply quotes the request's ``Authorization`` header and the bare
            key after it, as a debugging proxy or a careless server does (tests of redaction).

    Attributes:
        base_url: ``"http://127.0.0.1:PORT/v1"``, set by :meth:`start`.
        requests: the JSON bodies of chat requests received (a copy; thread-safe).
        embedding_requests: the JSON bodies of embeddings requests received.
        request_count: chat requests received (faulted ones included).
        max_in_flight: the most requests being handled at the same time.

    Example::

        >>> server = FakeOpenAIServer(latency_s=0.01).start()
        >>> server.base_url.startswith("http://127.0.0.1:")
        True
        >>> server.stop()
    """

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        responder: Responder | None = None,
        faults: Sequence[str] = (),
        models: Sequence[str] | None = None,
        embed_dim: int = 8,
        retry_after_s: float | None = 0,
        timeout_sleep_s: float = 5.0,
        api_key: str | None = None,
        report_usage: bool = True,
        cached_tokens: int = 0,
        structured: str = "schema",
        silent: bool = False,
        echo_key: bool = False,
    ) -> None:
        if structured not in STRUCTURED:
            raise ValueError(f"structured must be one of {STRUCTURED}; got {structured!r}")
        self.latency_s = _at_least("latency_s", latency_s, 0)
        self.embed_dim = _at_least("embed_dim", embed_dim, 1)
        self.timeout_sleep_s = _at_least("timeout_sleep_s", timeout_sleep_s, 0)
        self.retry_after_s = None if retry_after_s is None else _at_least("retry_after_s", retry_after_s, 0, " or None")
        self.cached_tokens = _at_least("cached_tokens", cached_tokens, 0)
        if isinstance(faults, str):
            raise TypeError(f"faults must be a sequence of fault names, e.g. [{faults!r}]; got a string")
        for fault in faults:
            check_fault(fault)
        self.structured, self.silent, self.echo_key = structured, silent, echo_key
        self.responder = responder or default_responder
        self.models = None if models is None else list(models)
        self.report_usage = report_usage
        self._api_key = api_key
        self._lock = threading.Lock()
        self._faults: deque[str] = deque(faults)
        self._requests: list[JSONObject] = []
        self._embedding_requests: list[JSONObject] = []
        self._request_count = 0
        self._in_flight = 0
        self._max_in_flight = 0
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> FakeOpenAIServer:
        """Bind an ephemeral port on 127.0.0.1 and serve in a daemon thread; returns self."""
        if self._httpd is not None:
            raise RuntimeError("FakeOpenAIServer is already running; call stop() first")
        self._stopping.clear()
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        port = httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=f"fake-openai-{port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close open connections (sleeping handlers wake up)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- state
    @property
    def requests(self) -> list[JSONObject]:
        with self._lock:
            return list(self._requests)

    @property
    def embedding_requests(self) -> list[JSONObject]:
        with self._lock:
            return list(self._embedding_requests)

    @property
    def request_count(self) -> int:
        with self._lock:
            return self._request_count

    @property
    def max_in_flight(self) -> int:
        with self._lock:
            return self._max_in_flight

    def add_faults(self, *faults: str) -> None:
        """Append faults to the queue (consumed by the next chat requests)."""
        for fault in faults:
            check_fault(fault)
        with self._lock:
            self._faults.extend(faults)

    def reset(self) -> None:
        """Forget received requests, the in-flight peak and pending faults."""
        with self._lock:
            self._requests.clear()
            self._embedding_requests.clear()
            self._request_count = 0
            self._max_in_flight = self._in_flight
            self._faults.clear()

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    # ----------------------------------------------------------------- handling
    def _handle(self, h: _Handler, method: str) -> None:
        path = h.path.split("?", 1)[0].rstrip("/")
        body: JSONObject = {}
        if method == "POST":
            length = int(h.headers.get("Content-Length") or 0)
            raw = h.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send_error(h, bad_request("request body is not valid JSON"))
                return
        is_chat = method == "POST" and path in ("/v1/chat/completions", "/chat/completions")
        if self.silent:  # a hung server: the request is read, and nothing is ever sent back
            if is_chat:
                with self._lock:
                    self._requests.append(body)
                    self._request_count += 1
            self._stopping.wait()
            h.close_connection = True
            return
        if self._api_key is not None and h.headers.get("Authorization") != f"Bearer {self._api_key}":
            self._send_error(h, bad_request("Incorrect API key provided.", 401, "invalid_api_key"))
            return
        if method == "GET" and path in ("/v1/models", "/models"):
            self._send_json(h, 200, model_list(self.models or ["fake-model"]))
        elif is_chat:
            self._in(h, lambda: self._chat(h, body))
        elif method == "POST" and path in ("/v1/embeddings", "/embeddings"):
            self._in(h, lambda: self._embeddings(h, body))
        else:
            self._send_error(h, bad_request(f"Unknown request URL: {method} {h.path}", 404, "unknown_url"))

    def _in(self, h: _Handler, fn: Callable[[], None]) -> None:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        h.counted = True
        try:
            fn()
        finally:
            self._out(h)

    def _out(self, h: _Handler) -> None:
        """The request stops counting as in flight (before its reply is written: once the client
        has the reply it may send the next request, which must not overlap this one)."""
        if h.counted:
            h.counted = False
            with self._lock:
                self._in_flight -= 1

    def _model_missing(self, h: _Handler, model: JSONValue) -> bool:
        if self.models is not None and model not in self.models:
            self._send_error(h, model_not_found(model))
            return True
        return False

    def _chat(self, h: _Handler, body: JSONObject) -> None:
        with self._lock:
            self._requests.append(body)
            self._request_count += 1
            fault = self._faults.popleft() if self._faults else "ok"
        if self.latency_s:
            self._stopping.wait(self.latency_s)
        if self._model_missing(h, body.get("model")):
            return
        if fault == "timeout":
            self._stopping.wait(self.timeout_sleep_s)
            fault = "ok"
        error = fault_error(fault, retry_after_s=self.retry_after_s)
        if error is None and fault == "malformed":
            self._send_raw(h, 200, MALFORMED_BODY, "application/json")
            return
        error = error or format_refusal(self.structured, json_object(body.get("response_format")))
        if error is not None:
            self._send_error(h, error)
            return
        self._answer(h, body, truncated=fault == "truncated")

    def _answer(self, h: _Handler, body: JSONObject, *, truncated: bool) -> None:
        """Send the responder's reply to a chat request (a server that ignores ``json_schema``
        answers as if the request had no ``response_format``)."""
        if json_object(body.get("response_format")).get("type") == "json_schema" and self.structured == "ignore":
            body = {k: v for k, v in body.items() if k != "response_format"}
        usage = self.cached_tokens if self.report_usage else None
        self._send_json(h, 200, chat_reply(body, self.responder, truncated=truncated, cached_tokens=usage))

    def _embeddings(self, h: _Handler, body: JSONObject) -> None:
        with self._lock:
            self._embedding_requests.append(body)
        if self.latency_s:
            self._stopping.wait(self.latency_s)
        model = body.get("model")
        if self._model_missing(h, model):
            return
        reply = embeddings_reply(body, self.embed_dim)
        if isinstance(reply, ErrorReply):
            self._send_error(h, reply)
        else:
            self._send_json(h, 200, reply)

    # ----------------------------------------------------------------- output
    def _send_error(self, h: _Handler, error: ErrorReply) -> None:
        message, sent = error.message, h.headers.get("Authorization") or ""
        if self.echo_key and sent:
            message += f" The request had Authorization: {sent} (key {sent.split()[-1]})."
        payload: JSONObject = {"error": {"message": message, "type": error.type, "param": None, "code": error.code}}
        self._send_json(h, error.status, payload, headers=error.headers)

    def _send_json(
        self, h: _Handler, status: int, payload: JSONValue, *, headers: dict[str, str] | None = None
    ) -> None:
        self._send_raw(h, status, json.dumps(payload).encode("utf-8"), "application/json", headers=headers)

    def _send_raw(
        self, h: _Handler, status: int, data: bytes, content_type: str, *, headers: dict[str, str] | None = None
    ) -> None:
        self._out(h)
        try:
            h.send_response(status)
            h.send_header("Content-Type", content_type)
            h.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
            h.wfile.flush()
        except OSError:  # the client gave up (e.g. timed out) or the server is stopping
            h.close_connection = True
