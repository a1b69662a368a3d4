"""The real Dagster webserver on 127.0.0.1, for tests that ask it what it serves over GraphQL."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

__all__ = ["dagster_webserver", "graphql"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(base_url: str, query: str, *, variables: dict | None = None, timeout: float = 60) -> dict:
    """POST ``query`` (with its ``variables``) to the webserver's ``/graphql`` and return the decoded reply."""
    body = {"query": query, **({"variables": variables} if variables else {})}
    req = urllib.request.Request(
        base_url + "/graphql", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


@contextmanager
def dagster_webserver(
    cwd: Path, env: Mapping[str, str], *, workspace: str = "workspace.yaml", start_timeout: float = 180
) -> Iterator[str]:
    """Start ``dagster-webserver -w workspace`` in ``cwd`` on a free loopback port; yield its base
    URL once ``/server_info`` answers; stop it afterwards. Fails with its output if it exits."""
    exe = Path(sys.executable).with_name("dagster-webserver")
    port = _free_port()
    proc = subprocess.Popen(
        [str(exe), "-w", workspace, "-h", "127.0.0.1", "-p", str(port)],
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + start_timeout
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                raise AssertionError(f"webserver exited: {out[-3000:]}")
            try:
                with urllib.request.urlopen(base + "/server_info", timeout=5):
                    break
            except OSError:
                if time.time() > deadline:
                    raise AssertionError(f"webserver did not answer within {start_timeout:.0f} s") from None
                time.sleep(1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
