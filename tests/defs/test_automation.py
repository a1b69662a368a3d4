"""Scheduled reruns by declarative automation: on the hourly tick, the stale assets of each
document (by the rules ``ctxwin run`` uses), evaluated through Dagster's own
``evaluate_automation_conditions`` against a real instance."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import dagster as dg
import pytest

from ctxwin_dagster.core.experiment import Experiment
from ctxwin_dagster.definitions import build_definitions
from ctxwin_dagster.defs.automation import SENSOR_NAME

# Runs the pipeline through Dagster (a daemon, a webserver, or in process): the slow tier.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DONE, NEW = "squad_1973_oil_crisis", "squad_Normans"
HOUR = dt.datetime(2026, 11, 25, 10, 0, tzinfo=dt.UTC)


def _requested(evaluated, name) -> dict[str, set[str]]:
    """partition -> asset keys requested by one evaluation."""
    out: dict[str, set[str]] = {}
    for key in evaluated["all_keys"]:
        for partition in evaluated[name].get_requested_partitions(dg.AssetKey(key)):
            out.setdefault(partition, set()).add(key)
    return out


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """One document materialized, one never; the conditions evaluated before and after the
    hourly tick, then after the materialized document's file changed."""
    tmp = tmp_path_factory.mktemp("automation")
    docs = tmp / "documents"
    docs.mkdir()
    for doc in (DONE, NEW):
        shutil.copy(ROOT / "data" / "documents" / f"{doc}.txt", docs)
    experiment = Experiment(
        name="automation",
        documents_dir=str(docs),
        qa_dir=str(ROOT / "data" / "qa"),
        lancedb_uri=str(tmp / "lancedb"),
        cache_dir=str(tmp / "cache"),
        sections={
            "evaluation": {
                "results_dir": str(tmp / "results"),
                "reports_dir": str(tmp / "reports"),
                "max_questions_per_document": 2,
            }
        },
    )
    defs = build_definitions(experiment=experiment)
    out = {}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("documents", [DONE, NEW])
        assert defs.resolve_job_def("all_assets_job").execute_in_process(instance=instance, partition_key=DONE).success
        job_keys = {
            k.to_user_string() for k in defs.resolve_job_def("all_assets_job").asset_layer.executable_asset_keys
        }
        before = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, evaluation_time=HOUR - dt.timedelta(minutes=5)
        )
        on_tick = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, cursor=before.cursor, evaluation_time=HOUR + dt.timedelta(minutes=1)
        )
        later = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, cursor=on_tick.cursor, evaluation_time=HOUR + dt.timedelta(minutes=20)
        )
        path = docs / f"{DONE}.txt"
        path.write_text(path.read_text(encoding="utf-8") + "\nA sentence added later.\n", encoding="utf-8")
        changed = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, cursor=later.cursor, evaluation_time=HOUR + dt.timedelta(hours=1, minutes=1)
        )
        all_keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
        out.update(before=before, on_tick=on_tick, later=later, changed=changed, job_keys=job_keys, all_keys=all_keys)
    yield out


def test_nothing_is_requested_between_ticks(evaluated):
    assert evaluated["before"].total_requested == 0
    assert evaluated["later"].total_requested == 0


def test_on_the_tick_only_the_stale_document_is_rerun_whole(evaluated):
    requested = _requested(evaluated, "on_tick")
    assert set(requested) == {NEW}
    assert requested[NEW] == evaluated["job_keys"]
    assert "experiment_comparison" not in requested[NEW]


def test_a_changed_file_reruns_its_document_on_the_next_tick(evaluated):
    requested = _requested(evaluated, "changed")
    assert DONE in requested
    assert "raw_documents" in requested[DONE] and "t_rag_index" in requested[DONE]


def test_the_rerun_sensor_is_off_until_turned_on():
    defs = build_definitions()
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
