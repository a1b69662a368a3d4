"""The real Dagster webserver, started on loopback: the assets and partitions are served."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import pytest

from ctxwin_dagster.testing.webserver import dagster_webserver, graphql

# Runs Dagster (in process or as a webserver) and the embedding model: the slow tier.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

ASSETS_QUERY = """
{ assetNodes { assetKey { path } groupName isPartitioned dependencyKeys { path }
               partitionDefinition { name type } } }
"""
VARIANTS = ("t_rag", "cc_rag", "swb_rag")


def readme_edges() -> set[tuple[str, str]]:
    """(input, asset) of each line of the README's asset graph block, ``{variant}`` expanded."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## The asset graph", 1)[1].split("```\n", 2)[1]
    edges = set()
    for line in block.splitlines():
        asset, _, inputs = line.partition("◄")
        names = [n.strip() for n in re.sub(r"\(.*?\)", "", inputs).split(",") if n.strip()]  # (…) is a note
        for variant in VARIANTS if "{variant}" in line else ("",):
            for name in names:
                edges.add((name.replace("{variant}", variant), asset.strip().replace("{variant}", variant)))
    return edges


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
    # the README's asset graph is the UI's lineage graph, edge for edge
    ui_edges = {("/".join(d["path"]), key) for key, n in by_key.items() for d in n["dependencyKeys"]}
    drawn = readme_edges()
    assert drawn == ui_edges, (
        f"only in the README: {sorted(drawn - ui_edges)}; only in the UI: {sorted(ui_edges - drawn)}"
    )
    assert f"({len(ui_edges)} edges;" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert by_key["chunks"]["isPartitioned"] and by_key["chunks"]["groupName"] == "ingest"
    keys = graphql(webserver, '{ assetNodes(assetKeys: [{path: ["chunks"]}]) { partitionKeys } }')
    assert set(keys["data"]["assetNodes"][0]["partitionKeys"]) == {"squad_Normans", "cuad_todos_medical_reseller"}


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of process ``pid`` from /proc, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _tree(root: int) -> dict[int, int]:
    """Every running process that descends from ``root`` (``root`` included): pid -> start time."""
    stats = {int(p.name): st for p in Path("/proc").glob("[0-9]*") if (st := _stat(int(p.name))) is not None}
    found = {root: stats[root][2]} if root in stats else {}
    grew = True
    while grew:
        grew = False
        for pid, (state, parent, started) in stats.items():
            if parent in found and pid not in found and state != "Z":
                found[pid] = started
                grew = True
    return found


def _alive(tree: dict[int, int]) -> list[int]:
    """The processes of ``tree`` still running: the same pid and start time (a zombie, ended but
    not yet reaped, does not count)."""
    return [
        pid for pid, started in tree.items() if (st := _stat(pid)) is not None and st[0] != "Z" and st[2] == started
    ]


def _command_lines(pids: list[int]) -> str:
    lines = []
    for pid in pids:
        try:
            lines.append(f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200])
        except OSError:
            continue
    return "\n".join(lines)


def _assert_ended(tree: dict[int, int], message: str) -> None:
    """Every process of ``tree`` ends within a minute (a hang guard); else fail with ``message``
    and the processes left."""
    deadline = time.time() + 60
    while time.time() < deadline and _alive(tree):
        time.sleep(1)
    assert not _alive(tree), f"{message}:\n" + _command_lines(_alive(tree))


@contextmanager
def _ctxwin_dev(
    tmp_path: Path, docs: tuple[str, ...] = ("squad_Normans",)
) -> Iterator[tuple[subprocess.Popen, TextIO, dict[int, int], str, Path]]:
    """``ctxwin dev`` as a subprocess on a one-document project, once the UI serves the project's
    assets and the daemon's sensors beat: the process, its output (a file), its process tree
    (recorded then), the UI's address and the Dagster home. Whatever of that tree is still running afterwards is killed."""
    import signal
    import socket

    import dagster as dg

    from ctxwin_dagster.testing.projects import ctxwin_env, make_project

    (tmp_path / "project").mkdir()
    root = make_project(tmp_path / "project", list(docs), questions_per_doc=1)
    home = tmp_path / "home"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "dev.log").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxwin_dagster.cli", "dev", "--dagster-home", str(home), "--port", str(port)],
        cwd=root,
        env=ctxwin_env(own_servers=True),  # ctxwin dev starts and ends its own servers
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # started with SIGINT ignored, as a background job of a script is: dg dev must still stop
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    base = f"http://127.0.0.1:{port}"
    tree: dict[int, int] = {}
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
        tree = _tree(proc.pid)
        yield proc, log, tree, base, home
    finally:
        for pid in _alive({**_tree(proc.pid), **tree}):
            os.kill(pid, signal.SIGKILL)
        proc.wait(60)
        log.close()


