"""The command's embedding server (backends/embeddings/server.py), as a real child process on
loopback: the vectors a run gets through it are the ones it would compute itself, bit for bit;
nothing over the model's window is cut silently; a server that is gone or serves another model
leaves the run to load the model itself; and the server ends with the command that started it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from ctxwin_dagster.backends.embeddings.local import LocalEmbedder
from ctxwin_dagster.backends.embeddings.server import ENV_VAR, EmbeddingService, served_models

TEXTS = [f"Article {i}: the provider shall keep the logs for {i} months." for i in range(40)] + ["short", "short"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "embeddings.log"
    with EmbeddingService(["all-MiniLM-L6-v2"], log=log) as service:
        yield service.start(), service, log


def test_vectors_through_the_server_are_the_ones_computed_in_process(server, monkeypatch):
    url, _, _ = server
    monkeypatch.setenv(ENV_VAR, url)
    served = LocalEmbedder(batch_size=16)
    got = served.embed(TEXTS)
    assert served.served_by == url
    monkeypatch.setenv(ENV_VAR, "off")
    local = LocalEmbedder(batch_size=16)
    assert local.served_by == ""
    assert np.array_equal(got, local.embed(TEXTS))


def test_a_run_gets_the_precision_it_asks_for(server, monkeypatch):
    """The server runs the model in its own precision and loads the other one for a run that
    asks for it, so vectors never depend on whether a server was running."""
    url, _, _ = server
    for precision in ("float32", "bfloat16"):
        monkeypatch.setenv(ENV_VAR, url)
        served = LocalEmbedder(batch_size=16, precision=precision)
        got = served.embed(TEXTS[:8])
        assert served.served_by == url
        monkeypatch.setenv(ENV_VAR, "off")
        assert np.array_equal(got, LocalEmbedder(batch_size=16, precision=precision).embed(TEXTS[:8])), precision


def test_the_server_runs_without_a_cache_of_shapes_and_with_two_arenas(server):
    """oneDNN's cache of a compiled primitive per batch shape and glibc's arena per thread made the
    server grow with the corpus; it starts with both turned down, and with torch's threads asleep
    between steps rather than spinning (a user's own values are kept)."""
    _, service, _ = server
    environ = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{service.process.pid}/environ").read_bytes().decode().split("\0")
        if "=" in item
    )
    assert environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0")
    assert environ.get("MALLOC_ARENA_MAX") == os.environ.get("MALLOC_ARENA_MAX", "2")
    assert environ.get("OMP_WAIT_POLICY") == os.environ.get("OMP_WAIT_POLICY", "PASSIVE")


def test_the_server_refuses_text_over_the_window_and_says_why(server):
    url, _, _ = server
    reply = httpx.post(f"{url}/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": ["word " * 400]}, timeout=60)
    assert reply.status_code == 400
    assert "reads at most 256" in reply.json()["error"]["message"]
    # Asked to, the model cuts it (the client's oversize='truncate', which it counts itself).
    cut = httpx.post(
        f"{url}/v1/embeddings",
        json={"model": "all-MiniLM-L6-v2", "input": ["word " * 400], "truncate": True},
        timeout=60,
    )
    assert cut.status_code == 200 and cut.json()["usage"]["prompt_tokens"] == 256


def test_an_openai_client_can_use_it(server):
    from openai import OpenAI

    url, _, _ = server
    reply = OpenAI(base_url=f"{url}/v1", api_key="unused").embeddings.create(
        model="all-MiniLM-L6-v2", input=["hello", "world"]
    )
    assert [len(d.embedding) for d in reply.data] == [384, 384]
    models = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
    assert [(m["id"], m["dim"], m["max_tokens"]) for m in models] == [("all-MiniLM-L6-v2", 384, 256)]
    assert models[0]["precision"] == LocalEmbedder().precision


def test_a_server_that_is_gone_or_serves_another_model_is_not_used(server, monkeypatch, caplog, tmp_path):
    url, _, _ = server
    caplog.set_level(logging.WARNING)
    monkeypatch.setenv(ENV_VAR, "http://127.0.0.1:9")  # nothing listens there
    emb = LocalEmbedder()
    assert emb.served_by == "" and emb.embed(["hello"]).shape == (1, 384)
    assert "cannot be used" in caplog.text
    # A model folder the server was not started with: this process loads it.
    monkeypatch.setenv(ENV_VAR, url)
    from ctxwin_dagster.backends.embeddings.local import _default_model_path

    assert LocalEmbedder(model_path=_default_model_path()).served_by == ""
    assert "does not serve" in caplog.text


def test_only_local_models_are_served():
    assert served_models(None) == ["all-MiniLM-L6-v2"]
    assert served_models({"provider": "local", "model": "/models/mine"}) == ["/models/mine"]
    assert served_models({"provider": "openai", "model": "text-embedding-3-small"}) == []


def test_the_server_ends_with_the_command_that_started_it(tmp_path):
    """The command is killed (-9): the server sees its stdin close and stops."""
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from ctxwin_dagster.backends.embeddings.server import EmbeddingService
        service = EmbeddingService(["all-MiniLM-L6-v2"], log=Path({str(tmp_path / "e.log")!r}))
        print(service.start(), service.process.pid, flush=True)
        time.sleep(600)
    """)
    command = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    url, pid = command.stdout.readline().split()
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200
    command.kill()
    command.wait(10)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            httpx.get(f"{url}/health", timeout=1)
        except httpx.TransportError:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the embedding server (pid {pid}) still answers after its command was killed")


def test_a_server_that_has_embedded_stops_at_once_when_its_command_ends(tmp_path, monkeypatch):
    """Once a model has run, the interpreter's own shutdown blocked for more than 30 s: the
    command waited 10 s at every end, then killed the server. It now leaves as soon as it stops."""
    service = EmbeddingService(["all-MiniLM-L6-v2"], log=tmp_path / "e.log")
    monkeypatch.setenv(ENV_VAR, service.start())
    assert LocalEmbedder().embed(["The provider shall keep the logs."]).shape == (1, 384)
    process = service.process
    assert process is not None and process.stdin is not None
    process.stdin.close()  # as the command's stop() does first
    process.wait(8)  # raises TimeoutExpired if the server still runs
    assert process.returncode == 0
    assert "embedding server: stopped" in (tmp_path / "e.log").read_text(encoding="utf-8")
    service.stop()
