"""The LLM task engine against the loopback fake OpenAI server: SWB replies parsed, repaired,
retried and fallen back per chunk (all counted), summaries map then reduce, windows fitted to the
model, the response cache, answers with citations."""

from __future__ import annotations

import json
import re

import pytest

from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
from ctxwin_dagster.backends.tasks.extractive import ExtractiveTasks
from ctxwin_dagster.backends.tasks.llm import LLMTasks
from ctxwin_dagster.backends.tasks.results import Answerer, Contextualizer, Summarizer, TaskEngine
from ctxwin_dagster.core.budget.fit import ContextOverflowError
from ctxwin_dagster.core.budget.limits import ModelLimits
from ctxwin_dagster.core.budget.tokens import PromptMeter, get_token_counter
from ctxwin_dagster.core.methods.prompts import NOT_IN_DOCUMENTS, SWB_RETRY_NOTE
from ctxwin_dagster.core.methods.swb import swb_batches
from ctxwin_dagster.core.text.splitting import RecursiveSplitter
from ctxwin_dagster.testing import FakeOpenAIServer

# Articles 1-10 of the AI Act (Article 5, "Prohibited AI practices", lies inside).
ARTICLES_START, ARTICLES_END = 228_229, 280_657


@pytest.fixture(scope="module")
def doc(ai_act_text) -> str:
    return ai_act_text[ARTICLES_START:ARTICLES_END]


# --------------------------------------------------------------------------------------
# LLM engine against the fake OpenAI server
# --------------------------------------------------------------------------------------

MODEL = "gpt-4o-mini"


def _kind(body) -> str:
    msgs = body["messages"]
    system = msgs[0]["content"] if msgs[0]["role"] == "system" else ""
    user = msgs[-1]["content"]
    if "situate chunks" in system:
        return "swb_retry" if "could not be used" in user else "swb"
    if user.startswith("<document>"):
        return "cc"
    if "Below is part" in user:
        return "segment"
    if "Below are summaries" in user:
        return "overview"
    if "Passages:" in user:
        return "answer"
    return "other"


def _ids(body) -> list[str]:
    return re.findall(r'chunk_id="([0-9a-f]+)"', body["messages"][-1]["content"])


def _valid(body) -> str:
    return json.dumps({"contexts": [{"chunk_id": i, "context": f"swb context {i[:8]}"} for i in _ids(body)]})


@pytest.fixture()
def small_doc(doc):
    return doc[:12_000]


@pytest.fixture()
def small_chunks(small_doc):
    return RecursiveSplitter(chunk_size=1000, chunk_overlap=100).split(small_doc, doc_id="ai_act", doc_sha256="small")


def _backend(server, **kw):
    return OpenAIChatBackend(model=MODEL, base_url=server.base_url, api_key="test", max_retries=0, **kw)


