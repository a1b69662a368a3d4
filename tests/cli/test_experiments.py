"""Your folder, your experiment, and nothing else touched — through the real machinery: the
``ctxwin`` command as a subprocess, the Dagster daemon it starts (with its documents sensor), and
the instance of each experiment's own Dagster home.

One project folder serves the module, in order: a copy of the repository's ``workspace.yaml``
with a one-document sample in ``data/`` built by ``ctxwin run``; then experiments on folders of
files named as people name them. After every step the sample's index rows and result files are
counted again: they must never change.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import pytest

from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.testing.projects import ctxwin_env, make_project, run_ctxwin

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_DOC = "squad_Normans"
OWN_DOC = "squad_1973_oil_crisis"


_env = ctxwin_env
ctxwin = run_ctxwin


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


def rows(uri: Path) -> dict[str, int]:
    import lancedb

    db = lancedb.connect(str(uri))
    listed = db.list_tables()
    names = list(getattr(listed, "tables", listed))
    return {n: db.open_table(n).count_rows() for n in sorted(names)}


def result_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.jsonl")) if folder.is_dir() else []


def instance_of(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(home))


def _question(doc_text: str, doc_ref: str, qid: str, needle: str, question: str) -> dict:
    start = doc_text.index(needle)
    return {
        "question_id": qid,
        "doc_id": doc_ref,
        "question": question,
        "reference_answer": needle,
        "reference_spans": [[start, start + len(needle)]],
    }


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project folder with a one-document sample, built by ``ctxwin run`` in its own home."""
    root = make_project(tmp_path_factory.mktemp("project"), [SAMPLE_DOC], questions_per_doc=3)
    home = root / ".dagster_home"
    ok(ctxwin(["run", "--workers", "1"], root, home))
    return root, home


def sample_state(root: Path) -> tuple[dict[str, int], list[str]]:
    # every result file under evaluations/results: other experiments keep theirs beside their index
    state = rows(root / "data" / "lancedb"), result_files(root / "evaluations" / "results")
    assert sum(state[0].values()) > 0 and state[1], state
    return state


