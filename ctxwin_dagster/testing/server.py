"""A fake OpenAI-compatible HTTP server for tests and benchmarks, on 127.0.0.1 only.

It speaks enough of the OpenAI API for the real ``openai`` client: ``POST /v1/chat/completions``,
``POST /v1/embeddings`` (float or base64 vectors) and ``GET /v1/models``. It runs in a background
thread on an ephemeral port (one thread per connection, so many slow requests are served at
once) and records what it received, how many requests were in flight at the peak, and injects
faults on demand.

Faults are a queue consumed one per chat request, in order:

``"ok"``         a normal answer
``"429"``        rate limited, with a ``Retry-After`` header (``retry_after_s``, ``None`` for none)
``"500"``        a server error (any 3-digit status works: ``"401"``, ``"503"`` …)
``"timeout"``    sleeps ``timeout_sleep_s`` before answering (longer than the client's timeout)
``"malformed"``  a 200 whose body is not JSON
``"truncated"``  a valid answer cut mid-way with ``finish_reason="length"``
``"overflow"``   a 400 ``context_length_exceeded``, as OpenAI and vLLM send for a too-long prompt

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

import base64
import contextlib
import hashlib
import json
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from ctxwin_dagster.core.budget.tokens import get_token_counter

__all__ = ["FAULTS", "STRUCTURED", "FakeOpenAIServer", "default_responder", "fake_embedding", "schema_instance"]

FAULTS = ("ok", "429", "500", "timeout", "malformed", "truncated", "overflow")
#: What the server does with ``response_format``: ``schema`` honours ``json_schema`` and
#: ``json_object``; ``grammar`` refuses ``json_schema`` and honours a ``json_object`` with a
#: ``schema`` beside it (llama.cpp's servers); ``json_object`` refuses ``json_schema`` and any
#: ``schema`` beside ``json_object`` (400) like a server without structured output; ``none``
#: refuses any ``response_format``; ``ignore`` takes ``json_schema`` and replies as if it had
#: not been sent (a server that accepts the field and does not enforce it).
STRUCTURED = ("schema", "grammar", "json_object", "none", "ignore")


def default_responder(body: dict[str, Any]) -> str:
    """A short deterministic reply derived from the last message of a chat request.

    With ``response_format={"type": "json_object"}`` the reply is a JSON object.

    Example::

        >>> default_responder({"messages": [{"role": "user", "content": "What is Article 5?"}]})
        'Reply baa2d0730af2: What is Article 5?'
    """
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content", "")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    content = str(content or "")
    digest = hashlib.sha256(content.encode("utf-8")).hexdigest()[:12]
    head = " ".join(content.split()[:12])
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return json.dumps(schema_instance((fmt.get("json_schema") or {}).get("schema") or {}, f"{digest} {head}"))
    if fmt.get("type") == "json_object" and isinstance(fmt.get("schema"), dict):  # llama.cpp's grammar
        return json.dumps(schema_instance(fmt["schema"], f"{digest} {head}"))
    if fmt.get("type") == "json_object":
        return json.dumps({"reply": digest, "echo": head}, ensure_ascii=False)
    return f"Reply {digest}: {head}"


def schema_instance(schema: dict[str, Any], text: str, name: str = "") -> Any:
    """A value of ``schema`` (the subset the project's reply schemas use), its strings made from
    ``text``: what a server with structured output would return. An array of ``enum`` items gets
    the values in order, each once, so an SWB batch reply names every chunk.

    Example::

        >>> schema_instance({"type": "object", "properties": {"a": {"type": "number"}}}, "x")
        {'a': 0.5}
    """
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {k: schema_instance(v, text, k) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        if schema.get("prefixItems"):
            return [schema_instance(item, f"{text} {i}") for i, item in enumerate(schema["prefixItems"], start=1)]
        n = int(schema.get("minItems") or 1)
        items = schema.get("items") or {}
        out = []
        for i in range(n):
            value = schema_instance(items, f"{text} {i + 1}")
            if isinstance(value, dict):  # enum properties take their i-th value
                for k, sub in (items.get("properties") or {}).items():
                    if "enum" in sub:
                        value[k] = sub["enum"][i % len(sub["enum"])]
            out.append(value)
        return out
    if kind in ("number", "integer"):
        return 0.5 if kind == "number" else 1
    if kind == "boolean":
        return True
    value = f"{name} {text}".strip() if name else text
    return value[: int(schema["maxLength"])] if "maxLength" in schema else value


def fake_embedding(text: str, dim: int) -> np.ndarray:
    """A deterministic L2-normalized float32 vector for ``text`` (seeded by its SHA-256).

    Example::

        >>> v = fake_embedding("hello", 8)
        >>> v.shape, round(float((v ** 2).sum()), 5)
        ((8,), 1.0)
    """
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    vec = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vec / np.float32(np.linalg.norm(vec) or 1.0)


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

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr
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
        responder: ``fn(request_body) -> assistant content``; default :func:`default_responder`.
        faults: chat-request faults consumed in order (see :data:`FAULTS`, or any status code).
        models: model names served; another model gets a 404 ``model_not_found``. None = any.
        embed_dim: dimension of ``/v1/embeddings`` vectors (a request's ``dimensions`` wins).
        retry_after_s: ``Retry-After`` value sent with a ``"429"`` fault (None: no header).
        timeout_sleep_s: how long a ``"timeout"`` fault sleeps.
        api_key: when set, requests without ``Authorization: Bearer <api_key>`` get a 401.
        report_usage: include ``usage`` in chat responses (False to test counting fallbacks).
        cached_tokens: ``usage.prompt_tokens_details.cached_tokens`` to report (capped).
        structured: what it does with ``response_format`` (see :data:`STRUCTURED`).
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
        responder: Callable[[dict[str, Any]], str] | None = None,
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
        self.structured = structured
        self.silent = silent
        self.echo_key = echo_key
        if latency_s < 0:
            raise ValueError(f"latency_s must be >= 0; got {latency_s}")
        if embed_dim < 1:
            raise ValueError(f"embed_dim must be >= 1; got {embed_dim}")
        if timeout_sleep_s < 0:
            raise ValueError(f"timeout_sleep_s must be >= 0; got {timeout_sleep_s}")
        if retry_after_s is not None and retry_after_s < 0:
            raise ValueError(f"retry_after_s must be >= 0 or None; got {retry_after_s}")
        if cached_tokens < 0:
            raise ValueError(f"cached_tokens must be >= 0; got {cached_tokens}")
        if isinstance(faults, str):
            raise TypeError(f"faults must be a sequence of fault names, e.g. [{faults!r}]; got a string")
        for fault in faults:
            self._check_fault(fault)
        self.latency_s = latency_s
        self.responder = responder or default_responder
        self.models = None if models is None else list(models)
        self.embed_dim = embed_dim
        self.retry_after_s = retry_after_s
        self.timeout_sleep_s = timeout_sleep_s
        self.report_usage = report_usage
        self.cached_tokens = cached_tokens
        self._api_key = api_key
        self._lock = threading.Lock()
        self._faults: deque[str] = deque(faults)
        self._requests: list[dict[str, Any]] = []
        self._embedding_requests: list[dict[str, Any]] = []
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
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests)

    @property
    def embedding_requests(self) -> list[dict[str, Any]]:
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
            self._check_fault(fault)
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

    @staticmethod
    def _check_fault(fault: str) -> None:
        if fault not in FAULTS and not (isinstance(fault, str) and len(fault) == 3 and fault.isdigit()):
            raise ValueError(f"unknown fault {fault!r}; use one of {FAULTS} or an HTTP status code like '503'")

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    # ----------------------------------------------------------------- handling
    def _handle(self, h: _Handler, method: str) -> None:
        path = h.path.split("?", 1)[0].rstrip("/")
        body: dict[str, Any] = {}
        if method == "POST":
            length = int(h.headers.get("Content-Length") or 0)
            raw = h.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send_error(h, 400, "request body is not valid JSON", "invalid_request_error")
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
            self._send_error(h, 401, "Incorrect API key provided.", "invalid_request_error", code="invalid_api_key")
            return
        if method == "GET" and path in ("/v1/models", "/models"):
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in (self.models or ["fake-model"])
            ]
            self._send_json(h, 200, {"object": "list", "data": data})
        elif is_chat:
            self._in(h, lambda: self._chat(h, body))
        elif method == "POST" and path in ("/v1/embeddings", "/embeddings"):
            self._in(h, lambda: self._embeddings(h, body))
        else:
            self._send_error(
                h, 404, f"Unknown request URL: {method} {h.path}", "invalid_request_error", code="unknown_url"
            )

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
        if getattr(h, "counted", False):
            h.counted = False
            with self._lock:
                self._in_flight -= 1

    def _model_missing(self, h: _Handler, model: Any) -> bool:
        if self.models is not None and model not in self.models:
            self._send_error(
                h,
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                "invalid_request_error",
                code="model_not_found",
            )
            return True
        return False

    def _chat(self, h: _Handler, body: dict[str, Any]) -> None:
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
        if fault == "429":
            headers = {} if self.retry_after_s is None else {"Retry-After": _fmt_seconds(self.retry_after_s)}
            self._send_error(
                h, 429, "Rate limit reached; please retry.", "requests", code="rate_limit_exceeded", headers=headers
            )
            return
        if fault.isdigit():
            self._send_error(
                h, int(fault), f"Fake fault {fault}.", "server_error" if fault >= "500" else "invalid_request_error"
            )
            return
        if fault == "overflow":
            self._send_error(
                h,
                400,
                "This model's maximum context length is 4096 tokens. However, your messages resulted in "
                "5000 tokens. Please reduce the length of the messages.",
                "invalid_request_error",
                code="context_length_exceeded",
            )
            return
        if fault == "malformed":
            self._send_raw(h, 200, b'{"id": "chatcmpl-broken", "choices": [{"mess', "application/json")
            return

        fmt = (body.get("response_format") or {}).get("type")
        with_schema = "schema" in (body.get("response_format") or {})
        if fmt and (
            self.structured == "none"
            or (fmt == "json_schema" and self.structured in ("json_object", "grammar"))
            or (with_schema and self.structured == "json_object")
        ):
            self._send_error(
                h, 400, f"response_format of type '{fmt}' is not supported by this server", "invalid_request_error"
            )
            return
        if fmt == "json_schema" and self.structured == "ignore":
            body = {k: v for k, v in body.items() if k != "response_format"}
        messages = body.get("messages") or []
        model = str(body.get("model") or "")
        counter = get_token_counter(model or None)
        content = str(self.responder(body))
        finish = "stop"
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        if fault == "truncated":
            tokens = counter.encode(content)
            content = (
                counter.decode(tokens[: max(1, len(tokens) // 2)]) if len(tokens) > 1 else content[: len(content) // 2]
            )
            finish = "length"
        elif isinstance(max_tokens, int) and max_tokens > 0:
            tokens = counter.encode(content)
            if len(tokens) > max_tokens:
                content, finish = counter.decode(tokens[:max_tokens]), "length"
        prompt_tokens = counter.count_messages(messages) if messages else 0
        completion_tokens = counter.count(content)
        response: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],
        }
        if self.report_usage:
            response["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": min(self.cached_tokens, prompt_tokens)},
            }
        self._send_json(h, 200, response)

    def _embeddings(self, h: _Handler, body: dict[str, Any]) -> None:
        with self._lock:
            self._embedding_requests.append(body)
        if self.latency_s:
            self._stopping.wait(self.latency_s)
        model = body.get("model")
        if self._model_missing(h, model):
            return
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs:
            self._send_error(h, 400, "'input' must be a non-empty string or list", "invalid_request_error")
            return
        texts = [x if isinstance(x, str) else " ".join(map(str, x)) for x in inputs]  # token arrays: as text
        dim = body.get("dimensions") or self.embed_dim
        if not isinstance(dim, int) or dim < 1:
            self._send_error(h, 400, f"'dimensions' must be a positive integer; got {dim!r}", "invalid_request_error")
            return
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(texts):
            vec = fake_embedding(text, dim)
            emb: Any = base64.b64encode(vec.astype("<f4").tobytes()).decode("ascii") if as_base64 else vec.tolist()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        counter = get_token_counter(None)
        n_tokens = sum(counter.count_many(texts))
        self._send_json(
            h,
            200,
            {
                "object": "list",
                "data": data,
                "model": model,
                "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
            },
        )

    # ----------------------------------------------------------------- output
    def _send_error(
        self,
        h: _Handler,
        status: int,
        message: str,
        type_: str,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        sent = h.headers.get("Authorization") or ""
        if self.echo_key and sent:
            message += f" The request had Authorization: {sent} (key {sent.split()[-1]})."
        payload = {"error": {"message": message, "type": type_, "param": None, "code": code}}
        self._send_json(h, status, payload, headers=headers)

    def _send_json(self, h: _Handler, status: int, payload: Any, *, headers: dict[str, str] | None = None) -> None:
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


def _fmt_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
