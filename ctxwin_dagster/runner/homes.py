"""A Dagster home per experiment: which home a command uses, the experiment it holds, one
command at a time on it, and runs that a killed command left behind.

* The sample lives in ``.dagster_home`` (``make run``, ``make dev``); an experiment named ``x``
  in ``data/experiments/x/dagster_home`` with its index in ``data/experiments/x/lancedb``.
* A home holds one experiment (``ctxwin_experiment.json``, read by the code location). A command
  may change its models or retrieval settings, never its documents folder or index: that is
  another experiment, in another home (a clear error says so).
* One ``ctxwin`` command works on a home at a time (a lock file in the home). A second one
  waits for the first and then finds its work done.
* A run the previous command left unfinished, when that command is gone, is ended by the next
  command before it plans: canceled if still queued; if its worker process still works, that
  process is stopped (SIGTERM, as Dagster's own termination), so the next command's runs are the
  only ones working on those documents; then marked failed if it has not ended itself (the
  instance's own ``report_run_canceled`` / ``report_run_failed``), so it does not look alive forever.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ctxwin_dagster.core.experiment import (
    EXPERIMENT_FILE,
    Experiment,
    ExperimentConflict,
    home_experiment,
)
from ctxwin_dagster.defs.command_runs import command_alive, command_of, pid_alive

if TYPE_CHECKING:
    import psutil
    from dagster import DagsterInstance

LOCK_FILE = "ctxwin.lock"


def bind_experiment(home: Path, experiment: Experiment) -> Experiment:
    """Store ``experiment`` (folders made absolute) as the home's experiment and return it.

    Raises:
        ExperimentConflict: the home holds another experiment on another documents folder or index.
    """
    resolved = experiment.resolved(Path.cwd())
    current_file = home / EXPERIMENT_FILE
    if current_file.is_file():
        current = home_experiment(home)
        if not current.same_data(resolved):
            raise ExperimentConflict(
                f"the Dagster home {home} holds the experiment {current.name!r} (documents {current.documents_dir}, "
                f"index {current.lancedb_uri}); {resolved.name!r} reads {resolved.documents_dir} into {resolved.lancedb_uri}. "
                f"Give it its own home (--dagster-home, or leave it out: data/experiments/{resolved.name}/dagster_home), "
                f"or run the experiment this home holds"
            )
        if current == resolved:
            return current
    resolved.save(home)
    return resolved


class HomeLock:
    """One ``ctxwin`` command per Dagster home at a time (``fcntl`` lock on ``ctxwin.lock``;
    the kernel releases it when the process ends, however it ends)."""

    def __init__(self, home: Path, *, out: TextIO | None = None) -> None:
        self.path = home / LOCK_FILE
        self.out = out
        self._fh: TextIO | None = None

    def __enter__(self) -> HomeLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a+")
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.seek(0)
            holder = self._fh.read().strip() or "another ctxwin command"
            if self.out is not None:
                print(
                    f"waiting for {holder}, which works on the Dagster home {self.path.parent} …",
                    file=self.out,
                    flush=True,
                )
            started = time.monotonic()
            fcntl.flock(self._fh, fcntl.LOCK_EX)
            if self.out is not None:
                print(f"… it finished after {time.monotonic() - started:.0f}s; going on", file=self.out, flush=True)
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(f"ctxwin (pid {os.getpid()}, since {time.strftime('%H:%M:%S')})\n")
        self._fh.flush()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            self._fh.seek(0)
            self._fh.truncate()
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def _worker_started(instance: DagsterInstance, run_id: str) -> tuple[int, float] | None:
    """The pid of the process executing ``run_id`` and when it started the run (its RUN_START
    event records both), if a process with that pid still lives."""
    import dagster as dg

    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_START, limit=1).records
    entry = records[0].event_log_entry if records else None
    pid = entry.dagster_event.pid if entry is not None and entry.dagster_event else None
    return (int(pid), entry.timestamp) if entry is not None and pid and pid_alive(int(pid)) else None


def _worker_of(pid: int, home: str, run_started: float) -> psutil.Process | None:
    """The process ``pid`` if it is still the worker that started a run of ``home`` at
    ``run_started``: a process of that Dagster home (``DAGSTER_HOME`` in its environment) that
    was already running then; None for a process that took the pid later, one of another home,
    or one whose environment cannot be read (the run is then left to finish)."""
    import psutil

    try:
        process = psutil.Process(pid)
        home_of = process.environ().get("DAGSTER_HOME")
        started = process.create_time()
    except (psutil.Error, OSError):
        return None
    if home_of is None or started > run_started + 1.0 or Path(home_of).resolve() != Path(home).resolve():
        return None
    return process


def _stop_worker(process: psutil.Process, grace_s: float) -> None:
    """SIGTERM, which Dagster's worker answers by interrupting its step and reporting the run as
    ended; SIGKILL if it still lives after ``grace_s``. ``psutil`` signals only the process it
    identified, never one that took its pid since."""
    import psutil

    try:
        process.terminate()
        process.wait(grace_s)
    except psutil.TimeoutExpired:
        process.kill()
        process.wait(5)
    except psutil.NoSuchProcess:
        pass


def fail_orphaned_runs(
    instance: DagsterInstance, *, grace_s: float = 30.0, say: Callable[[str], object] = lambda _line: None
) -> list[str]:
    """End the runs a ``ctxwin`` command launched and left unfinished when it was killed (its
    process is gone): a run still queued is canceled; a started one whose worker still works has
    that worker stopped (:func:`_stop_worker`), since a new command is about to run the same
    documents and two runs of one document would write its index rows at once; a started run that
    has not ended itself then is marked failed. Returns their ids. A run whose worker is not
    certainly its own (see :func:`_worker_of`) is left to finish; runs of a live command, of
    the UI or of another machine are left alone."""
    import dagster as dg

    unfinished = [
        dg.DagsterRunStatus.QUEUED,
        dg.DagsterRunStatus.NOT_STARTED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED,
    ]
    records = instance.get_run_records(filters=dg.RunsFilter(statuses=unfinished))
    ended = []
    for record in records:
        run = record.dagster_run
        command = command_of(run.tags)
        if not command or command_alive(command):
            continue
        why = f"the ctxwin command that launched this run ({command}) ended before the run did"
        if run.status in (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED):
            instance.report_run_canceled(run, why)
            ended.append(run.run_id)
            continue
        worker = _worker_started(instance, run.run_id)
        if worker is not None:
            pid, run_started = worker
            process = _worker_of(pid, instance.root_directory, run_started)
            if process is None:
                continue
            say(f"stopping run {run.run_id[:8]} (worker pid {pid}): a killed ctxwin command left it working")
            _stop_worker(process, grace_s)
        now = instance.get_run_by_id(run.run_id)
        if now is not None and not now.is_finished:
            instance.report_run_failed(now, why)
        ended.append(run.run_id)
    return ended
