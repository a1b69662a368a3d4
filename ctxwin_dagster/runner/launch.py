"""Launching runs on the Dagster instance, as the code location of ``workspace.yaml``.

``ctxwin run`` and ``ctxwin evaluate`` do not execute the jobs themselves: for every document
partition that needs a run they record a request in the instance, which the code location's
sensor ``ctxwin_command_runs`` turns into a run (:mod:`ctxwin_dagster.defs.command_runs` says
why a sensor). The instance's run coordinator takes it from there: with the run queue
(``QueuedRunCoordinator``, Dagster's default) the daemon dequeues runs within the instance's
concurrency limits and the run launcher starts them (a local process by default; a Kubernetes
job, a Docker container … with the launchers of ``deploy/``). The runs are the instance's own:
listed under their jobs in the UI, re-executable there, logs and all. Only Dagster's public API
is used here.

When no daemon is heartbeating, the command starts ``dagster-daemon`` for its own duration
(and stops it after); the daemon of ``ctxwin dev`` (``dg dev``) is used when one runs. With the
daemon it starts the local embedding model's server, which every run of the command uses instead
of loading the model itself (:mod:`ctxwin_dagster.backends.embeddings.server`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from ctxwin_dagster.core.json_types import JSONValue
from ctxwin_dagster.defs.command_runs import SENSOR_NAME
from ctxwin_dagster.runner.processes import stop_process, with_parent_death

if TYPE_CHECKING:
    from dagster import AssetCheckKey, AssetKey, DagsterInstance

    from ctxwin_dagster.defs.command_runs import CommandRequest
    from ctxwin_dagster.runner.code_server import CodeServer

TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}


def stop_runs(instance: DagsterInstance, run_ids: Iterable[str]) -> list[str]:
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
    """Asks for runs of the code location's jobs (through the sensor of
    :mod:`ctxwin_dagster.defs.command_runs`) and follows them; starts a daemon when none runs.

    Args:
        instance: the Dagster instance (``DagsterInstance.get()`` of the home).
        workspace: the ``workspace.yaml`` the daemon it starts loads.
        log: where that daemon's output goes (a file).
    """

    #: After this long without a run for a request, say what may be wrong (once).
    SLOW_PICKUP_S = 60.0

    def __init__(
        self,
        instance: DagsterInstance,
        workspace: Path,
        *,
        log: Path,
        embedding_models: Iterable[str] = (),
        chat_models: Iterable[str] = (),
    ) -> None:
        from ctxwin_dagster.backends.chat.llama_server import LOG_NAME, LlamaServer
        from ctxwin_dagster.backends.embeddings.server import EmbeddingService

        self.instance = instance
        self.workspace = workspace
        self.log = log
        self.daemon: subprocess.Popen | None = None
        self.code_server: CodeServer | None = None  # the daemon's code server, when this command started them
        self.embeddings = EmbeddingService(list(embedding_models), log=log.with_name("ctxwin-embeddings.log"))
        #: llama.cpp's server of each local chat model the runs call (started with the daemon).
        self.chat_servers = [LlamaServer(m, log=log.with_name(LOG_NAME)) for m in dict.fromkeys(chat_models)]
        self.requested: dict[str, CommandRequest] = {}  # request id -> CommandRequest, until its run exists
        self.run_ids: dict[str, str] = {}  # request id -> run id
        self.warned = False

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.withdraw()
        self.stop_daemon()

    def withdraw(self) -> list[str]:
        """Withdraw the requests whose run does not exist yet (the command stops), and stop the
        runs that appeared meanwhile; returns the ids of those runs."""
        from ctxwin_dagster.defs.command_runs import withdraw_requests

        if not self.requested:
            return []
        withdraw_requests(self.instance, list(self.requested))
        appeared = [run_id for rid in list(self.requested) if (run_id := self.run_id(rid))]
        self.requested.clear()
        return stop_runs(self.instance, appeared)

    # ------------------------------------------------------------------ daemon
    def daemon_running(self, max_age_s: float = 45.0) -> bool:
        """A daemon evaluates this instance's sensors (and dequeues its runs): ours, or another
        whose heartbeat (written every 30 s) is recent."""
        if self.daemon is not None:
            return self.daemon.poll() is None
        beat = self.instance.get_daemon_heartbeats().get("SENSOR")
        return beat is not None and time.time() - beat.timestamp < max_age_s

    def ensure_daemon(self) -> str:
        """Start ``dagster-daemon`` when no daemon runs the sensors of this home; says which."""
        if self.daemon_running():
            via = f"runs queued through the sensor {SENSOR_NAME} of "
            return via + (
                "the running Dagster daemon" if self.daemon is None else "the Dagster daemon started by this command"
            )
        exe = Path(sys.executable).with_name("dagster-daemon")
        cmd = [str(exe) if exe.exists() else "dagster-daemon"]  # with_parent_death finds it on PATH
        env, served = self._embedding_env()
        served += self._chat_env(env)
        workspace, code = self._start_code_server(env)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.daemon = subprocess.Popen(
                with_parent_death([*cmd, "run", "-w", str(workspace)]), stdout=out, stderr=subprocess.STDOUT, env=env
            )
        return (
            f"runs queued through the sensor {SENSOR_NAME}; Dagster daemon started for this command "
            f"(log {self.log}){code}{served}"
        )

    def _start_code_server(self, env: dict[str, str]) -> tuple[Path, str]:
        """The workspace the daemon loads: one code server for the whole command when the
        workspace is a single ``python_module`` (:mod:`.code_server`), else the workspace as it
        is (the daemon starts its code servers); and a note saying which."""
        from ctxwin_dagster.runner.code_server import CodeServer, served_target

        target = served_target(self.workspace)
        if target is None:
            return self.workspace, ""
        self.code_server = CodeServer(target, log=self.log.with_name("ctxwin-code-server.log"), env=env)
        try:
            return self.code_server.start(), f"; definitions served by one code server (log {self.code_server.log})"
        except RuntimeError as exc:
            self.code_server = None
            return self.workspace, f"; {exc}: the daemon starts its own"

    def _embedding_env(self) -> tuple[dict[str, str], str]:
        """The daemon's environment, with the embedding server's address when this command
        starts one (local models only, and not when ``CTXWIN_EMBEDDING_SERVER`` is set already:
        to another server, or ``off``); and a note saying so."""
        from ctxwin_dagster.backends.embeddings.server import ENV_VAR

        env = os.environ.copy()
        if not self.embeddings.models or env.get(ENV_VAR, "").strip():
            return env, ""
        try:
            env[ENV_VAR] = self.embeddings.start()
        except RuntimeError as exc:  # the runs load the model themselves, as before
            return env, f"; {exc}"
        return env, f"; the runs embed through one model server ({env[ENV_VAR]}, log {self.embeddings.log})"

    def _chat_env(self, env: dict[str, str]) -> str:
        """Start llama.cpp's server of each local chat model and put their addresses in ``env``
        (not when ``CTXWIN_CHAT_SERVER`` is set already, or where llama-cpp-python is missing:
        the runs then run the model in process); a note saying so."""
        from ctxwin_dagster.backends.chat.llama_server import ENV_VAR, available, env_value

        if not self.chat_servers or env.get(ENV_VAR, "").strip() or not available():
            return ""
        try:
            urls = {server.model: server.start() for server in self.chat_servers}
        except RuntimeError as exc:
            return f"; {exc}"
        env[ENV_VAR] = env_value(urls)
        return f"; the chat model is served by llama.cpp ({env[ENV_VAR]}, log {self.chat_servers[0].log})"

    def _stop_servers(self) -> None:
        self.embeddings.stop()
        for server in self.chat_servers:
            server.stop()

    def stop_daemon(self) -> None:
        """Stop what this command started: its daemon, its code server, its model servers."""
        daemon, self.daemon = self.daemon, None
        if daemon is not None:
            stop_process(daemon, signal.SIGINT)
        if self.code_server is not None:
            self.code_server.stop()
            self.code_server = None
        self._stop_servers()
        if daemon is None:
            return
        # Its last heartbeat must not make the next command wait for a daemon that is gone.
        self.instance.wipe_daemon_heartbeats()

    # ------------------------------------------------------------------ runs
    def submit(
        self,
        job_name: str,
        *,
        partition: str | None,
        run_config: Mapping[str, JSONValue],
        tags: Mapping[str, str],
        asset_selection: Iterable[AssetKey] | None = None,
        asset_check_selection: Iterable[AssetCheckKey] | None = None,
    ) -> str:
        """Ask for a run of ``job_name`` (optionally a subset of its assets) for ``partition``;
        returns the request id (the run's ``run_key``). :meth:`run_id` gives the run once the
        sensor has launched it."""
        from ctxwin_dagster.defs.command_runs import write_request

        request = write_request(
            self.instance,
            job_name,
            partition=partition,
            assets=asset_selection,
            checks=asset_check_selection,
            tags=tags,
            run_config=run_config,
        )
        self.requested[request.id] = request
        return request.id

    def run_id(self, request_id: str) -> str | None:
        """The run launched for ``request_id``, once there is one."""
        if request_id in self.run_ids:
            return self.run_ids[request_id]
        import dagster as dg

        from ctxwin_dagster.defs.command_runs import RUN_KEY_TAG

        runs = self.instance.get_run_records(filters=dg.RunsFilter(tags={RUN_KEY_TAG: request_id}), limit=1)
        if not runs:
            request = self.requested.get(request_id)
            if (
                request is not None
                and not self.warned
                and time.time() - request.created > self.SLOW_PICKUP_S
                and self.daemon_running()
            ):
                self.warned = True
                print(
                    f"ctxwin: no run launched {self.SLOW_PICKUP_S:.0f}s after the request; is the sensor {SENSOR_NAME!r} stopped? "
                    f"Start it in the Dagster UI (Automation) or with `dagster sensor start {SENSOR_NAME} -w {self.workspace}`",
                    file=sys.stderr,
                    flush=True,
                )
            return None
        self.run_ids[request_id] = runs[0].dagster_run.run_id
        self.requested.pop(request_id, None)
        return self.run_ids[request_id]

    def statuses(self, request_ids: Sequence[str]) -> dict[str, str]:
        """Each request's run status (``REQUESTED`` until the sensor has launched it; a run that
        is gone counts as ``FAILURE``), the launched runs read in one query."""
        import dagster as dg

        run_ids = {r: self.run_id(r) for r in request_ids}
        known = [i for i in run_ids.values() if i is not None]
        found: dict[str, str] = {}
        if known:
            found = {
                rec.dagster_run.run_id: rec.dagster_run.status.value
                for rec in self.instance.get_run_records(filters=dg.RunsFilter(run_ids=known))
            }
        return {r: "REQUESTED" if i is None else found.get(i, "FAILURE") for r, i in run_ids.items()}
