"""The sensor that launches the runs a ``ctxwin`` command asks for (in process; the whole path
through a real daemon is exercised by ``test_experiments.py``, ``test_runs.py`` and
``test_pipeline.py``)."""

from __future__ import annotations

import socket

import dagster as dg
import pytest

from ctxwin_dagster.defs.command_runs import (
    RUN_KEY_TAG,
    command_id,
    command_of,
    command_runs_sensor,
    read_requests,
    withdraw_requests,
    write_request,
)


@pytest.fixture
def instance(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as inst:
        yield inst


def _tick(instance, cursor=None):
    return command_runs_sensor(dg.build_sensor_context(instance=instance, cursor=cursor))


def test_a_request_becomes_one_run_request_with_its_partition_assets_and_tags(instance):
    asset = dg.AssetKey("t_rag_index")
    check = dg.AssetCheckKey(asset, "rows_match_chunks")
    req = write_request(
        instance,
        "all_assets_job",
        partition="My_notes_draft",
        assets=[asset],
        checks=[check],
        tags={"ctxwin/reason": "chunks changed"},
    )
    result = _tick(instance)
    [run] = result.run_requests
    assert run.run_key == req.id
    assert run.job_name == "all_assets_job" and run.partition_key == "My_notes_draft"
    assert run.asset_selection == [asset] and run.asset_check_keys == [check]
    # the run carries only the reason a person reads; which command asked is in its run key
    assert run.tags == {"ctxwin/reason": "chunks changed"}
    assert command_of({RUN_KEY_TAG: run.run_key}) == command_id()
    # The cursor moves past it: the next tick launches nothing more.
    again = _tick(instance, result.cursor)
    assert not again.run_requests and result.cursor == again.cursor


def test_requests_of_a_command_that_is_gone_or_withdrawn_are_never_launched(instance):
    dead = write_request(instance, "all_assets_job", partition="a", command=f"{socket.gethostname()}:999999999")
    withdrawn = write_request(instance, "all_assets_job", partition="b")
    live = write_request(instance, "comparison_job", partition=None)
    withdraw_requests(instance, [withdrawn.id])
    result = _tick(instance)
    assert [r.run_key for r in result.run_requests] == [live.id]
    waiting, last = read_requests(instance)
    assert [r.id for r in waiting] == [dead.id, live.id]  # withdrawn left out; liveness is the sensor's call
    assert read_requests(instance, last) == ([], last)


def test_many_requests_are_read_across_pages_in_order(instance):
    made = [write_request(instance, "all_assets_job", partition=f"d{i}").id for i in range(7)]
    waiting, _ = read_requests(instance, page=3)
    assert [r.id for r in waiting] == made


def test_nothing_waiting_is_a_skip_that_says_so(instance):
    result = _tick(instance)
    assert not result.run_requests
    assert "no ctxwin command is waiting" in (result.skip_reason.skip_message if result.skip_reason else "")


def test_ticks_in_a_code_server_open_the_instance_once_and_read_each_new_request(instance, monkeypatch):
    # In a code server the context carries the instance's reference, not the instance; opening a
    # SQLite instance reads Dagster's migration scripts, so the sensor keeps the one it opened.
    opened = []
    from_ref = dg.DagsterInstance.from_ref

    def counted(ref):
        opened.append(ref)
        return from_ref(ref)

    monkeypatch.setattr(dg.DagsterInstance, "from_ref", staticmethod(counted))
    ref = instance.get_ref()
    first = write_request(instance, "all_assets_job", partition="a")
    one = command_runs_sensor(dg.build_sensor_context(instance_ref=ref))
    assert [r.run_key for r in one.run_requests] == [first.id]
    second = write_request(instance, "all_assets_job", partition="b")
    two = command_runs_sensor(dg.build_sensor_context(instance_ref=ref, cursor=one.cursor))
    assert [r.run_key for r in two.run_requests] == [second.id]  # the kept instance sees the new request
    three = command_runs_sensor(dg.build_sensor_context(instance_ref=ref, cursor=two.cursor))
    assert not three.run_requests
    assert len(opened) == 1
