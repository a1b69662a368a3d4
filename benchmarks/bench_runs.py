"""Runs on the Dagster instance: parallel documents, skipped reruns, the executor, and the floor.

Four measurements (each prints figures; nothing is asserted):

``workers``
    An LLM contextualizer on the loopback test server (FakeOpenAIServer, 500 ms per request),
    8 documents, ``ctxwin run --job swb_rag_job --workers 1`` vs ``--workers 4``, each in a fresh
    project folder (no cache). Target: ``--workers 4`` at least 3x faster. With ``--cpu`` every
    Python process of each command logs its CPU seconds at exit (a ``sitecustomize`` on
    ``PYTHONPATH``), summed by kind: the runs' own processes, the daemon, the code server, the
    embedding server and the command; on 2 cores their sum over 2 is a floor for the wall time.
``unchanged``
    ``ctxwin run`` on the sample twice in a fresh folder: the cold run, then the wall time of the
    run with nothing changed (target: <= 15 s).
``executor``
    One document, the whole graph, run warm with ``--force`` through the instance: the
    in-process executor (the project's) vs Dagster's multiprocess executor (a process per
    step), loaded from a workspace whose definitions pass it to ``build_definitions``.
``floor``
    A cold run of the sample, in this process (one document after another), profiled per stage
    against the embedding floor: the time to embed every distinct text the run embedded, once,
    measured in the same process right after. Reports each stage's ratio to the floor, and texts
    the run embedded more than once (duplicate work).

Run::

    .venv/bin/python benchmarks/bench_runs.py workers|unchanged|executor|floor [--keep DIR] [--cpu]

The commands start one embedding server for their runs (backends/embeddings/server.py); with
``CTXWIN_EMBEDDING_SERVER=off`` in the environment every run loads the model itself, as before
it existed, so the two can be compared on the same machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "documents"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


# Loaded by every Python process of a command (PYTHONPATH) when ``--cpu`` is given: at exit each
# appends its CPU seconds and what it was to the file named by CTXWIN_BENCH_CPU_LOG.
_CPU_SITECUSTOMIZE = r"""
import atexit, os, resource, sys

def _ctxwin_bench_cpu():
    import multiprocessing
    usage = resource.getrusage(resource.RUSAGE_SELF)
    argv = " ".join(sys.argv)
    if multiprocessing.parent_process() is not None and "grpc" in argv:
        kind = "run worker"  # the code server's child that executes one run
    elif "grpc" in argv:
        kind = "code server"
    elif "dagster-daemon" in argv:
        kind = "daemon"
    elif "embeddings/server.py" in argv or "embeddings.server" in argv:
        kind = "embedding server"
    elif "ctxwin_dagster.cli" in argv or "cli/__main__.py" in argv:
        kind = "ctxwin command"
    else:
        kind = "other: " + argv[:60]
    with open(os.environ["CTXWIN_BENCH_CPU_LOG"], "a") as f:
        f.write(f"{kind}\t{usage.ru_utime + usage.ru_stime:.3f}\t{usage.ru_maxrss}\n")  # maxrss in KiB

atexit.register(_ctxwin_bench_cpu)

# The embedding server leaves by os._exit (it skips the interpreter's shutdown): it logs there.
# (sys.argv is not yet the module's path while this runs, so every process is wrapped.)
_ctxwin_os_exit = os._exit

def _ctxwin_exit_logged(code):
    try:
        _ctxwin_bench_cpu()
    finally:
        _ctxwin_os_exit(code)

os._exit = _ctxwin_exit_logged
"""


def cpu_env(folder: Path) -> dict[str, str]:
    """The environment that makes every Python process of a command log its CPU time at exit
    (a ``sitecustomize`` on ``PYTHONPATH``; read back with :func:`cpu_by_kind`)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_CPU_SITECUSTOMIZE, encoding="utf-8")
    path = os.pathsep.join(x for x in (str(folder), os.environ.get("PYTHONPATH", "")) if x)
    return {"PYTHONPATH": path, "CTXWIN_BENCH_CPU_LOG": str(folder / "cpu.tsv")}


def cpu_by_kind(folder: Path) -> dict[str, tuple[int, float]]:
    """``kind -> (processes, CPU seconds)`` from the log :func:`cpu_env` set up."""
    out: dict[str, tuple[int, float]] = {}
    log = folder / "cpu.tsv"
    for line in log.read_text(encoding="utf-8").splitlines() if log.exists() else []:
        kind, seconds = line.split("\t")[:2]
        n, total = out.get(kind, (0, 0.0))
        out[kind] = (n + 1, total + float(seconds))
    return out


