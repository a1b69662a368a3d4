"""A server that echoes the API key in its error bodies, through the real machinery: ``ctxwin
run`` (its daemon, its Dagster runs, their event logs and compute logs) and ``ctxwin ask`` as
subprocesses. Afterwards no file of the project folder, the experiment's Dagster home included,
and no line of the console holds the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxwin_dagster.testing.projects import make_project, run_ctxwin
from ctxwin_dagster.testing.server import FakeOpenAIServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# Not shaped like an OpenAI key ("sk-…"): it must be masked by value.
KEY = "Zq7-unusual-key-shape-4242-private"


def files_holding(folder: Path, needle: bytes) -> list[str]:
    found = []
    for path in folder.rglob("*"):
        try:
            if path.is_file() and needle in path.read_bytes():
                found.append(str(path.relative_to(folder)))
        except OSError:
            continue
    return found


def test_a_key_echoed_in_a_500_is_nowhere_in_the_home_or_on_the_console(tmp_path, monkeypatch):
    (tmp_path / "project").mkdir()
    root = make_project(tmp_path / "project", [], questions_per_doc=0)
    (root / "data" / "qa" / "questions.jsonl").unlink()
    docs = tmp_path / "docs"
    docs.mkdir()
    text = (ROOT / "data" / "documents" / "squad_Normans.txt").read_text(encoding="utf-8")[:3000]
    (docs / "note.txt").write_text(text, encoding="utf-8")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # the subprocesses' environment, as a user sets it
    with FakeOpenAIServer(api_key=KEY, echo_key=True, faults=["500"] * 200, models=["m"]) as server:
        experiment = tmp_path / "echo.json"
        experiment.write_text(
            json.dumps(
                {
                    "name": "echo",
                    "documents_dir": str(docs),
                    "qa_dir": str(root / "data" / "qa"),
                    "contextualizer": {"model": "m", "base_url": server.base_url, "max_retries": 1},
                }
            ),
            encoding="utf-8",
        )
        run = run_ctxwin(["run", "--experiment", str(experiment), "--workers", "1"], root)
        # The server did get the key and did echo it: what is tested is that nothing kept it.
        assert server.request_count >= 1
        ask = run_ctxwin(
            ["ask", "Who was Rollo?", "--experiment", "echo", "--variant", "t", "--model", "m"]
            + ["--base-url", server.base_url],
            root,
        )
    console = run.stdout + run.stderr
    assert run.returncode != 0 and "Fake fault 500" in console, console[-3000:]
    assert ask.returncode != 0 and "Fake fault 500" in ask.stdout + ask.stderr, ask.stdout + ask.stderr
    assert KEY not in console and KEY not in ask.stdout + ask.stderr
    home = root / "data" / "experiments" / "echo" / "dagster_home"
    assert (home / "ctxwin-daemon.log").is_file() and any(home.rglob("*.db")), sorted(p.name for p in home.iterdir())
    assert files_holding(tmp_path, KEY.encode()) == []  # the project, its home, index and caches