@pytest.fixture(scope="module")
def own_folder(project, tmp_path_factory):
    """A user's folder: files named as people name them, and a question naming its file."""
    base = tmp_path_factory.mktemp("mine")
    docs, qa = base / "My Contracts (2024)", base / "questions"
    docs.mkdir()
    qa.mkdir()
    text = (ROOT / "data" / "documents" / f"{OWN_DOC}.txt").read_text(encoding="utf-8")
    (docs / "Oil Crisis, 1973 (final).txt").write_text(text, encoding="utf-8")
    (docs / "Oil Crisis, 1973 [copy 2].md").write_text(text[: len(text) // 2], encoding="utf-8")
    items = [
        _question(text, "Oil Crisis, 1973 (final).txt", "q1", "1973", "In which year did the oil crisis begin?"),
        _question(text, "Oil Crisis, 1973 [copy 2].md", "q2", "OPEC", "Which organisation proclaimed the embargo?"),
    ]
    (qa / "mine.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return docs, qa


@pytest.fixture(scope="module")
def runs_home(project, own_folder):
    """The experiment "runs" (``ctxwin run --documents`` on the user's folder) built, whichever
    tests of the module are selected; its Dagster home."""
    root, _ = project
    docs, _ = own_folder
    ok(ctxwin(["run", "--documents", str(docs), "--name", "runs"], root))
    return root / "data" / "experiments" / "runs" / "dagster_home"


def test_evaluate_on_a_folder_of_real_file_names_completes_and_leaves_the_sample_alone(project, own_folder):
    root, sample_home = project
    docs, qa = own_folder
    before = sample_state(root)
    out = ok(ctxwin(["evaluate", "--name", "mine", "--documents", str(docs), "--qa", str(qa), "--workers", "2"], root))
    home = root / "data" / "experiments" / "mine" / "dagster_home"
    assert "2 ran, 0 up to date, 0 failed" in out, out
    assert "[1/1] experiment_comparison: ok" in out, out
    report = json.loads((root / "evaluations" / "reports" / "mine" / "comparison.json").read_text(encoding="utf-8"))
    assert report["n_questions"] == {v: 2 for v in VARIANTS}
    # Its own index, and its own partitions; the sample's home is not touched.
    own = rows(root / "data" / "experiments" / "mine" / "lancedb")
    assert len(own) == 3 and len(set(own.values())) == 1 and min(own.values()) > 0, own
    with instance_of(home) as instance:
        assert sorted(instance.get_dynamic_partitions("documents")) == [
            "Oil_Crisis_1973_copy_2",
            "Oil_Crisis_1973_final",
        ]
        # The daemon ran the experiment's documents sensor, on the experiment's folder.
        ticks = [
            t
            for state in instance.all_instigator_state()
            if state.instigator_name == "documents_sensor"
            for t in instance.get_ticks(state.instigator_origin_id, state.selector_id)
        ]
        assert ticks, "the documents sensor never ticked"
        assert all(t.status.value != "FAILURE" for t in ticks), [t.error for t in ticks]
    with instance_of(sample_home) as instance:
        assert list(instance.get_dynamic_partitions("documents")) == [SAMPLE_DOC]
    assert sample_state(root) == before


def test_run_on_another_folder_twice_then_the_sample_changes_neither(project, own_folder):
    root, _ = project
    docs, _ = own_folder
    before = sample_state(root)
    first = ok(ctxwin(["run", "--documents", str(docs), "--name", "runs"], root))
    assert "2 ran" in first
    own_index = root / "data" / "experiments" / "runs" / "lancedb"
    own_rows = rows(own_index)
    second = ok(ctxwin(["run", "--documents", str(docs), "--name", "runs"], root))
    assert "0 of 2 documents to run (2 up to date, skipped)" in second
    sample = ok(ctxwin(["run"], root))
    assert "0 of 1 documents to run (1 up to date, skipped)" in sample
    assert rows(own_index) == own_rows
    assert sample_state(root) == before
    # The sample's home does not take another folder: that is another experiment.
    refused = ctxwin(["run", "--documents", str(docs), "--dagster-home", str(root / ".dagster_home")], root)
    assert refused.returncode != 0 and "holds the experiment 'sample'" in refused.stderr, refused.stderr


def test_rows_deleted_behind_the_projects_back_are_rebuilt(project):
    import lancedb

    root, _ = project
    before = sample_state(root)
    table = lancedb.connect(str(root / "data" / "lancedb")).open_table("cc_rag_chunks")
    table.delete(f"doc_id = '{SAMPLE_DOC}'")
    assert table.count_rows() == 0
    out = ok(ctxwin(["run"], root))
    assert f"{SAMPLE_DOC}: cc_rag_index: 0 of {before[0]['cc_rag_chunks']} rows in the cc_rag index" in out, out
    assert sample_state(root)[0] == before[0]


def test_a_file_empty_or_unreadable_for_a_sensor_tick_loses_nothing(project, own_folder, runs_home):
    """The sensor of the experiment's home (the daemon's code, evaluated here on that home)
    while a file is empty, then unreadable: nothing is removed; its run fails, then recovers."""
    from ctxwin_dagster.definitions import home_definitions
    from ctxwin_dagster.defs.sensors import documents_sensor

    root, _ = project
    docs, _ = own_folder
    home = root / "data" / "experiments" / "runs" / "dagster_home"
    index = root / "data" / "experiments" / "runs" / "lancedb"
    before = rows(index)
    path = docs / "Oil Crisis, 1973 [copy 2].md"
    text = path.read_bytes()
    defs = home_definitions(home)
    for breakage in ("empty", "unreadable"):
        if breakage == "empty":
            path.write_bytes(b"")
        else:
            path.write_bytes(text)
            path.chmod(0)
        try:
            with instance_of(home) as instance:
                result = documents_sensor(
                    dg.build_sensor_context(instance=instance, resources={"settings": defs.resources["settings"]})
                )
                assert not result.dynamic_partitions_requests
                assert len(instance.get_dynamic_partitions("documents")) == 2
            assert rows(index) == before
            if breakage == "empty":
                failed = ctxwin(["run", "--documents", str(docs), "--name", "runs"], root)
                assert failed.returncode == 1
                line = next(x for x in failed.stdout.splitlines() if "FAILED" in x)
                assert "Oil_Crisis_1973_copy_2" in line and "empty" in line, failed.stdout
                assert rows(index) == before
        finally:
            path.chmod(0o644)
            path.write_bytes(text)
    recovered = ok(ctxwin(["run", "--documents", str(docs), "--name", "runs"], root))
    assert "1 ran" in recovered or "0 of 2 documents to run" in recovered, recovered
    assert rows(index) == before


def test_prune_deletes_only_when_asked_and_undo_puts_it_back(project, own_folder, runs_home):
    root, _ = project
    docs, _ = own_folder
    home = root / "data" / "experiments" / "runs" / "dagster_home"
    index = root / "data" / "experiments" / "runs" / "lancedb"
    before = rows(index)
    moved = docs.parent / "aside.md"
    shutil.move(docs / "Oil Crisis, 1973 [copy 2].md", moved)
    try:
        run = ok(ctxwin(["run", "--documents", str(docs), "--name", "runs"], root))
        assert "1 document(s) have no file any more (Oil_Crisis_1973_copy_2)" in run
        assert rows(index) == before
        listed = ok(ctxwin(["prune", "runs"], root))
        assert "Nothing deleted" in listed and rows(index) == before
        pruned = ok(ctxwin(["prune", "runs", "--yes"], root))
        assert "pruned 1 document(s)" in pruned
        after = rows(index)
        assert all(after[t] < before[t] for t in before)
        with instance_of(home) as instance:
            assert list(instance.get_dynamic_partitions("documents")) == ["Oil_Crisis_1973_final"]
        log = [json.loads(line) for line in (home / "ctxwin_prune.log").read_text(encoding="utf-8").splitlines()]
        assert log[-1]["action"] == "prune" and log[-1]["doc_ids"] == ["Oil_Crisis_1973_copy_2"]
        assert sum(log[-1]["rows"].values()) == sum(before.values()) - sum(after.values())
        ok(ctxwin(["prune", "runs", "--undo"], root))
        assert rows(index) == before
        with instance_of(home) as instance:
            assert len(instance.get_dynamic_partitions("documents")) == 2
    finally:
        shutil.move(moved, docs / "Oil Crisis, 1973 [copy 2].md")
    assert "0 of 2 documents to run" in ok(ctxwin(["run", "--documents", str(docs), "--name", "runs"], root))


def test_prune_refuses_a_folder_with_no_documents_unless_allowed(project, own_folder, runs_home):
    """An existing folder with no document in it (a share that is not mounted) prunes nothing,
    listed or with --yes; with --allow-empty every document is pruned, as asked, and undoable."""
    root, _ = project
    docs, _ = own_folder
    index = root / "data" / "experiments" / "runs" / "lancedb"
    log = runs_home / "ctxwin_prune.log"
    before, logged = rows(index), log.read_text(encoding="utf-8") if log.is_file() else ""
    aside = docs.parent / "while unmounted"
    aside.mkdir()
    names = sorted(p.name for p in docs.iterdir())
    for name in names:
        shutil.move(docs / name, aside / name)
    try:
        for args in (["prune", "runs", "--yes"], ["prune", "runs"]):
            refused = ctxwin(args, root)
            assert refused.returncode != 0, refused.stdout[-3000:]
            message = refused.stderr
            assert f"the documents folder {str(docs.resolve())!r} has no documents" in message, message
            assert "not mounted" in message and "Nothing was deleted" in message and "--allow-empty" in message
        assert rows(index) == before
        assert (log.read_text(encoding="utf-8") if log.is_file() else "") == logged
        with instance_of(runs_home) as instance:
            assert len(instance.get_dynamic_partitions("documents")) == 2
        listed = ok(ctxwin(["prune", "runs", "--allow-empty"], root))
        assert "2 document(s) without a file" in listed and rows(index) == before
        pruned = ok(ctxwin(["prune", "runs", "--allow-empty", "--yes"], root))
        assert "pruned 2 document(s)" in pruned and not any(rows(index).values())
        ok(ctxwin(["prune", "runs", "--undo"], root))
        assert rows(index) == before
    finally:
        for name in names:
            shutil.move(aside / name, docs / name)
        aside.rmdir()
    assert "0 of 2 documents to run" in ok(ctxwin(["run", "--documents", str(docs), "--name", "runs"], root))


def test_a_run_outside_ctxwin_leaves_its_partition_up_to_date_for_ctxwin_run(project, own_folder, runs_home):
    """A materialization of one partition's assets as the UI makes it — Dagster's own asset job,
    no ctxwin tags, launched by ``dagster asset materialize`` on the experiment's home — counts."""
    from ctxwin_dagster.definitions import home_definitions
    from ctxwin_dagster.defs.jobs import all_assets_job

    root, _ = project
    docs, _ = own_folder
    home = root / "data" / "experiments" / "runs" / "dagster_home"
    keys = home_definitions(home).resolve_job_def(all_assets_job.name).asset_layer.executable_asset_keys
    select = ",".join(sorted(k.to_user_string() for k in keys))
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("dagster")),
            "asset",
            "materialize",
            "-m",
            "ctxwin_dagster.definitions",
            "--select",
            select,
            "--partition",
            "Oil_Crisis_1973_final",
        ],
        cwd=root,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with instance_of(home) as instance:
        last = instance.get_runs(limit=1)[0]
    assert last.job_name == "__ASSET_JOB" and last.tags.get("dagster/partition") == "Oil_Crisis_1973_final"
    # tagged at its first step with the reason ctxwin run would give it (the command's own tag is not there)
    assert last.tags.get("ctxwin/reason") == "up to date; run on request", last.tags  # ctxwin run had run it
    assert "ctxwin/command" not in last.tags
    out = ok(ctxwin(["run", "--documents", str(docs), "--name", "runs"], root))
    assert "0 of 2 documents to run (2 up to date, skipped)" in out, out


def test_two_commands_on_one_home_start_one_daemon_and_do_the_work_once(project, tmp_path):
    root, _ = project
    docs = tmp_path / "two"
    docs.mkdir()
    shutil.copy(ROOT / "data" / "documents" / f"{OWN_DOC}.txt", docs / "one document.txt")
    args = [sys.executable, "-m", "ctxwin_dagster.cli", "run", "--documents", str(docs), "--name", "twice"]
    first = subprocess.Popen(args, cwd=root, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(1)
    second = subprocess.Popen(args, cwd=root, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outs = [p.communicate(timeout=900)[0] for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outs
    assert sum("Dagster daemon started" in o for o in outs) == 1, outs
    assert any("waiting for" in o and "0 of 1 documents to run" in o for o in outs), outs
    with instance_of(root / "data" / "experiments" / "twice" / "dagster_home") as instance:
        runs = [r for r in instance.get_runs() if r.job_name == "all_assets_job"]
    assert len(runs) == 1


def test_killing_the_command_stops_its_daemon_and_the_next_command_ends_its_run(project, own_folder, runs_home):
    root, _ = project
    docs, _ = own_folder
    home = root / "data" / "experiments" / "runs" / "dagster_home"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxwin_dagster.cli", "run", "--documents", str(docs), "--name", "runs", "--force"],
        cwd=root,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.time() + 300
    seen = ""
    while time.time() < deadline and "Dagster daemon started" not in seen:
        seen += proc.stdout.readline()
    assert "Dagster daemon started" in seen, seen
    deadline = time.time() + 60
    while time.time() < deadline and not _daemons(home):
        time.sleep(0.5)
    assert len(_daemons(home)) == 1
    # The daemon loads the definitions from the one code server the command started (a server the
    # daemon started would be the daemon's child, and replaced every minute).
    servers = _code_servers(home)
    assert len(servers) == 1, servers
    assert _parent(servers[0]) == proc.pid
    # its socket folder, taken while it runs: any command of another test may remove it once the
    # command is dead (remove_orphaned_folders), so it is not looked for after the kill
    left = list(Path(tempfile.gettempdir()).glob(f"ctxwin-code-{proc.pid}-*"))
    assert left, "the command's code server had no socket folder"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    deadline = time.time() + 60
    while time.time() < deadline and (_daemons(home) or _code_servers(home)):
        time.sleep(1)
    assert not _daemons(home), "the daemon outlived the command that started it"
    assert not _code_servers(home), "the code server outlived the command that started it"
    # The run's worker (a child of the dead code server) may still be working: the next command
    # stops it before it plans, so its own runs are the only ones on those documents.
    working = _workers_alive(home)
    with instance_of(home) as instance:
        unfinished = [r.run_id for r in instance.get_runs() if not r.is_finished]
    nxt = ok(ctxwin(["run", "--documents", str(docs), "--name", "runs"], root))
    assert not any(f.exists() for f in left), "the next command left the killed one's socket folder"
    if unfinished:
        assert f"ended {len(unfinished)} run(s) that a killed ctxwin command left unfinished" in nxt, nxt
    assert not [pid for pid in working if Path(f"/proc/{pid}").exists()], "a killed command's run worker still works"
    with instance_of(home) as instance:
        assert all(r.is_finished for r in instance.get_runs())


def _daemons(home: Path) -> list[int]:
    """pids of dagster-daemon processes working on ``home``."""
    return _processes(home, b"dagster-daemon")


def _code_servers(home: Path) -> list[int]:
    """pids of code servers (``dagster api grpc``) of ``home``."""
    return [pid for pid, cmd in _processes(home, b"", with_cmd=True) if b" api grpc " in cmd]


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _workers_alive(home: Path) -> list[int]:
    """pids of run workers of ``home``: the code server starts each as a ``multiprocessing`` child
    (``spawn_main``), a command's own launcher as ``dagster api execute_run``."""
    return [
        pid
        for pid, cmd in _processes(home, b"", with_cmd=True)
        if b"execute_run" in cmd or (b"spawn_main" in cmd and b"--multiprocessing-fork" in cmd)
    ]


def _processes(home: Path, exe_suffix: bytes, *, with_cmd: bool = False) -> list:
    found: list = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(c.endswith(exe_suffix) for c in cmd[:2]) and f"DAGSTER_HOME={home.resolve()}".encode() in env:
            found.append((int(proc.name), b" ".join(cmd)) if with_cmd else int(proc.name))
    return found
