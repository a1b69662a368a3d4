"""The real Dagster webserver, started on loopback: the assets and partitions are served."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxwin_dagster.testing.webserver import dagster_webserver, graphql

# Runs Dagster (in process or as a webserver) and the embedding model: the slow tier.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

ASSETS_QUERY = """
{ assetNodes { assetKey { path } groupName isPartitioned
               partitionDefinition { name type } } }
"""


@pytest.fixture()
def webserver(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    # partitions the webserver should report: add them through the instance, as the sensor would
    env = {**os.environ, "DAGSTER_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from dagster import DagsterInstance as I; I.get().add_dynamic_partitions('documents', ['squad_Normans', 'cuad_todos_medical_reseller'])",
        ],
        env=env,
        check=True,
        cwd=ROOT,
    )
    with dagster_webserver(ROOT, env) as base:
        yield base


def test_webserver_serves_assets_and_partitions(webserver):
    deadline = time.time() + 120
    while True:  # the code location loads in the background
        data = graphql(webserver, ASSETS_QUERY)
        nodes = (data.get("data") or {}).get("assetNodes") or []
        if nodes or time.time() > deadline:
            break
        time.sleep(1)
    by_key = {"/".join(n["assetKey"]["path"]): n for n in nodes}
    expected = {
        "raw_documents",
        "chunks",
        "t_rag_index",
        "cc_rag_index",
        "swb_rag_index",
        "global_summaries",
        "cc_rag_contexts",
        "swb_rag_contexts",
    }
    assert expected <= set(by_key), sorted(by_key)
    assert by_key["chunks"]["isPartitioned"] and by_key["chunks"]["groupName"] == "ingest"
    keys = graphql(webserver, '{ assetNodes(assetKeys: [{path: ["chunks"]}]) { partitionKeys } }')
    assert set(keys["data"]["assetNodes"][0]["partitionKeys"]) == {"squad_Normans", "cuad_todos_medical_reseller"}


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, ended but not yet reaped, do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def test_ctxwin_dev_serves_the_ui_and_daemon_through_dg_dev(tmp_path):
    """``ctxwin dev`` (``make dev``) starts ``dg dev`` on the experiment's home: the UI answers with
    the project's assets, the daemon runs the sensors, and nothing warns that it is superseded."""
    import signal
    import socket

    import dagster as dg

    from ctxwin_dagster.testing.projects import ctxwin_env, make_project

    (tmp_path / "project").mkdir()
    root = make_project(tmp_path / "project", ["squad_Normans"], questions_per_doc=1)
    home = tmp_path / "home"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "dev.log").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxwin_dagster.cli", "dev", "--dagster-home", str(home), "--port", str(port)],
        cwd=root,
        env=ctxwin_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # started with SIGINT ignored, as a background job of a script is: dg dev must still stop
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 240
        nodes: list = []
        beats: dict = {}
        while time.time() < deadline and proc.poll() is None and not (nodes and "SENSOR" in beats):
            time.sleep(2)
            try:
                nodes = (graphql(base, ASSETS_QUERY).get("data") or {}).get("assetNodes") or []
            except OSError:
                continue
            os.environ["DAGSTER_HOME"] = str(home)
            with dg.DagsterInstance.get() as instance:
                beats = instance.get_daemon_heartbeats()
        log.seek(0)
        output = log.read()
        assert proc.poll() is None, output[-3000:]
        assert {"raw_documents", "experiment_comparison"} <= {"/".join(n["assetKey"]["path"]) for n in nodes}, output[
            -3000:
        ]
        assert "SENSOR" in beats, output[-3000:]
        assert "superseded" not in output.lower() and "SupersessionWarning" not in output
        # SIGTERM to the command alone (as a process manager sends it) stops the UI and daemon too.
        proc.send_signal(signal.SIGTERM)
        proc.wait(90)
        deadline = time.time() + 60
        while time.time() < deadline and _group_alive(proc.pid):
            time.sleep(1)
        assert not _group_alive(proc.pid), "ctxwin dev ended and left dg dev's processes running"
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
