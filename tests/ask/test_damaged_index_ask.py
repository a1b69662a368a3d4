"""``ctxwin ask`` over a damaged index names the fix as the experiment's own ``ctxwin run``
spells it: the sample's in its usual home as it is, any other home with ``--dagster-home``."""

from __future__ import annotations

import os

import pytest

from ctxwin_dagster.ask.session import AskerSpec
from ctxwin_dagster.backends.index.health import DamagedIndexError, run_command_for
from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
from ctxwin_dagster.testing.rows import synthetic_document


def test_the_fix_names_the_experiments_own_run_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "usual_home"))
    assert run_command_for(tmp_path / "usual_home") == "ctxwin run"
    assert run_command_for(tmp_path / "homes" / "other") == "ctxwin run --dagster-home homes/other"


def test_an_asker_opened_from_its_spec_names_its_homes_run_command(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "usual_home"))
    index = ChunkIndex(str(tmp_path / "lancedb"))
    index.replace_document("t_rag", *synthetic_document(0, 20, dim=8))
    data = next((tmp_path / "lancedb" / "t_rag_chunks.lance" / "data").glob("*.lance"))
    data.write_bytes(os.urandom(data.stat().st_size))
    home = tmp_path / "other_home"
    spec = AskerSpec(str(tmp_path / "lancedb"), None, None, None, None, None, "{}", None, home=str(home))
    with spec.open() as asker, pytest.raises(DamagedIndexError) as caught:
        asker.index.verify("t_rag")
    assert f"Fix: `ctxwin run --dagster-home {home} --rebuild-index t_rag`" in str(caught.value)
