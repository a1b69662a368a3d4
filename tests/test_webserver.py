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

ROOT = Path(__file__).resolve().parents[1]

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
        [sys.executable, "-c", "from dagster import DagsterInstance as I; I.get().add_dynamic_partitions('documents', ['squad_Normans', 'cuad_todos_medical_reseller'])"],
        env=env, check=True, cwd=ROOT,
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
    expected = {"raw_documents", "chunks", "t_rag_index", "cc_rag_index", "swb_rag_index",
                "global_summaries", "cc_rag_contexts", "swb_rag_contexts"}
    assert expected <= set(by_key), sorted(by_key)
    assert by_key["chunks"]["isPartitioned"] and by_key["chunks"]["groupName"] == "ingest"
    keys = graphql(webserver, '{ assetNodes(assetKeys: [{path: ["chunks"]}]) { partitionKeys } }')
    assert set(keys["data"]["assetNodes"][0]["partitionKeys"]) == {"squad_Normans", "cuad_todos_medical_reseller"}
