"""The asker's answers from an assembled context: the windows labelled as passages, the answer
prompt's fit to the answer model, and the answer with its citations mapped back to the windows.
"""

from __future__ import annotations

import dataclasses

from ctxwin_dagster.ask.results import AskResult, Citation, cite_sentences, window_dict
from ctxwin_dagster.backends.tasks.results import TaskEngine
from ctxwin_dagster.core.budget.fit import FitReport, check_fit
from ctxwin_dagster.core.budget.limits import ModelLimits
from ctxwin_dagster.core.budget.tokens import TokenCounter
from ctxwin_dagster.core.methods.prompts import NOT_IN_DOCUMENTS, detect_language, format_passages, get_template
from ctxwin_dagster.core.retrieval.enhance import EnhancedContext
from ctxwin_dagster.core.retrieval.routing import routing_note
from ctxwin_dagster.core.retrieval.window import Window

__all__ = ["ContextAnswers"]


class ContextAnswers:
    """Answers from assembled contexts by ``tasks``, the answer engine, whose model's limits and
    token counter are ``limits`` and ``counter``."""

    def __init__(self, tasks: TaskEngine, *, limits: ModelLimits, counter: TokenCounter) -> None:
        self.tasks, self.limits, self.counter = tasks, limits, counter
        self.engine, self.model = tasks.engine, tasks.model

    def passages(self, ctx: EnhancedContext) -> tuple[list[tuple[str, str]], dict[str, tuple[Window, str]]]:
        """Passages labelled by the best hit in each window, and label -> (window, its chunk id).

        Labels are unique: several sentence windows can come from one chunk, and a citation must
        name the window it quotes. A window whose best chunk labels an earlier window takes its
        next chunk, else the chunk id with ``~2``, ``~3`` … after it.
        """
        rank = {cid: i for i, (cid, _) in enumerate(ctx.hits)}
        passages: list[tuple[str, str]] = []
        by_label: dict[str, tuple[Window, str]] = {}
        for w in ctx.windows:
            ordered = sorted(w.chunk_ids, key=lambda c: (rank.get(c, len(rank)), w.chunk_ids.index(c)))
            chunk = next((c for c in ordered if c not in by_label), ordered[0])
            label, k = chunk, 1
            while label in by_label:
                k += 1
                label = f"{chunk}~{k}"
            passages.append((label, w.text))
            by_label[label] = (w, chunk)
        return passages, by_label

    def fit(self, question: str, ctx: EnhancedContext) -> FitReport:
        """How the answer prompt over ``ctx`` fits the answer model."""
        passages, _ = self.passages(ctx)
        lang = detect_language(question + "\n" + " ".join(t for _, t in passages[:2]))
        msgs = get_template("answer", lang).render(question=question, passages=format_passages(passages))
        most = self.tasks.max_tokens if self.tasks.max_tokens is not None else self.limits.max_completion_tokens
        reserved = min(int(most), self.limits.max_completion_tokens)
        return check_fit(msgs, limits=self.limits, reserved_completion=reserved, counter=self.counter)

    def answer(self, question: str, ctx: EnhancedContext, *, variant: str, doc_id: str | None, mode: str) -> AskResult:
        """The answer to ``question`` from the windows of ``ctx``, its citations and notes."""
        passages, by_label = self.passages(ctx)
        notes: list[str] = []
        if ctx.routed_to:
            notes.append(routing_note(question, ctx.routed_to))
        if not ctx.exact and ctx.windows:
            notes.append(
                "window text rebuilt from the index rows (no document file); white space between chunks may differ"
            )
        if not ctx.windows:
            return AskResult(
                question,
                NOT_IN_DOCUMENTS,
                True,
                [],
                [],
                mode,
                "retrieve",
                variant,
                doc_id,
                self.engine,
                self.model,
                notes=notes + ["the search returned no chunks"],
                context=ctx,
            )
        dropped_before = self.tasks.stats["answer_passages_dropped"]
        # one passage per window, in order: each window's offset in its document
        res = self.tasks.answer(question, passages, doc_id=doc_id or "", starts=[w.start for w in ctx.windows])
        dropped = self.tasks.stats["answer_passages_dropped"] - dropped_before
        if dropped:
            notes.append(
                f"{dropped} of {len(passages)} windows did not fit {self.model} and were left out (the least relevant)"
            )
        citations: list[Citation] = []
        answer = res.text
        if not res.not_found:
            answer, cited = cite_sentences(res.text, {label: w for label, (w, _) in by_label.items()})
            citations = [dataclasses.replace(c, chunk_id=by_label[c.chunk_id][1]) for c in cited if c.chunk_id]
            if not citations:
                notes.append("the answer cites none of the passages")
        if res.unknown_citations:
            notes.append(f"the answer cites unknown ids: {list(res.unknown_citations)}")
        return AskResult(
            question=question,
            answer=answer,
            not_found=bool(res.not_found),
            citations=citations,
            windows=[window_dict(w) for w in ctx.windows],
            mode=mode,
            mode_used="retrieve",
            variant=variant,
            doc_id=doc_id,
            engine=res.engine or self.engine,
            model=res.model or self.model,
            records=list(res.records),
            notes=notes,
            context=ctx,
        )
