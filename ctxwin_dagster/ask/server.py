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

This module is the client half (:func:`find`, :func:`start`, :func:`stop`, :class:`Client`); it
imports the standard library only, so a question to a running server costs a fraction of a
second. The server itself runs :mod:`.server_process`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO, TypedDict

from ctxwin_dagster.ask.session import AskerSpec
from ctxwin_dagster.core.json_types import JSONObject

__all__ = [
    "ENV_VAR",
    "IDLE_SECONDS",
    "KEY_VARIABLES",
    "MAX_BODY_BYTES",
    "MAX_QUESTION_CHARS",
    "Client",
    "Reply",
    "ServerState",
    "enabled",
    "find",
    "read_state",
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


class ServerState(TypedDict):
    """The state file of a running server: its process, port, token and spec key."""

    pid: int
    port: int
    token: str
    key: str


def read_state(path: Path) -> ServerState | None:
    """The state file at ``path``, or None when it cannot be read."""
    try:
        state: ServerState = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state


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

    def _call(self, method: str, path: str, body: JSONObject | None = None, timeout: float | None = None) -> JSONObject:
        """The server's JSON object reply (ValueError: the reply is not one)."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
            got = json.loads(resp.read().decode("utf-8"))
        if not isinstance(got, dict):
            raise ValueError(f"the reply is not a JSON object: {got!r}")
        return got

    def health(self, timeout: float = 2.0) -> JSONObject | None:
        """The server's state, or None when it does not answer."""
        try:
            return self._call("GET", "/health", timeout=timeout)
        except (OSError, ValueError):
            return None

    def ask(self, question: str, options: JSONObject, *, as_json: bool) -> Reply:
        """Ask one question (see :func:`~.session.question_options`), with this environment's
        :data:`KEY_VARIABLES`. A question the server refuses gives status 1 and its reason; a
        server that went away gives status -1."""
        keys: JSONObject = {name: os.environ.get(name) for name in KEY_VARIABLES}
        try:
            got = self._call("POST", "/ask", {"question": question, "options": options, "json": as_json, "keys": keys})
            return _reply_of(got)
        except urllib.error.HTTPError as exc:
            return Reply(1, err=f"ctxwin ask: {_error_message(exc)}")
        except (OSError, ValueError) as exc:
            return Reply(-1, err=f"the ask server (pid {self.pid}) did not answer: {exc}")

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


def _reply_of(got: JSONObject) -> Reply:
    """The :class:`Reply` in the server's answer to ``POST /ask`` (ValueError: there is none)."""
    status, out, err = got.get("status"), got.get("out", ""), got.get("err", "")
    if not isinstance(status, int) or not isinstance(out, str) or not isinstance(err, str):
        raise ValueError(f"the reply is not an answer: {got!r}")
    return Reply(status, out, err)


def find(spec: AskerSpec) -> Client | None:
    """The running server of ``spec``, or None (no state file, or its server does not answer)."""
    path = state_file(spec)
    state = read_state(path) if path is not None else None
    if not state:
        return None
    client = Client(int(state["port"]), str(state["token"]), int(state["pid"]))
    health = client.health()
    if health is None or health.get("key") != spec.key():
        return None
    return client


def start(spec: AskerSpec, *, log: TextIO | None = None) -> Client | None:
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
                "ctxwin_dagster.ask.server_process",
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
