"""The ask server's own process: the asker it keeps open, its HTTP handler, the checks of a
question, and its main loop (see :mod:`.server` for what it serves and how ``ctxwin ask`` finds,
starts and stops it).

:func:`serve` listens on loopback with a random token, writes the state file, answers until it
is idle, told to stop, or signalled, and removes the state file. Run a server by hand with
``python -m ctxwin_dagster.ask.server_process --spec JSON --state FILE``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING

from ctxwin_dagster.ask.server import (
    IDLE_SECONDS,
    KEY_VARIABLES,
    MAX_BODY_BYTES,
    MAX_BODY_ENV,
    MAX_QUESTION_CHARS,
    MAX_QUESTION_ENV,
    ServerState,
    read_state,
)
from ctxwin_dagster.ask.session import AskerSpec
from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.retrieval.options import NO_ENHANCE, RETRIEVAL_OPTIONS

if TYPE_CHECKING:
    from ctxwin_dagster.ask.service import Asker

__all__ = ["main", "serve"]


def _index_signature(lancedb: str) -> tuple[tuple[str, int], ...]:
    """Changes when a run writes a table (LanceDB adds a manifest to ``<table>.lance/_versions``).
    An object store's index (``s3://…``) has none here: its server opens it once, and
    ``ctxwin ask --stop-server`` makes the next question open it again."""
    if "://" in lancedb:
        return ()
    root = Path(lancedb)
    out = []
    for table in sorted(root.glob("*.lance")):
        with contextlib.suppress(OSError):
            out.append((table.name, (table / "_versions").stat().st_mtime_ns))
    return tuple(out)


class _AskService:
    """The server's asker: opened in the background at start, again when the index changes."""

    def __init__(self, spec: AskerSpec) -> None:
        self.spec = spec
        self.key = spec.key()
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.asker: Asker | None = None
        self.open_error: str | None = None
        self.signature: tuple[tuple[str, int], ...] = ()
        self.last_used = time.monotonic()
        self.questions = 0
        threading.Thread(target=self._open, daemon=True).start()

    def _open(self) -> None:
        with self.lock:
            self._reopen()

    def _reopen(self) -> None:
        """Open the asker (again), the lock held."""
        from ctxwin_dagster.ask.results import AskError

        try:
            if self.asker is not None:
                self.asker.close()
            self.signature = _index_signature(self.spec.lancedb)
            self.asker = self.spec.open()
            self.open_error = None
            _warm(self.asker)
        except (AskError, ValueError, OSError) as exc:
            self.asker, self.open_error = None, str(exc)
        finally:
            self.ready.set()

    def ask(
        self, question: str, options: JSONObject, as_json: bool, keys: dict[str, str | None] | None = None
    ) -> JSONObject:
        """The reply to one question; ``keys``: the client's :data:`KEY_VARIABLES` (None: keep the server's)."""
        from ctxwin_dagster.ask.results import AskError
        from ctxwin_dagster.ask.session import ask_kwargs, format_result

        self.ready.wait()
        self.last_used = time.monotonic()
        with self.lock:
            self.last_used = time.monotonic()
            new_keys = _take_keys(keys)
            if new_keys or _index_signature(self.spec.lancedb) != self.signature:
                if new_keys:
                    print("the API key changed: opening the asker again", flush=True)
                self._reopen()
            if self.asker is None:
                return {"status": 2, "err": f"ctxwin ask: {self.open_error}"}
            try:
                kwargs = ask_kwargs(options)
                if kwargs["doc_id"]:
                    kwargs["doc_id"] = self.asker.documents.resolve(kwargs["doc_id"])
                result = self.asker.ask(question, **kwargs)
            except (AskError, ValueError) as exc:
                return {"status": 1, "err": f"ctxwin ask: {exc}"}
            except Exception as exc:  # noqa: BLE001 - the client is told, the server goes on
                return {"status": 1, "err": f"ctxwin ask: {type(exc).__name__}: {exc}"}
            finally:
                self.questions += 1
                self.last_used = time.monotonic()
        out = json.dumps(result.to_dict(), ensure_ascii=False) if as_json else format_result(result)
        return {"status": 0, "out": out}


