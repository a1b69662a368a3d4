"""The whole asset graph in process, on two real sample documents, with a chat model served by
the local OpenAI-compatible test server (loopback) and the real local embedding model."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from ctxwin_dagster.backends.chat.capabilities import PROBE_REQUESTS
from ctxwin_dagster.core.budget.limits import ModelLimits, default_registry
from ctxwin_dagster.core.defaults import VARIANTS
from ctxwin_dagster.definitions import INDEXING_ASSETS, defs
from ctxwin_dagster.defs.model_resources import ChatModelResource, EmbeddingsResource
from ctxwin_dagster.defs.resources import LanceDBResource, PipelineSettings, ProjectSettings
from ctxwin_dagster.defs.sensors import partition_changes
from ctxwin_dagster.testing import FakeOpenAIServer

# Runs Dagster (in process or as a webserver) and the embedding model: the slow tier.
pytestmark = pytest.mark.slow

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "documents"
DOCS = ("squad_Normans", "cuad_todos_medical_reseller")
MODEL = "ctxwin-test-contextualizer"
ASSETS = INDEXING_ASSETS


def responder(body: dict) -> str:
    """Plays the contextualizer: JSON contexts for SWB batches, prose otherwise."""
    prompt = body["messages"][-1]["content"]
    ids = re.findall(r'chunk_id="([^"]+)"', prompt)
    if ids:
        return json.dumps(
            {"contexts": [{"chunk_id": cid, "context": f"Situating context for chunk {cid}."} for cid in ids]}
        )
    if "<chunk>" in prompt:
        return "This chunk belongs to the document's discussion of its main subject."
    return "An overview of the document: its parties, subject matter and main provisions."


@pytest.fixture(scope="module")
def server():
    default_registry().register(ModelLimits(MODEL, context_length=128_000, max_completion_tokens=4_096))
    with FakeOpenAIServer(responder=responder) as srv:
        yield srv


@pytest.fixture()
def project(tmp_path, server):
    docs = tmp_path / "documents"
    docs.mkdir()
    for doc in DOCS:
        shutil.copy(SAMPLE / f"{doc}.txt", docs / f"{doc}.txt")
    resources = {
        "settings": ProjectSettings(documents_dir=str(docs)),
        "pipeline": PipelineSettings(),
        "contextualizer": ChatModelResource(
            model=MODEL, base_url=server.base_url, api_key="test-key", cache_dir=str(tmp_path / "cache"), max_retries=1
        ),
        "answerer": ChatModelResource(cache_dir=str(tmp_path / "cache")),
        "embeddings": EmbeddingsResource(cache_dir=str(tmp_path / "cache")),
        "lancedb": LanceDBResource(uri=str(tmp_path / "lancedb")),
    }
    return docs, resources


def materialize_all(instance, resources, key):
    return dg.materialize(ASSETS, resources=resources, partition_key=key, instance=instance, raise_on_error=False)


def test_definitions_hold_the_whole_graph():
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {a.key.to_user_string() for a in ASSETS} <= keys
    for job in ("all_assets_job", "t_rag_job", "cc_rag_job", "swb_rag_job"):
        assert defs.resolve_job_def(job) is not None


def test_every_sensor_and_schedule_says_what_it_does():
    repo = defs.get_repository_def()
    automations = [*repo.sensor_defs, *repo.schedule_defs]
    assert {s.name for s in repo.sensor_defs} >= {"documents_sensor", "ctxwin_command_runs"}
    assert [s.name for s in automations if len((s.description or "").split()) < 8] == []


def test_whole_graph_idempotent_and_document_removal(project, server):
    docs, resources = project
    index = resources["lancedb"].index()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("documents", list(DOCS))
        n_chunks = {}
        calls_before = server.request_count
        for key in DOCS:
            result = materialize_all(instance, resources, key)
            assert result.success, key
            n_chunks[key] = len(result.output_for_node("chunks"))
            assert all(c.passed for c in result.get_asset_check_evaluations())
            meta = result.asset_materializations_for_node("swb_rag_contexts")[0].metadata
            assert meta["calls"].value == -(-n_chunks[key] // 5)  # one call per batch of 5
        first_calls = server.request_count - calls_before
        # summary + one CC call per chunk + one SWB call per batch, per document; and the endpoint's
        # capabilities, asked once (the fake server takes every reply format)
        assert first_calls == sum(1 + n + -(-n // 5) for n in n_chunks.values()) + PROBE_REQUESTS
        for variant in VARIANTS:
            for key in DOCS:
                assert index.count(variant, doc_id=key) == n_chunks[key]
            assert index.duplicate_ids(variant) == 0
        # the tables answer queries, restricted to a document
        embedder = resources["embeddings"].embedder()
        q = embedder.embed(["Who were the Normans and where is Normandy?"])[0]
        hits = index.search("swb_rag", q, k=4, doc_id="squad_Normans")
        assert len(hits) == 4 and all(h["doc_id"] == "squad_Normans" for h in hits)
        assert hits[0]["context"].startswith("Situating context for chunk")
        cc_hits = index.search("cc_rag", q, k=2)
        assert cc_hits[0]["embedded_text"].endswith(cc_hits[0]["text"])

        # re-materializing: same rows, and zero calls to the model (all from the cache)
        calls_before = server.request_count
        for key in DOCS:
            again = materialize_all(instance, resources, key)
            assert again.success
            meta = again.asset_materializations_for_node("cc_rag_contexts")[0].metadata
            assert meta["calls"].value == 0 and meta["cache_hits"].value == n_chunks[key]
        assert server.request_count == calls_before
        for variant in VARIANTS:
            assert index.count(variant) == sum(n_chunks.values())

        # deleting a document's file deletes nothing: it is only reported as without a file
        (docs / "squad_Normans.txt").unlink()
        added, gone = partition_changes(resources["settings"], list(instance.get_dynamic_partitions("documents")))
        assert gone == ["squad_Normans"] and added == []
        for variant in VARIANTS:
            assert index.count(variant, doc_id="squad_Normans") == n_chunks["squad_Normans"]
        # what `ctxwin prune` does with its rows, and how it puts them back
        from ctxwin_dagster.backends.index.rows import export_rows, restore_rows

        kept = export_rows(index, "t_rag", ["squad_Normans"])
        assert kept.num_rows == n_chunks["squad_Normans"]
        assert index.delete_document("t_rag", "squad_Normans") == n_chunks["squad_Normans"]
        assert restore_rows(index, "t_rag", kept) == n_chunks["squad_Normans"]
        assert (
            index.count("t_rag", doc_id="squad_Normans") == n_chunks["squad_Normans"]
            and index.duplicate_ids("t_rag") == 0
        )
        assert index.count("t_rag", doc_id="cuad_todos_medical_reseller") == n_chunks["cuad_todos_medical_reseller"]


def test_a_bad_file_fails_only_its_partition(project):
    docs, resources = project
    (docs / "broken.txt").write_bytes(b"\x00\x01\x02binary")
    index = resources["lancedb"].index()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("documents", ["broken", "cuad_todos_medical_reseller"])
        good = materialize_all(instance, resources, "cuad_todos_medical_reseller")
        assert good.success
        rows = {v: index.count(v) for v in VARIANTS}
        bad = materialize_all(instance, resources, "broken")
        assert not bad.success
        failure = next(e for e in bad.all_events if e.is_step_failure)
        message = failure.event_specific_data.error.cause.message
        assert "broken.txt" in message and "binary" in message
        assert {v: index.count(v) for v in VARIANTS} == rows
