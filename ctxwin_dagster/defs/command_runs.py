"""Runs that a ``ctxwin`` command asks for, launched by Dagster's own sensor machinery.

``ctxwin run`` and ``ctxwin evaluate`` decide which document partitions need a run (see
:mod:`ctxwin_dagster.defs.staleness`), and record one *request* per run in the instance's event
log: an observation of the asset ``ctxwin_run_requests`` (the job, the partition, the assets and
checks, the tags, as JSON metadata). The sensor ``ctxwin_command_runs`` reads the requests
recorded since its cursor and turns each into a ``RunRequest`` whose ``run_key`` is the request
id, so Dagster creates the run once; the instance's run queue and launcher take it from there,
exactly as for a run from the UI or the hourly automation. The command follows its runs through the
instance by that run key.

Why a sensor rather than the command creating the runs itself: creating a run of a code
location's job from outside the webserver and the daemon needs Dagster's private workspace
classes (``dagster._core``). A sensor is the public way to launch runs from code, and shows in
the UI (Automation → ``ctxwin_command_runs``) which command asked for which runs. Why the event
log: it is the instance's own storage, so a command and a daemon on different machines that
share the instance (Postgres, ``deploy/``) see the same requests. The cost is the daemon's
sensor loop: a request waits up to about five seconds for the next tick.

A request is never launched when its command has withdrawn it (the command stopped before the
run existed) or when its command's process is gone (killed; judged on the machine that ran it).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

import dagster as dg

from ctxwin_dagster.core.json_types import JSONObject, JSONValue
from ctxwin_dagster.defs.jobs import VARIANT_JOBS, all_assets_job
from ctxwin_dagster.defs.materializations import plain_metadata

#: The tag that named the ``ctxwin`` command (``host:pid``) of a run, in homes written before the
#: command went into the run key (:func:`command_of`); a run carries only the tags a person reads.
COMMAND_TAG = "ctxwin/command"
SENSOR_NAME = "ctxwin_command_runs"
#: Dagster's tag holding a sensor run's ``run_key`` (here: the request id).
RUN_KEY_TAG = "dagster/run_key"


def command_id() -> str:
    """This process as a ``ctxwin`` command: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def command_of(tags: Mapping[str, str]) -> str | None:
    """The ``ctxwin`` command (``host:pid``) that asked for a run with ``tags``: the end of its
    run key (``ctxwin-<id>@host:pid``), or its tag in runs made before; None for a run no command
    asked for (the UI, a backfill, the automation).

    >>> command_of({RUN_KEY_TAG: "ctxwin-0a1b2c3d4e5f@vm:4242"})
    'vm:4242'
    >>> command_of({"dagster/partition": "doc"}) is None
    True
    """
    if COMMAND_TAG in tags:
        return tags[COMMAND_TAG]
    key = tags.get(RUN_KEY_TAG, "")
    return key.partition("@")[2] or None if key.startswith("ctxwin-") else None


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
    run_config: JSONObject = field(default_factory=dict)
    created: float = 0.0

    def run_request(self) -> dg.RunRequest:
        assets = [dg.AssetKey.from_user_string(a) for a in self.assets] if self.assets is not None else None
        checks = None
        if self.checks is not None:
            checks = [
                dg.AssetCheckKey(dg.AssetKey.from_user_string(c.rpartition(":")[0]), c.rpartition(":")[2])
                for c in self.checks
            ]
        return dg.RunRequest(
            run_key=self.id,
            job_name=self.job,
            partition_key=self.partition,
            asset_selection=assets,
            asset_check_keys=checks,
            run_config=self.run_config,
            tags=self.tags,
        )


#: The asset whose observations carry the requests (declared in the definitions so the UI
#: explains it; it has no materializations).
REQUESTS_ASSET = dg.AssetKey("ctxwin_run_requests")

requests_spec = dg.AssetSpec(
    REQUESTS_ASSET,
    group_name="ctxwin",
    description="Requests for runs left by `ctxwin run` / `ctxwin evaluate` (one observation each, with the job, "
    "partition and assets as JSON); the sensor ctxwin_command_runs launches them.",
)


