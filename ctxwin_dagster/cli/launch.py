"""Launching runs on the Dagster instance, as the code location of ``workspace.yaml``.

``ctxwin run`` and ``ctxwin evaluate`` do not execute the jobs themselves: they load the
workspace (the same code location, ``ctxwin``, that ``dagster dev -w workspace.yaml`` serves),
create one run per document partition from the location's job, and submit it to the instance.
The instance's run coordinator takes it from there: with the run queue
(``QueuedRunCoordinator``, Dagster's default) the daemon dequeues runs within the instance's
concurrency limits and the run launcher starts them (a local process by default; a Kubernetes
job, a Docker container … with the launchers of ``deploy/``). The runs are the instance's own:
listed under their jobs in the UI, re-executable there, logs and all.

When the queue is used and no daemon is heartbeating, the command starts ``dagster-daemon``
for its own duration (and stops it after); ``dagster dev``'s daemon is used when one runs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

LOCATION = "ctxwin"
DEFINITIONS_MODULE = "ctxwin_dagster.definitions"

#: The instance settings ``ctxwin`` writes to a new Dagster home: the run queue, polled every
#: second, with a limit on runs at once across every launcher of the instance (the CLI keeps
#: at most ``--workers`` of its own runs in it).
DEFAULT_INSTANCE_YAML = """\
# Written by ctxwin for a new Dagster home; edit freely (deploy/ has examples for Kubernetes,
# Docker and Celery). ctxwin run submits its runs to this instance's run queue.
telemetry:
  enabled: false
run_queue:
  max_concurrent_runs: 16
  dequeue_interval_seconds: 1
run_monitoring:
  enabled: true
