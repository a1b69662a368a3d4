"""A loopback OpenAI-compatible endpoint in front of a :class:`LocalChatBackend`.

Libraries that only speak the OpenAI API — RAGAS's judge goes through the ``openai`` SDK and
``instructor`` — can then use the local model. It listens on 127.0.0.1 only, on a free port,
answers ``POST /v1/chat/completions`` and ``GET /v1/models``, and stops with its context. A
``response_format`` of type ``json_schema`` is honoured the way OpenAI's strict mode is: the
reply is decoded under the schema (constrained decoding), and so is ``json_object`` with a
``schema`` beside it; ``json_object`` alone gives any JSON object. The schema is tightened first
(unbounded strings capped, no extra keys) so that the JSON closes within the reply's tokens.

Example::

    with LocalChatServer(LocalChatBackend(model="local:smollm2")) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="local")
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ctxwin_dagster.backends.base import ChatRequest
from ctxwin_dagster.backends.chat.local import LocalChatBackend
from ctxwin_dagster.core.budget.fit import ContextOverflowError
from ctxwin_dagster.core.methods.prompts.schemas import CHARS_PER_TOKEN_FLOOR, ReplySchema, tighten_for_decoding

__all__ = ["LocalChatServer", "decoding_schema"]


class LocalChatServer:
    """Serves ``backend`` as an OpenAI-compatible chat endpoint on loopback (see the module docstring)."""

    def __init__(self, backend: LocalChatBackend) -> None:
        self.backend = backend
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not started; use it as a context manager or call start()")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> LocalChatServer:
        backend = self.backend

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

            def log_message(self, *args: object) -> None:  # quiet
                return

            def _send(self, status: int, payload: object) -> None:
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": backend.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                    max_tokens = int(
                        body.get("max_tokens") or body.get("max_completion_tokens") or backend.max_new_tokens
                    )
                    request = ChatRequest(
                        messages=tuple(body["messages"]),
                        temperature=min(2.0, max(0.0, float(body.get("temperature", 0.0) or 0.0))),
                        top_p=float(body.get("top_p", 1.0) or 1.0),
                        max_tokens=max_tokens,
                        json_mode=(body.get("response_format") or {}).get("type") in ("json_object", "json_schema"),
                        schema=decoding_schema(body.get("response_format"), min(max_tokens, backend.max_new_tokens)),
                    )
                    result = backend.complete(request)
                except ContextOverflowError as exc:
                    self._send(
                        400,
                        {
                            "error": {
                                "message": str(exc),
                                "type": "invalid_request_error",
                                "code": "context_length_exceeded",
                            }
                        },
                    )
                    return
                except (KeyError, TypeError, ValueError) as exc:
                    self._send(400, {"error": {"message": f"bad request: {exc}", "type": "invalid_request_error"}})
                    return
                rec = result.record
                self._send(
                    200,
                    {
                        "id": "chatcmpl-local",
                        "object": "chat.completion",
                        "model": backend.model,
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": result.text},
                                "finish_reason": result.finish_reason or "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": rec.input_tokens,
                            "completion_tokens": rec.output_tokens,
                            "total_tokens": rec.input_tokens + rec.output_tokens,
                        },
                    },
                )

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="ctxwin-local-chat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> LocalChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def decoding_schema(response_format: object, max_tokens: int) -> ReplySchema | None:
    """The schema a ``response_format`` asks for: OpenAI's ``{"type": "json_schema", "json_schema":
    {"name", "schema"}}``, or ``{"type": "json_object", "schema": {...}}`` (the convention of
    several OpenAI-compatible servers, and what instructor's JSON_SCHEMA mode sends); else None.

    The schema is tightened for decoding (:func:`tighten_for_decoding`): strings it leaves
    unbounded are capped (a twelfth of the reply's tokens, at two characters a token), arrays
    to the items that fit, and objects take no keys beyond theirs, so that a small model's JSON closes within ``max_tokens``: a JSON
    cut there is worth nothing to the client."""
    if not isinstance(response_format, dict):
        return None
    cap = max(24, CHARS_PER_TOKEN_FLOOR * max_tokens // 12)
    # an array item holds a string or two of ``cap`` characters and its keys: no more items than fit
    items = max(1, max_tokens // (cap + 24))
    given = response_format.get("schema")
    if response_format.get("type") == "json_object" and isinstance(given, dict):
        return ReplySchema("reply", tighten_for_decoding(given, cap, max_items=items))
    if response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema") or {}
    if not isinstance(spec, dict):
        raise AttributeError(f"response_format json_schema is a {type(spec).__name__}, not an object")
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        raise ValueError("response_format json_schema has no 'schema' object")
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in str(spec.get("name") or "reply")) or "reply"
    return ReplySchema(name, tighten_for_decoding(schema, cap, max_items=items))
