"""A run that a killed ``ctxwin`` command left working is stopped by the next command before it
plans, so two runs never work on one document's index rows at once; a process that only took
the run's old pid, or a process of another home, is never touched. An instance in a temporary
folder and a stand-in worker process (Dagster's own worker is a child of the code server)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid

import dagster as dg
import pytest

from ctxwin_dagster.defs.command_runs import COMMAND_TAG
from ctxwin_dagster.runner.homes import fail_orphaned_runs

#: A process that sleeps; SIGTERM ends it, as it ends Dagster's worker.
SLEEPER = "import time; time.sleep(600)"


@pytest.fixture
def instance(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as inst:
        yield inst


def _process(home: str | None):
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    if home is not None:
        env["DAGSTER_HOME"] = home
    return subprocess.Popen([sys.executable, "-c", SLEEPER], env=env)


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def _started_run(instance, worker_pid: int, *, started: float | None = None) -> str:
    """A started run of a command that is gone, its RUN_START event naming ``worker_pid``."""
    run_id = str(uuid.uuid4())
    instance.add_run(
        dg.DagsterRun(
            job_name="all_assets_job",
            run_id=run_id,
            status=dg.DagsterRunStatus.STARTED,
            tags={COMMAND_TAG: f"{socket.gethostname()}:{_dead_pid()}"},
        )
    )
    event = dg.DagsterEvent(
        event_type_value=dg.DagsterEventType.RUN_START.value, job_name="all_assets_job", pid=worker_pid
    )
    instance.store_event(
        dg.EventLogEntry(
            error_info=None,
            level=20,
            user_message="",
            run_id=run_id,
            timestamp=time.time() if started is None else started,
            dagster_event=event,
        )
    )
    return run_id


def _status(instance, run_id: str):
    run = instance.get_run_by_id(run_id)
    assert run is not None
    return run.status


def test_a_live_worker_of_a_killed_command_is_stopped_and_its_run_ended(instance):
    worker = _process(instance.root_directory)
    try:
        time.sleep(0.2)
        run_id = _started_run(instance, worker.pid)
        said: list[str] = []
        assert fail_orphaned_runs(instance, grace_s=10, say=said.append) == [run_id]
        assert worker.poll() is not None  # stopped, not left working beside the next command's runs
        assert said and f"worker pid {worker.pid}" in said[0], said
        assert _status(instance, run_id) == dg.DagsterRunStatus.FAILURE
    finally:
        worker.kill()
        worker.wait()


def test_a_process_that_took_the_workers_pid_later_or_of_another_home_is_left_alone(instance, tmp_path):
    later = _process(instance.root_directory)  # started after the run did: the pid was reused
    other = _process(str(tmp_path / "another_home"))
    try:
        time.sleep(0.2)
        reused = _started_run(instance, later.pid, started=time.time() - 3600)
        elsewhere = _started_run(instance, other.pid)
        assert fail_orphaned_runs(instance, grace_s=1) == []
        assert later.poll() is None and other.poll() is None
        assert {_status(instance, r) for r in (reused, elsewhere)} == {dg.DagsterRunStatus.STARTED}  # left to finish
    finally:
        for proc in (later, other):
            proc.kill()
            proc.wait()


def test_a_run_whose_worker_is_gone_is_marked_failed(instance):
    run_id = _started_run(instance, _dead_pid())
    assert fail_orphaned_runs(instance) == [run_id]
    assert _status(instance, run_id) == dg.DagsterRunStatus.FAILURE
