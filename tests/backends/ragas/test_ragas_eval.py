"""RAGAS integration (ctxwin_dagster.backends.ragas): non-LLM metrics and the judge path.

The judge path runs ragas's real code (collections metrics, their prompts, instructor's JSON
mode, the openai client) against ``FakeOpenAIServer`` on 127.0.0.1, answered by
``lexical_judge_responder`` (a word-overlap stand-in for a judge model).
"""

from __future__ import annotations

import importlib.util
import math
import random
import string
import subprocess
import sys

import numpy as np
import pytest

from ctxwin_dagster.backends.calls.endpoint import PLACEHOLDER_KEY
from ctxwin_dagster.backends.ragas import (
    NON_LLM_METRICS,
    PAPER_METRICS,
    JudgeConfig,
    evaluate_records,
    import_ragas,
    ragas_embeddings,
)
from ctxwin_dagster.testing import FakeOpenAIServer, fake_embedding, lexical_judge_responder


@pytest.fixture(autouse=True)
def _no_ragas_analytics(monkeypatch):
    monkeypatch.setenv("RAGAS_DO_NOT_TRACK", "true")


def _random_text(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_lowercase + "     ") for _ in range(n))


# A document of 4 chunks with unrelated random texts (string similarity between them is low).
CHUNK_TEXTS = [_random_text(200, seed) for seed in range(4)]
DOC = "".join(CHUNK_TEXTS)
CATALOG = {
    "d": [{"chunk_id": f"c{i}", "start": 200 * i, "end": 200 * i + 200, "text": CHUNK_TEXTS[i]} for i in range(4)]
}


def hit(i: int) -> dict:
    return {
        "chunk_id": f"c{i}",
        "doc_id": "d",
        "start": 200 * i,
        "end": 200 * i + 200,
        "text": CHUNK_TEXTS[i],
        "score": 0.5,
    }


def rec(qid: str, variant: str, ranks: list[int], spans: list[list[int]], **kw) -> dict:
    base = {
        "question_id": qid,
        "doc_id": "d",
        "variant": variant,
        "question": "Which?",
        "answer": "x",
        "not_found": False,
        "reference_answer": "x",
        "reference_spans": spans,
        "retrieved": [hit(i) for i in ranks],
        "contexts": [CHUNK_TEXTS[i] for i in ranks],
        "context_spans": [[200 * i, 200 * i + 200] for i in ranks],
    }
    base.update(kw)
    return base


def test_importing_the_module_does_not_import_ragas():
    code = "import sys, ctxwin_dagster.backends.ragas; print('ragas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_import_ragas_works_around_the_missing_vertexai_module():
    r = import_ragas()
    assert r.version.startswith("0.")
    assert r.SingleTurnSample(user_input="q").user_input == "q"
    if r.vertexai_placeholder:
        assert sys.modules["langchain_community.chat_models.vertexai"].ChatVertexAI.__doc__.startswith("Placeholder")


