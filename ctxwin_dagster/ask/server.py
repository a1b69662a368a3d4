"""The ask server: one process per experiment that keeps the index and the models open.

A ``ctxwin ask`` that opens everything itself spends seconds before its first word: importing
LanceDB and the embedding model's stack, loading the model, opening the tables. The answer
itself takes a fraction of a second. So ``ctxwin ask`` sends its question to a server that keeps
one :class:`~ctxwin_dagster.ask.service.Asker` open for an :class:`~.session.AskerSpec`, and
starts that server on first use:

* **where**: loopback only, on a free port, with a random token that every request must carry.
  Its address, token and process id are in a state file readable by the user only,
  ``<cache_dir>/ask-servers/<spec key>.json``; the key covers the spec and the installed code,
  so another experiment, other settings or an upgrade get another server;
* **what it serves**: ``POST /ask`` (a question with :func:`~.session.question_options`; the
  reply is what ``ctxwin ask`` prints and its exit code), ``GET /health``, ``POST /stop``. A body
  that is not a JSON object, a field of the wrong type or options that contradict each other get
  a 4xx with a JSON error in OpenAI's shape (``{"error": {"message": …}}``), which ``ctxwin ask``
  prints. A body over :data:`MAX_BODY_BYTES` (1 MiB; ``CTXWIN_ASK_SERVER_MAX_BODY``, bytes) gets
  a 413 naming the limit before any of it is read, and a question over
  :data:`MAX_QUESTION_CHARS` characters (10,000; ``CTXWIN_ASK_MAX_QUESTION_CHARS``) a 400 naming
  it; both limits are read when the server starts;
* **the API key**: ``ctxwin ask`` sends the chat model's key variables of its own environment
  (:data:`KEY_VARIABLES`, ``OPENAI_API_KEY``) with each question, over this authenticated
  loopback channel; when they differ from the server's, the server takes them and opens the
  asker again before answering, so a key the user changed (or removed) is used from the next
  question on. Keys are never logged nor written to the state file;
* **many at once**: each connection has its own thread and the system holds up to 128 waiting
  connections (:mod:`~ctxwin_dagster.backends.loopback`), so a client slow to send its question
  holds up no one. Questions themselves are answered one at a time: they share one asker;
* **fresh**: a run that writes the index (a new table version) makes the server open the asker
  again before the next question; the documents are read from their files at each question, as
  in process;
* **when it stops**: after :data:`IDLE_SECONDS` without a question (``CTXWIN_ASK_SERVER_IDLE``,
  seconds), on ``ctxwin ask --stop-server``, on SIGTERM or SIGINT; it then removes its state
  file. Nothing it serves is written anywhere;
* **off**: ``ctxwin ask --no-server``, or ``CTXWIN_ASK_SERVER=off`` in the environment, answer in
  the command's own process as before.

The client half of this module (:func:`find`, :func:`start`, :func:`stop`, :class:`Client`)
imports the standard library only, so a question to a running server costs a fraction of a
second. Run a server by hand with ``python -m ctxwin_dagster.ask.server --spec JSON --state FILE``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from ctxwin_dagster.ask.session import AskerSpec

__all__ = [
    "ENV_VAR",
    "IDLE_SECONDS",
    "KEY_VARIABLES",
    "MAX_BODY_BYTES",
    "MAX_QUESTION_CHARS",
    "Client",
    "Reply",
    "enabled",
    "find",
    "start",
    "state_file",
    "stop",
]

#: ``off`` (or ``0``/``no``/``false``) in the environment: ``ctxwin ask`` never uses or starts a server.
ENV_VAR = "CTXWIN_ASK_SERVER"
#: A server with no question for this long (seconds) stops; ``CTXWIN_ASK_SERVER_IDLE`` changes it.
IDLE_SECONDS = 900.0
#: How long a client waits for a new server to listen (it loads its models after that).
START_TIMEOUT = 60.0
#: The largest request body the server reads (bytes); ``CTXWIN_ASK_SERVER_MAX_BODY`` changes it.
MAX_BODY_BYTES = 1024 * 1024
MAX_BODY_ENV = "CTXWIN_ASK_SERVER_MAX_BODY"
#: The longest question the server answers (characters); ``CTXWIN_ASK_MAX_QUESTION_CHARS`` changes it.
MAX_QUESTION_CHARS = 10_000
MAX_QUESTION_ENV = "CTXWIN_ASK_MAX_QUESTION_CHARS"
#: The environment variables that hold the chat model's key: each question carries the client's.
KEY_VARIABLES = ("OPENAI_API_KEY",)


def enabled() -> bool:
    """False when :data:`ENV_VAR` says ``off``."""
    return os.environ.get(ENV_VAR, "").strip().lower() not in ("off", "0", "no", "false")


def state_file(spec: AskerSpec) -> Path | None:
    """Where the server of ``spec`` writes its address (None: the spec has no cache folder)."""
    if not spec.cache_dir:
        return None
    return Path(spec.cache_dir) / "ask-servers" / f"{spec.key()}.json"


# ------------------------------------------------------------------------------ client
@dataclass(frozen=True)
class Reply:
    """What ``ctxwin ask`` prints for one question, and its exit status (0: answered)."""

    status: int
    out: str = ""
    err: str = ""


class Client:
    """Questions to a running ask server (standard library only)."""

    def __init__(self, port: int, token: str, pid: int, timeout: float = 3600.0) -> None:
        self.url, self.token, self.pid, self.timeout = f"http://127.0.0.1:{port}", token, pid, timeout

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))

    def health(self, timeout: float = 2.0) -> dict[str, Any] | None:
        """The server's state, or None when it does not answer."""
        try:
            return self._call("GET", "/health", timeout=timeout)
        except (OSError, ValueError):
            return None

    def ask(self, question: str, options: dict[str, Any], *, as_json: bool) -> Reply:
        """Ask one question (see :func:`~.session.question_options`), with this environment's
        :data:`KEY_VARIABLES`. A question the server refuses gives status 1 and its reason; a
        server that went away gives status -1."""
        keys = {name: os.environ.get(name) for name in KEY_VARIABLES}
        try:
            got = self._call("POST", "/ask", {"question": question, "options": options, "json": as_json, "keys": keys})
        except urllib.error.HTTPError as exc:
            return Reply(1, err=f"ctxwin ask: {_error_message(exc)}")
        except (OSError, ValueError) as exc:
            return Reply(-1, err=f"the ask server (pid {self.pid}) did not answer: {exc}")
        return Reply(int(got["status"]), got.get("out", ""), got.get("err", ""))

    def stop(self) -> bool:
        try:
            self._call("POST", "/stop", {}, timeout=5.0)
            return True
        except (OSError, ValueError):
            return False