def _take_keys(keys: dict[str, str | None] | None) -> bool:
    """Put the client's key variables in this process's environment (read by the chat and
    embedding clients when the asker is opened); whether any changed."""
    changed = False
    for name, value in (keys or {}).items():
        if os.environ.get(name) == value:
            continue
        changed = True
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    return changed


def _warm(asker: Asker) -> None:
    """Load the embedding model and open the tables now, not at the first question."""
    for variant in ("swb", "cc", "t"):
        try:
            asker.retrieve("ctxwin", variant=variant)
        except Exception as exc:  # noqa: BLE001 - a table that is missing fails its question later, with its message
            print(f"warm-up of the {variant} index: {exc}", flush=True)


def _handler(
    service: _AskService, token: str, server_stop: threading.Event, limits: _Limits
) -> type[BaseHTTPRequestHandler]:
    from ctxwin_dagster.backends.loopback import RequestError, read_json_object, send_error, send_json

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # every reply has its length; the client closes after it
        disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass  # questions are not logged

        def _authorized(self) -> bool:
            if secrets.compare_digest(self.headers.get("Authorization", ""), f"Bearer {token}"):
                return True
            send_error(self, RequestError(401, "a token is needed (see the server's state file)"), close=True)
            return False

        def do_GET(self) -> None:  # noqa: N802 - the base class's name
            if not self._authorized():
                return
            if self.path == "/health":
                send_json(
                    self,
                    200,
                    {
                        "key": service.key,
                        "pid": os.getpid(),
                        "ready": service.ready.is_set(),
                        "questions": service.questions,
                        "error": service.open_error,
                    },
                )
            else:
                send_error(self, RequestError(404, f"no {self.path}; use POST /ask, GET /health or POST /stop"))

        def do_POST(self) -> None:  # noqa: N802 - the base class's name
            if not self._authorized():
                return
            try:
                if self.path not in ("/ask", "/stop"):
                    raise RequestError(404, f"no {self.path}; use POST /ask, GET /health or POST /stop")
                body = read_json_object(self, max_bytes=limits.body_bytes, setting=MAX_BODY_ENV)
                if self.path == "/stop":
                    send_json(self, 200, {"stopping": True})
                    server_stop.set()
                    return
                question = _checked_question(body, limits.question_chars)
                reply = service.ask(question.text, question.options, question.as_json, question.keys)
            except RequestError as exc:
                send_error(self, exc, close=True)
                return
            send_json(self, 200, reply)

    return Handler


@dataclass(frozen=True)
class _Limits:
    body_bytes: int = MAX_BODY_BYTES
    question_chars: int = MAX_QUESTION_CHARS


@dataclass(frozen=True)
class _Question:
    text: str
    options: JSONObject
    as_json: bool
    keys: dict[str, str | None] | None


#: What each kind of option takes, as a request names it.
_KIND_NAMES: dict[type, tuple[type | tuple[type, ...], str]] = {
    bool: (bool, "true or false"),
    int: (int, "a whole number"),
    float: ((int, float), "a number"),
}

#: The type of each option of :func:`~.session.question_options` (None: not given); the retrieval
#: options' from the one table of them.
_OPTION_KINDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    **dict.fromkeys(("variant", "doc", "mode", "retrieval"), (str, "a string")),
    NO_ENHANCE: (bool, "true or false"),
    **{o.name: _KIND_NAMES[o.kind] for o in RETRIEVAL_OPTIONS},
    **dict.fromkeys(("window_tokens", "overlap_tokens"), (int, "a whole number")),
    "early_stop": ((int, float), "a number from 0 to 1"),
}