def test_non_llm_metrics_known_values_and_agree_with_ctxwin():
    records = [
        rec("q1", "t_rag", [2, 1], [[210, 250]]),  # relevant c1 at rank 2
        rec("q2", "t_rag", [0, 3], [[10, 20], [610, 650]]),  # c0 and c3 both relevant, both retrieved
        rec("q3", "t_rag", [2, 3], [[10, 20]]),  # c0 relevant, not retrieved
        rec("q4", "t_rag", [1], [[150, 260]]),  # span crosses c0|c1: 2 reference chunks, 1 retrieved
    ]
    res = evaluate_records(records, chunks=CATALOG, string_distance="difflib")
    assert res.string_distance == "difflib"
    got = {r["question_id"]: r for r in res.rows}
    expected = {
        # (non-LLM precision (average precision), non-LLM recall, ID precision, ID recall)
        "q1": (0.5, 1.0, 0.5, 1.0),
        "q2": (1.0, 1.0, 1.0, 1.0),
        "q3": (0.0, 0.0, 0.0, 0.0),
        "q4": (1.0, 0.5, 1.0, 0.5),
    }
    for qid, (p, r, idp, idr) in expected.items():
        row = got[qid]
        assert row["non_llm_context_precision_with_reference"] == pytest.approx(p, abs=1e-6), qid
        assert row["non_llm_context_recall"] == pytest.approx(r), qid
        assert row["id_based_context_precision"] == pytest.approx(idp), qid
        assert row["id_based_context_recall"] == pytest.approx(idr), qid
        # ragas's ID-based metrics and ctxwin's own agree
        assert row["id_context_precision"] == pytest.approx(idp) and row["id_context_recall"] == pytest.approx(idr)
    assert got["q1"]["mrr"] == 0.5 and got["q1"]["span_hit"] == 1.0
    counts = res.counts("non_llm_context_recall")
    assert counts == {"n_population": 4, "n": 4, "n_nan": 0, "n_failed": 0, "n_skipped": 0, "n_missing": 0}
    summ = {s["metric"]: s for s in res.summary}
    assert summ["id_based_context_recall"]["mean"] == pytest.approx(2.5 / 4)
    assert summ["id_based_context_recall"]["source"] == "ragas" and summ["mrr"]["source"] == "ctxwin"
    assert res.judge is None and res.judge_usage == {} and res.failures == []
    assert set(NON_LLM_METRICS) <= set(res.metric_names)
    assert len(res.to_frame()) == 4 and not res.summary_frame().empty


def test_string_distance_choice():
    records = [rec("q1", "t_rag", [1], [[210, 250]])]
    has_rapidfuzz = importlib.util.find_spec("rapidfuzz") is not None
    res = evaluate_records(records, chunks=CATALOG)  # auto
    assert res.string_distance == ("levenshtein" if has_rapidfuzz else "difflib")
    if not has_rapidfuzz:
        with pytest.raises(RuntimeError, match="pip install rapidfuzz"):
            evaluate_records(records, chunks=CATALOG, string_distance="levenshtein")
    with pytest.raises(ValueError, match="string_distance"):
        evaluate_records(records, string_distance="cosine")


def test_nan_heavy_set_is_counted_not_averaged():
    # Reference spans outside every catalog chunk: ragas can score neither recall (NaN).
    records = [rec(f"n{i}", "t_rag", [0, 1], [[900, 950]]) for i in range(5)]
    records.append(rec("ok", "t_rag", [1], [[210, 250]]))
    records.append(rec("u1", "t_rag", [1], [], reference_answer="", not_found=True))  # unanswerable
    records.append(rec("e1", "t_rag", [], [[210, 250]], contexts=[], context_spans=[]))  # nothing retrieved
    res = evaluate_records(records, chunks=CATALOG, string_distance="difflib")
    idr = res.counts("id_based_context_recall")
    assert idr["n_population"] == 7  # answerable questions
    assert idr["n"] == 1 and idr["n_nan"] == 5 and idr["n_skipped"] == 1 and idr["n_failed"] == 0
    for m in ("non_llm_context_precision_with_reference", "non_llm_context_recall"):
        c = res.counts(m)
        assert (c["n"], c["n_nan"], c["n_skipped"]) == (1, 5, 1), m
    summ = {s["metric"]: s for s in res.summary if s["metric"] == "id_based_context_recall"}
    s = summ["id_based_context_recall"]
    assert s["mean"] == 1.0  # the one scored question, NaNs not averaged in
    assert s["skip_reasons"] == {"no retrieved chunks": 1}
    rows = {r["question_id"]: r for r in res.rows}
    assert math.isnan(rows["n0"]["id_based_context_recall"])
    assert rows["u1"]["id_based_context_recall"] is None and rows["u1"]["not_found_correct"] == 1.0
    # the same NaNs reach the paired comparison as dropped pairs
    from ctxwin_dagster.core.evaluation.stats import compare_variants

    both = [dict(r) for r in res.rows] + [dict(r, variant="swb_rag") for r in res.rows]
    df = compare_variants(both, metrics=["id_based_context_recall"], n_boot=200)
    assert df.iloc[0]["n_dropped_nan"] == 5 and df.iloc[0]["n_pairs"] == 1


