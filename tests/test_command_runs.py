"""The sensor that launches the runs a ``ctxwin`` command asks for (in process; the whole path
through a real daemon is exercised by ``test_experiments.py`` and ``test_pipeline.py``)."""

from __future__ import annotations

import dagster as dg

from ctxwin_dagster.defs.command_runs import (
    COMMAND_TAG,
    command_id,
    command_runs_sensor,
    drop_requests,
    read_requests,
    requests_dir,
    write_request,
)

def test_a_request_becomes_one_run_request_with_its_partition_assets_and_tags(tmp_path):
    asset = dg.AssetKey("t_rag_index")
    check = dg.AssetCheckKey(asset, "rows_match_chunks")
    req = write_request(tmp_path, "all_assets_job", partition="My_notes_draft", assets=[asset], checks=[check],
                        tags={"ctxwin/reason": "chunks changed"})
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        result = command_runs_sensor(dg.build_sensor_context(instance=instance))
    [run] = result.run_requests
    assert run.run_key == req.id
    assert run.job_name == "all_assets_job" and run.partition_key == "My_notes_draft"
    assert run.asset_selection == [asset] and run.asset_check_keys == [check]
    assert run.tags["ctxwin/reason"] == "chunks changed" and run.tags[COMMAND_TAG] == command_id()
    assert not list(requests_dir(tmp_path).glob(".*.tmp"))  # written whole, then renamed

def test_a_request_of_a_command_that_is_gone_is_never_launched_and_is_dropped(tmp_path):
    write_request(tmp_path, "all_assets_job", partition="a", command=f"{__import__('socket').gethostname()}:999999999")
    live = write_request(tmp_path, "comparison_job", partition=None)
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        result = command_runs_sensor(dg.build_sensor_context(instance=instance))
    assert [r.run_key for r in result.run_requests] == [live.id]
    assert drop_requests(tmp_path) == 1
    assert [r.id for r in read_requests(tmp_path)] == [live.id]
    assert drop_requests(tmp_path, [live.id]) == 1 and read_requests(tmp_path) == []

def test_nothing_waiting_is_a_skip_that_says_so(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        result = command_runs_sensor(dg.build_sensor_context(instance=instance))
    assert not result.run_requests
    assert "no ctxwin command is waiting" in (result.skip_reason.skip_message if result.skip_reason else "")
