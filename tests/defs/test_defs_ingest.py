"""The Dagster layer: definitions load, assets run with a context, the graph materializes."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from ctxwin_dagster.core.text.documents import Document, DocumentError
from ctxwin_dagster.definitions import defs
from ctxwin_dagster.defs.ingest.assets import chunks, raw_documents
from ctxwin_dagster.defs.partitions import documents_partitions
from ctxwin_dagster.defs.resources import ProjectSettings
from ctxwin_dagster.defs.sensors import partition_changes

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "documents"


def test_definitions_load():
    assert defs.resolve_job_def("all_assets_job") is not None
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"raw_documents", "chunks"} <= keys


def test_raw_documents_with_a_partition_context():
    settings = ProjectSettings(documents_dir=str(SAMPLE))
    with dg.build_asset_context(partition_key="squad_Normans") as context:
        result = raw_documents(context, settings)
    doc = result.value
    assert isinstance(doc, Document) and doc.doc_id == "squad_Normans"
    assert result.metadata["n_chars"] == len(doc.text) > 1000
    assert result.data_version == dg.DataVersion(doc.sha256)


@pytest.mark.slow
def test_materialize_ingest_in_process(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("squad_Normans.txt", "cuad_todos_medical_reseller.txt"):
        (docs / name).write_bytes((SAMPLE / name).read_bytes())
    (docs / "empty.txt").write_text("", encoding="utf-8")
    (docs / "binary.txt").write_bytes(b"text\x00with\x00nul")
    settings = ProjectSettings(documents_dir=str(docs))
    with dg.instance_for_test() as instance:
        added, removed = partition_changes(settings, [])
        # An empty file and a binary one each get a partition that fails with the reason.
        assert added == ["binary", "cuad_todos_medical_reseller", "empty", "squad_Normans"] and removed == []
        assert [(f.path.name, f.problem.split(";")[0]) for f in settings.document_folder().problems()] == [
            ("empty.txt", "empty (0 bytes)")
        ]
        instance.add_dynamic_partitions(documents_partitions.name, added)
        for key in ("squad_Normans", "cuad_todos_medical_reseller"):
            res = dg.materialize(
                [raw_documents, chunks], resources={"settings": settings}, partition_key=key, instance=instance
            )
            assert res.success
            chunk_list = res.output_for_node("chunks")
            doc = res.output_for_node("raw_documents")
            assert chunk_list and all(doc.text[c.start : c.end] == c.text for c in chunk_list)
            checks = res.get_asset_check_evaluations()
            assert [c.passed for c in checks] == [True]
        # a bad file fails its own partition with a message naming the file
        bad = dg.materialize(
            [raw_documents, chunks],
            resources={"settings": settings},
            partition_key="binary",
            instance=instance,
            raise_on_error=False,
        )
        assert not bad.success
        failure = next(e for e in bad.all_events if e.is_step_failure)
        error = failure.event_specific_data.error
        assert "binary.txt" in error.cause.message and "NUL bytes" in error.cause.message
        # removing a file removes its partition
        (docs / "binary.txt").unlink()
        added, removed = partition_changes(settings, list(instance.get_dynamic_partitions("documents")))
        assert (added, removed) == ([], ["binary"])


def test_raw_documents_fails_for_an_empty_or_unreadable_file_naming_it_and_the_fix(tmp_path, monkeypatch):
    (tmp_path / "good.txt").write_text("Some text.", encoding="utf-8")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "locked.md").write_text("secret", encoding="utf-8")
    settings = ProjectSettings(documents_dir=str(tmp_path))
    # Both keep their partitions (the scan names their problems) ...
    assert settings.document_ids() == ["empty", "good", "locked"]
    with (
        dg.build_asset_context(partition_key="empty") as context,
        pytest.raises(
            DocumentError, match=r"'empty\.txt' .* is empty \(0 bytes\); put the document's text in it or remove it"
        ),
    ):
        raw_documents(context, settings)
    real = Path.read_bytes

    def read_bytes(self):
        if self.name == "locked.md":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    # ... and each one's run fails naming the file and the fix.
    with (
        dg.build_asset_context(partition_key="locked") as context,
        pytest.raises(
            DocumentError, match=r"'locked\.md' .* cannot be read \(Permission denied\); fix its permissions"
        ),
    ):
        raw_documents(context, settings)


def test_raw_documents_records_the_bytes_replaced_in_a_utf8_file(tmp_path):
    (tmp_path / "sagas.txt").write_bytes(("Norðmaðr " * 50).encode("utf-8").replace(b" ", b" \x9d", 6))
    with dg.build_asset_context(partition_key="sagas") as context:
        result = raw_documents(context, ProjectSettings(documents_dir=str(tmp_path)))
    assert result.metadata["file_encoding"] == "utf-8" and result.metadata["replaced_bytes"] == 6


def test_missing_document_file_error_names_the_fix(tmp_path):
    settings = ProjectSettings(documents_dir=str(tmp_path))
    with pytest.raises(DocumentError, match="no file in .* any more"):
        settings.document_file("gone")


@pytest.mark.slow
def test_stale_documents_follow_the_document_hash_and_the_settings(tmp_path):
    from ctxwin_dagster.defs.staleness import stale_documents
    from ctxwin_dagster.defs.versions import with_settings_versions

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Article 1\n\nFirst version of the text.", encoding="utf-8")
    (docs / "b.txt").write_text("Another document.", encoding="utf-8")
    settings = ProjectSettings(documents_dir=str(docs))
    assets = with_settings_versions([raw_documents, chunks], {"settings": settings})
    graph = dg.Definitions(assets=assets, resources={"settings": settings}).resolve_asset_graph()
    keys = {raw_documents.key, chunks.key}

    def why():
        found, _ = stale_documents(instance, graph, settings, None, keys, ["a", "b"])
        return {d: st.summary() for d, st in found.items() if st.stale}

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(documents_partitions.name, ["a", "b"])
        assert why() == {
            "a": "raw_documents: never materialized (+1 assets downstream)",
            "b": "raw_documents: never materialized (+1 assets downstream)",
        }
        for key in ("a", "b"):
            assert dg.materialize(
                assets, resources={"settings": settings}, partition_key=key, instance=instance
            ).success
        assert why() == {}
        (docs / "a.txt").write_text("Article 1\n\nSecond version of the text.", encoding="utf-8")
        assert why() == {"a": "raw_documents: document changed (+1 assets downstream)"}
        # a run that stopped after raw_documents leaves the partition stale until chunks catch up
        assert dg.materialize(
            assets,
            resources={"settings": settings},
            partition_key="a",
            instance=instance,
            selection=[raw_documents.key],
        ).success
        assert why() == {"a": "chunks: upstream raw_documents rematerialized since"}
        # other chunking settings: the chunks of every document are stale, the texts are not
        wider = ProjectSettings(documents_dir=str(docs), chunk_size=500)
        graph = dg.Definitions(
            assets=with_settings_versions([raw_documents, chunks], {"settings": wider}), resources={"settings": wider}
        ).resolve_asset_graph()
        assert why() == {
            "a": "raw_documents: settings changed (+1 assets downstream)",
            "b": "raw_documents: settings changed (+1 assets downstream)",
        }


def test_documents_sensor_adds_real_file_names_and_names_the_files_it_does_not_take(tmp_path):
    from ctxwin_dagster.defs.resources import EvaluationSettings, LanceDBResource
    from ctxwin_dagster.defs.sensors import documents_sensor

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "Acme, Inc. [2019] – Supply.txt").write_bytes((SAMPLE / "squad_Normans.txt").read_bytes())
    (docs / "draft.txt").write_bytes(b"")
    (docs / "slides.pptx").write_bytes(b"PK\x03\x04")
    resources = {
        "settings": ProjectSettings(documents_dir=str(docs)),
        "lancedb": LanceDBResource(uri=str(tmp_path / "lancedb")),
        "evaluation": EvaluationSettings(results_dir=str(tmp_path / "results")),
    }
    with dg.instance_for_test() as instance:
        result = documents_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        adds = [r for r in result.dynamic_partitions_requests if isinstance(r, dg.AddDynamicPartitionsRequest)]
        # The empty file gets its partition (its run fails naming the fix); the slides are not taken.
        assert [list(r.partition_keys) for r in adds] == [["Acme_Inc._2019_Supply", "draft"]]
        instance.add_dynamic_partitions("documents", ["Acme_Inc._2019_Supply", "draft"])
        again = documents_sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor=result.cursor))
        assert (
            "none added; 1 file(s) cannot be read (their runs fail): draft.txt (empty (0 bytes)); "
            "1 file(s) not taken: slides.pptx (unsupported type '.pptx')"
        ) in again.skip_reason.skip_message
        # Nothing usable: the sensor says so instead of counting 0 documents, and removes nothing.
        (docs / "Acme, Inc. [2019] – Supply.txt").unlink()
        last = documents_sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor=again.cursor))
        assert not last.dynamic_partitions_requests
        assert (
            "(no usable document in the folder); 1 without a file (see `ctxwin prune`)" in last.skip_reason.skip_message
        )
        assert sorted(instance.get_dynamic_partitions("documents")) == ["Acme_Inc._2019_Supply", "draft"]
        # A folder that is gone on a tick changes nothing either.
        shutil.rmtree(docs)
        gone = documents_sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor=last.cursor))
        assert not gone.dynamic_partitions_requests and "nothing was changed" in gone.skip_reason.skip_message
        assert sorted(instance.get_dynamic_partitions("documents")) == ["Acme_Inc._2019_Supply", "draft"]


def test_documents_sensor_records_the_ids_so_a_new_file_cannot_take_one(tmp_path):
    import json

    from ctxwin_dagster.defs.resources import EvaluationSettings, LanceDBResource
    from ctxwin_dagster.defs.sensors import documents_sensor

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "x.txt").write_text("text", encoding="utf-8")
    registry = tmp_path / "doc_ids.json"
    resources = {
        "settings": ProjectSettings(documents_dir=str(docs), doc_ids_file=str(registry)),
        "lancedb": LanceDBResource(uri=str(tmp_path / "lancedb")),
        "evaluation": EvaluationSettings(results_dir=str(tmp_path / "results")),
    }
    with dg.instance_for_test() as instance:
        first = documents_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert json.loads(registry.read_text(encoding="utf-8")) == {"x.txt": "x"}
        instance.add_dynamic_partitions("documents", ["x"])
        (docs / "x.md").write_text("text", encoding="utf-8")  # sorts first
        second = documents_sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor=first.cursor))
        assert [list(r.partition_keys) for r in second.dynamic_partitions_requests] == [["x_md"]]


def test_a_new_judge_changes_the_scores_and_the_comparison_not_the_answers():
    """The judge is a resource of its own: only the assets that use it get a new settings version."""
    from ctxwin_dagster.core.experiment import Experiment
    from ctxwin_dagster.definitions import build_definitions

    def versions(experiment):
        graph = build_definitions(experiment=experiment).resolve_asset_graph()
        return {k.to_user_string(): graph.get(k).code_version for k in graph.get_all_asset_keys()}

    before = versions(Experiment())
    # an experiment file written before the judge had its section: the old keys are read as the judge's
    after = versions(Experiment.from_dict({"name": "sample", "evaluation": {"judge_model": "gpt-4o-mini"}}))
    changed = sorted(k for k in before if before[k] != after[k])
    assert changed == ["cc_rag_ragas_scores", "experiment_comparison", "swb_rag_ragas_scores", "t_rag_ragas_scores"]
