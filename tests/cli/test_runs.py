"""`ctxwin run` launches its runs on the Dagster instance as the code location of workspace.yaml,
skips what is up to date, and reruns only the document that changed.

One Dagster home and one project folder (a copy of the repository's workspace.yaml, two sample
documents, two questions each) serve the tests of this module, in order: the first run, what the
real webserver (started on loopback) says about its runs, a second run with nothing changed, and
a run after one document changed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import dagster as dg
import pytest

from ctxwin_dagster.testing.projects import make_project, run_ctxwin
from ctxwin_dagster.testing.webserver import dagster_webserver, graphql

# Runs the pipeline through Dagster (a daemon, a webserver, or in process): the slow tier.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("squad_Normans", "cuad_todos_medical_reseller")


def _runs(home) -> list[dg.DagsterRun]:
    os.environ["DAGSTER_HOME"] = str(home)
    with dg.DagsterInstance.get() as instance:
        return list(instance.get_runs())


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = make_project(tmp_path_factory.mktemp("project"), DOCS, questions_per_doc=2)
    home = root / "dagster_home"
    # The first command starts its own embedding server, as for a user (the last test checks it);
    # the later ones embed through the tests' shared one (a server of their own: 11 s of CPU each).
    first = run_ctxwin(["run", "--workers", "2"], root, home, own_servers=True)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    return root, home, first, {r.run_id for r in _runs(home)}


JOB_RUNS = """
{ repositoryOrError(repositorySelector: {repositoryLocationName: "ctxwin", repositoryName: "__repository__"}) {
    ... on Repository { jobs { name runs { runId status tags { key value } } } } } }
"""

RUNS = """
{ runsOrError { ... on Runs { results { runId jobName status
    repositoryOrigin { repositoryLocationName repositoryName } } } } }
