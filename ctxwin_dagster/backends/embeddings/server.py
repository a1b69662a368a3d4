"""One local embedding model per command, shared by every run it launches.

A run of a document is a process of its own (Dagster's run launcher starts one per run). Each
used to import sentence-transformers and load the model before its first vector: 4 to 30 s of
CPU per run on this project's 2-core machines, paid again by every document and by every run
of a parallel command at the same time. ``ctxwin run``, ``ctxwin evaluate`` and ``ctxwin dev``
start this server once instead, on loopback, and tell the daemon (and through it every run) its
address in the environment variable :data:`ENV_VAR`. :class:`~.local.LocalEmbedder` then sends
its texts here and never imports torch.

The server speaks OpenAI's embeddings API (``POST /v1/embeddings`` with ``model`` and
``input``; ``encoding_format`` ``float`` or ``base64``), so any OpenAI client can use it, plus:

* ``batch_size`` (texts per forward pass; the client's own, so a vector is the one the client
  would have computed itself, bit for bit), ``truncate`` (the client's ``oversize='truncate'``)
  and ``precision`` (the client's ``float32`` or ``bfloat16``; a model asked for in the other
  precision is loaded in that one too);
* the window is checked with the model's own tokenizer: a text over ``max_seq_length`` word
  pieces is refused (400, naming the text and its count) unless ``truncate`` is set. The client
  fits texts before sending them, so a refusal means a client bug, never a silent cut;
* ``GET /v1/models`` lists the models with their dimension and window; ``GET /health``.

A request that is not one of these gets a 4xx with a JSON error in OpenAI's shape
(``{"error": {"message": …}}``) saying what was wrong: a body that is not a JSON object, an
``input`` that is not a string or a non-empty list of strings, a field of the wrong type, a model
not served here. A body over :data:`MAX_BODY_BYTES` (64 MiB; ``CTXWIN_EMBEDDING_SERVER_MAX_BODY``,
bytes, when the server starts) gets a 413 naming the limit before any of it is read. Each
connection has its own thread and the system holds up to 128 waiting connections
(:mod:`~ctxwin_dagster.backends.loopback`), so many runs connecting at once are all served, and a
client slow to send its texts holds up no one.

It serves the models it was started with (``--model``, repeatable; the shipped
all-MiniLM-L6-v2 by default), loaded in the background from the moment it starts, so a command
does not wait for the load before launching its runs. Requests are encoded one at a time (the
model uses every core for each); runs of several documents share it in turn. Batching requests
of different documents together would change each text's padding, so vectors would no longer be
the same as an in-process run's, for no gain on a CPU (a forward pass of 64 texts already keeps
both cores busy).

At start it logs ``listening on http://127.0.0.1:PORT`` and the models it serves (its log is
``ctxwin-embeddings.log`` in the command's home). The server stops when its parent closes its stdin (the command ends, however it ends) and on
SIGTERM or SIGINT. Run it by hand with::

    python -m ctxwin_dagster.backends.embeddings.server --port 8765 [--model FOLDER]
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from ctxwin_dagster.backends.child import ChildServer, watch_parent
from ctxwin_dagster.backends.embeddings.local import ENV_VAR, LOCAL_MODEL_NAME
from ctxwin_dagster.backends.embeddings.model_host import ModelHost
from ctxwin_dagster.backends.loopback import (
    LoopbackServer,
    RequestError,
    check_field,
    limit_from_env,
    read_json_object,
    send_error,
    send_json,
)
from ctxwin_dagster.core.json_types import JSONObject

__all__ = ["ENV_VAR", "MAX_BODY_BYTES", "READY_PREFIX", "EmbeddingService", "serve", "served_models"]

log = logging.getLogger(__name__)

#: The line the server prints on stdout once it listens: ``READY_PREFIX + url``.
READY_PREFIX = "ctxwin embedding server listening on "
#: The largest request body read (bytes); ``CTXWIN_EMBEDDING_SERVER_MAX_BODY`` when the server starts.
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_BODY_ENV = "CTXWIN_EMBEDDING_SERVER_MAX_BODY"


class _Server(LoopbackServer):
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], host: ModelHost, *, max_body: int = MAX_BODY_BYTES) -> None:
        super().__init__(address, _Handler)
        self.host = host
        self.max_body = max_body


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # The headers and the body go out as two writes: with Nagle's algorithm on, the body waited
    # for the client's delayed ACK, about 40 ms on every request (60 ms a request instead of 10).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        log.debug("embedding server: " + format, *args)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        host = self.server.host
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            send_json(self, 200, {"object": "list", "data": host.describe()})
        elif self.path.rstrip("/") == "/health":
            send_json(
                self,
                200,
                {
                    "loaded": host.loaded,
                    "error": host.load_error,
                    "load_seconds": round(host.load_seconds, 2),
                    "pid": os.getpid(),
                    "models": host.describe(),
                },
            )
        else:
            send_error(
                self, RequestError(404, f"no such path {self.path}; use POST /v1/embeddings, GET /v1/models or /health")
            )

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
            send_error(self, RequestError(404, f"no such path {self.path}; use POST /v1/embeddings"), close=True)
            return
        refusal: RequestError | None = None
        try:
            body = read_json_object(self, max_bytes=self.server.max_body, setting=MAX_BODY_ENV)
            request = _EmbeddingsRequest(body)
            vecs, tokens = self.server.host.encode(
                request.model,
                request.texts,
                batch_size=request.batch_size,
                truncate=request.truncate,
                precision=request.precision,
            )
        except RequestError as exc:
            refusal = exc
        except KeyError as exc:
            refusal = RequestError(404, str(exc).strip("'\""), param="model", code="model_not_found")
        except ValueError as exc:
            refusal = RequestError(400, str(exc))
        except Exception as exc:
            refusal = RequestError(500, f"{type(exc).__name__}: {exc}")
        if refusal is not None:
            # A refused body may be partly unread: the connection carries no further request.
            send_error(self, refusal, close=True)
            return
        as_base64 = request.encoding_format == "base64"
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if as_base64 else v.tolist(),
            }
            for i, v in enumerate(vecs)
        ]
        send_json(
            self,
            200,
            {
                "object": "list",
                "data": data,
                "model": request.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )


class _EmbeddingsRequest:
    """The fields of one ``POST /v1/embeddings``, checked (see the module docstring)."""

    def __init__(self, body: JSONObject) -> None:
        texts = body.get("input")
        if texts is None:
            raise RequestError(400, "input is missing; send a string or a list of strings", param="input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise RequestError(400, "input must be a string or a list of strings", param="input")
        if not texts:
            raise RequestError(400, "input is an empty list; send at least one text", param="input")
        self.texts: list[str] = [t for t in texts if isinstance(t, str)]  # all of them (checked above)
        self.model: str = check_field(body, "model", str, "the name of a served model") or ""
        batch_size = check_field(body, "batch_size", int, "a whole number >= 1")
        self.batch_size: int = 64 if batch_size is None else batch_size
        if self.batch_size < 1:
            raise RequestError(400, f"batch_size must be >= 1; got {self.batch_size}", param="batch_size")
        self.truncate: bool = bool(check_field(body, "truncate", bool, "true or false"))
        self.precision: str | None = check_field(body, "precision", str, "'float32' or 'bfloat16'") or None
        self.encoding_format: str = check_field(body, "encoding_format", str, "'float' or 'base64'") or "float"
        if self.encoding_format not in ("float", "base64"):
            raise RequestError(
                400,
                f"encoding_format must be 'float' or 'base64'; got {self.encoding_format!r}",
                param="encoding_format",
            )


def serve(
    models: list[str], *, host: str = "127.0.0.1", port: int = 0, device: str = "cpu", watch_stdin: bool = False
) -> None:
    """Serve until SIGTERM/SIGINT (or, with ``watch_stdin``, until stdin closes)."""
    max_body = limit_from_env(MAX_BODY_ENV, MAX_BODY_BYTES)
    models_host = ModelHost(models, device=device)
    server = _Server((host, port), models_host, max_body=max_body)
    models_host.load_in_background()
    url = f"http://{host}:{server.server_address[1]}"
    log.info(
        "embedding server: listening on %s (pid %d), serving %s; bodies up to %s bytes",
        url,
        os.getpid(),
        ", ".join(models_host.embedders),
        f"{max_body:,}",
    )
    print(READY_PREFIX + url, flush=True)

    def stop(*_: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if watch_stdin:
        watch_parent(stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


def served_models(embeddings: Mapping[str, object] | None) -> list[str]:
    """The models a server should hold for these embeddings settings (the keys of
    ``EmbeddingsResource``): ``[model]`` for the local provider (the default), ``[]`` otherwise."""
    settings = dict(embeddings or {})
    if (settings.get("provider") or "local") != "local":
        return []
    return [str(settings.get("model") or "").strip() or LOCAL_MODEL_NAME]


class EmbeddingService(ChildServer):
    """This server as a child process of a command (:class:`~ctxwin_dagster.backends.child.ChildServer`):
    :meth:`start` returns its URL once it listens (the models load meanwhile); it stops with
    :meth:`stop`, or when the command ends however it ends (its stdin is a pipe from the command).

    Example::

        with EmbeddingService(["all-MiniLM-L6-v2"], log=Path("home/ctxwin-embeddings.log")) as service:
            env = {**os.environ, ENV_VAR: service.start()}
    """

    def __init__(self, models: list[str], *, log: Path, timeout_s: float = 60.0) -> None:
        self.models = list(models)
        args = ["--watch-stdin"]
        for model in self.models:
            args += ["--model", model]
        super().__init__(
            __name__,
            args,
            ready_prefix=READY_PREFIX,
            log=log,
            what="the embedding server",
            timeout_s=timeout_s,
            # Each request is read in a thread of its own, and glibc gives threads memory arenas of their
            # own (up to 8 per core) that it keeps: 10,240 texts in 160 requests peaked at 2.15 GB with
            # the default, 1.41 GB with two arenas, at the same speed. In bfloat16 the model runs on
            # oneDNN, which keeps a compiled primitive for every shape of batch it has seen (up to
            # 1,024): a corpus sends batches of every size and length, so the server grew with the
            # corpus (3.0 GB after 11 minutes of a 1,000-document run). Without that cache a
            # 40-document run peaked at 965 MB instead of 1,255 MB, flat after its first 25 requests,
            # for the same CPU (116 s against 115 s). The model's threads sleep between the steps of
            # a batch instead of spinning (see ``local._load_sentence_transformer``). A user's own
            # settings are kept.
            env={
                "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
                "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
                "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2"),
                "ONEDNN_PRIMITIVE_CACHE_CAPACITY": os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0"),
            },
            drop_env=(ENV_VAR,),
            hint=f"set {ENV_VAR}=off to load the model in each run instead",
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed on stdout)")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="all-MiniLM-L6-v2 (default) or a sentence-transformers folder; repeatable",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--watch-stdin", action="store_true", help="stop when stdin closes (the parent ended)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    serve(args.model, host=args.host, port=args.port, device=args.device, watch_stdin=args.watch_stdin)
    log.info("embedding server: stopped")
    # Leave without the interpreter's own shutdown: once a model has run, its final garbage
    # collection blocked for more than 30 s here (torch), and the command that started this
    # server waited 10 s at every end before killing it. Nothing is left to write.
    logging.shutdown()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
