"""Runs that a ``ctxwin`` command asks for, launched by Dagster's own sensor machinery.

``ctxwin run`` and ``ctxwin evaluate`` decide which document partitions need a run (see
:mod:`ctxwin_dagster.defs.staleness`), and write one *request* per run into the Dagster home
(``<home>/ctxwin_requests/<request id>.json``: the job, the partition, the assets and checks, the
tags). The sensor ``ctxwin_command_runs`` turns each request into a ``RunRequest`` whose
``run_key`` is the request id, so Dagster creates the run once however many ticks see the file;
the instance's run queue and launcher take it from there, exactly as for a run from the UI or
the schedule. The command follows its runs through the instance by that run key, and removes its
request files when the runs exist (or when it stops).

Why a sensor rather than the command creating the runs itself: creating a run of a code
location's job from outside the webserver and the daemon needs Dagster's private workspace
classes (``dagster._core``). A sensor is the public way to launch runs from code, and shows in
the UI (Automation → ``ctxwin_command_runs``) which command asked for which runs. The cost is
the daemon's sensor loop: a request waits up to about five seconds for the next tick.

A request whose command is gone (killed) is skipped and never launched; the next ``ctxwin``
command on the home deletes its file (:func:`drop_requests`).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from ctxwin_dagster.defs.jobs import VARIANT_JOBS, all_assets_job

#: The tag naming the ``ctxwin`` command (``host:pid``) that asked for a run.
COMMAND_TAG = "ctxwin/command"
#: The folder of a Dagster home where commands leave their requests.
REQUESTS_DIR = "ctxwin_requests"
SENSOR_NAME = "ctxwin_command_runs"
#: Dagster's tag holding a sensor run's ``run_key`` (here: the request id).
RUN_KEY_TAG = "dagster/run_key"


def command_id() -> str:
    """This process as a ``ctxwin`` command: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def command_alive(command: str) -> bool:
    """Whether the command ``host:pid`` still runs (a command of another machine counts as alive:
    it is not ours to judge)."""
    host, _, pid = command.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    return pid_alive(int(pid))


@dataclass(frozen=True)
class CommandRequest:
    """One run a command asks for. Asset and check keys are user strings (``a/b``; a check is
    ``asset:check``)."""

    id: str
    command: str
    job: str
    partition: str | None = None
    assets: list[str] | None = None
    checks: list[str] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    run_config: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0

    def run_request(self) -> dg.RunRequest:
        assets = [dg.AssetKey.from_user_string(a) for a in self.assets] if self.assets is not None else None
        checks = None
        if self.checks is not None:
            checks = [dg.AssetCheckKey(dg.AssetKey.from_user_string(c.rpartition(":")[0]), c.rpartition(":")[2]) for c in self.checks]
        return dg.RunRequest(
            run_key=self.id,
            job_name=self.job,
            partition_key=self.partition,
            asset_selection=assets,
            asset_check_keys=checks,
            run_config=self.run_config,
            tags={**self.tags, COMMAND_TAG: self.command},
        )


def requests_dir(home: str | Path) -> Path:
    return Path(home) / REQUESTS_DIR


def write_request(
    home: str | Path,
    job: str,
    *,
    partition: str | None,
    assets: Iterable[dg.AssetKey] | None = None,
    checks: Iterable[dg.AssetCheckKey] | None = None,
    tags: Mapping[str, str] | None = None,
    run_config: Mapping[str, Any] | None = None,
    command: str | None = None,
) -> CommandRequest:
    """Leave a request for one run in ``home`` (written whole, then renamed into place, so the
    sensor never reads half a file); returns it."""
    command = command or command_id()
    request = CommandRequest(
        id=f"ctxwin-{uuid.uuid4().hex[:12]}",
        command=command,
        job=job,
        partition=partition,
        assets=sorted(k.to_user_string() for k in assets) if assets is not None else None,
        checks=sorted(f"{c.asset_key.to_user_string()}:{c.name}" for c in checks) if checks is not None else None,
        tags=dict(tags or {}),
        run_config=dict(run_config or {}),
        created=time.time(),
    )
    folder = requests_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{request.id}.tmp"
    tmp.write_text(json.dumps(asdict(request), indent=1), encoding="utf-8")
    tmp.replace(folder / f"{request.id}.json")
    return request


def read_requests(home: str | Path) -> list[CommandRequest]:
    """The requests waiting in ``home``, oldest first (a file that does not parse is left out)."""
    out = []
    for path in requests_dir(home).glob("*.json"):
        try:
            out.append(CommandRequest(**json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(out, key=lambda r: (r.created, r.id))


def drop_requests(home: str | Path, ids: Iterable[str] | None = None) -> int:
    """Delete request files: those of ``ids``, or (``ids=None``) those whose command is gone.
    Returns how many. A request is a note between two processes, not the user's data."""
    wanted = set(ids) if ids is not None else None
    dropped = 0
    for request in read_requests(home):
        if (wanted is not None and request.id in wanted) or (wanted is None and not command_alive(request.command)):
            (requests_dir(home) / f"{request.id}.json").unlink(missing_ok=True)
            dropped += 1
    return dropped


@dg.sensor(
    name=SENSOR_NAME,
    jobs=[all_assets_job, *VARIANT_JOBS],
    minimum_interval_seconds=1,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Launches the runs that `ctxwin run` and `ctxwin evaluate` ask for (one run per request; "
    "the request id is the run key, so a run is never launched twice).",
)
def command_runs_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    home = context.instance.root_directory
    waiting = read_requests(home)
    live = [r for r in waiting if command_alive(r.command)]
    if not live:
        gone = len(waiting) - len(live)
        return dg.SensorResult(skip_reason="no ctxwin command is waiting for runs" + (f" ({gone} request(s) of ended commands ignored)" if gone else ""))
    return dg.SensorResult(run_requests=[r.run_request() for r in live])
