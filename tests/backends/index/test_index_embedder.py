"""Each index records the embedder that built it; a write or a search with another is refused."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from ctxwin_dagster.ask import Asker
from ctxwin_dagster.ask.results import AskError
from ctxwin_dagster.backends.embeddings import factory
from ctxwin_dagster.backends.embeddings.identity import EmbedderIdentity
from ctxwin_dagster.backends.index.vectorstore import ChunkIndex, EmbedderMismatchError, IndexError_, IndexRecord
from ctxwin_dagster.backends.tasks.extractive import ExtractiveTasks
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings

DIM = 8


class FakeEmbedder:
    """A tiny deterministic embedder with a name and a dimension (no model to load)."""

    provider = "local"

    def __init__(self, model: str, dim: int = DIM) -> None:
        self.model = model
        self.dim = dim

    def embed(self, texts):
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(f"{self.model}:{t}".encode()).digest()[:4], "little")
            out[i] = np.random.default_rng(seed).standard_normal(self.dim)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _rows(doc_id: str, texts: list[str]) -> list[dict]:
    return [
        {
            "chunk_id": f"{doc_id}-{i}",
            "doc_id": doc_id,
            "chunk_index": i,
            "start": i * 10,
            "end": i * 10 + 9,
            "text": t,
            "section": None,
            "context": "",
            "embedded_text": t,
        }
        for i, t in enumerate(texts)
    ]


TEXTS = ["social scoring is prohibited", "the fine is thirty million", "providers keep logs"]


def _write(idx: ChunkIndex, embedder: FakeEmbedder | None, doc_id: str = "d", variant: str = "t_rag", **kw):
    emb = embedder or FakeEmbedder("any-model")
    return idx.replace_document(variant, doc_id, _rows(doc_id, TEXTS), emb.embed(TEXTS), embedder=embedder, **kw)


def test_table_records_embedder_and_survives_writes_upkeep_and_reopening(tmp_path):
    a = FakeEmbedder("model-a")
    idx = ChunkIndex(str(tmp_path))
    _write(idx, a, row_strategy="context_budget")
    _write(idx, a, row_strategy="context_budget")  # merge_insert on the same ids
    _write(idx, a, doc_id="e", row_strategy="context_budget")
    idx.maintain("t_rag")
    record = ChunkIndex(str(tmp_path)).record("t_rag")
    assert record == IndexRecord("model-a", DIM, "local", "context_budget")
    hits = ChunkIndex(str(tmp_path)).search("t_rag", a.embed([TEXTS[1]])[0], k=1, embedder=a)
    assert hits[0]["text"] == TEXTS[1]


def test_search_with_another_embedder_is_refused_with_the_fix(tmp_path):
    idx = ChunkIndex(str(tmp_path))
    _write(idx, FakeEmbedder("model-a"))
    b = FakeEmbedder("model-b")
    with pytest.raises(EmbedderMismatchError) as err:
        idx.search("t_rag", b.embed(["fine"])[0], k=2, embedder=b)
    msg = str(err.value)
    assert "'t_rag_chunks'" in msg and "built with model-a" in msg and "question with model-b" in msg
    assert "Search with model-a" in msg and "another LanceDB folder" in msg
    # The same model with vectors of another size is another embedder too.
    with pytest.raises(EmbedderMismatchError):
        idx.check_embedder("t_rag", EmbedderIdentity("model-a", DIM * 2))


def test_write_with_another_embedder_or_row_strategy_is_refused(tmp_path):
    idx = ChunkIndex(str(tmp_path))
    _write(idx, FakeEmbedder("model-a"), row_strategy="separate")
    with pytest.raises(EmbedderMismatchError) as err:
        _write(idx, FakeEmbedder("model-b"), doc_id="e", row_strategy="separate")
    msg = str(err.value)
    assert "'t_rag_chunks'" in msg and "built with model-a" in msg and "model-b" in msg
    assert (
        "use the recorded embedder" in msg.lower() and "another LanceDB folder" in msg and "drop_table('t_rag')" in msg
    )
    with pytest.raises(EmbedderMismatchError, match="row strategy 'separate'"):
        _write(idx, FakeEmbedder("model-a"), doc_id="e", row_strategy="pooled")
    assert idx.count("t_rag") == len(TEXTS)  # nothing written by the refused writers
    # Deleting the table explicitly lets another model build it.
    assert idx.drop_table("t_rag") and idx.record("t_rag") is None
    _write(idx, FakeEmbedder("model-b"))
    assert idx.record("t_rag").model == "model-b"


def test_old_table_without_record_still_searches_and_takes_the_first_writers_record(tmp_path):
    idx = ChunkIndex(str(tmp_path))
    _write(idx, None)  # as written before records: no embedder named
    assert idx.record("t_rag") is None
    b = FakeEmbedder("model-b")
    assert len(idx.search("t_rag", b.embed(["fine"])[0], k=2, embedder=b)) == 2  # accepted, no record to compare
    a = FakeEmbedder("model-a")
    _write(idx, a, doc_id="e", row_strategy="chunk only")
    assert idx.record("t_rag") == IndexRecord("model-a", DIM, "local", "chunk only")
    with pytest.raises(EmbedderMismatchError):
        idx.search("t_rag", b.embed(["fine"])[0], k=2, embedder=b)


def test_question_vector_of_another_size_is_refused_clearly(tmp_path):
    idx = ChunkIndex(str(tmp_path))
    _write(idx, None)
    with pytest.raises(IndexError_, match="holds 8-dim vectors but the question vector has 4"):
        idx.search("t_rag", np.ones(4, dtype=np.float32), k=1)


def test_asker_refuses_a_search_with_another_embedder(tmp_path):
    idx = ChunkIndex(str(tmp_path))
    _write(idx, FakeEmbedder("model-a"), variant="swb_rag")
    ok = Asker(index=idx, embedder=FakeEmbedder("model-a"), tasks=ExtractiveTasks(FakeEmbedder("model-a")))
    assert ok.retrieve("fine", variant="swb", retrieval=RetrievalSettings.named("paper", k=1))
    asker = Asker(index=idx, embedder=FakeEmbedder("model-b"), tasks=ExtractiveTasks(FakeEmbedder("model-b")))
    with pytest.raises(AskError, match="built with model-a .* question with model-b"):
        asker.retrieve("fine", variant="swb", retrieval=RetrievalSettings.named("paper", k=1))


def test_real_local_embedder_is_checked_against_the_record_without_loading(tmp_path):
    from ctxwin_dagster.backends.embeddings.local import LocalEmbedder

    emb = LocalEmbedder()
    assert emb.identity == EmbedderIdentity("all-MiniLM-L6-v2", 384, "local")
    idx = ChunkIndex(str(tmp_path))
    other = FakeEmbedder("other-model", 384)
    _write(idx, other)
    with pytest.raises(EmbedderMismatchError, match="built with other-model .*all-MiniLM-L6-v2"):
        idx.check_embedder("t_rag", emb)
    assert emb.stats.texts_encoded == 0


def test_asker_open_builds_the_configured_embedder_through_the_factory(tmp_path, monkeypatch):
    (tmp_path / "db").mkdir()
    calls = []
    make = factory.make_embedder

    def spy(**kwargs):
        calls.append(kwargs)
        return make(**kwargs)

    monkeypatch.setattr(factory, "make_embedder", spy)
    settings = {
        "provider": "openai",
        "model": "text-embedding-3-small",
        "api_key": "sk-test",
        "batch_size": 7,
        "row_strategy": "separate",
        "context_weight": 0.3,
    }
    with Asker.open(
        lancedb=tmp_path / "db", documents=None, cache_dir=tmp_path / "cache", embeddings=settings
    ) as asker:
        assert asker.embedder.identity == EmbedderIdentity("text-embedding-3-small", 1536, "openai")
        assert asker.embedder.batch_size == 7
    assert calls[-1]["cache_dir"] == tmp_path / "cache" and "row_strategy" not in calls[-1]
    with Asker.open(lancedb=tmp_path / "db", documents=None, cache_dir=None) as asker:  # default: local MiniLM
        assert asker.embedder.identity == EmbedderIdentity("all-MiniLM-L6-v2", 384, "local")
    with pytest.raises(AskError, match="unknown embeddings settings"):
        Asker.open(lancedb=tmp_path / "db", documents=None, cache_dir=None, embeddings={"modle": "x"})
    with pytest.raises(AskError, match="neither"):
        Asker.open(lancedb=tmp_path / "db", documents=None, cache_dir=None, embeddings={"model": "no-such-local-model"})


def test_embeddings_resource_builds_through_the_factory(tmp_path):
    from ctxwin_dagster.defs.model_resources import EmbeddingsResource

    res = EmbeddingsResource(
        provider="openai", model="text-embedding-3-large", api_key="sk-test", batch_size=5, cache_dir=str(tmp_path)
    )
    emb = res.embedder()
    assert emb.identity == EmbedderIdentity("text-embedding-3-large", 3072, "openai") and emb.batch_size == 5
    assert (tmp_path / "embeddings.sqlite").exists()