def test_without_catalog_precision_is_computed_and_recall_skipped_with_reason():
    res = evaluate_records([rec("q1", "t_rag", [2, 1], [[210, 250]])], string_distance="difflib")
    row = res.rows[0]
    assert row["id_based_context_precision"] == 0.5
    assert row["id_based_context_recall"] is None and row["non_llm_context_recall"] is None
    (s,) = [s for s in res.summary if s["metric"] == "id_based_context_recall"]
    assert s["n_skipped"] == 1 and "no chunk catalog" in next(iter(s["skip_reasons"]))


# ---------------------------------------------------------------- the judge path

DOC2 = "Paris is the capital of France. Berlin is the capital of Germany. Rome is in Italy."
CTX = [DOC2[0:32], DOC2[66:]]
QUESTION = "What is the capital of France?"


def judge_records() -> list[dict]:
    good = {
        "question_id": "good",
        "doc_id": "d2",
        "variant": "swb_rag",
        "question": QUESTION,
        "answer": "Paris is the capital of France.",
        "not_found": False,
        "reference_answer": "Paris is the capital of France.",
        "reference_spans": [[0, 31]],
        "retrieved": [],
        "contexts": CTX,
        "context_spans": [[0, 32], [66, len(DOC2)]],
    }
    wrong = dict(
        good,
        question_id="wrong",
        answer="Lyon is the capital of Spain.",
        contexts=list(reversed(CTX)),
        context_spans=[[66, len(DOC2)], [0, 32]],
    )
    empty = dict(good, question_id="nan", answer="???")  # no statement: faithfulness is NaN
    unanswerable = dict(
        good, question_id="u", reference_answer="", reference_spans=[], not_found=True, answer="Not found."
    )
    return [good, wrong, empty, unanswerable]


def test_judge_path_all_five_metrics_against_fake_server():
    responder = lexical_judge_responder({"Paris is the capital of France.": QUESTION})
    with FakeOpenAIServer(responder=responder, embed_dim=16) as server:
        judge = JudgeConfig(
            model="judge-model",
            base_url=server.base_url,
            embedding_model="embed-model",
            max_retries=0,
            max_concurrency=3,
        )
        res = evaluate_records(judge_records(), judge=judge, string_distance="difflib")
        n_chat = server.request_count
        n_emb = len(server.embedding_requests)
    rows = {r["question_id"]: r for r in res.rows}
    good, wrong = rows["good"], rows["wrong"]
    assert good["faithfulness"] == 1.0
    assert good["context_recall"] == 1.0
    assert good["context_precision"] == pytest.approx(1.0, abs=1e-6)  # useful context at rank 1
    assert good["answer_correctness"] == pytest.approx(1.0)  # F1 = 1 and identical texts embed identically
    assert good["answer_relevancy"] == pytest.approx(1.0)  # the "generated" question is the question
    assert wrong["faithfulness"] == 0.0
    assert wrong["context_precision"] == pytest.approx(0.5, abs=1e-6)  # useful context at rank 2
    assert wrong["answer_correctness"] < 0.5
    assert math.isnan(rows["nan"]["faithfulness"])
    assert rows["u"]["faithfulness"] is None  # unanswerable: not judged (include_unanswerable=False)
    f = res.counts("faithfulness")
    assert (f["n_population"], f["n"], f["n_nan"], f["n_failed"], f["n_skipped"]) == (3, 2, 1, 0, 0)
    assert res.failures == []
    assert res.judge == "judge-model"
    assert res.judge_usage["requests"] == n_chat > 0 and res.judge_usage["input_tokens"] > 0
    assert res.judge_usage["http_errors"] == 0
    assert n_emb > 0  # answer relevancy / correctness embedded through the server
    assert all(m in res.metric_names for m in PAPER_METRICS)


