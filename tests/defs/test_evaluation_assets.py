"""The evaluation stage in process: QA sets, answers per variant, scores, the comparison report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

import ctxwin_dagster.definitions as definitions
from ctxwin_dagster.defs.jobs import ON_REQUEST_ASSETS
from ctxwin_dagster.defs.resources import (
    EvaluationSettings,
)

# Runs Dagster (in process or as a webserver) and the embedding model: the slow tier.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_evaluation_graph_writes_a_comparison_report(tmp_path, folder_resources):
    docs = tmp_path / "documents"
    docs.mkdir()
    shutil.copy(ROOT / "data" / "documents" / "squad_Normans.txt", docs)
    evaluation = EvaluationSettings(
        experiment="unit",
        results_dir=str(tmp_path / "results"),
        reports_dir=str(tmp_path / "reports"),
        max_questions_per_document=25,
    )
    resources = folder_resources(docs, evaluation)  # the embedded offline defaults, pointed at this test's folders
    all_assets = [a for a in vars(definitions).values() if isinstance(a, dg.AssetsDefinition)]
    comparison_asset = definitions.experiment_comparison
    # Every per-document asset of the pipeline and its evaluation; the question writer runs only on request.
    on_request = {a for a in all_assets if {k.to_user_string() for k in a.keys} & set(ON_REQUEST_ASSETS)}
    assert len(on_request) == len(ON_REQUEST_ASSETS)
    partitioned = [a for a in all_assets if a is not comparison_asset and a not in on_request]
    assert len(partitioned) == 15
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("documents", ["squad_Normans"])
        result = dg.materialize(partitioned, resources=resources, partition_key="squad_Normans", instance=instance)
        assert result.success
        qa = result.output_for_node("qa_sets")
        assert len(qa) == 208 and all(q["doc_id"] == "squad_Normans" for q in qa)
        answers = result.output_for_node("swb_rag_answers")
        assert len(answers) == 25
        meta = result.asset_materializations_for_node("swb_rag_answers")[0].metadata
        assert meta["answer_rule"].value.startswith("sentences ranked by the sentence model")  # the offline default
        answerable = [a for a in answers if a["reference_spans"]]
        assert answerable and all(a["retrieved"] and a["contexts"] for a in answerable)
        checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
        assert checks["few_nan_scores"] and checks["reference_spans_valid"]
        # the comparison loads the answers and scores of every document partition through its inputs
        comparison = dg.materialize(all_assets, resources=resources, instance=instance, selection=[comparison_asset])
        assert comparison.success
    report = tmp_path / "reports" / "unit"
    assert {"report.md", "report.html", "comparison.json", "quality.png"} <= {p.name for p in report.iterdir()}
    payload = json.loads((report / "comparison.json").read_text())
    assert payload["variants"] == ["t_rag", "cc_rag", "swb_rag"]
    assert {"span_hit", "mrr"} <= set(payload["metrics"])
    assert any(row["metric"] == "span_hit" for row in payload["comparison"])
    md = (report / "report.md").read_text()
    assert "Paired tests" in md and "Efficiency" in md
