"""Costs per unit of work and a comparison built from its inputs, in process (issue 9, part 3):

* a cached rerun of ``cc_rag_contexts`` keeps the cost of the work and pays nothing;
* ``experiment_comparison`` takes the documents' answers and scores through its inputs, for the
  documents whose file is in the folder: a document whose file is gone leaves the next
  comparison at once, while the documents sensor deletes nothing of it (its partition, index rows
  and result files stay until ``ctxwin prune``).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

import ctxwin_dagster.definitions as definitions
from ctxwin_dagster.backends.chat.capabilities import PROBE_REQUESTS
from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.defs.contexts.assets import cc_rag_contexts
from ctxwin_dagster.defs.ingest.assets import chunks, raw_documents
from ctxwin_dagster.defs.jobs import all_assets_job, comparison_job
from ctxwin_dagster.defs.model_resources import ChatModelResource, EmbeddingsResource
from ctxwin_dagster.defs.resources import EvaluationSettings, PipelineSettings, ProjectSettings
from ctxwin_dagster.defs.sensors import documents_sensor
from ctxwin_dagster.testing import FakeOpenAIServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PRICED_MODEL = "gpt-4o-mini"  # genai-prices knows its price


def cc_responder(body: dict) -> str:
    """Plays the contextualizer for CC-RAG prompts (and anything else) with short prose."""
    return "This chunk belongs to the document's discussion of its main subject."


def test_cached_rerun_of_cc_rag_contexts_keeps_the_cost_of_the_work(tmp_path):
    docs = tmp_path / "documents"
    docs.mkdir()
    paragraphs = [
        f"Section {i}. " + " ".join(f"Clause {i}.{j} sets out duty number {j} of party {i}." for j in range(12))
        for i in range(4)
    ]
    (docs / "tiny_contract.txt").write_text("\n\n".join(paragraphs), encoding="utf-8")
    with FakeOpenAIServer(responder=cc_responder) as server, dg.instance_for_test() as instance:
        resources = {
            "settings": ProjectSettings(documents_dir=str(docs)),
            "pipeline": PipelineSettings(),
            "contextualizer": ChatModelResource(
                model=PRICED_MODEL,
                base_url=server.base_url,
                api_key="test-key",
                cache_dir=str(tmp_path / "cache"),
                max_retries=1,
            ),
            "embeddings": EmbeddingsResource(cache_dir=str(tmp_path / "cache")),
        }
        instance.add_dynamic_partitions("documents", ["tiny_contract"])
        metas = []
        for _ in range(2):
            result = dg.materialize(
                [raw_documents, chunks, cc_rag_contexts],
                resources=resources,
                partition_key="tiny_contract",
                instance=instance,
            )
            assert result.success
            metas.append(
                {k: v.value for k, v in result.asset_materializations_for_node("cc_rag_contexts")[0].metadata.items()}
            )
        n_chunks = len(result.output_for_node("chunks"))
    first, again = metas
    # the rerun sent nothing; the first run asked the endpoint once what it can do
    assert n_chunks >= 2 and server.request_count == n_chunks + PROBE_REQUESTS
    assert first["calls"] == n_chunks and first["cache_hits"] == 0 and first["cost_known"]
    assert first["cost_usd"] > 0 and first["paid_usd"] == first["cost_usd"]
    assert again["calls"] == 0 and again["cache_hits"] == n_chunks and again["cost_known"]
    assert again["paid_usd"] == 0
    assert again["cost_usd"] == pytest.approx(first["cost_usd"])  # the same work costs the same


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_a_removed_document_leaves_the_next_comparison(tmp_path, folder_resources):
    docs = tmp_path / "documents"
    docs.mkdir()
    keep, drop = "squad_1973_oil_crisis", "squad_Normans"
    for doc in (keep, drop):
        shutil.copy(ROOT / "data" / "documents" / f"{doc}.txt", docs)
    evaluation = EvaluationSettings(
        experiment="removal",
        results_dir=str(tmp_path / "results"),
        reports_dir=str(tmp_path / "reports"),
        max_questions_per_document=6,
    )
    resources = folder_resources(docs, evaluation)  # the embedded offline defaults, pointed at this test's folders
    assets = [a for a in vars(definitions).values() if isinstance(a, dg.AssetsDefinition)]
    # The project's own jobs, as `ctxwin run` and the Dagster UI run them: one run per document,
    # then the comparison in a run of its own that loads the documents' outputs.
    defs = dg.Definitions(assets=assets, jobs=[all_assets_job, comparison_job], resources=resources)
    results = tmp_path / "results" / "removal"
    report = tmp_path / "reports" / "removal" / "comparison.json"
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("documents", [keep, drop])
        for doc in (keep, drop):
            assert (
                defs.resolve_job_def("all_assets_job").execute_in_process(instance=instance, partition_key=doc).success
            )
        for kind in ("answers", "scores"):
            for v in VARIANTS:
                assert {p.stem for p in (results / kind / v).glob("*.jsonl")} == {keep, drop}

        first = defs.resolve_job_def("comparison_job").execute_in_process(instance=instance)
        assert first.success
        meta = first.asset_materializations_for_node("experiment_comparison")[0].metadata
        assert meta["doc_ids"].value == sorted([keep, drop]) and meta["figures"].value["questions"] == 12
        # What the UI shows first: the verdict in place, one line per pair, then the report.
        assert list(meta)[:2] == ["verdict", "report"]
        assert isinstance(meta["verdict"], dg.TextMetadataValue)
        assert meta["verdict"].value.splitlines()[0].startswith("CC-RAG vs T-RAG: ")
        assert len(meta["verdict"].value.splitlines()) == 3 and "**" not in meta["verdict"].value
        assert set(_read_json(report)["n_questions"].values()) == {12}

        # The document's file goes; the sensor neither removes its partition nor deletes its data.
        (docs / f"{drop}.txt").unlink()
        sensor_context = dg.build_sensor_context(instance=instance, resources={"settings": resources["settings"]})
        sensor_result = documents_sensor(sensor_context)
        assert not sensor_result.dynamic_partitions_requests
        assert "1 without a file" in sensor_result.skip_reason.skip_message
        assert set(instance.get_dynamic_partitions("documents")) == {keep, drop}
        for kind in ("answers", "scores"):
            for v in VARIANTS:
                assert {p.stem for p in (results / kind / v).glob("*.jsonl")} == {keep, drop}
        index = resources["lancedb"].index()
        assert all(index.count(v, doc_id=drop) > 0 for v in VARIANTS)
        # Its exports are not read either: the comparison takes its data through its inputs, for
        # the documents whose file is in the folder.
        (results / "answers" / "t_rag" / f"{drop}.jsonl").write_text(
            (results / "answers" / "t_rag" / f"{keep}.jsonl").read_text(encoding="utf-8").replace(keep, drop),
            encoding="utf-8",
        )

        second = defs.resolve_job_def("comparison_job").execute_in_process(instance=instance)
        assert second.success
        meta = second.asset_materializations_for_node("experiment_comparison")[0].metadata
        figures = meta["figures"].value
        assert (
            meta["doc_ids"].value == [keep] and figures["questions"] == 6 and figures["documents_without_scores"] == 0
        )
        # nothing of the one report is a number the Plots tab would draw as a one-point chart
        assert not [k for k, v in meta.items() if isinstance(v, (dg.IntMetadataValue, dg.FloatMetadataValue))]
    payload = _read_json(report)
    assert set(payload["n_questions"].values()) == {6}
    assert all(row["n_questions"] == 6 for row in payload["efficiency"])
    assert not re.search(drop, (report.parent / "report.md").read_text(encoding="utf-8"))


def test_the_comparisons_cost_inputs_are_edges_of_the_asset_graph():
    """What the report reads besides the scores (indexing costs, window counts) is a declared
    dependency on every partition of those assets, so the lineage shows it and a change of them
    makes the comparison stale."""
    from ctxwin_dagster.defs.evaluation.metadata_totals import COST_ASSETS

    graph = definitions.build_definitions().resolve_asset_graph()
    node = graph.get(dg.AssetKey("experiment_comparison"))
    wanted = {dg.AssetKey(a) for assets in COST_ASSETS.values() for a in assets}
    assert wanted <= set(node.parent_keys)
    assert {dg.AssetKey(f"{v}_index") for v in VARIANTS} <= wanted
    for key in wanted:
        assert isinstance(graph.get_partition_mapping(node.key, key), dg.AllPartitionMapping), key