def test_judge_failures_are_counted_per_metric():
    responder = lexical_judge_responder()
    records = judge_records()[:1]
    with FakeOpenAIServer(responder=responder, faults=["500"]) as server:
        judge = JudgeConfig(
            model="judge",
            base_url=server.base_url,
            metrics=("faithfulness", "context_recall"),
            max_retries=0,
            attempts=1,
            max_concurrency=1,
        )
        res = evaluate_records(records, judge=judge, string_distance="difflib")
    total_failed = sum(res.counts(m)["n_failed"] for m in ("faithfulness", "context_recall"))
    assert total_failed == 1 and len(res.failures) == 1
    fail = res.failures[0]
    assert fail["question_id"] == "good" and fail["metric"] in ("faithfulness", "context_recall")
    assert "500" in fail["error"] or "InternalServerError" in fail["error"]
    assert math.isnan(res.rows[0][fail["metric"]])
    other = "context_recall" if fail["metric"] == "faithfulness" else "faithfulness"
    assert res.rows[0][other] == 1.0
    assert res.judge_usage["http_errors"] == 1


def test_a_verdict_that_is_not_a_score_is_a_counted_failure():
    """A weak judge filled the int "attributed" (meant 0 or 1) with 143320: ragas would report a
    context recall of 143320. It is counted as a failure instead of a score."""
    lexical = lexical_judge_responder()

    def responder(body):
        reply = lexical(body)
        return reply.replace('"attributed": 1', '"attributed": 143320').replace(
            '"attributed": 0', '"attributed": 143320'
        )

    records = judge_records()[:1]
    with FakeOpenAIServer(responder=responder) as server:
        judge = JudgeConfig(
            model="judge", base_url=server.base_url, metrics=("context_recall",), max_retries=0, attempts=1
        )
        res = evaluate_records(records, judge=judge, string_distance="difflib")
    assert res.counts("context_recall")["n_failed"] == 1 and res.counts("context_recall")["n"] == 0
    assert "outside [0, 1]" in res.failures[0]["error"] and math.isnan(res.rows[0]["context_recall"])


def test_judge_retries_absorb_transient_errors_and_malformed_json():
    records = judge_records()[:1]
    with FakeOpenAIServer(responder=lexical_judge_responder(), faults=["500", "malformed"]) as server:
        judge = JudgeConfig(
            model="judge",
            base_url=server.base_url,
            metrics=("faithfulness",),
            max_retries=0,
            attempts=3,
            max_concurrency=1,
        )
        res = evaluate_records(records, judge=judge, string_distance="difflib")
        assert server.request_count == 4  # 2 faulted + the 2 calls of faithfulness
    assert res.failures == [] and res.rows[0]["faithfulness"] == 1.0
    assert res.judge_usage["http_errors"] == 1


def test_judge_with_a_ctxwin_embedder_object():
    class HashEmbedder:
        model, dim = "hash", 16

        def __init__(self):
            self.calls = 0

        def embed(self, texts):
            self.calls += 1
            return np.stack([fake_embedding(t, 16) for t in texts]) if texts else np.zeros((0, 16), np.float32)

    emb = HashEmbedder()
    responder = lexical_judge_responder({"Paris is the capital of France.": QUESTION})
    with FakeOpenAIServer(responder=responder) as server:
        judge = JudgeConfig(model="judge", base_url=server.base_url, metrics=("answer_relevancy",), max_retries=0)
        res = evaluate_records(judge_records()[:1], judge=judge, embedder=emb, string_distance="difflib")
        assert server.embedding_requests == []
    assert res.rows[0]["answer_relevancy"] == pytest.approx(1.0)
    assert emb.calls > 0


def test_judge_config_validation_and_missing_embeddings():
    with pytest.raises(ValueError, match="unknown judge metric"):
        JudgeConfig(model="m", metrics=("faithfulness", "bleu"))
    with pytest.raises(ValueError, match="model is empty"):
        JudgeConfig(model=" ")
    with pytest.raises(RuntimeError, match="set the CTXWIN_TEST_NO_SUCH_KEY environment variable"):
        JudgeConfig(model="m", api_key_env="CTXWIN_TEST_NO_SUCH_KEY").api_key()
    assert (
        JudgeConfig(model="m", base_url="http://127.0.0.1:9/v1", api_key_env="CTXWIN_TEST_NO_SUCH_KEY").api_key()
        == PLACEHOLDER_KEY
    )
    with pytest.raises(ValueError, match="need embeddings"):
        evaluate_records(
            judge_records()[:1],
            judge=JudgeConfig(model="m", base_url="http://127.0.0.1:9/v1"),
            string_distance="difflib",
        )