def _checked_question(body: JSONObject, max_chars: int) -> _Question:
    """The fields of ``POST /ask``, checked.

    Raises:
        RequestError: (400) a missing, empty or too long question, a field of the wrong type,
            options :func:`~.session.ask_kwargs` refuses, or a key variable this server does not use.
    """
    from ctxwin_dagster.ask.results import AskError
    from ctxwin_dagster.ask.session import ask_kwargs
    from ctxwin_dagster.backends.loopback import RequestError, check_field

    text = check_field(body, "question", str, "a string")
    if text is None or not text.strip():
        raise RequestError(400, "question is empty; pass the question to answer", param="question")
    if len(text) > max_chars:
        raise RequestError(
            400,
            f"the question is {len(text):,} characters; the ask server answers questions of at most "
            f"{max_chars:,} ({MAX_QUESTION_ENV} when it starts changes that)",
            param="question",
            code="question_too_long",
        )
    options = check_field(body, "options", dict, "an object (the options of ctxwin ask)") or {}
    for name, (kinds, what) in _OPTION_KINDS.items():
        check_field(options, name, kinds, what)
    try:
        ask_kwargs(options)
    except (AskError, ValueError, TypeError) as exc:
        raise RequestError(400, f"options: {exc}", param="options") from None
    as_json = check_field(body, "json", bool, "true or false")
    keys = check_field(body, "keys", dict, f"an object of {', '.join(KEY_VARIABLES)}")
    for name, value in (keys or {}).items():
        if name not in KEY_VARIABLES:
            raise RequestError(400, f"keys: {name!r} is not one of {list(KEY_VARIABLES)}", param="keys")
        if value is not None and not isinstance(value, str):
            raise RequestError(400, f"keys: {name} must be a string or null", param="keys")
    return _Question(text, options, bool(as_json), keys)


def serve(spec: AskerSpec, state: Path, *, idle: float = IDLE_SECONDS) -> None:
    """Serve ``spec`` until idle for ``idle`` seconds, ``/stop``, SIGTERM or SIGINT."""
    from ctxwin_dagster.backends.loopback import LoopbackServer, limit_from_env

    limits = _Limits(limit_from_env(MAX_BODY_ENV, MAX_BODY_BYTES), limit_from_env(MAX_QUESTION_ENV, MAX_QUESTION_CHARS))
    token = secrets.token_urlsafe(24)
    server_stop = threading.Event()
    service = _AskService(spec)
    httpd = LoopbackServer(("127.0.0.1", 0), _handler(service, token, server_stop, limits))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server_stop.set())
    state.parent.mkdir(parents=True, exist_ok=True)
    tmp = state.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        written: ServerState = {"pid": os.getpid(), "port": httpd.server_address[1], "token": token, "key": service.key}
        json.dump(written, fh)
    os.replace(tmp, state)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    print(
        f"ask server pid {os.getpid()} listening on http://127.0.0.1:{httpd.server_address[1]} for {spec.lancedb} "
        f"(bodies up to {limits.body_bytes:,} bytes, questions up to {limits.question_chars:,} characters)",
        flush=True,
    )
    try:
        while not server_stop.wait(1.0):
            if time.monotonic() - service.last_used > idle and not service.lock.locked():
                print(f"idle for {idle:.0f} s: stopping after {service.questions} questions", flush=True)
                break
    finally:
        httpd.shutdown()
        current = read_state(state)
        if current is not None and current.get("pid") == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                state.unlink()
        if service.asker is not None:
            with contextlib.suppress(Exception):
                service.asker.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The ask server of one experiment (see the module docstring).")
    parser.add_argument("--spec", required=True, help="the AskerSpec as JSON")
    parser.add_argument("--state", required=True, type=Path, help="the state file to write")
    parser.add_argument("--idle", type=float, default=float(os.environ.get("CTXWIN_ASK_SERVER_IDLE") or IDLE_SECONDS))
    args = parser.parse_args(argv)
    serve(AskerSpec.from_dict(json.loads(args.spec)), args.state, idle=args.idle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
