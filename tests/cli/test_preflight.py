"""Each configured endpoint is checked once before any run: reachable, key accepted, model known."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxwin_dagster.backends.planning.preflight import EndpointError, check_endpoint
from ctxwin_dagster.testing import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_check_endpoint_names_what_is_wrong():
    with FakeOpenAIServer(models=["m1"], api_key="right") as srv:
        assert check_endpoint("contextualizer", "m1", srv.base_url, "right").endswith("ok")
        with pytest.raises(EndpointError, match="rejected the API key"):
            check_endpoint("contextualizer", "m1", srv.base_url, "wrong")
        with pytest.raises(EndpointError, match="does not know the model 'm2'; it serves: m1"):
            check_endpoint("answerer", "m2", srv.base_url, "right")
    with pytest.raises(EndpointError, match="cannot reach"):
        check_endpoint("contextualizer", "m1", f"http://127.0.0.1:{_closed_port()}/v1", "k")


def test_a_local_model_needs_no_server_or_key_but_its_file(monkeypatch):
    """`make run-llm` configures local:smollm2: ctxwin serves it itself (llama.cpp on loopback, or
    in process), so it is never checked as an OpenAI model (which would stop the run for want of
    OPENAI_API_KEY)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    served = check_endpoint("contextualizer", "local:smollm2", None, None)
    assert (
        served == "contextualizer: local:smollm2 (SmolLM2-135M-Instruct.Q4_1.gguf; llama.cpp server on loopback, GGUF)"
    )
    monkeypatch.setenv("CTXWIN_CHAT_SERVER", "off")
    assert "in process" in check_endpoint("contextualizer", "local:smollm2", None, None)
    with pytest.raises(EndpointError, match="answerer: .*no-such-model"):
        check_endpoint("answerer", "local:no-such-model", None, None)


def test_ctxwin_run_stops_before_any_run_on_an_unreachable_server(tmp_path):
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "data" / "documents" / "squad_Normans.txt", tmp_path / "docs")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DAGSTER_HOME": str(tmp_path / "home")}
    started = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxwin_dagster.cli",
            "run",
            "--documents",
            "docs",
            "--model",
            "m",
            "--base-url",
            f"http://127.0.0.1:{_closed_port()}/v1",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.perf_counter() - started
    assert out.returncode != 0
    errors = [line for line in out.stderr.splitlines() if line.strip()]
    assert (
        len(errors) == 1
        and "contextualizer: cannot reach http://127.0.0.1" in errors[0]
        and "nothing was run" in errors[0]
    ), out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert not (tmp_path / "home" / "ctxwin-daemon.log").exists()
    print(f"stopped after {took:.1f}s")