def test_evaluate_records_inside_a_running_loop():
    # Synchronous API called from async code: runs in a worker thread, no nested-loop error.
    import asyncio

    async def main():
        return evaluate_records([rec("q1", "t_rag", [1], [[210, 250]])], chunks=CATALOG, string_distance="difflib")

    res = asyncio.run(main())
    assert res.rows[0]["id_based_context_recall"] == 1.0


@pytest.mark.slow
def test_ragas_embeddings_wraps_the_local_embedder():
    from ctxwin_dagster.backends.embeddings.local import LocalEmbedder

    emb = ragas_embeddings(LocalEmbedder())
    import_ragas()
    vecs = emb.embed_texts(["Paris is the capital of France.", "Berlin is the capital of Germany."])
    assert len(vecs) == 2 and len(vecs[0]) == 384
    one = emb.embed_text("Paris is the capital of France.")
    assert np.allclose(one, vecs[0], atol=1e-5)


def test_nan_heavy_scores_fail_the_asset_check(tmp_path):
    """The *_ragas_scores asset fails its check when NaNs exceed the threshold, and passes a clean set."""
    import dagster as dg

    from ctxwin_dagster.core.text.splitting import Chunk
    from ctxwin_dagster.defs.evaluation.scores import t_rag_ragas_scores
    from ctxwin_dagster.defs.model_resources import EmbeddingsResource, JudgeResource
    from ctxwin_dagster.defs.resources import EvaluationSettings

    chunks = [Chunk(c["chunk_id"], "d", i, c["start"], c["end"], c["text"]) for i, c in enumerate(CATALOG["d"])]
    heavy = [rec(f"n{i}", "t_rag", [0, 1], [[900, 950]]) for i in range(5)] + [rec("ok", "t_rag", [1], [[210, 250]])]
    clean = [rec(f"c{i}", "t_rag", [1, 2], [[210, 250]]) for i in range(4)]
    evaluation = EvaluationSettings(experiment="nan", results_dir=str(tmp_path), max_failed_share=0.2)
    outcomes = {}
    for name, records in (("heavy", heavy), ("clean", clean)):
        with dg.build_asset_context(partition_key="d") as context:
            result = t_rag_ragas_scores(
                context,
                evaluation=evaluation,
                judge=JudgeResource(),
                embeddings=EmbeddingsResource(cache_dir=str(tmp_path / "cache")),  # not the sample's data/cache
                answers=records,
                chunks=chunks,
            )
        check = result.check_results[0]
        outcomes[name] = check.passed
        if name == "heavy":
            assert check.metadata["worst_share"].value == 0.833  # 5 of 6, rounded
            assert "id_based_context_recall" in check.metadata["metrics_over"].value
            assert result.metadata["nan_or_failed"] > 0
    assert outcomes == {"heavy": False, "clean": True}
    assert (tmp_path / "nan" / "scores" / "t_rag" / "d.jsonl").is_file()


def test_a_document_without_questions_is_scored_without_importing_ragas():
    """ragas takes 7-10 s of CPU to import; a run of documents without questions (a corpus
    indexed for asking) gets their empty scores without paying it, and still records ragas's version."""
    code = (
        "import sys; from ctxwin_dagster.backends.ragas import evaluate_records; "
        "r = evaluate_records([], chunks=[]); print('ragas' in sys.modules, len(r.rows), r.ragas_version, r.string_distance)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported, rows, version, distance = out.stdout.split()
    assert (imported, rows, distance) == ("False", "0", "levenshtein")
    from importlib.metadata import version as installed

    assert version == installed("ragas")
