"""The window readers of sliding-window QA (:mod:`ctxwin_dagster.core.methods.sliding_qa`).

* :class:`LLMWindowReader` — a chat model: each window is one ``window_answer`` request
  (JSON mode), a wave of windows goes to ``complete_many`` at once (bounded concurrency, the
  backend's response cache, retries and accounting), an unusable reply is retried once with a
  reminder, and several answers are merged with one ``window_synthesize`` call.
* :class:`ExtractiveWindowReader` — the offline default: each window is answered by *selecting
  its sentences that answer the question* with the extractive engine's rule
  (:mod:`~ctxwin_dagster.backends.tasks.answering`: the embedding model ``all-MiniLM-L6-v2``
  plus BM25, lists kept whole); the confidence is the best cosine similarity, and a window the
  rule finds no answer in says ``NO_ANSWER``. The merge picks the best-supported answer
  (:func:`~ctxwin_dagster.core.methods.sliding_qa.best_supported`). Deterministic, no network, cost 0,
  and labelled ``engine="extractive"`` everywhere. It still renders and counts the prompts the
  LLM reader would send, so input volumes are reported the same way offline.

Example (offline)::

    from ctxwin_dagster.core.methods.sliding_qa import sliding_window_qa
    from ctxwin_dagster.core.budget.tokens import get_token_counter
    enc = get_token_counter("gpt-4o").encoding
    reader = ExtractiveWindowReader(LocalEmbedder())
    result = sliding_window_qa("Which practices are prohibited?", text, reader=reader,
                               encode=enc.encode_ordinary, decode=enc.decode, doc_id="act")
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np

from ctxwin_dagster.backends.base import (
    CallRecord,
    CallTags,
    ChatBackend,
    Embedder,
    Ledger,
    chat_limits,
    decodes_any_schema,
)
from ctxwin_dagster.backends.chat.structured import ENFORCED
from ctxwin_dagster.backends.tasks.answering import AnswerRule, answer_from_passages
from ctxwin_dagster.backends.tasks.extractive import DEFAULT_ANSWER_THRESHOLD
from ctxwin_dagster.backends.tasks.llm import check_sampling
from ctxwin_dagster.backends.tasks.llm_calls import LLMCalls
from ctxwin_dagster.backends.tasks.memo import extractive_record
from ctxwin_dagster.backends.tasks.window_prompts import WindowPrompt, WindowReading
from ctxwin_dagster.core.budget.limits import ModelLimits
from ctxwin_dagster.core.budget.tokens import PromptMeter, TokenCounter, get_token_counter
from ctxwin_dagster.core.methods.prompts import (
    NO_ANSWER,
    WINDOW_RETRY_NOTE,
    PromptOutputError,
    PromptTemplate,
    WindowAnswer,
    detect_language,
    get_template,
    parse_window_answer,
    summary_block,
)
from ctxwin_dagster.core.methods.prompts.schemas import ReplySchema, window_answer_schema
from ctxwin_dagster.core.methods.sliding_qa import (
    Synthesis,
    WindowFinding,
    best_supported,
    locate_evidence,
    no_answer_finding,
    parse_synthesis,
)
from ctxwin_dagster.core.retrieval.window import Window
from ctxwin_dagster.core.text.sentences import split_sentences

__all__ = ["ExtractiveWindowReader", "LLMWindowReader"]

_STAGE = "sliding_qa"


class LLMWindowReader(WindowReading, LLMCalls):
    """Window answers and their merge from a chat model (see the module docstring).

    Args:
        chat: a :class:`~ctxwin_dagster.backends.base.ChatBackend` (its cache and ledger are used).
        temperature, top_p: sampling (0.0 by default: answers are reproducible and cacheable).
        max_tokens: reply budget of one window answer (JSON) and of the merge.
        limits: the model's limits; default ``chat.limits`` or the registry's.
        counter: token counter for fitting prompts; default the model's.
        language: prompt language; None detects it from the window text and the question.
        doc_id, variant: accounting tags of the calls.

    Attributes:
        stats: counts of ``windows``, ``invalid_replies``, ``retried``, ``retry_invalid``,
            ``syntheses``; ``schema_enforced`` (first window replies the backend held to their
            schema) and ``schema_ignored`` (of those, replies that still did not parse).
    """

    engine = "llm"

    def __init__(
        self,
        chat: ChatBackend,
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 512,
        limits: ModelLimits | None = None,
        counter: TokenCounter | None = None,
        language: str | None = None,
        doc_id: str = "",
        variant: str = "",
    ) -> None:
        check_sampling(temperature, top_p)
        if max_tokens < 16:
            raise ValueError(f"max_tokens must be >= 16 (a JSON answer needs room); got {max_tokens}")
        self.chat = chat
        self.model = chat.model
        self.limits = chat_limits(chat, limits)
        self.max_tokens = min(max_tokens, self.limits.max_completion_tokens)
        self.temperature = temperature
        self.top_p = top_p
        self.counter = counter or get_token_counter(chat.model)
        self.meter = PromptMeter(self.counter)
        self.language = language
        self.tags = CallTags(_STAGE, doc_id, variant)
        self.stats: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"LLMWindowReader(model={self.model!r}, max_tokens={self.max_tokens})"

    def _schema(self) -> ReplySchema:
        """The window answer's schema; with its strings capped to the reply's tokens for a backend
        that decodes any schema (the local model), so the JSON is never cut."""
        return window_answer_schema(self.max_tokens if decodes_any_schema(self.chat) else None)

    def window_token_limit(self, *, summary: str | None = None, question: str = "") -> int:
        """The most tokens a window may hold so that its prompt fits the model."""
        lang = self.language or detect_language(question)
        tpl = get_template("window_answer", lang)
        frame = tpl.render(
            summary_block=summary_block(summary, lang), window=9999, windows=9999, text="", question=question
        )
        return self.limits.available_prompt_tokens(self.max_tokens) - self.meter.count_messages(frame) - 16

    def _read(
        self, question: str, windows: Sequence[Window], numbers: Sequence[int], prompts: list[WindowPrompt]
    ) -> list[WindowFinding]:
        """One ``window_answer`` call per window, all of the wave at once."""
        self.stats["windows"] += len(prompts)
        first = self.chat.complete_many(
            [self._request(m, t.id, self.tags, schema=self._schema()) for t, _, m in prompts]
        )
        parsed: dict[int, WindowAnswer] = {}
        errors: dict[int, str] = {}
        records: dict[int, list[CallRecord]] = {i: [r.record] for i, r in enumerate(first)}
        for i, res in enumerate(first):
            self.stats["schema_enforced"] += res.record.reply_format in ENFORCED
            try:
                parsed[i] = parse_window_answer(res.text)
            except PromptOutputError as exc:
                errors[i] = str(exc)
                self.stats["schema_ignored"] += res.record.reply_format in ENFORCED
        if errors:
            self.stats["invalid_replies"] += len(errors)
            retry = sorted(errors)
            reqs = []
            for i in retry:
                tpl, lang, msgs = prompts[i]
                msgs = [dict(m) for m in msgs]
                msgs[-1]["content"] += WINDOW_RETRY_NOTE.get(lang, WINDOW_RETRY_NOTE["en"])
                reqs.append(self._request(msgs, f"{tpl.id}+retry1", self.tags, schema=self._schema()))
            self.stats["retried"] += len(reqs)
            for i, res in zip(retry, self.chat.complete_many(reqs), strict=True):
                records[i].append(res.record)
                try:
                    parsed[i] = parse_window_answer(res.text)
                    del errors[i]
                except PromptOutputError as exc:
                    self.stats["retry_invalid"] += 1
                    errors[i] = f"{errors[i]}; after retry: {exc}"
        out: list[WindowFinding] = []
        for i, (w, n) in enumerate(zip(windows, numbers, strict=True)):
            recs = tuple(records[i])
            if i in errors:
                out.append(no_answer_finding(w, n, error=errors[i], records=recs))
                continue
            a = parsed[i]
            if not a.found:
                out.append(no_answer_finding(w, n, records=recs))
                continue
            out.append(
                WindowFinding(
                    n,
                    w.doc_id,
                    w.start,
                    w.end,
                    True,
                    a.answer,
                    a.confidence,
                    a.evidence,
                    locate_evidence(a.evidence, w) if a.evidence else None,
                    None,
                    recs,
                )
            )
        return out

    def _synthesize(
        self, findings: Sequence[WindowFinding], tpl: PromptTemplate, msgs: list[dict[str, str]]
    ) -> Synthesis:
        """One ``window_synthesize`` call over the answers; citations ``[W<n>]`` name the windows."""
        self.stats["syntheses"] += 1
        res = self.chat.complete(self._request(msgs, tpl.id, self.tags))
        parsed = parse_synthesis(res.text, [f.window for f in findings])
        return Synthesis(parsed.text, parsed.windows, (res.record,), parsed.not_found)


class ExtractiveWindowReader(WindowReading):
    """Window answers by sentence selection with an embedding model (see the module docstring).

    Args:
        embedder: an :class:`~ctxwin_dagster.backends.base.Embedder` (e.g. ``LocalEmbedder``).
        threshold: the cosine similarity below which a window says ``NO_ANSWER`` (default
            :data:`~ctxwin_dagster.backends.tasks.extractive.DEFAULT_ANSWER_THRESHOLD`, calibrated on SQuAD):
            the floor of the answer rule.
        answer_sentences: at most this many sentences answer in a window.
        rule: the rest of the :class:`~.answering.AnswerRule` (ranking, the not-found model,
            lists); its ``floor`` and ``sentences`` are ``threshold`` and ``answer_sentences``.
        counter: counts the prompts the LLM reader would send (default ``cl100k_base``).
        ledger: where records go; a new :class:`Ledger` when None.
        model_label: the ``model`` of findings and records.
        doc_id, variant: accounting tags of the records.
    """

    engine = "extractive"

    def __init__(
        self,
        embedder: Embedder,
        *,
        threshold: float = DEFAULT_ANSWER_THRESHOLD,
        answer_sentences: int = 3,
        rule: AnswerRule | None = None,
        counter: TokenCounter | None = None,
        ledger: Ledger | None = None,
        model_label: str = "extractive/all-MiniLM-L6-v2",
        doc_id: str = "",
        variant: str = "",
        max_cached_vectors: int = 200_000,
    ) -> None:
        if not -1 <= threshold <= 1:
            raise ValueError(f"threshold is a cosine similarity in [-1, 1]; got {threshold}")
        if answer_sentences < 1:
            raise ValueError(f"answer_sentences must be >= 1; got {answer_sentences}")
        self.embedder = embedder
        self.threshold = threshold
        self.answer_sentences = answer_sentences
        self.rule = dataclasses.replace(rule or AnswerRule(), floor=threshold, sentences=answer_sentences)
        self.counter = counter or get_token_counter(None)
        self.meter = PromptMeter(self.counter)
        self.ledger = ledger if ledger is not None else Ledger()
        self.model = model_label
        self.tags = CallTags(_STAGE, doc_id, variant)
        self.max_cached_vectors = max_cached_vectors
        self._vectors: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ExtractiveWindowReader(embedder={self.embedder!r}, threshold={self.threshold})"

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts``, each text encoded once per reader (overlapping windows share sentences)."""
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            vecs = np.asarray(self.embedder.embed(missing), dtype=np.float32)
            with self._lock:
                if len(self._vectors) + len(missing) > self.max_cached_vectors:
                    self._vectors.clear()
                self._vectors.update(zip(missing, vecs, strict=True))
        with self._lock:
            return (
                np.stack([self._vectors[t] for t in texts]) if texts else np.zeros((0, self.embedder.dim), np.float32)
            )

    def _record(self, messages: list[dict[str, str]], version: str, output: str, latency: float) -> CallRecord:
        rec = extractive_record(self.meter, self.model, self.tags, version, messages, output, latency)
        self.ledger.add(rec)
        return rec

    def _read(
        self, question: str, windows: Sequence[Window], numbers: Sequence[int], prompts: list[WindowPrompt]
    ) -> list[WindowFinding]:
        """Per window: the extractive answer (:mod:`.answering`'s rule) or ``NO_ANSWER``."""
        t0 = time.perf_counter()
        texts: list[str] = [question]
        for w in windows:
            texts.extend(w.text[s:e] for s, e in split_sentences(w.text) if e - s >= 10)
        self._embed(texts)  # one batch for every window; each window's answer reads the cache
        embed_s = (time.perf_counter() - t0) / max(1, len(windows))
        out: list[WindowFinding] = []
        for w, n, (tpl, lang, msgs) in zip(windows, numbers, prompts, strict=True):
            ts = time.perf_counter()
            found = answer_from_passages(
                question, [(f"W{n}", w.text)], self._embed, rule=self.rule, english=lang == "en", starts=[w.start]
            )
            if found.not_found or found.top is None:
                best = found.best or 0.0
                output = f'{{"answer": "{NO_ANSWER}", "confidence": {max(0.0, best):.4f}, "evidence": ""}}'
                rec = self._record(msgs, tpl.id, output, embed_s + time.perf_counter() - ts)
                out.append(no_answer_finding(w, n, records=(rec,)))
                continue
            s, e = w.start + found.top.start, w.start + found.top.end
            confidence = min(1.0, max(0.0, found.best or 0.0))
            output = _json_answer(found.plain, confidence, found.top.text)
            rec = self._record(msgs, tpl.id, output, embed_s + time.perf_counter() - ts)
            out.append(
                WindowFinding(
                    n, w.doc_id, w.start, w.end, True, found.plain, confidence, found.top.text, (s, e), None, (rec,)
                )
            )
        return out

    def _synthesize(
        self, findings: Sequence[WindowFinding], tpl: PromptTemplate, msgs: list[dict[str, str]]
    ) -> Synthesis:
        """The best-supported answer (highest similarity, then agreement); records the merge
        prompt the LLM reader would send."""
        ts = time.perf_counter()
        best, support = best_supported(findings)
        windows = tuple(f.window for f in support)
        text = f"{best.answer} " + "[" + ", ".join(f"W{n}" for n in windows) + "]"
        rec = self._record(msgs, tpl.id, text, time.perf_counter() - ts)
        return Synthesis(best.answer, windows, (rec,))


def _json_answer(answer: str, confidence: float, evidence: str) -> str:
    import json

    return json.dumps({"answer": answer, "confidence": round(confidence, 4), "evidence": evidence}, ensure_ascii=False)
