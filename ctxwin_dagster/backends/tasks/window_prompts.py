"""What both window readers of sliding-window QA (:mod:`.window_readers`) do alike: each
window's ``window_answer`` prompt and the ``window_synthesize`` prompt of the merge. The LLM
reader sends them; the extractive reader meters them, so input volumes are reported the same way
offline. Each reader reads the windows (:meth:`WindowReading._read`) and merges the answers
(:meth:`WindowReading._synthesize`) its own way.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxwin_dagster.core.methods.prompts import (
    SYNTHESIZE_TEMPLATES,
    PromptTemplate,
    detect_language,
    get_template,
    summary_block,
)
from ctxwin_dagster.core.methods.sliding_qa import Synthesis, WindowFinding, format_findings
from ctxwin_dagster.core.retrieval.window import Window

__all__ = ["WindowPrompt", "WindowReading"]

#: A window's prompt: its template, its language and its messages.
WindowPrompt = tuple[PromptTemplate, str, list[dict[str, str]]]


class WindowReading:
    """What both readers do alike: each window's ``window_answer`` prompt and the
    ``window_synthesize`` prompt of the merge (the LLM reader sends them; the extractive reader
    meters them), in ``language`` or, when it is None, the language of the question and text."""

    language: str | None = None

    def read(
        self,
        question: str,
        windows: Sequence[Window],
        *,
        numbers: Sequence[int],
        total: int,
        summary: str | None = None,
    ) -> list[WindowFinding]:
        """One finding per window of the wave (numbered by ``numbers``; ``total`` is the number
        of windows of the run), in order."""
        prompts = [self._window_prompt(question, w, n, total, summary) for w, n in zip(windows, numbers, strict=True)]
        return self._read(question, windows, numbers, prompts)

    def synthesize(self, question: str, findings: Sequence[WindowFinding], *, summary: str | None = None) -> Synthesis:
        """The answer merged from ``findings`` (those that found one, best first)."""
        lang = self.language or detect_language(question + "\n" + " ".join(f.answer for f in findings))
        tpl = SYNTHESIZE_TEMPLATES.get(lang, SYNTHESIZE_TEMPLATES["en"])
        msgs = tpl.render(
            summary_block=summary_block(summary, lang), question=question, answers=format_findings(findings)
        )
        return self._synthesize(findings, tpl, msgs)

    def _window_prompt(self, question: str, w: Window, n: int, total: int, summary: str | None) -> WindowPrompt:
        lang = self.language or detect_language(question + "\n" + w.text[:20_000])
        tpl = get_template("window_answer", lang)
        msgs = tpl.render(
            summary_block=summary_block(summary, lang), window=n, windows=total, text=w.text, question=question
        )
        return tpl, lang, msgs

    def _read(
        self, question: str, windows: Sequence[Window], numbers: Sequence[int], prompts: list[WindowPrompt]
    ) -> list[WindowFinding]:  # pragma: no cover - each reader's own
        raise NotImplementedError

    def _synthesize(
        self, findings: Sequence[WindowFinding], tpl: PromptTemplate, msgs: list[dict[str, str]]
    ) -> Synthesis:  # pragma: no cover - each reader's own
        raise NotImplementedError