"""

#: What ctxwin wrote to new Dagster homes before it used the run queue (replaced when found).
_OLD_DEFAULT_YAML = "telemetry:\n  enabled: false\n"

TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}


def prepare_home(dagster_home: str | None) -> Path:
    """The Dagster home (created with :data:`DEFAULT_INSTANCE_YAML` when new), exported as
    ``DAGSTER_HOME`` for this process and the processes it starts."""
    home = Path(dagster_home or os.environ.get("DAGSTER_HOME") or ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists() or config.read_text(encoding="utf-8") == _OLD_DEFAULT_YAML:
        config.write_text(DEFAULT_INSTANCE_YAML, encoding="utf-8")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def workspace_file(home: Path) -> Path:
    """``workspace.yaml`` of the folder the command runs in when it loads this project's
    definitions; otherwise an equivalent one written to the Dagster home (the same code
    location name, working directory = this folder)."""
    local = Path("workspace.yaml")
    if local.is_file() and DEFINITIONS_MODULE in local.read_text(encoding="utf-8"):
        return local.resolve()
    ws = home / "workspace.yaml"
    ws.write_text(
        "load_from:\n"
        "  - python_module:\n"
        f"      module_name: {DEFINITIONS_MODULE}\n"
        f"      location_name: {LOCATION}\n"
        f"      working_directory: {Path.cwd().resolve()}\n",
        encoding="utf-8",
    )
    return ws


#: Run before the daemon's own code, in its process: the kernel sends it SIGTERM when the command
#: that started it dies, however it dies (kill -9 included), so no daemon is left orphaned. (A
#: ``preexec_fn`` would do the same but makes Python fork the whole command, LanceDB's runtime included.)
_EXEC_WITH_PARENT_DEATH = (
    "import ctypes, os, signal, sys\n"
    "try:\n    ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)\n"
    "except OSError:\n    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n    sys.exit(0)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def stop_runs(instance: Any, run_ids: Iterable[str]) -> list[str]:
    """Cancel queued runs and terminate started ones (the command that launched them is
    stopping); returns the ids acted on."""
    import dagster as dg

    done = []
    for run_id in run_ids:
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            continue
        if run.status in (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED):
            instance.report_run_canceled(run, "the ctxwin command that queued it was stopped")
        else:
            try:
                instance.run_launcher.terminate(run_id)
            except Exception:  # the launcher cannot reach it: record the end ourselves
                instance.report_run_failed(run, "the ctxwin command that launched it was stopped")
        done.append(run_id)
    return done


class Launcher(AbstractContextManager):
    """Creates and submits runs of the code location's jobs; starts a daemon if the queue needs one.

    Args:
        instance: the Dagster instance (``DagsterInstance.get()`` of the home).
        workspace: the ``workspace.yaml`` to load.
        log: where the daemon's output goes (a file).
    """

    def __init__(self, instance: Any, workspace: Path, *, log: Path) -> None:
        self.instance = instance
        self.workspace = workspace
        self.log = log
        self.daemon: subprocess.Popen | None = None
        self._context: Any = None
        self._request: Any = None

    def __enter__(self) -> Launcher:
        from dagster import __version__
        from dagster._core.workspace.context import WorkspaceProcessContext
        from dagster._core.workspace.load_target import WorkspaceFileTarget

        self._context = WorkspaceProcessContext(
            instance=self.instance,
            version=__version__,
            read_only=False,
            workspace_load_target=WorkspaceFileTarget(paths=[str(self.workspace)]),
            code_server_log_level="WARNING",
        ).__enter__()
        self._request = self._context.create_request_context()
        errors = self._request.get_code_location_error(LOCATION) if self._request.has_code_location_error(LOCATION) else None
        if errors is not None:
            raise SystemExit(f"ctxwin: the code location {LOCATION!r} of {self.workspace} does not load:\n{errors.to_string()}")
        self.location = self._request.get_code_location(LOCATION)
        repos = list(self.location.get_repositories().values())
        self.repository = repos[0]
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_daemon()
        if self._context is not None:
            self._context.__exit__(*exc)
            self._context = None

    # ------------------------------------------------------------------ daemon
    @property
    def queued(self) -> bool:
        from dagster._core.run_coordinator import QueuedRunCoordinator

        return isinstance(self.instance.run_coordinator, QueuedRunCoordinator)

    def daemon_running(self, max_age_s: float = 45.0) -> bool:
        """A daemon dequeues this instance's runs: ours, or another whose heartbeat (written
        every 30 s) is recent."""
        if self.daemon is not None:
            return self.daemon.poll() is None
        beat = self.instance.get_daemon_heartbeats().get("QUEUED_RUN_COORDINATOR")
        return beat is not None and time.time() - beat.timestamp < max_age_s

    def ensure_daemon(self) -> str:
        """Start ``dagster-daemon`` when the run queue has nobody to dequeue it; says which."""
        if not self.queued:
            return f"runs launched directly by {type(self.instance.run_coordinator).__name__}"
        if self.daemon_running():
            return "runs queued for the running Dagster daemon" if self.daemon is None else "runs queued for the daemon started by this command"
        exe = Path(sys.executable).with_name("dagster-daemon")
        cmd = [str(exe)] if exe.exists() else [shutil.which("dagster-daemon") or "dagster-daemon"]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        exe_path = cmd[0] if os.path.isabs(cmd[0]) else (shutil.which(cmd[0]) or cmd[0])
        self.daemon = subprocess.Popen(
            [sys.executable, "-c", _EXEC_WITH_PARENT_DEATH, str(os.getpid()), exe_path, "run", "-w", str(self.workspace)],
            stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy(),
        )
        out.close()
        return f"runs queued; Dagster daemon started for this command (log {self.log})"

    def stop_daemon(self) -> None:
        if self.daemon is None:
            return
        self.daemon.send_signal(signal.SIGINT)
        try:
            self.daemon.wait(30)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait(10)
        self.daemon = None
        # Its last heartbeat must not make the next command wait for a daemon that is gone.
        self.instance.wipe_daemon_heartbeats()

    # ------------------------------------------------------------------ runs
    def submit(
        self,
        job_name: str,
        *,
        partition: str | None,
        run_config: Mapping[str, Any],
        tags: Mapping[str, str],
        asset_selection: Iterable[Any] | None = None,
        asset_check_selection: Iterable[Any] | None = None,
    ) -> str:
        """Create a run of ``job_name`` (optionally a subset of its assets) for ``partition``
        with the code location's origin, and submit it; returns the run id."""
        from dagster._core.definitions.selector import JobSubsetSelector

        selection = frozenset(asset_selection) if asset_selection is not None else None
        checks = frozenset(asset_check_selection) if asset_check_selection is not None else None
        selector = JobSubsetSelector(
            location_name=self.location.name,
            repository_name=self.repository.name,
            job_name=job_name,
            op_selection=None,
            asset_selection=selection,
            asset_check_selection=checks,
        )
        remote_job = self.location.get_job(selector)
        plan = self.location.get_execution_plan(remote_job, dict(run_config), step_keys_to_execute=None, known_state=None, instance=self.instance)
        all_tags = {**remote_job.tags, **tags}
        if partition is not None:
            all_tags["dagster/partition"] = partition
        run = self.instance.create_run(
            job_name=job_name,
            run_id=None,
            run_config=dict(run_config),
            resolved_op_selection=remote_job.resolved_op_selection,
            step_keys_to_execute=plan.execution_plan_snapshot.step_keys_to_execute,
            op_selection=None,
            status=None,
            root_run_id=None,
            parent_run_id=None,
            tags=all_tags,
            job_snapshot=remote_job.job_snapshot,
            execution_plan_snapshot=plan.execution_plan_snapshot,
            parent_job_snapshot=remote_job.parent_job_snapshot,
            remote_job_origin=remote_job.get_remote_origin(),
            job_code_origin=remote_job.get_python_origin(),
            asset_selection=selection,
            asset_check_selection=checks,
            asset_graph=self.repository.asset_graph,
        )
        self.instance.submit_run(run.run_id, self._request)
        return run.run_id

    def status(self, run_id: str) -> str:
        run = self.instance.get_run_by_id(run_id)
        return run.status.value if run is not None else "FAILURE"
