"""The indexes on object storage: writes, index upkeep, search, two writers at once, the index
asset and ``ctxwin ask``, against moto's S3 server started by the test on 127.0.0.1.

LanceDB reads the endpoint and credentials from the environment (``AWS_ENDPOINT``,
``AWS_ACCESS_KEY_ID``...), as a deployment would; the fixture sets them for the test's
duration and removes them after.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from ctxwin_dagster.backends.index.upkeep import IndexPolicy
from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
from ctxwin_dagster.testing.rows import synthetic_document as doc

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "documents"
POLICY = IndexPolicy(
    ann_min_rows=1_000, retrain_growth=0.5, append_rows=300, rows_per_partition=100, nprobes=4, refine_factor=5
)


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on loopback with one bucket; yields a function giving fresh prefixes."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {
        "AWS_ACCESS_KEY_ID": "test-key",
        "AWS_SECRET_ACCESS_KEY": "test-secret",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="ctxwin")
    counter = iter(range(10**6))
    try:
        yield type("S3", (), {"client": client, "uri": staticmethod(lambda: f"s3://ctxwin/run{next(counter)}")})
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def _keys(client, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="ctxwin", Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_writes_upkeep_and_search_on_s3(s3):
    uri = s3.uri()
    idx = ChunkIndex(uri, policy=POLICY)
    docs = [doc(i) for i in range(12)]
    reports = []
    for d in docs:
        idx.replace_document("t_rag", *d)
        reports.append(idx.maintain("t_rag"))
    assert [r.rows for r in reports if r.trained] == [1_000]
    assert any(r.appended for r in reports)
    keys = _keys(s3.client, uri.removeprefix("s3://ctxwin/"))
    assert any(k.startswith(f"{uri.removeprefix('s3://ctxwin/')}/t_rag_chunks.lance/_indices/") for k in keys)
    assert not Path("ctxwin").exists()  # nothing went to a local folder named like the bucket

    reader = ChunkIndex(uri, policy=POLICY)  # a second connection sees the same table and record
    assert reader.count("t_rag") == 1_200 and reader.ann_state("t_rag")["trained_rows"] == 1_000
    assert reader.index_stats("t_rag")["doc_id"]["type"] == "BTREE"
    name, _rows, vecs = docs[11]  # written after the training
    assert reader.search("t_rag", vecs[5], k=2)[0]["chunk_id"] == f"{name}-5"
    q = vecs[3]
    exact = np.argsort(-(vecs @ q))[:4]
    assert [h["chunk_id"] for h in reader.search("t_rag", q, k=4, doc_id=name)] == [f"{name}-{j}" for j in exact]
    assert reader.duplicate_ids("t_rag", doc_id=name) == 0
    assert reader.delete_document("t_rag", "d000") == 100 and idx.count("t_rag") == 1_100


def _writer(uri: str, first: int, n_docs: int) -> None:
    idx = ChunkIndex(uri, policy=POLICY)
    for i in range(first, first + n_docs):
        idx.replace_document("t_rag", *doc(i, 60))
        idx.maintain("t_rag")
    # rewrite the first one with other chunks: a replace, not an append
    name, rows, vecs = doc(first, 40, seed=1000 + first)
    idx.replace_document("t_rag", name, rows, vecs)
    idx.maintain("t_rag")


def test_two_writers_at_once_on_s3(s3):
    uri = s3.uri()
    ctx = mp.get_context("spawn")  # the environment (endpoint, keys) is inherited
    procs = [ctx.Process(target=_writer, args=(uri, first, 10)) for first in (0, 100)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0
    idx = ChunkIndex(uri, policy=POLICY)
    assert idx.count("t_rag") == 2 * (9 * 60 + 40)
    assert idx.duplicate_ids("t_rag") == 0
    for first in (0, 100):
        assert idx.count("t_rag", doc_id=f"d{first:03d}") == 40
        assert {r["chunk_id"] for r in idx.rows("t_rag", doc_id=f"d{first + 5:03d}")} == {
            f"d{first + 5:03d}-{j}" for j in range(60)
        }
    idx.maintain("t_rag")
    _name, _rows, vecs = doc(107, 60)
    assert idx.search("t_rag", vecs[9], k=1)[0]["chunk_id"] == "d107-9"
    assert 1 <= idx.ann_state("t_rag")["trainings"] <= 3  # not one per document


@pytest.mark.slow
def test_index_asset_and_ctxwin_ask_on_s3(s3, tmp_path, capsys):
    import dagster as dg

    from ctxwin_dagster.cli import main
    from ctxwin_dagster.defs.indexes.assets import t_rag_index
    from ctxwin_dagster.defs.ingest.assets import chunks, raw_documents
    from ctxwin_dagster.defs.model_resources import EmbeddingsResource
    from ctxwin_dagster.defs.partitions import documents_partitions
    from ctxwin_dagster.defs.resources import LanceDBResource, ProjectSettings

    uri = s3.uri()
    docs = tmp_path / "documents"
    docs.mkdir()
    shutil.copy(SAMPLE / "squad_Normans.txt", docs / "squad_Normans.txt")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(documents_partitions.name, ["squad_Normans"])
    resources = {
        "settings": ProjectSettings(documents_dir=str(docs)),
        "embeddings": EmbeddingsResource(cache_dir=str(tmp_path / "cache")),
        "lancedb": LanceDBResource(uri=uri),
    }
    result = dg.materialize(
        [raw_documents, chunks, t_rag_index], resources=resources, partition_key="squad_Normans", instance=instance
    )
    assert result.success
    mat = [e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey("t_rag_index")][0]
    meta = {k: v.value for k, v in mat.materialization.metadata.items()}
    assert meta["uri"] == uri and meta["n_rows"] > 0 and meta["table_rows"] == meta["n_rows"]
    assert (
        meta["ann_index"].startswith("none")
        and meta["indexes_created_now"] == "doc_id BTREE, chunk_id BTREE, embedded_text FTS"
    )
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["rows_match_chunks"]
    assert ChunkIndex(uri).count("t_rag", doc_id="squad_Normans") == meta["n_rows"]

    code = main(
        [
            "ask",
            "Who was the Norse leader?",
            "--variant",
            "t",
            "--doc",
            "squad_Normans",
            "--json",
            "--lancedb",
            uri,
            "--documents",
            str(docs),
            "--cache-dir",
            str(tmp_path / "cache"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    answer = json.loads(out)
    assert answer["variant"] == "t_rag" and answer["citations"] and not answer["not_found"]
    assert "Rollo" in out
