"""The real Dagster webserver, started on loopback: the assets and partitions are served."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

# Runs Dagster (in process or as a webserver) and the embedding model: the slow tier.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

ASSETS_QUERY = """
{ assetNodes { assetKey { path } groupName isPartitioned
               partitionDefinition { name type } } }
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, query: str) -> dict:
    req = urllib.request.Request(url, data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture()
def webserver(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    # partitions the webserver should report: add them through the instance, as the sensor would
    env = {**os.environ, "DAGSTER_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    subprocess.run(
        [sys.executable, "-c", "from dagster import DagsterInstance as I; I.get().add_dynamic_partitions('documents', ['squad_Normans', 'cuad_todos_medical_reseller'])"],
        env=env, check=True, cwd=ROOT,
    )
    port = _free_port()
    exe = Path(sys.executable).with_name("dagster-webserver")
    proc = subprocess.Popen(
        [str(exe), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"webserver exited: {proc.stdout.read().decode(errors='replace')[-3000:]}")
            try:
                with urllib.request.urlopen(base + "/server_info", timeout=5):
                    break
            except OSError:
                if time.time() > deadline:
                    raise AssertionError("webserver did not answer within 180 s") from None
                time.sleep(1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_webserver_serves_assets_and_partitions(webserver):
    graphql = webserver + "/graphql"
    deadline = time.time() + 120
    while True:  # the code location loads in the background
        data = _post(graphql, ASSETS_QUERY)
        nodes = (data.get("data") or {}).get("assetNodes") or []
        if nodes or time.time() > deadline:
            break
        time.sleep(1)
    by_key = {"/".join(n["assetKey"]["path"]): n for n in nodes}
    expected = {"raw_documents", "chunks", "t_rag_index", "cc_rag_index", "swb_rag_index",
                "global_summaries", "cc_rag_contexts", "swb_rag_contexts"}
    assert expected <= set(by_key), sorted(by_key)
    assert by_key["chunks"]["isPartitioned"] and by_key["chunks"]["groupName"] == "ingest"
    keys = _post(graphql, '{ assetNodes(assetKeys: [{path: ["chunks"]}]) { partitionKeys } }')
    assert set(keys["data"]["assetNodes"][0]["partitionKeys"]) == {"squad_Normans", "cuad_todos_medical_reseller"}
