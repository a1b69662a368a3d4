"""Probes of an HTTP server on loopback, for the tests of the project's own servers (the
embedding server and the ask server; see :mod:`ctxwin_dagster.backends.loopback`).

* :func:`burst`: one call from each of many threads, released together;
* :class:`HeldRequest`: a client slow to send its body. It sends its headers with
  ``Expect: 100-continue`` and waits for the server's ``100 Continue``, so the server's handler is
  known to be running; then it sends part of the body and holds the rest until :meth:`~HeldRequest.finish`;
* :func:`headers_only`: a POST that declares a body and sends none of it (a server that reads
  before checking the size waits for it);
* :func:`listen_backlog`: the backlog of the socket listening on a port, as ``ss`` reports it (Linux).

No probe measures time: each either gets its answer or fails after ``timeout`` seconds.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ctxwin_dagster.core.json_types import JSONValue

__all__ = ["HeldRequest", "burst", "headers_only", "listen_backlog"]

T = TypeVar("T")


def burst(call: Callable[[int], T], n: int = 50) -> list[T | Exception]:
    """``call(i)`` for ``i`` in ``range(n)``, from ``n`` threads released at once: the results,
    or the exception a call raised, in order."""
    ready = threading.Barrier(n)

    def one(i: int) -> T | Exception:
        ready.wait()
        try:
            return call(i)
        except Exception as exc:  # noqa: BLE001 - returned, for the test to count
            return exc

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def _head(path: str, length: int, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", f"Content-Length: {length}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def _reply(sock: socket.socket) -> tuple[int, JSONValue]:
    response = http.client.HTTPResponse(sock)
    response.begin()
    data = response.read()
    return response.status, json.loads(data) if data else None


class HeldRequest:
    """A POST of ``body`` to ``127.0.0.1:port`` that the server has started on and that waits for
    the rest of its body (see the module docstring). Close it with :meth:`finish` or :meth:`close`."""

    def __init__(
        self, port: int, path: str, body: bytes, *, headers: dict[str, str] | None = None, timeout: float = 60
    ):
        self.body = body
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.sendall(_head(path, len(body), {**(headers or {}), "Expect": "100-continue"}))
        interim = self.sock.makefile("rb")
        status = interim.readline()
        if b" 100 " not in status:
            raise AssertionError(f"the server did not answer Expect: 100-continue: {status!r}")
        while interim.readline() not in (b"\r\n", b"\n", b""):
            pass
        interim.close()
        self.half = len(body) // 2
        self.sock.sendall(body[: self.half])

    def finish(self) -> tuple[int, JSONValue]:
        """Send the rest of the body: the status and the JSON reply."""
        try:
            self.sock.sendall(self.body[self.half :])
            return _reply(self.sock)
        finally:
            self.close()

    def close(self) -> None:
        self.sock.close()


def headers_only(
    port: int, path: str, length: int, *, headers: dict[str, str] | None = None, timeout: float = 60
) -> tuple[int, JSONValue]:
    """A POST that declares ``length`` bytes of body and sends none: the status and the JSON reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(_head(path, length, headers or {}))
        return _reply(sock)


def listen_backlog(port: int) -> int:
    """The backlog of the socket listening on ``127.0.0.1:port`` (``ss -ltn``'s Send-Q column)."""
    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.split()
    if len(out) < 3 or out[0] != "LISTEN":
        raise AssertionError(f"no socket listens on port {port}: {out}")
    return int(out[2])
