"""A Dagster instance kept in a real PostgreSQL server (started by the test on loopback, from
Debian's package), through the real machinery: ``ctxwin run --storage postgresql://…`` as a
subprocess, its daemon and runs; then the command killed mid-run and started again."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import dagster as dg
import pytest

from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.testing.postgres import PostgresServer
from ctxwin_dagster.testing.projects import ctxwin_env, index_rows_per_document, make_project, run_ctxwin

pytestmark = pytest.mark.slow

DOC = "squad_Normans"


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


@pytest.fixture(scope="module")
def postgres():
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="module")
def project(tmp_path_factory, postgres):
    """The one-document sample, built by ``ctxwin run`` on an instance kept in PostgreSQL."""
    root = make_project(tmp_path_factory.mktemp("project"), [DOC], questions_per_doc=3)
    home = root / ".dagster_home"
    out = ok(run_ctxwin(["run", "--workers", "1", "--storage", postgres.url], root, home))
    return root, home, out


def test_the_sample_runs_end_to_end_on_postgres(project, postgres):
    import psycopg2

    root, home, out = project
    assert "1 ran, 0 up to date, 0 failed" in out and "experiment_comparison: ok in" in out, out
    written = postgres.url.replace("postgresql://", "postgresql+psycopg2://")
    assert "postgres_url: " + written in (home / "dagster.yaml").read_text(encoding="utf-8")
    assert not (home / "history").exists(), "the runs went to SQLite files in the home"
    with psycopg2.connect(postgres.url) as conn, conn.cursor() as cur:
        cur.execute("select count(*) from runs")
        assert cur.fetchone()[0] >= 2  # the document's run and the comparison's
        cur.execute("select count(*) from event_logs where dagster_event_type = 'ASSET_MATERIALIZATION'")
        assert cur.fetchone()[0] >= 15
    again = ok(run_ctxwin(["run", "--workers", "1"], root, home))
    assert "0 of 1 documents to run (1 up to date, skipped)" in again, again
    # Another storage for a home that holds runs is refused, naming the fix.
    refused = run_ctxwin(["run", "--storage", "postgresql://someone@127.0.0.1:1/other"], root, home)
    assert refused.returncode != 0 and "another storage is another home" in refused.stderr, refused.stderr


def test_killed_mid_run_then_started_again_resumes_on_postgres(project):
    root, home, _ = project
    before = index_rows_per_document(root / "data" / "lancedb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxwin_dagster.cli", "run", "--workers", "1", "--force"],
        cwd=root,
        env=ctxwin_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = ""
    deadline = time.time() + 300
    while time.time() < deadline and "Dagster daemon started" not in seen:
        seen += proc.stdout.readline()
    assert "Dagster daemon started" in seen, seen
    with dg.DagsterInstance.from_config(str(home)) as instance:
        deadline = time.time() + 300
        while time.time() < deadline and not instance.get_runs(
            filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])
        ):
            time.sleep(0.5)
        assert instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])), "no run started"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    out = ok(run_ctxwin(["run", "--workers", "1"], root, home))
    assert "Summary" in out and "0 failed" in out, out
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert all(r.is_finished for r in instance.get_runs()), [r.status for r in instance.get_runs()]
    # No row twice: the index holds what it held before the killed run, document by document.
    after = index_rows_per_document(root / "data" / "lancedb")
    assert after == before and set(after) == set(VARIANTS), (before, after)
