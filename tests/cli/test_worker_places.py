"""A ``ctxwin`` command queues all its runs at once, each in one of its ``--workers`` places,
and the instance's run queue runs one run per place at a time (the places are Dagster's own
``tag_concurrency_limits``; the whole path through a daemon is in ``test_runs.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import dagster as dg

from ctxwin_dagster.defs.resources import ProjectSettings
from ctxwin_dagster.runner import launch
from ctxwin_dagster.runner.launch import DEFAULT_INSTANCE_YAML, prepare_home, queues_worker_places
from ctxwin_dagster.runner.runs import Planned, RunPlanner


def _queues(home) -> bool:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return queues_worker_places(instance)


def test_new_and_unchanged_old_homes_get_the_places_and_an_edited_home_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    new = prepare_home(str(tmp_path / "new"))
    assert (new / "dagster.yaml").read_text(encoding="utf-8") == DEFAULT_INSTANCE_YAML and _queues(new)

    old = tmp_path / "old"
    old.mkdir()
    previous = launch._OLD_DEFAULT_YAMLS[1]
    assert "ctxwin/worker" not in previous and "run_queue:" in previous
    (old / "dagster.yaml").write_text(previous, encoding="utf-8")
    assert not _queues(old)
    prepare_home(str(old))
    assert _queues(old), "ctxwin's own earlier settings are brought up to date"

    edited = tmp_path / "edited"
    edited.mkdir()
    mine = "telemetry:\n  enabled: false\nrun_queue:\n  max_concurrent_runs: 3\n"
    (edited / "dagster.yaml").write_text(mine, encoding="utf-8")
    prepare_home(str(edited))
    assert (edited / "dagster.yaml").read_text(encoding="utf-8") == mine and not _queues(edited)


def test_the_largest_documents_go_first_each_to_the_place_with_the_fewest_characters(tmp_path):
    docs = tmp_path / "documents"
    docs.mkdir()
    sizes = {"big": 9_000, "mid": 5_000, "small_a": 3_000, "small_b": 2_000, "tiny": 1_000}
    for name, n in sizes.items():
        (docs / f"{name}.txt").write_text("x" * n, encoding="utf-8")
    planned = [Planned(name, None, "new") for name in sorted(sizes)]
    planner = SimpleNamespace(settings=ProjectSettings(documents_dir=str(docs)), workers=2)
    places = RunPlanner._places(planner, planned)  # type: ignore[arg-type]
    assert [p.partition for p in places] == ["big", "mid", "small_a", "small_b", "tiny"]
    by_place: dict[int, list[str]] = {}
    for p, place in places.items():
        by_place.setdefault(place, []).append(p.partition or "")
    assert by_place == {0: ["big", "tiny"], 1: ["mid", "small_a", "small_b"]}  # 10,000 characters each
    assert sorted(RunPlanner._places(SimpleNamespace(settings=planner.settings, workers=8), planned).values()) == [
        0,
        1,
        2,
        3,
        4,
    ], "never more places than runs"
