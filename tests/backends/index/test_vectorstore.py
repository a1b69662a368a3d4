"""LanceDB chunk index: merge on chunk_id, per-document replacement, search, concurrency."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

from ctxwin_dagster.backends.index.vectorstore import ChunkIndex, IndexError_


def make_rows(doc: str, ids: range, dim: int = 8, seed: int = 0):
    rows = [
        {
            "chunk_id": f"{doc}-{i}",
            "doc_id": doc,
            "chunk_index": n,
            "start": i * 10,
            "end": i * 10 + 10,
            "text": f"{doc} chunk {i} " + ("apples and pears" if i % 2 else "the other thing"),
            "section": "Article 1" if i == 0 else None,
            "context": f"context of {i}",
            "embedded_text": f"context of {i}\n\n{doc} chunk {i} "
            + ("apples and pears" if i % 2 else "the other thing"),
        }
        for n, i in enumerate(ids)
    ]
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(len(rows), dim)).astype("float32")
    return rows, v / np.linalg.norm(v, axis=1, keepdims=True)


def test_replace_document_merges_on_chunk_id(tmp_path):
    idx = ChunkIndex(str(tmp_path))
    rows, vecs = make_rows("a", range(5))
    assert idx.replace_document("t_rag", "a", rows, vecs) == {"rows": 5, "inserted": 5, "updated": 0, "deleted": 0}
    idx.replace_document("t_rag", "b", *make_rows("b", range(3)))
    again = idx.replace_document("t_rag", "a", rows, vecs)  # idempotent
    assert again["inserted"] == 0 and again["deleted"] == 0 and idx.count("t_rag") == 8
    changed = idx.replace_document("t_rag", "a", *make_rows("a", range(2, 7)))
    assert (changed["inserted"], changed["updated"], changed["deleted"]) == (2, 3, 2)
    assert idx.count("t_rag", doc_id="a") == 5 and idx.count("t_rag", doc_id="b") == 3
    assert idx.duplicate_ids("t_rag") == 0
    # every document's count in one read, the same as a query per document, and new after a write
    assert idx.counts_by_document("t_rag") == {"a": 5, "b": 3} and idx.counts_by_document("cc_rag") == {}
    idx.delete_document("t_rag", "b")
    assert idx.counts_by_document("t_rag") == {"a": 5}
    idx.replace_document("t_rag", "b", *make_rows("b", range(3)))
    stored = {r["chunk_id"] for r in idx.rows("t_rag", doc_id="a")}
    assert stored == {f"a-{i}" for i in range(2, 7)}


def test_delete_document_leaves_others(tmp_path):
    idx = ChunkIndex(str(tmp_path))
    idx.replace_document("cc_rag", "a", *make_rows("a", range(4)))
    idx.replace_document("cc_rag", "b", *make_rows("b", range(3)))
    assert idx.delete_document("cc_rag", "a") == 4
    assert idx.count("cc_rag") == 3 and idx.delete_document("cc_rag", "a") == 0
    assert idx.delete_document("never_made", "a") == 0


def test_search_scores_filters_and_hybrid(tmp_path):
    idx = ChunkIndex(str(tmp_path))
    rows, vecs = make_rows("a", range(6))
    idx.replace_document("t_rag", "a", rows, vecs)
    idx.replace_document("t_rag", "b", *make_rows("b", range(6), seed=1))
    hits = idx.search("t_rag", vecs[3], k=3)
    assert hits[0]["chunk_id"] == "a-3" and hits[0]["score"] == pytest.approx(1.0, abs=1e-5)
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    only_b = idx.search("t_rag", vecs[3], k=4, doc_id="b")
    assert {h["doc_id"] for h in only_b} == {"b"} and len(only_b) == 4
    fused = idx.search("t_rag", vecs[0], k=4, query_text="apples pears", hybrid=True)
    assert len(fused) == 4 and all("rrf_score" in h for h in fused)
    assert sum("apples" in h["text"] for h in fused) >= 3


def test_bad_inputs_are_rejected_and_leave_the_table_intact(tmp_path):
    idx = ChunkIndex(str(tmp_path))
    rows, vecs = make_rows("a", range(3))
    idx.replace_document("t_rag", "a", rows, vecs)
    with pytest.raises(ValueError, match="rows but"):
        idx.replace_document("t_rag", "a", rows, vecs[:2])
    with pytest.raises(ValueError, match="duplicate chunk_id"):
        idx.replace_document("t_rag", "a", rows + rows[:1], np.vstack([vecs, vecs[:1]]))
    with pytest.raises(IndexError_, match="8-dim vectors but the embedder gives 4"):
        idx.replace_document("t_rag", "a", rows, np.ones((3, 4), dtype="float32"))
    with pytest.raises(IndexError_, match="materialize the swb_rag_index asset first"):
        idx.search("swb_rag", vecs[0])
    with pytest.raises(ValueError, match="variant"):
        idx.table_name("t rag; drop")
    assert idx.count("t_rag") == 3 and idx.duplicate_ids("t_rag") == 0


def _writer(uri: str, doc: str, rounds: int) -> None:
    idx = ChunkIndex(uri)
    for r in range(rounds):
        idx.replace_document("t_rag", doc, *make_rows(doc, range(r, r + 20), seed=r))


def test_concurrent_writers_neither_lose_nor_duplicate_rows(tmp_path):
    uri = str(tmp_path)
    ChunkIndex(uri).replace_document("t_rag", "seed", *make_rows("seed", range(2)))
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(uri, f"doc{i}", 4)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    idx = ChunkIndex(uri)
    assert idx.count("t_rag") == 2 + 4 * 20
    assert idx.duplicate_ids("t_rag") == 0
    for i in range(4):
        assert {r["chunk_id"] for r in idx.rows("t_rag", doc_id=f"doc{i}")} == {f"doc{i}-{j}" for j in range(3, 23)}


def test_one_document_search_is_lancedbs_exact_scan_and_follows_other_writers(tmp_path):
    """Within one document the search scans the document's rows held in memory per table
    version: the same rows and order as LanceDB's own flat scan, and a write by another
    handle (another process) or a drop is seen at the next read."""
    import lancedb

    reader, writer = ChunkIndex(str(tmp_path)), ChunkIndex(str(tmp_path))
    writer.replace_document("t_rag", "a", *make_rows("a", range(40), seed=1))
    writer.replace_document("t_rag", "b", *make_rows("b", range(10), seed=2))
    table = lancedb.connect(str(tmp_path)).open_table("t_rag_chunks")
    rng = np.random.default_rng(3)
    for _ in range(10):
        q = rng.normal(size=8).astype("float32")
        ours = reader.search("t_rag", q, k=12, doc_id="a")
        flat = (
            table.search(q, vector_column_name="vector")
            .metric("cosine")
            .limit(12)
            .where("doc_id = 'a'", prefilter=True)
            .bypass_vector_index()
            .to_list()
        )
        assert [h["chunk_id"] for h in ours] == [h["chunk_id"] for h in flat]
        assert all(abs(h["score"] - (1 - f["_distance"])) < 1e-5 for h, f in zip(ours, flat))
        assert set(ours[0]) - {"score"} == set(flat[0]) - {"_distance"}
    assert reader.count("t_rag", doc_id="a") == 40 and len(reader.rows("t_rag", doc_id="a")) == 40

    rows, vecs = make_rows("a", range(3), seed=4)
    writer.replace_document("t_rag", "a", rows, vecs)  # another handle rewrites document a
    assert reader.count("t_rag", doc_id="a") == 3
    assert {r["chunk_id"] for r in reader.rows("t_rag", doc_id="a")} == {"a-0", "a-1", "a-2"}
    assert reader.search("t_rag", vecs[2], k=1, doc_id="a")[0]["chunk_id"] == "a-2"
    reader.rows("t_rag", doc_id="a")[0]["text"] = "changed by a caller"
    assert reader.rows("t_rag", doc_id="a")[0]["text"] != "changed by a caller"

    writer.drop_table("t_rag")
    assert reader.count("t_rag", doc_id="a") == 0 and reader.rows("t_rag", doc_id="a") == []
    writer.replace_document("t_rag", "a", *make_rows("a", range(5), seed=5))
    assert reader.count("t_rag", doc_id="a") == 5
