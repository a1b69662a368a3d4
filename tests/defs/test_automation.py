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
from ctxwin_dagster.testing import FakeOpenAIServer
from ctxwin_dagster.testing.question_writer import question_writer_responder

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
    """One document materialized, with generated questions, one never; the conditions evaluated
    before and after the hourly tick, then after the materialized document's file changed."""
    tmp = tmp_path_factory.mktemp("automation")
    server = FakeOpenAIServer(responder=question_writer_responder(), models=["writer"]).start()
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
            },
            "question_writer": {"model": "writer", "base_url": server.base_url, "out_dir": str(tmp / "generated")},
        },
    )
    defs = build_definitions(experiment=experiment)
    out = {}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("documents", [DONE, NEW])
        assert defs.resolve_job_def("all_assets_job").execute_in_process(instance=instance, partition_key=DONE).success
        questions = defs.resolve_job_def("questions_job").execute_in_process(instance=instance, partition_key=DONE)
        assert questions.success
        out["questions"] = questions.asset_materializations_for_node("generated_questions")[0]
        out["checks"] = questions.get_asset_check_evaluations()
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
        out.update(generated=tmp / "generated")
    server.stop()
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


def test_generated_questions_are_written_checked_and_left_out_of_the_pipeline_job(evaluated):
    meta = evaluated["questions"].metadata
    assert meta["n_questions"].value == 5 and meta["span_found_rate"].value == 1.0
    assert Path(meta["qa_file"].value) == evaluated["generated"] / f"{DONE}.jsonl"
    [check] = evaluated["checks"]
    assert check.check_name == "reference_spans_in_document" and check.passed
    assert "generated_questions" not in evaluated["job_keys"]


def test_questions_are_refreshed_when_their_document_changes_and_only_then(evaluated):
    key = dg.AssetKey("generated_questions")
    for name in ("before", "on_tick", "later"):
        assert not evaluated[name].get_requested_partitions(key), name
    # the changed file's text is read again on the tick, and its questions are written again in
    # the same run; the document that never had questions gets none by itself
    assert evaluated["changed"].get_requested_partitions(key) == {DONE}
    assert "raw_documents" in _requested(evaluated, "changed")[DONE]
