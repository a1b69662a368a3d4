"""A stand-in for a model that writes questions: :func:`question_writer_responder`, for the
loopback :class:`~ctxwin_dagster.testing.server.FakeOpenAIServer`.

It reads the question-generation prompts (``qa_*`` of
:data:`~ctxwin_dagster.core.methods.prompts.tables.QA_TEMPLATES`) and answers like a careful
model: a single-fact draft quotes the passage's first sentence with a number or a capitalised
name in its middle, answers with it and asks with the rest of the sentence; a two-passage draft
quotes a sentence of each passage that share a word; an unanswerable draft asks for something no
sentence holds. Asked back, it answers its own questions from memory (round trip) and finds
no answer to its unanswerable ones; without the document it knows nothing.

``faults`` makes some replies wrong, as a model that ignores the schema would: ``"misquote"``
(the quote is not in the passage), ``"loose_answer"`` (the answer is not in its quote),
``"prose"`` (no JSON at all), ``"answers_unanswerable"`` (its check answers the unanswerable
questions), each for every ``faults[name]``-th draft of its kind.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping

from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.methods.prompts.tables import NOT_IN_DOCUMENTS
from ctxwin_dagster.core.text.sentences import split_sentences
from ctxwin_dagster.testing.replies import Responder, message_text

__all__ = ["question_writer_responder"]

_NAME = re.compile(r"(?<=\w )(?:1[0-9]{3}|[A-Z][a-z]{3,})\b")


def _between(text: str, tag: str) -> str:
    m = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, flags=re.S)
    return m.group(1) if m else ""


def _sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in split_sentences(text) if len(text[s:e].split()) >= 6]


def question_writer_responder(faults: Mapping[str, int] | None = None) -> Responder:
    """A responder (``body -> reply``) for the question-generation prompts (see the module docstring)."""
    faults = dict(faults or {})
    memory: dict[str, str] = {}
    seen: Counter[str] = Counter()

    def fault(name: str, kind: str) -> bool:
        every = faults.get(name) or 0
        return bool(every) and seen[kind] % every == 0

    def single(prompt: str) -> dict[str, str] | None:
        for sentence in _sentences(_between(prompt, "passage")):
            m = _NAME.search(sentence)
            if m and len(sentence) < 400:
                answer = m.group(0)
                rest = sentence[: m.start()] + "___" + sentence[m.end() :]
                question = "Which word fills the gap in: " + " ".join(rest.replace("?", "").split())[:120] + "?"
                return {"quote": sentence, "answer": answer, "question": question}
        return None

    def pair(prompt: str) -> dict[str, str] | None:
        one, two = _sentences(_between(prompt, "passage_1")), _sentences(_between(prompt, "passage_2"))
        for a in one:
            words_a = {w.lower() for w in re.findall(r"[A-Za-z]{5,}", a)}
            for b in two:
                shared = sorted(words_a & {w.lower() for w in re.findall(r"[A-Za-z]{5,}", b)})
                if shared:
                    question = f"Which word do the passages about {a.split()[1]} and {b.split()[1]} share?"
                    return {"quote_1": a, "quote_2": b, "answer": shared[0], "question": question}
        return None

    def respond(body: JSONObject) -> str:
        prompt = message_text(body)
        if "Write one question for a reading test" in prompt:
            kind, reply = "single", single(prompt)
        elif "two passages from far apart" in prompt:
            kind, reply = "two_passages", pair(prompt)
        elif "that the passage does not answer" in prompt:
            kind = "unanswerable"
            names = re.findall(r"\b[A-Z][a-z]{4,}\b", _between(prompt, "passage"))
            subject = names[seen[kind] % len(names)] if names else "the treaty"
            reply = {
                "missing": "the colour of a banner",
                "question": f"What colour was the banner of {subject} in {1500 + seen[kind]}?",
            }
        elif "Do the excerpts answer the question?" in prompt:
            question = prompt.rsplit("Question: ", 1)[-1].split("\n", 1)[0]
            answer = memory.get(question)
            if not answer:  # its own unanswerable question, or one it never wrote
                seen["answers_unanswerable"] += 1
                if fault("answers_unanswerable", "answers_unanswerable"):
                    first = _sentences(_between(prompt, "excerpt"))[:1] or [""]
                    return json.dumps({"quote": first[0], "answer": first[0][:40]})
                return json.dumps({"quote": "", "answer": NOT_IN_DOCUMENTS})
            return json.dumps({"quote": "", "answer": answer})
        elif "from what you know" in message_text(body, 0):
            return json.dumps({"answer": "I do not know"})
        else:
            return "I cannot help with that."
        seen[kind] += 1
        if reply is None:
            return json.dumps({"question": "", "answer": "", "quote": ""})
        if fault("prose", kind):
            return "Here is a question: " + reply["question"]
        if fault("misquote", kind) and "quote" in reply:
            reply["quote"] = "A sentence the passage does not hold at all, made up."
        if fault("loose_answer", kind) and "quote" in reply:
            reply["answer"] = "something else entirely"
        memory[reply["question"]] = reply.get("answer", "")
        return json.dumps(reply)

    return respond
