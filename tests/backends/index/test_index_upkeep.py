"""Index upkeep: documents written one after another never retrain the ANN index per document,
rows written after the last training are still found, per-document search is exact."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import ctxwin_dagster.backends.index.upkeep as index_upkeep
from ctxwin_dagster.backends.index.upkeep import IndexPolicy
from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
from ctxwin_dagster.testing.rows import synthetic_document

DIM = 16
ROWS_PER_DOC = 100


def doc(i: int, n: int = ROWS_PER_DOC, *, dim: int = DIM, seed: int | None = None):
    return synthetic_document(i, n, dim=dim, seed=seed)


@pytest.fixture
def trainings(monkeypatch):
    """Count every training of the ANN index (a spy around the one function that trains)."""
    calls: list[int] = []
    real = index_upkeep.train_vector_index

    def spy(table, rows, policy):
        calls.append(rows)
        return real(table, rows, policy)

    monkeypatch.setattr(index_upkeep, "train_vector_index", spy)
    return calls


POLICY = IndexPolicy(
    ann_min_rows=1_000, retrain_growth=0.5, append_rows=500, rows_per_partition=100, nprobes=4, refine_factor=5
)


def test_documents_written_one_after_another_never_retrain_per_document(tmp_path, trainings):
    idx = ChunkIndex(str(tmp_path), policy=POLICY)
    reports = []
    for i in range(40):
        idx.replace_document("t_rag", *doc(i))
        reports.append(idx.maintain("t_rag"))
    # The rule: first training at 1,000 rows, then whenever the table has grown by half since.
    expected, trained_on = [], 0
    for n in range(1, 41):
        rows = n * ROWS_PER_DOC
        if rows >= 1_000 and (not trained_on or rows >= trained_on * 1.5):
            expected.append(rows)
            trained_on = rows
    assert expected == [1_000, 1_500, 2_300, 3_500]
    assert trainings == expected  # 4 trainings for 40 documents, 31 of them after the first training
    assert [r.rows for r in reports if r.trained] == expected
    assert sum(r.appended for r in reports) >= 3  # new rows were appended to the indexes, not retrained
    assert all(r.unindexed_rows < POLICY.append_rows for r in reports)
    assert all(r.ann_deltas <= POLICY.max_deltas for r in reports)
    state = idx.ann_state("t_rag")
    assert state["trainings"] == 4 and state["trained_rows"] == 3_500 and state["trained_at"]
    assert state["config"].startswith("IVF_SQ")
    last = reports[-1]
    assert (last.ann_trainings, last.ann_trained_rows, last.ann_trained_at) == (4, 3_500, state["trained_at"])
    stats = idx.index_stats("t_rag")
    assert stats["doc_id"]["type"] == "BTREE" and stats["vector"]["type"] == "IVF_SQ"
    assert stats["embedded_text"]["type"] == "FTS"


def test_rows_added_after_the_last_training_are_still_found(tmp_path, trainings):
    from dataclasses import replace

    idx = ChunkIndex(str(tmp_path), policy=replace(POLICY, retrain_growth=2.0))
    for i in range(12):
        idx.replace_document("t_rag", *doc(i))
        idx.maintain("t_rag")
    assert trainings == [1_000]
    name, rows, vecs = doc(99)
    rows[7]["embedded_text"] = "zebra unicorn narwhal"
    idx.replace_document("t_rag", name, rows, vecs)
    report = idx.maintain("t_rag")
    assert not report.trained and not report.appended  # nothing indexed the new rows
    stats = idx.index_stats("t_rag")
    # the newest rows (this document's, the last written) are among those the index does not cover
    assert stats["vector"]["unindexed_rows"] >= ROWS_PER_DOC
    assert stats["vector"]["indexed_rows"] + stats["vector"]["unindexed_rows"] == 1_300
    # Whole-table search (the ANN index plus a flat scan of what it does not cover) finds them.
    for j in (0, 7, 50, 99):
        hit = idx.search("t_rag", vecs[j], k=3)[0]
        assert hit["chunk_id"] == f"{name}-{j}" and hit["score"] == pytest.approx(1.0, abs=1e-4)
    fused = idx.search("t_rag", vecs[3], k=3, query_text="zebra narwhal", hybrid=True)
    assert f"{name}-7" in {h["chunk_id"] for h in fused}
    assert {h["doc_id"] for h in idx.search("t_rag", vecs[0], k=5, doc_id=name)} == {name}
    # Later documents push the unindexed rows over the threshold: appended, not retrained.
    for i in range(12, 17):
        idx.replace_document("t_rag", *doc(i))
        idx.maintain("t_rag")
    assert trainings == [1_000] and idx.index_stats("t_rag")["vector"]["unindexed_rows"] < POLICY.append_rows
    assert idx.search("t_rag", vecs[50], k=1)[0]["chunk_id"] == f"{name}-50"


def test_per_document_search_is_exact(tmp_path):
    idx = ChunkIndex(str(tmp_path), policy=POLICY)
    docs = [doc(i) for i in range(15)]
    for d in docs:
        idx.replace_document("t_rag", *d)
    idx.maintain("t_rag")
    assert "vector" in idx.index_stats("t_rag")
    rng = np.random.default_rng(7)
    for name, _rows, vecs in docs[::3]:
        q = vecs[rng.integers(len(vecs))] + 0.3 * rng.normal(size=DIM).astype("float32")
        q /= np.linalg.norm(q)
        exact = np.argsort(-(vecs @ q))[:10]
        hits = idx.search("t_rag", q, k=10, doc_id=name)
        assert [h["chunk_id"] for h in hits] == [f"{name}-{j}" for j in exact]
        assert [h["score"] for h in hits] == pytest.approx([float(vecs[j] @ q) for j in exact], abs=1e-5)


def test_duplicate_check_reads_one_document(tmp_path):
    idx = ChunkIndex(str(tmp_path), policy=POLICY)
    for i in range(3):
        idx.replace_document("t_rag", *doc(i, 20))
    idx.maintain("t_rag")
    assert idx.duplicate_ids("t_rag", doc_id="d001") == 0
    # A row that slipped in twice (as two writers of the same document at once could make).
    table = idx.lance_table("t_rag")
    one = table.search().where("chunk_id = 'd001-4'", prefilter=True).limit(1).to_arrow()
    table.add(pa.Table.from_pylist(one.to_pylist(), schema=table.schema))
    assert idx.duplicate_ids("t_rag", doc_id="d001") == 1
    assert idx.duplicate_ids("t_rag", doc_id="d000") == 0 and idx.duplicate_ids("t_rag", doc_id="d002") == 0
    assert idx.duplicate_ids("t_rag") == 1


def test_a_table_indexed_before_upkeep_is_retrained_once_and_recorded(tmp_path, trainings):
    """Tables built by earlier versions (an IVF_PQ index, no training record) are brought under the policy."""
    from lancedb.index import IvfPq

    idx = ChunkIndex(str(tmp_path), policy=POLICY)
    for i in range(11):
        idx.replace_document("t_rag", *doc(i))
    idx.lance_table("t_rag").create_index(
        "vector", config=IvfPq(distance_type="cosine", num_partitions=4, num_sub_vectors=2), replace=True
    )
    assert idx.ann_state("t_rag")["trainings"] == 0
    idx.maintain("t_rag")
    idx.replace_document("t_rag", *doc(11))
    idx.maintain("t_rag")
    assert trainings == [1_100] and idx.index_stats("t_rag")["vector"]["type"] == "IVF_SQ"


def test_policy_rejects_bad_settings():
    with pytest.raises(ValueError, match="retrain_growth"):
        IndexPolicy(retrain_growth=0)
    with pytest.raises(ValueError, match="ann_min_rows"):
        IndexPolicy(ann_min_rows=10)
    with pytest.raises(ValueError, match="nprobes"):
        IndexPolicy(nprobes=0)