def test_ctxwin_dev_serves_the_ui_and_daemon_through_dg_dev(tmp_path):
    """``ctxwin dev`` (``make dev``) starts ``dg dev`` on the experiment's home: the UI answers with
    the project's assets, the daemon runs the sensors, and nothing warns that it is superseded;
    SIGTERM to the command alone (as a process manager sends it) stops the UI and daemon too."""
    import signal

    with _ctxwin_dev(tmp_path) as (proc, log, tree, _, _):
        log.seek(0)
        output = log.read()
        assert "superseded" not in output.lower() and "SupersessionWarning" not in output
        # The daemon's lines are shown, but not a sensor tick that found nothing to do
        # (ctxwin_command_runs ticks every second; the sensors have beaten by now).
        time.sleep(5)
        log.seek(0)
        output = log.read()
        assert "dagster.daemon" in output, output[-3000:]
        assert "Checking for new runs for sensor" not in output and " skipped: " not in output, output[-3000:]
        proc.send_signal(signal.SIGTERM)
        proc.wait(90)
        _assert_ended(tree, "ctxwin dev ended and left processes running")


def test_kill_9_of_ctxwin_dev_leaves_none_of_its_processes(tmp_path):
    """``kill -9`` of ``ctxwin dev``, which no handler of it sees, still ends ``dg dev``, the
    webserver, the daemon, the code servers and the embedding server it started."""
    import signal

    with _ctxwin_dev(tmp_path) as (proc, _, tree, _, _):
        started = _command_lines(list(tree))
        for part in ("dg dev", "dagster_webserver", "dagster._daemon", "dagster code-server", "embeddings.server"):
            assert part in started, started
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        _assert_ended(tree, "kill -9 of ctxwin dev left processes running")