def test_llm_swb_valid_json_is_parsed(small_doc, small_chunks):
    with (
        FakeOpenAIServer(responder=lambda b: _valid(b) if _kind(b) == "swb" else "?") as server,
        _backend(server) as chat,
    ):
        tasks = LLMTasks(chat)
        assert isinstance(tasks, Contextualizer)
        res = tasks.contextualize_swb(small_doc, small_chunks, "SUMMARY", doc_id="d", window_chars=2_000)
        bodies = server.requests
    n_batches = -(-len(small_chunks) // 5)
    assert len(bodies) == n_batches and all(_kind(b) == "swb" for b in bodies)
    assert [r.context for r in res] == [f"swb context {c.chunk_id[:8]}" for c in small_chunks]
    assert all(
        r.engine == "llm" and r.model == MODEL and r.prompt_version == "swb_batch.en.v1" and not r.fallback for r in res
    )
    assert all(b["temperature"] == 0.2 and b["top_p"] == 0.95 and b["max_tokens"] == 2048 for b in bodies)
    # Structured output: each batch is held to a strict schema naming exactly its chunk ids.
    for b in bodies:
        rf = b["response_format"]
        assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
        contexts = rf["json_schema"]["schema"]["properties"]["contexts"]
        assert contexts["items"]["properties"]["chunk_id"]["enum"] == _ids(b)
        assert contexts["minItems"] == contexts["maxItems"] == len(_ids(b))
    # Batch windows: 2,000 chars before the first chunk and after the last.
    b1 = swb_batches(small_chunks, 5)[1]
    first = next(b for b in bodies if _ids(b)[0] == b1[0].chunk_id)["messages"][-1][
        "content"
    ]  # order of arrival varies
    assert f"<text_before>\n{small_doc[b1[0].start - 2000 : b1[0].start]}\n</text_before>" in first
    assert f"<text_after>\n{small_doc[b1[-1].end : b1[-1].end + 2000]}\n</text_after>" in first
    assert sum(r.input_tokens for r in res) == sum(rec.input_tokens for rec in chat.ledger.records)
    assert tasks.stats["swb_batches"] == n_batches and tasks.stats["swb_invalid"] == 0
    assert tasks.stats["swb_schema_enforced"] == n_batches and tasks.stats["swb_schema_ignored"] == 0


class _RecordingMeter(PromptMeter):
    """A prompt meter that keeps every prompt it was asked to count."""

    def __init__(self, counter):
        super().__init__(counter)
        self.prompts = []

    def count_messages(self, messages):
        self.prompts.append([dict(m) for m in messages])
        return super().count_messages(messages)


@pytest.mark.slow
def test_extractive_meters_exactly_the_swb_prompts_the_llm_sends(embedder, small_doc, small_chunks):
    counter = get_token_counter(MODEL)  # the fake server counts the prompt tokens it receives with it
    extractive = ExtractiveTasks(embedder, counter=counter)
    extractive.meter = _RecordingMeter(counter)
    summary = extractive.summarize(small_doc, doc_id="d", max_tokens=120).text
    extractive.meter.prompts.clear()
    offline = extractive.contextualize_swb(small_doc, small_chunks, summary, doc_id="d", window_chars=3_000)
    metered = extractive.meter.prompts
    swb_records = [r for r in extractive.ledger.records if r.tags.variant == "swb"]

    with FakeOpenAIServer(responder=_valid) as server, _backend(server) as chat:
        online = LLMTasks(chat).contextualize_swb(small_doc, small_chunks, summary, doc_id="d", window_chars=3_000)
        order = {c.chunk_id: i for i, c in enumerate(small_chunks)}
        bodies = sorted(server.requests, key=lambda b: order[_ids(b)[0]])  # order of arrival varies
        llm_records = sorted(chat.ledger.records, key=lambda r: r.input_chars)

    n_batches = -(-len(small_chunks) // 5)
    assert len(bodies) == len(metered) == len(swb_records) == n_batches and all(_kind(b) == "swb" for b in bodies)
    # The same messages, to the character: what the extractive engine meters is what the LLM is sent.
    assert [b["messages"] for b in bodies] == metered
    assert [r.input_tokens for r in swb_records] == [counter.count_messages(b["messages"]) for b in bodies]
    assert sorted(r.input_chars for r in swb_records) == [r.input_chars for r in llm_records]
    # Hence the same input volumes per chunk, whichever engine made the contexts.
    assert [(r.chunk_id, r.prompt_version, r.input_tokens, r.input_chars) for r in offline] == [
        (r.chunk_id, r.prompt_version, r.input_tokens, r.input_chars) for r in online
    ]


def test_llm_swb_fenced_and_partial_json_is_repaired(small_doc, small_chunks):
    def responder(body):
        ids = _ids(body)
        if ids[0] == small_chunks[0].chunk_id:  # fenced, with prose and abbreviated ids
            entries = [{"chunk_id": i[:10], "context": f"ctx {i[:8]}"} for i in ids]
            return "Sure! Here it is:\n```json\n" + json.dumps({"contexts": entries}) + "\n```\nDone."
        # a bare list with the chunk numbers instead of ids
        return json.dumps([{"chunk_id": n + 1, "context": f"ctx {i[:8]}"} for n, i in enumerate(ids)])

    with FakeOpenAIServer(responder=responder) as server, _backend(server) as chat:
        tasks = LLMTasks(chat)
        res = tasks.contextualize_swb(small_doc, small_chunks, "SUMMARY", doc_id="d", window_chars=2_000)
        assert server.request_count == -(-len(small_chunks) // 5)
    assert [r.context for r in res] == [f"ctx {c.chunk_id[:8]}" for c in small_chunks]
    assert tasks.stats["swb_invalid"] == 0 and not any(r.fallback for r in res)


def test_llm_swb_retry_repairs_a_bad_batch(small_doc, small_chunks):
    def responder(body):
        return _valid(body) if _kind(body) == "swb_retry" or _ids(body)[0] != small_chunks[0].chunk_id else "not json"

    with FakeOpenAIServer(responder=responder) as server, _backend(server) as chat:
        tasks = LLMTasks(chat)
        res = tasks.contextualize_swb(small_doc, small_chunks, "SUMMARY", doc_id="d", window_chars=2_000)
        kinds = [_kind(b) for b in server.requests]
    assert kinds.count("swb_retry") == 1 and "cc" not in kinds
    assert (
        tasks.stats["swb_invalid"] == 1 and tasks.stats["swb_retried"] == 1 and tasks.stats["swb_fallback_chunks"] == 0
    )
    assert res[0].prompt_version == "swb_batch.en.v1+retry1" and not res[0].fallback
    assert res[-1].prompt_version == "swb_batch.en.v1"
    assert (
        SWB_RETRY_NOTE["en"].format(n=5)
        in next(b for b in server.requests if _kind(b) == "swb_retry")["messages"][-1]["content"]
    )


def test_llm_swb_garbage_retries_then_falls_back_per_chunk_counted(small_doc, small_chunks):
    window = 2_000

    def responder(body):
        kind = _kind(body)
        if kind in ("swb", "swb_retry"):
            return "I am sorry, I cannot produce JSON today."
        if kind == "cc":
            return "fallback context"
        return "?"

    with FakeOpenAIServer(responder=responder) as server, _backend(server) as chat:
        tasks = LLMTasks(chat)
        res = tasks.contextualize_swb(small_doc, small_chunks, "SUMMARY", doc_id="d", window_chars=window)
        bodies = server.requests
    n, n_batches = len(small_chunks), -(-len(small_chunks) // 5)
    kinds = [_kind(b) for b in bodies]
    assert (kinds.count("swb"), kinds.count("swb_retry"), kinds.count("cc")) == (n_batches, n_batches, n)
    assert all(r.fallback and r.context == "fallback context" for r in res)
    assert all("after retry" in r.error and "per-chunk fallback" in r.error for r in res)
    assert all(r.prompt_version == "cc_context.en.v1+swb_fallback" for r in res)
    assert tasks.stats["swb_invalid"] == n_batches and tasks.stats["swb_retry_invalid"] == n_batches
    assert tasks.stats["swb_fallback_chunks"] == n
    # The fallback sees the batch's local window, not the whole document.
    batches = swb_batches(small_chunks, 5)
    for body in (b for b in bodies if _kind(b) == "cc"):
        content = body["messages"][-1]["content"]
        document = content[len("<document>\n") : content.index("\n</document>")]
        batch = next(bt for bt in batches if any(c.text in content[content.index("<chunk>") :] for c in bt))
        assert document == small_doc[max(0, batch[0].start - window) : batch[-1].end + window]
        assert len(document) < len(small_doc)
    # Tokens of every call (first try, retry, fallback) are accounted to the chunks.
    assert sum(r.input_tokens for r in res) == sum(rec.input_tokens for rec in chat.ledger.records)


def test_llm_swb_partial_reply_falls_back_only_for_missing_chunks(small_doc, small_chunks):
    def responder(body):
        kind = _kind(body)
        if kind in ("swb", "swb_retry"):
            ids = _ids(body)
            return json.dumps({"contexts": [{"chunk_id": i, "context": f"ctx {i[:8]}"} for i in ids[:-1]]})
        return "fallback context"

    with FakeOpenAIServer(responder=responder) as server, _backend(server) as chat:
        tasks = LLMTasks(chat)
        res = tasks.contextualize_swb(small_doc, small_chunks, "SUMMARY", doc_id="d", window_chars=2_000)
    batches = swb_batches(small_chunks, 5)
    last_ids = {b[-1].chunk_id for b in batches}
    assert {r.chunk_id for r in res if r.fallback} == last_ids
    assert all(r.context == f"ctx {r.chunk_id[:8]}" for r in res if not r.fallback)
    assert tasks.stats["swb_fallback_chunks"] == len(batches)


def test_llm_second_run_with_a_cache_makes_no_calls(tmp_path, small_doc, small_chunks):
    def responder(body):
        kind = _kind(body)
        if kind == "swb":
            return _valid(body)
        return {"cc": "cc context", "segment": "segment summary", "overview": "overview", "answer": "Yes [x]."}.get(
            kind, "?"
        )

    def run(server):
        with _backend(server, cache=ResponseCache(tmp_path / "chat.sqlite")) as chat:
            tasks = LLMTasks(chat)
            s = tasks.summarize(small_doc, doc_id="d", max_tokens=200, segment_chars=5_000)
            cc = tasks.contextualize_cc(small_doc, small_chunks, doc_id="d")
            swb = tasks.contextualize_swb(small_doc, small_chunks, s.text, doc_id="d", window_chars=2_000)
            a = tasks.answer("Q?", [(small_chunks[0].chunk_id, small_chunks[0].text)], doc_id="d")
            return s, cc, swb, a, chat.ledger.totals()

    with FakeOpenAIServer(responder=responder) as server:
        first = run(server)
        n = server.request_count
        assert n > 0 and first[4]["calls"] == n
        second = run(server)
        assert server.request_count == n, "the second identical run is served from the cache"
    assert second[4]["calls"] == 0 and second[4]["cache_hits"] == n
    assert [r.context for r in second[1]] == [r.context for r in first[1]]
    assert all(r.cached for r in second[1] + second[2]) and not any(r.cached for r in first[1])
    assert [r.input_tokens for r in second[2]] == [r.input_tokens for r in first[2]]


def test_llm_summary_map_then_reduce(small_doc):
    def responder(body):
        kind = _kind(body)
        if kind == "segment":
            part = re.search(r"Below is part (\d+) of (\d+)", body["messages"][-1]["content"]).group(1)
            return f"summary of part {part}"
        return "the overview " * 50 if kind == "overview" else "?"

    with FakeOpenAIServer(responder=responder) as server, _backend(server) as chat:
        tasks = LLMTasks(chat)
        res = tasks.summarize(small_doc, doc_id="d", max_tokens=40, segment_chars=5_000)
        bodies = server.requests
    assert res.segments == ["summary of part 1", "summary of part 2", "summary of part 3"]
    overview_prompt = bodies[-1]["messages"][-1]["content"]
    assert (
        '<summary part="2">\nsummary of part 2\n</summary>' in overview_prompt
        and "at most 40 tokens" in overview_prompt
    )
    assert res.n_tokens <= 40 and res.text.startswith("the overview") and res.notes  # cut to budget, and said so
    assert len(res.records) == 4 and res.records[-1].prompt_version == "summarize_overview.en.v1"


def test_llm_summary_segment_too_long_for_the_model_is_cut_and_noted(small_doc):
    tiny = ModelLimits("tiny", context_length=2_000, max_completion_tokens=500)
    with FakeOpenAIServer(responder=lambda b: "short summary") as server, _backend(server, limits=tiny) as chat:
        tasks = LLMTasks(chat)
        res = tasks.summarize(small_doc, doc_id="d", max_tokens=300)
        sent = server.requests[0]["messages"][-1]["content"]
    assert res.text == "short summary" and res.notes and "cut to fit" in res.notes[0]
    assert " … " in sent and tasks.stats["summary_truncations"] == 1
    assert get_token_counter(MODEL).count(sent) < 2_000


def test_llm_cc_document_too_long_is_an_error_naming_the_fix(small_doc, small_chunks):
    tiny = ModelLimits("tiny", context_length=2_000, max_completion_tokens=500)
    with FakeOpenAIServer() as server, _backend(server, limits=tiny) as chat:
        with pytest.raises(ContextOverflowError, match="SWB-RAG") as info:
            LLMTasks(chat).contextualize_cc(small_doc, small_chunks, doc_id="d")
        assert server.request_count == 0
    assert "longer context" in str(info.value)


def test_llm_swb_windows_are_shrunk_to_fit_and_counted(small_doc, small_chunks):
    small = ModelLimits("small", context_length=3_000, max_completion_tokens=500)
    with FakeOpenAIServer(responder=_valid) as server, _backend(server, limits=small) as chat:
        tasks = LLMTasks(chat, max_tokens=500)
        res = tasks.contextualize_swb(small_doc, small_chunks, "SUMMARY", doc_id="d", window_chars=20_000)
        assert all(get_token_counter(MODEL).count_messages(b["messages"]) <= 2_500 for b in server.requests)
    assert tasks.stats["swb_windows_shrunk"] >= 1 and all(r.context for r in res)


def test_llm_answer_citations_and_not_found(small_chunks):
    ids = [c.chunk_id for c in small_chunks[:3]]
    passages = [(c.chunk_id, c.text) for c in small_chunks[:3]]

    def responder(body):
        return (
            NOT_IN_DOCUMENTS
            if "boil" in body["messages"][-1]["content"]
            else f"It is in Article 1 [{ids[1]}] and [{ids[2][:10]}]."
        )

    with FakeOpenAIServer(responder=responder) as server, _backend(server) as chat:
        tasks = LLMTasks(chat)
        assert isinstance(tasks, Answerer) and isinstance(tasks, Summarizer) and isinstance(tasks, TaskEngine)
        assert tasks.ledger is chat.ledger and tasks.embedder is None and tasks.limits is not None
        found = tasks.answer("What is the subject matter?", passages, doc_id="d")
        missing = tasks.answer("When does water boil?", passages, doc_id="d")
    assert found.cited_chunk_ids == [ids[1], ids[2]] and not found.not_found and found.records[0].tags.stage == "answer"
    assert missing.not_found and missing.text == NOT_IN_DOCUMENTS and missing.cited_chunk_ids == []
