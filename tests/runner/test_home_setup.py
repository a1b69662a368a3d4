"""The ``dagster.yaml`` ctxwin writes to a Dagster home: what a new home gets, which earlier
defaults are brought up to date, and that its runs keep no DEBUG lines in the event log."""

from __future__ import annotations

import os

import dagster as dg
import pytest

from ctxwin_dagster.runner import home_setup
from ctxwin_dagster.runner.home_setup import DEFAULT_INSTANCE_YAML, prepare_home


@pytest.fixture
def restore_dagster_home():
    before = os.environ.get("DAGSTER_HOME")
    yield
    if before is None:
        os.environ.pop("DAGSTER_HOME", None)
    else:
        os.environ["DAGSTER_HOME"] = before


def test_a_new_home_gets_the_default_and_an_earlier_default_is_brought_up_to_date(tmp_path, restore_dagster_home):
    new = prepare_home(str(tmp_path / "new"))
    assert (new / "dagster.yaml").read_text(encoding="utf-8") == DEFAULT_INSTANCE_YAML
    with dg.DagsterInstance.from_config(str(new)) as instance:
        assert instance.python_log_level == "INFO"
    old = tmp_path / "old"
    old.mkdir()
    (old / "dagster.yaml").write_text(home_setup._BEFORE_LOG_LEVEL_YAML, encoding="utf-8")
    prepare_home(str(old))
    assert (old / "dagster.yaml").read_text(encoding="utf-8") == DEFAULT_INSTANCE_YAML
    edited = tmp_path / "edited"
    edited.mkdir()
    mine = home_setup._BEFORE_LOG_LEVEL_YAML + "# my own line\n"
    (edited / "dagster.yaml").write_text(mine, encoding="utf-8")
    prepare_home(str(edited))
    assert (edited / "dagster.yaml").read_text(encoding="utf-8") == mine  # a user's edit is kept


def test_a_run_in_a_new_home_keeps_info_lines_and_events_but_no_debug_lines(tmp_path, restore_dagster_home):
    home = prepare_home(str(tmp_path / "home"))

    @dg.asset
    def logged(context) -> int:
        context.log.debug("a debug line")
        context.log.info("an info line")
        return 1

    @dg.asset
    def loaded(logged: int) -> int:  # the IO manager logs DEBUG lines as it loads and writes
        return logged + 1

    with dg.DagsterInstance.from_config(str(home)) as instance:
        result = dg.materialize([logged, loaded], instance=instance)
        assert result.success
        entries = instance.all_logs(result.run_id)
    messages = [e.user_message for e in entries if not e.is_dagster_event]
    assert messages == ["an info line"], messages
    kinds = {e.dagster_event.event_type_value for e in entries if e.dagster_event}
    assert {"STEP_START", "LOADED_INPUT", "HANDLED_OUTPUT", "ASSET_MATERIALIZATION", "STEP_SUCCESS"} <= kinds