"""


def test_runs_belong_to_the_code_location_in_the_webserver(project):
    root, home, first, _ = project
    # The comparison's reason is its own (it never ran; not an upstream asset's), named once.
    assert "experiment_comparison: never materialized" in first.stdout
    assert "experiment_comparison: experiment_comparison" not in first.stdout
    assert "runs queued" in first.stdout
    env = {**os.environ, "DAGSTER_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    with dagster_webserver(root, env) as base:
        # A new home is written without the UI's "Join the Dagster community" dialog.
        assert graphql(base, "{ shouldShowNux }")["data"]["shouldShowNux"] is False
        deadline = time.time() + 180
        data: dict = {}
        while time.time() < deadline:  # the code location loads in the background
            data = graphql(base, JOB_RUNS)
            if (data.get("data") or {}).get("repositoryOrError", {}).get("jobs"):
                break
            time.sleep(1)
        jobs = {j["name"]: j["runs"] for j in data["data"]["repositoryOrError"]["jobs"]}
        # Listed under their jobs in the code location: one run per document, and the comparison.
        partitions = sorted(
            next(t["value"] for t in r["tags"] if t["key"] == "dagster/partition") for r in jobs["all_assets_job"]
        )
        assert partitions == sorted(DOCS)
        assert all(r["status"] == "SUCCESS" for r in jobs["all_assets_job"])
        assert [r["status"] for r in jobs["comparison_job"]] == ["SUCCESS"]
        runs = graphql(base, RUNS)["data"]["runsOrError"]["results"]
        assert len(runs) == 3
        assert {
            (r["repositoryOrigin"]["repositoryLocationName"], r["repositoryOrigin"]["repositoryName"]) for r in runs
        } == {("ctxwin", "__repository__")}


def test_a_second_run_with_nothing_changed_executes_no_partition(project):
    root, home, _, _ = project
    before = {r.run_id for r in _runs(home)}
    again = run_ctxwin(["run"], root, home)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "0 of 2 documents to run (2 up to date, skipped)" in again.stdout
    assert "experiment_comparison: up to date, skipped" in again.stdout
    assert {r.run_id for r in _runs(home)} == before


def test_a_changed_document_reruns_only_its_partition_and_the_comparison(project):
    root, home, _, _ = project
    before = {r.run_id for r in _runs(home)}
    path = root / "data" / "documents" / "squad_Normans.txt"
    path.write_text(path.read_text(encoding="utf-8") + "\nThe Normans also built castles.\n", encoding="utf-8")
    changed = run_ctxwin(["run"], root, home)
    assert changed.returncode == 0, changed.stdout[-3000:] + changed.stderr[-3000:]
    assert "1 of 2 documents to run (1 up to date, skipped)" in changed.stdout
    assert "squad_Normans: raw_documents: document changed" in changed.stdout
    new = [r for r in _runs(home) if r.run_id not in before]
    assert sorted((r.job_name, r.tags.get("dagster/partition")) for r in new) == [
        ("all_assets_job", "squad_Normans"),
        ("comparison_job", None),
    ]
    os.environ["DAGSTER_HOME"] = str(home)
    with dg.DagsterInstance.get() as instance:
        partitions = {
            rec.event_log_entry.asset_materialization.partition
            for r in new
            for rec in instance.get_records_for_run(r.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
        }
    assert partitions == {"squad_Normans", None}


def test_force_reruns_every_document(project):
    root, home, _, _ = project
    forced = run_ctxwin(["run", "--force", "--doc", "cuad_todos_medical_reseller"], root, home)
    assert forced.returncode == 0, forced.stdout[-3000:] + forced.stderr[-3000:]
    assert "1 of 1 documents to run (0 up to date, skipped); --force" in forced.stdout
    # Everything the extractive engine did is reused from the content cache, and counted so.
    for asset in ("global_summaries", "cc_rag_contexts", "swb_rag_contexts", "t_rag_answers"):
        line = next(x for x in forced.stdout.splitlines() if x.strip().startswith(asset + " "))
        fields = dict(f.split("=") for f in line.split(None, 1)[1].split(", "))
        assert fields["calls"] == "0" and int(fields["cache_hits"].replace(",", "")) > 0, line


def test_one_asset_materialized_from_the_ui_gives_every_later_reason_truly(project):
    """One partition of one asset, materialized as the asset's page does (Dagster's own
    ``__ASSET_JOB``, outside ctxwin): its run carries the reason ctxwin run would give it, and the
    next ``ctxwin run`` names what that changed, and nothing that did not change."""
    import subprocess
    import sys

    root, home, _, _ = project
    env = {**os.environ, "DAGSTER_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    args = ["asset", "materialize", "-m", "ctxwin_dagster.definitions", "--select", "t_rag_answers"]
    dagster = str(Path(sys.executable).with_name("dagster"))
    done = subprocess.run(
        [dagster, *args, "--partition", "squad_Normans"], cwd=root, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ui_run = _runs(home)[0]
    assert ui_run.job_name == "__ASSET_JOB"
    assert ui_run.tags["ctxwin/reason"] == "up to date; run on request"  # as ctxwin run saw it: nothing stale
    after = run_ctxwin(["run"], root, home)
    assert after.returncode == 0, after.stdout[-3000:] + after.stderr[-3000:]
    out = after.stdout
    assert "1 of 2 documents to run (1 up to date, skipped)" in out, out
    [line] = [x.strip() for x in out.splitlines() if x.strip().startswith("squad_Normans: ")]
    assert line.startswith("squad_Normans: t_rag_ragas_scores: ") and "t_rag_answers" in line, line
    [comparison] = [x for x in out.splitlines() if x.startswith("experiment_comparison: ")]
    assert "global_summaries" not in comparison and "swb_rag" not in comparison and "cc_rag" not in comparison, (
        comparison
    )
    runs = _runs(home)
    # the tag is the printed reason's short form (the UI's list of runs clips long tags): the cause first
    assert runs[1].tags["ctxwin/reason"] == "t_rag_answers rematerialized", runs[1].tags


def test_a_failed_document_prints_one_line_and_the_others_stay_up_to_date(project):
    root, home, _, _ = project
    (root / "data" / "documents" / "broken.txt").write_bytes(b"\x00\x01\x02binary")
    out = run_ctxwin(["run"], root, home)
    assert out.returncode == 1
    assert "1 of 3 documents to run (2 up to date, skipped)" in out.stdout
    lines = [x for x in out.stdout.splitlines() if "broken" in x and "FAILED" in x]
    assert len(lines) == 1 and "raw_documents" in lines[0] and "broken.txt" in lines[0], out.stdout
    assert "Traceback" not in out.stdout + out.stderr


def test_the_runs_embed_through_the_commands_model_server(project):
    """The first command started one embedding server for its runs: every index was embedded
    there, none of the runs loaded the model, and the server stopped with the command."""
    import httpx

    from ctxwin_dagster.defs.materializations import plain_metadata

    root, home, first, first_runs = project
    assert "the runs embed through one model server" in first.stdout
    os.environ["DAGSTER_HOME"] = str(home)
    indexes = {f"{variant}_index" for variant in ("t_rag", "cc_rag", "swb_rag")}
    with dg.DagsterInstance.get() as instance:
        embedded = {
            (m.asset_key.to_user_string(), m.partition): plain_metadata(m.metadata).get("embedded_by")
            for run_id in first_runs
            for rec in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
            if (m := rec.event_log_entry.asset_materialization) is not None and m.asset_key.to_user_string() in indexes
        }
    assert set(embedded) == {(index, doc) for index in indexes for doc in DOCS}, sorted(embedded)
    used = set(embedded.values())
    assert len(used) == 1 and all(str(u).startswith("http://127.0.0.1:") for u in used), used
    assert "loaded" in (home / "ctxwin-embeddings.log").read_text()
    for url in used:
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "/health", timeout=2)