def _error_message(exc: urllib.error.HTTPError) -> str:
    """The message of the server's JSON error reply (OpenAI's shape), else the HTTP status."""
    try:
        return str(json.loads(exc.read().decode("utf-8"))["error"]["message"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"the ask server refused the question: HTTP {exc.code} {exc.reason}"


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def find(spec: AskerSpec) -> Client | None:
    """The running server of ``spec``, or None (no state file, or its server does not answer)."""
    path = state_file(spec)
    state = _read_state(path) if path is not None else None
    if not state:
        return None
    client = Client(int(state["port"]), str(state["token"]), int(state["pid"]))
    health = client.health()
    if health is None or health.get("key") != spec.key():
        return None
    return client


def start(spec: AskerSpec, *, log=None) -> Client | None:
    """Start a server for ``spec`` in the background (it outlives this process) and return its
    client once it listens; None when it could not start (the reason is in its log file,
    ``ask-servers/<key>.log``, and said on ``log``)."""
    path = state_file(spec)
    if path is None:
        return None
    logfile = path.with_suffix(".log")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a dead server's
        out = open(logfile, "ab")  # noqa: SIM115 - closed once the server holds its own copy
    except OSError as exc:
        if log is not None:
            print(f"ctxwin ask: no ask server ({exc}); answering in this process", file=log)
        return None
    with out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ctxwin_dagster.ask.server",
                "--spec",
                json.dumps(spec.to_dict()),
                "--state",
                str(path),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,  # not stopped with the command's terminal or process group
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        client = find(spec)
        if client is not None:
            return client
        time.sleep(0.05)
    if proc.poll() is None:
        proc.terminate()
    if log is not None:
        print(f"ctxwin ask: the ask server did not start (see {logfile}); answering in this process", file=log)
    return None


def stop(spec: AskerSpec) -> int | None:
    """Stop the running server of ``spec``; its pid, or None when none was running."""
    client = find(spec)
    if client is None:
        return None
    client.stop()
    return client.pid


# ------------------------------------------------------------------------------ server
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
        self.asker: Any = None
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
        self, question: str, options: dict[str, Any], as_json: bool, keys: dict[str, str | None] | None = None
    ) -> dict[str, Any]:
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


def _warm(asker: Any) -> None:
    """Load the embedding model and open the tables now, not at the first question."""
    for variant in ("swb", "cc", "t"):
        try:
            asker.retrieve("ctxwin", variant=variant)
        except Exception as exc:  # noqa: BLE001 - a table that is missing fails its question later, with its message
            print(f"warm-up of the {variant} index: {exc}", flush=True)


def _handler(service: _AskService, token: str, server_stop: threading.Event, limits: _Limits):
    from ctxwin_dagster.backends.loopback import RequestError, read_json_object, send_error, send_json

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # every reply has its length; the client closes after it
        disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
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
    options: dict[str, Any]
    as_json: bool
    keys: dict[str, str | None] | None


#: The type of each option of :func:`~.session.question_options` (None: not given).
_OPTION_KINDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    **dict.fromkeys(("variant", "doc", "mode", "retrieval"), (str, "a string")),
    **dict.fromkeys(("no_enhance", "hybrid"), (bool, "true or false")),
    **dict.fromkeys(
        (
            "neighbors",
            "window_chars",
            "focus_chars",
            "opening_chars",
            "k",
            "route_to",
            "window_tokens",
            "overlap_tokens",
        ),
        (int, "a whole number"),
    ),
    "early_stop": ((int, float), "a number from 0 to 1"),
}


def _checked_question(body: dict[str, Any], max_chars: int) -> _Question:
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
        json.dump({"pid": os.getpid(), "port": httpd.server_address[1], "token": token, "key": service.key}, fh)
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
        current = _read_state(state)
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
