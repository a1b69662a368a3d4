"""Runs that carry many documents, through the real machinery: ``ctxwin run`` as a subprocess,
the daemon it starts, the sensor that launches its runs over ranges of partitions.

A batch with a broken document: the other documents succeed (their batch runs again without it),
and the broken one fails in a run of its own, naming its file; nothing runs twice afterwards."""

from __future__ import annotations

import subprocess
from pathlib import Path

import dagster as dg
import pytest

from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.runner.batches import RANGE_END_TAG, RANGE_START_TAG
from ctxwin_dagster.testing.projects import index_rows_per_document as rows_per_document
from ctxwin_dagster.testing.projects import make_project, run_ctxwin

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


def test_a_batch_with_a_broken_document_runs_the_others_and_fails_the_broken_one_alone(tmp_path):
    (tmp_path / "project").mkdir()
    root = make_project(tmp_path / "project", [], questions_per_doc=0)
    (root / "data" / "qa" / "questions.jsonl").unlink()
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, source in (("a", "squad_Normans"), ("c", "squad_1973_oil_crisis"), ("d", "cuad_todos_medical_reseller")):
        text = (ROOT / "data" / "documents" / f"{source}.txt").read_text(encoding="utf-8")[:2500]
        (docs / f"{name}.txt").write_text(text, encoding="utf-8")
    (docs / "b.txt").write_bytes(b"\x00\x01\x02 not text")
    args = ["run", "--documents", str(docs), "--name", "four", "--workers", "1", "--batch-size", "4"]

    first = run_ctxwin(args, root)
    out = first.stdout
    assert first.returncode == 1, out[-3000:] + first.stderr[-3000:]
    assert "4 of 4 documents to run in 1 run (0 up to date" in out, out
    assert "a … d (4 documents): a document failed (b: DocumentError: 'b.txt'" in out, out
    assert "run again without it: a, c … d (2 documents); each alone: b" in out, out
    assert "b: FAILED: raw_documents:" in out and "b.txt" in out and "NUL bytes" in out, out
    assert "3 ran, 0 up to date, 1 failed" in out, out
    assert "failed: b " in out, out
    index = root / "data" / "experiments" / "four" / "lancedb"
    rows = rows_per_document(index)
    assert set(rows["t_rag"]) == {"a", "c", "d"} and all(rows[v] == rows["t_rag"] for v in VARIANTS), rows

    home = root / "data" / "experiments" / "four" / "dagster_home"
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = [r for r in instance.get_runs() if r.job_name == "all_assets_job"]
        batches = [(r.tags.get(RANGE_START_TAG), r.tags.get(RANGE_END_TAG), r.status.value) for r in runs]
        singles = {r.tags.get("dagster/partition"): r.status.value for r in runs if r.tags.get("dagster/partition")}
        # Each document's partition: materialized for a, c and d; b's one run failed.
        done = {
            k
            for k in ("a", "b", "c", "d")
            if instance.get_latest_materialization_event(dg.AssetKey("t_rag_index")) is not None
            and instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey("t_rag_index"), asset_partitions=[k]), limit=1
            ).records
        }
    assert ("a", "d", "FAILURE") in batches and ("c", "d", "SUCCESS") in batches, batches
    assert singles == {"a": "SUCCESS", "b": "FAILURE"}, singles
    assert done == {"a", "c", "d"}

    (docs / "b.txt").unlink()
    again = ok(run_ctxwin(args, root))
    assert "0 of 3 documents to run (3 up to date, skipped)" in again, again
    assert rows_per_document(index) == rows