LAUNCH_RUN = """
mutation ($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""

LAUNCH_BACKFILL = """
mutation ($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}
"""

RUNS_WITH_TAGS = "{ runsOrError { ... on Runs { results { runId status tags { key value } } } } }"

SELECTED = [{"path": ["raw_documents"]}, {"path": ["chunks"]}]
CHECKS = [{"assetKey": {"path": ["chunks"]}, "name": "offsets_exact"}]


def _runs_by_id(base: str) -> dict[str, dict]:
    runs = graphql(base, RUNS_WITH_TAGS)["data"]["runsOrError"]["results"]
    return {r["runId"]: {**r, "tags": {t["key"]: t["value"] for t in r["tags"]}} for r in runs}


def _wait_for(check, what: str, timeout: float = 300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = check()
        if found:
            return found
        time.sleep(2)
    raise AssertionError(f"{what} within {timeout:.0f} s")


def test_the_ui_materializes_one_partition_and_backfills_several_in_one_run(tmp_path):
    """As a person does in the UI, through the real webserver and daemon of ``ctxwin dev``: one
    document's partition materialized from the asset's page (Dagster's ``__ASSET_JOB`` with the
    partition's tag) is a run of that document alone; a backfill of two documents is one run over
    the range of both (the assets' BackfillPolicy), and each document gets its own materialization."""
    import dagster as dg

    docs = ("squad_Normans", "cuad_todos_medical_reseller")
    with _ctxwin_dev(tmp_path, docs) as (proc, log, _, base, home):
        partitions = _wait_for(  # the documents sensor adds the partitions on its first tick
            lambda: (
                set(
                    graphql(base, '{ assetNodes(assetKeys: [{path: ["chunks"]}]) { partitionKeys } }')["data"][
                        "assetNodes"
                    ][0]["partitionKeys"]
                )
                == set(docs)
            ),
            "the documents sensor added the partitions",
        )
        assert partitions
        params = {
            "selector": {
                "repositoryLocationName": "ctxwin",
                "repositoryName": "__repository__",
                "jobName": "__ASSET_JOB",
                "assetSelection": SELECTED,
                "assetCheckSelection": CHECKS,  # the UI selects the checks of the assets it materializes
            },
            "mode": "default",
            "runConfigData": {},
            "executionMetadata": {"tags": [{"key": "dagster/partition", "value": "squad_Normans"}]},
        }
        launched = graphql(base, LAUNCH_RUN, variables={"params": params})["data"]["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched.get("message", launched)
        one = launched["run"]["runId"]
        run = _wait_for(
            lambda: (r := _runs_by_id(base)[one])["status"] in ("SUCCESS", "FAILURE", "CANCELED") and r,
            "the UI's run of one partition ended",
        )
        log.seek(0)
        assert run["status"] == "SUCCESS", log.read()[-3000:]
        assert run["tags"]["dagster/partition"] == "squad_Normans"
        # the run carries the reason ctxwin run gives its own, by the same rules, over what it selected
        never = "new document"
        assert run["tags"]["ctxwin/reason"] == never, run["tags"]

        # the comparison launched from its page gets its own reason, as ctxwin run gives it
        whole = {
            "selector": {
                "repositoryLocationName": "ctxwin",
                "repositoryName": "__repository__",
                "jobName": "__ASSET_JOB",
                "assetSelection": [{"path": ["experiment_comparison"]}],
            },
            "mode": "default",
            "runConfigData": {},
        }
        launched = graphql(base, LAUNCH_RUN, variables={"params": whole})["data"]["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched.get("message", launched)
        comparison = launched["run"]["runId"]
        tagged = _wait_for(
            lambda: (r := _runs_by_id(base)[comparison])["status"] in ("SUCCESS", "FAILURE", "CANCELED") and r,
            "the UI's run of the comparison ended",
        )
        assert tagged["tags"].get("ctxwin/reason") == "never materialized: experiment_comparison", tagged["tags"]

        backfill = graphql(
            base,
            LAUNCH_BACKFILL,
            variables={"params": {"partitionNames": list(docs), "assetSelection": SELECTED, "fromFailure": False}},
        )["data"]["launchPartitionBackfill"]
        assert backfill["__typename"] == "LaunchBackfillSuccess", backfill
        runs = _wait_for(
            lambda: (
                (
                    found := [
                        r
                        for r in _runs_by_id(base).values()
                        if r["tags"].get("dagster/backfill") == backfill["backfillId"]
                    ]
                )
                and all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in found)
                and found
            ),
            "the backfill's runs ended",
        )
        assert [r["status"] for r in runs] == ["SUCCESS"], runs  # one run for both documents
        tags = runs[0]["tags"]
        assert {tags["dagster/asset_partition_range_start"], tags["dagster/asset_partition_range_end"]} == set(docs)
        # squad_Normans was materialized by the first run: up to date, run on request; the other never was
        assert tags["ctxwin/documents"] in {f"{a} … {b} (2 documents)" for a, b in (docs, docs[::-1])}
        assert tags["ctxwin/reason"] in {
            f"{never} (+1 other reason)",
            "up to date; run on request (+1 other reason)",
        }

        os.environ["DAGSTER_HOME"] = str(home)
        with dg.DagsterInstance.get() as instance:
            for doc in docs:
                records = instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=dg.AssetKey("chunks"), asset_partitions=[doc]), limit=10
                ).records
                assert records[0].run_id == runs[0]["runId"]
                n_chunks = records[0].asset_materialization.metadata["n_chunks"].value
                assert n_chunks > 0 and records[0].asset_materialization.partition == doc
            counts = {
                doc: instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=dg.AssetKey("chunks"), asset_partitions=[doc]), limit=10
                )
                .records[0]
                .asset_materialization.metadata["n_chunks"]
                .value
                for doc in docs
            }
            assert counts["squad_Normans"] != counts["cuad_todos_medical_reseller"]  # each its own metadata