def peak_rss_mib(folder: Path) -> dict[str, float]:
    """``kind -> the largest peak resident memory (MiB) of any one process of that kind``, from
    the log :func:`cpu_env` set up."""
    out: dict[str, float] = {}
    log = folder / "cpu.tsv"
    for line in log.read_text(encoding="utf-8").splitlines() if log.exists() else []:
        parts = line.split("\t")
        if len(parts) == 3:
            out[parts[0]] = max(out.get(parts[0], 0.0), int(parts[2]) / 1024)
    return out


def ctxwin(args: list[str], cwd: Path, extra_env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall time and output of ``ctxwin ARGS`` in ``cwd`` (its own Dagster home)."""
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "ctxwin_dagster.cli", *args],
        cwd=cwd,
        env={**ENV, "DAGSTER_HOME": str(cwd / "home"), **(extra_env or {})},
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - started
    if out.returncode != 0:
        print(out.stdout[-3000:], out.stderr[-3000:])
        raise SystemExit(f"ctxwin {' '.join(args)} failed")
    return took, out.stdout


def project(root: Path, docs: dict[str, str] | None = None) -> Path:
    """A project folder: workspace.yaml, documents (the sample by default) and QA sets."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "workspace.yaml", root / "workspace.yaml")
    (root / "data").mkdir(exist_ok=True)
    if docs is None:
        shutil.copytree(SAMPLE, root / "data" / "documents")
        shutil.copytree(ROOT / "data" / "qa", root / "data" / "qa")
    else:
        (root / "data" / "documents").mkdir()
        for name, text in docs.items():
            (root / "data" / "documents" / f"{name}.txt").write_text(text, encoding="utf-8")
    return root


def eight_documents(chars: int = 12_000) -> dict[str, str]:
    """8 documents of about ``chars`` characters cut from the sample (at paragraph ends)."""
    out: dict[str, str] = {}
    texts = [p.read_text(encoding="utf-8") for p in sorted(SAMPLE.glob("*.txt"))]
    i = 0
    while len(out) < 8:
        text = texts[i % len(texts)]
        start = (i // len(texts)) * chars
        piece = text[start : start + chars]
        cut = piece.rfind("\n\n")
        out[f"doc{len(out) + 1}"] = piece[: cut if cut > chars // 2 else len(piece)]
        i += 1
    return out


def bench_workers(base: Path, latency: float, cpu: bool = False) -> None:
    from ctxwin_dagster.testing import FakeOpenAIServer

    docs = eight_documents()
    model = "gpt-4o-mini"  # a name the limits registry knows; the loopback server plays it
    times = {}
    with FakeOpenAIServer(latency_s=latency, models=[model]) as server:
        for workers in (1, 4):
            root = project(base / f"workers{workers}", docs)
            calls = server.request_count
            extra = cpu_env(root / "cpu") if cpu else None
            took, out = ctxwin(
                [
                    "run",
                    "--job",
                    "swb_rag_job",
                    "--model",
                    model,
                    "--base-url",
                    server.base_url,
                    "--workers",
                    str(workers),
                ],
                root,
                extra,
            )
            times[workers] = took
            print(
                f"--workers {workers}: {took:.1f}s wall, {server.request_count - calls} requests at {latency * 1000:.0f} ms"
            )
            print("   " + next(line for line in out.splitlines() if line.startswith("Summary")))
            if cpu:
                kinds = cpu_by_kind(root / "cpu")
                total = sum(t for _, t in kinds.values())
                print(
                    f"   CPU {total:.1f}s in all ({total / (os.cpu_count() or 1):.1f}s of wall time on {os.cpu_count()} cores):"
                )
                for kind, (n, t) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
                    print(f"     {kind:<18} {n:3d} process(es) {t:6.1f}s ({t / n:.1f}s each)")
    print(f"speed-up --workers 4 vs 1: {times[1] / times[4]:.2f}x (target >= 3x; {os.cpu_count()} cores)")


def bench_unchanged(base: Path) -> None:
    root = project(base / "sample")
    cold, _ = ctxwin(["run"], root)
    warm, out = ctxwin(["run"], root)
    print(f"sample, cold: {cold:.1f}s wall; nothing changed: {warm:.1f}s wall (target <= 15 s)")
    print("   " + "\n   ".join(line for line in out.splitlines() if "up to date" in line))


MULTI_DEFS = """import dagster as dg
from ctxwin_dagster.definitions import build_definitions
defs = build_definitions(executor=dg.multiprocess_executor.configured({"max_concurrent": 2}))
"""


def _run_durations(home: Path) -> list[float]:
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home)
    with dg.DagsterInstance.get() as instance:
        runs = instance.get_runs(
            filters=dg.RunsFilter(job_name="all_assets_job", statuses=[dg.DagsterRunStatus.SUCCESS])
        )
        return [
            (lambda s: (s.end_time or 0) - (s.launch_time or s.start_time or 0))(instance.get_run_stats(r.run_id))
            for r in runs
        ]


def bench_executor(base: Path, doc: str = "squad_Normans") -> None:
    root = project(base / "executor")
    (root / "multi_defs.py").write_text(MULTI_DEFS, encoding="utf-8")
    (root / "multi_workspace.yaml").write_text(
        "load_from:\n  - python_file:\n      relative_path: multi_defs.py\n      location_name: ctxwin\n      working_directory: .\n",
        encoding="utf-8",
    )
    ctxwin(["run", "--doc", doc], root)  # warm the caches
    results = {}
    for name, extra in (("in_process", []), ("multiprocess", ["--workspace", "multi_workspace.yaml"])):
        took, _ = ctxwin(["run", "--force", "--doc", doc, "--job", "all_assets_job", *extra], root)
        results[name] = (took, _run_durations(root / "home")[0])
        print(f"{name:>12}: command {took:.1f}s, run (launch to end) {results[name][1]:.1f}s")
    print(f"multiprocess / in_process run time: {results['multiprocess'][1] / results['in_process'][1]:.2f}x")


def bench_floor(base: Path, docs: list[str] | None = None) -> None:
    import dagster as dg
    import numpy as np

    from ctxwin_dagster.backends.embeddings.local import LocalEmbedder
    from ctxwin_dagster.definitions import defs
    from ctxwin_dagster.defs.resources import ProjectSettings

    root = project(base / "floor")
    if docs:  # only these documents of the sample
        for path in (root / "data" / "documents").iterdir():
            if path.stem not in docs:
                path.unlink()
    os.chdir(root)
    encoded: Counter[str] = Counter()
    spent = [0.0]
    original = LocalEmbedder._encode

    def recording(self, texts):
        started = time.perf_counter()
        try:
            return original(self, texts)
        finally:
            spent[0] += time.perf_counter() - started
            encoded.update(texts)

    LocalEmbedder._encode = recording  # type: ignore[method-assign]
    job = defs.resolve_job_def("all_assets_job")
    # The definitions' default resources: relative paths, so caches and tables land in this folder.
    stage: Counter[str] = Counter()
    started = time.perf_counter()
    with dg.instance_for_test() as instance:
        keys = ProjectSettings().document_ids()
        instance.add_dynamic_partitions("documents", keys)
        for key in keys:
            quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
            result = job.execute_in_process(instance=instance, partition_key=key, raise_on_error=True, run_config=quiet)
            for event in result.all_events:
                if event.event_type_value == "ASSET_MATERIALIZATION":
                    meta = event.event_specific_data.materialization.metadata
                    rt = meta.get("runtime_s")
                    stage[event.asset_key.to_user_string()] += float(getattr(rt, "value", 0) or 0)
    total = time.perf_counter() - started
    LocalEmbedder._encode = original  # type: ignore[method-assign]
    distinct = list(encoded)
    fresh = LocalEmbedder().load()
    fresh.embed(["warm up"])
    t0 = time.perf_counter()
    vecs = original(fresh, distinct) if distinct else np.zeros((0, 1))
    floor = time.perf_counter() - t0
    dup = {t: n for t, n in encoded.items() if n > 1}
    print(
        f"cold run of the sample ({len(keys)} documents, in process): {total:.1f}s; embedding inside it {spent[0]:.1f}s"
    )
    print(f"embedding floor: {len(distinct):,} distinct texts embedded once in {floor:.1f}s ({len(vecs)} vectors)")
    print(f"texts embedded more than once in the run: {len(dup):,} ({sum(dup.values()) - len(dup):,} extra encodings)")
    print(f"job / floor: {total / floor:.2f}x (target <= 1.3x)")
    print("| stage | seconds | / floor |\n| --- | --- | --- |")
    for name, seconds in sorted(stage.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {seconds:.1f} | {seconds / floor:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["workers", "unchanged", "executor", "floor"])
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--keep", help="work in this folder (kept) instead of a temporary one")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="workers: also report the CPU seconds of each kind of process (runs, daemon, code server, servers)",
    )
    parser.add_argument("--doc", action="append", help="floor: only this sample document (repeatable; default all)")
    args = parser.parse_args()
    base = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="ctxwin-bench-"))
    try:
        {
            "workers": lambda: bench_workers(base, args.latency, args.cpu),
            "unchanged": lambda: bench_unchanged(base),
            "executor": lambda: bench_executor(base),
            "floor": lambda: bench_floor(base, args.doc),
        }[args.what]()
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
