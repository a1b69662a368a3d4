"""A word-overlap stand-in for a RAGAS judge model: :func:`lexical_judge_responder`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.testing.replies import Responder, message_text

__all__ = ["lexical_judge_responder"]

_WORD = re.compile(r"\w+", re.UNICODE)
_PROMPT_INPUT = "Now perform the same with the following input\ninput: "


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(str(text or ""))]


def _sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?])\s+", str(text or "").strip())
    return [p.strip() for p in parts if _WORD.search(p or "")]


def _supported(statement: str, context: str) -> int:
    words = _words(statement)
    ctx = set(_words(context))
    return int(bool(words) and all(w in ctx for w in words))


def lexical_judge_responder(questions: Mapping[str, str] | None = None) -> Responder:
    """A deterministic stand-in for a judge model, for tests with ``FakeOpenAIServer``.

    It answers each RAGAS 0.4 metric prompt with the JSON that prompt's output schema asks for,
    judging by word overlap: a statement is "supported" by a context when all its words occur in
    it; statements are the sentences of a text. It is not an evaluation method — it lets tests
    drive ragas's real judge path (prompts, instructor JSON mode, parsing, scoring) offline.

    Args:
        questions: ``{response: question}`` for answer relevancy (the question "generated" for
            a response; default: the response itself as a question).
    """
    questions = dict(questions or {})

    def respond(body: JSONObject) -> str:
        prompt = message_text(body)
        at = prompt.find("as specified in JSON Schema:\n")
        start = prompt.rfind(_PROMPT_INPUT)
        if at < 0 or start < 0:
            raise ValueError("not a ragas metric prompt")
        schema, _ = json.JSONDecoder().raw_decode(prompt, at + len("as specified in JSON Schema:\n"))
        data, _ = json.JSONDecoder().raw_decode(prompt, start + len(_PROMPT_INPUT))
        title = schema.get("title")
        if title == "StatementGeneratorOutput":
            return json.dumps({"statements": _sentences(data.get("answer", ""))})
        if title == "NLIStatementOutput":
            ctx = data.get("context", "")
            return json.dumps(
                {
                    "statements": [
                        {"statement": s, "reason": "word overlap", "verdict": _supported(s, ctx)}
                        for s in data.get("statements", [])
                    ]
                }
            )
        if title == "ContextRecallOutput":
            ctx = data.get("context", "")
            return json.dumps(
                {
                    "classifications": [
                        {"statement": s, "reason": "word overlap", "attributed": _supported(s, ctx)}
                        for s in _sentences(data.get("answer", ""))
                    ]
                }
            )
        if title == "ContextPrecisionOutput":
            return json.dumps(
                {"reason": "word overlap", "verdict": _supported(data.get("answer", ""), data.get("context", ""))}
            )
        if title == "AnswerRelevanceOutput":
            response = data.get("response", "")
            noncommittal = int(bool(re.search(r"\b(not found|don't know|do not know|cannot answer)\b", response, re.I)))
            return json.dumps({"question": questions.get(response, response), "noncommittal": noncommittal})
        if title == "ClassificationWithReason":
            answer, truth = data.get("answer", []), data.get("ground_truth", [])
            tp = [s for s in answer if _supported(s, " ".join(truth))]
            fp = [s for s in answer if s not in tp]
            fn = [s for s in truth if not _supported(s, " ".join(answer))]
            item = lambda s: {"statement": s, "reason": "word overlap"}  # noqa: E731
            return json.dumps({"TP": [item(s) for s in tp], "FP": [item(s) for s in fp], "FN": [item(s) for s in fn]})
        raise ValueError(f"lexical_judge_responder does not know the output schema {title!r}")

    return respond