def write_request(
    instance: dg.DagsterInstance,
    job: str,
    *,
    partition: str | None,
    assets: Iterable[dg.AssetKey] | None = None,
    checks: Iterable[dg.AssetCheckKey] | None = None,
    tags: Mapping[str, str] | None = None,
    run_config: Mapping[str, JSONValue] | None = None,
    command: str | None = None,
) -> CommandRequest:
    """Record a request for one run in ``instance``'s event log; returns it."""
    command = command or command_id()
    request = CommandRequest(
        id=f"ctxwin-{uuid.uuid4().hex[:12]}@{command}",  # the run key: which command asked (command_of)
        command=command,
        job=job,
        partition=partition,
        assets=sorted(k.to_user_string() for k in assets) if assets is not None else None,
        checks=sorted(f"{c.asset_key.to_user_string()}:{c.name}" for c in checks) if checks is not None else None,
        tags=dict(tags or {}),
        run_config=dict(run_config or {}),
        created=time.time(),
    )
    _observe(
        instance, {"request": asdict(request)}, f"{command} asks for {job}" + (f" on {partition}" if partition else "")
    )
    return request


def withdraw_requests(instance: dg.DagsterInstance, ids: Iterable[str]) -> None:
    """Record that the requests ``ids`` must not be launched any more (the command stops)."""
    ids = sorted(ids)
    if ids:
        _observe(instance, {"withdrawn": ids}, f"{len(ids)} request(s) withdrawn")


def _observe(instance: dg.DagsterInstance, payload: Mapping[str, object], text: str) -> None:
    instance.report_runless_asset_event(
        dg.AssetObservation(
            asset_key=REQUESTS_ASSET, description=text, metadata={"ctxwin": dg.MetadataValue.json(payload)}
        )
    )


def read_requests(
    instance: dg.DagsterInstance, after: int | None = None, page: int = 500
) -> tuple[list[CommandRequest], int | None]:
    """The requests recorded after the event-log id ``after`` that are not withdrawn, oldest
    first, and the id of the last event read (``after`` if there was none)."""
    records: list[dg.EventLogRecord] = []
    last = after
    while True:
        flt = dg.AssetRecordsFilter(asset_key=REQUESTS_ASSET, after_storage_id=last)
        batch = instance.fetch_observations(flt, limit=page, ascending=True).records
        records += batch
        if batch:
            last = batch[-1].storage_id
        if len(batch) < page:
            break
    requests: list[CommandRequest] = []
    withdrawn: set[str] = set()
    for record in records:
        observation = record.asset_observation
        payload = plain_metadata(observation.metadata).get("ctxwin") if observation is not None else None
        if not isinstance(payload, dict):
            continue
        if "request" in payload:
            try:
                requests.append(CommandRequest(**payload["request"]))
            except TypeError:
                continue
        withdrawn.update(payload.get("withdrawn") or [])
    return [r for r in requests if r.id not in withdrawn], last


#: One instance per code-server process and instance, kept from tick to tick (see :func:`_instance_of`).
_INSTANCES: dict[str, dg.DagsterInstance] = {}
_INSTANCES_LOCK = threading.Lock()


def _instance_of(context: dg.SensorEvaluationContext) -> dg.DagsterInstance:
    """The instance the sensor reads, opened once per code-server process.

    In a code server, a sensor context's ``instance`` is opened afresh from the instance's
    reference at every tick, and opening a SQLite instance checks its schema against Dagster's
    migration scripts, read from disk each time: half of the code server's CPU in a long
    ``ctxwin run`` (this sensor ticks every second). The instance is the same from tick to tick,
    so it is kept, keyed by its serialized reference. A context built in a test (an instance
    and no reference) gives its own instance.
    """
    ref = context.instance_ref
    if ref is None:
        return context.instance
    key = dg.serialize_value(ref)
    with _INSTANCES_LOCK:
        if key not in _INSTANCES:
            _INSTANCES[key] = dg.DagsterInstance.from_ref(ref)
        return _INSTANCES[key]


@dg.sensor(
    name=SENSOR_NAME,
    jobs=[all_assets_job, *VARIANT_JOBS],
    minimum_interval_seconds=1,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Launches the runs that `ctxwin run` and `ctxwin evaluate` ask for (one run per request; "
    "the request id is the run key, so a run is never launched twice).",
)
def command_runs_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    # The cursor is the event-log id of the last request read. A request read once is launched
    # once (and its run key would stop a second launch anyway).
    previous = context.cursor or ""
    after = int(previous) if previous.isdigit() else None
    waiting, last = read_requests(_instance_of(context), after)
    cursor = str(last) if last is not None else context.cursor
    live = [r for r in waiting if command_alive(r.command)]
    if not live:
        gone = len(waiting) - len(live)
        return dg.SensorResult(
            skip_reason="no ctxwin command is waiting for runs"
            + (f" ({gone} request(s) of ended commands ignored)" if gone else ""),
            cursor=cursor,
        )
    return dg.SensorResult(run_requests=[r.run_request() for r in live], cursor=cursor)
