"""JSON schemas of the replies that must parse: what a model is held to when it can be.

A chat request that carries one of these (:class:`~ctxwin_dagster.backends.base.ChatRequest`'s
``schema``) is sent with ``response_format={"type": "json_schema", ...}`` to an OpenAI-compatible
server that supports it, and is decoded under the schema by the local model (constrained
decoding). The parsers of :mod:`.parsing` still read every reply, so a server that ignores the
schema is caught there, repaired or retried, and counted.

The schemas keep to what OpenAI's strict mode accepts (objects with every property required and
``additionalProperties: false``, strings, numbers, arrays, ``enum``), so one schema serves every
backend. :func:`swb_contexts_schema` with ``ordered=True`` is tighter (each chunk's id fixed at
its place, a length cap per context): for a local decoder, which supports all of JSON Schema.

Example::

    >>> s = swb_contexts_schema(["a1", "b2"])
    >>> s.name, s.schema["properties"]["contexts"]["minItems"]
    ('swb_contexts', 2)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ctxwin_dagster.core.json_types import JSONObject, JSONValue

__all__ = [
    "CHARS_PER_TOKEN_FLOOR",
    "QUESTION_PATTERN",
    "ReplySchema",
    "qa_schema",
    "substring_pattern",
    "swb_contexts_schema",
    "tighten_for_decoding",
    "window_answer_schema",
]

#: Characters per token assumed when a reply's strings are capped to fit its tokens: prose takes
#: about four, a small model that repeats itself one or two (the JSON must never be cut).
CHARS_PER_TOKEN_FLOOR = 2


@dataclass(frozen=True, slots=True)
class ReplySchema:
    """A named JSON schema for a reply (``name`` is what ``response_format`` calls it)."""

    name: str
    schema: Mapping[str, object]

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "_-" for c in self.name):
            raise ValueError(f"a reply schema's name is letters, digits, _ and - only; got {self.name!r}")
        if not isinstance(self.schema, Mapping) or self.schema.get("type") != "object":
            raise ValueError(f"a reply schema must describe a JSON object; got {self.schema!r:.80}")

    def dumps(self) -> str:
        """The schema as canonical JSON (part of a response's cache key)."""
        return json.dumps({"name": self.name, "schema": self.schema}, sort_keys=True, ensure_ascii=False)

    def response_format(self) -> dict[str, object]:
        """The ``response_format`` of an OpenAI-compatible request (strict structured output)."""
        return {"type": "json_schema", "json_schema": {"name": self.name, "schema": dict(self.schema), "strict": True}}


def _object(properties: Mapping[str, JSONValue]) -> JSONObject:
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(properties),
        "additionalProperties": False,
    }


def swb_contexts_schema(
    chunk_ids: Sequence[str], *, ordered: bool = False, max_context_chars: int | None = None
) -> ReplySchema:
    """The ``swb_batch`` reply: ``{"contexts": [{"chunk_id", "context"}, ...]}``, one per chunk.

    Args:
        chunk_ids: the batch's chunk ids, in order.
        ordered: one entry per chunk at its place (``prefixItems``), named by the chunk's
            ``number`` in the batch (fixed: ``1``…``n``) instead of its 32-character id, which
            costs a small model's tokenizer about 25 tokens to write; so every chunk gets exactly
            one context. A local decoder supports it, OpenAI's strict mode does not (there the
            ids are an ``enum`` and the parser checks that none repeats).
        max_context_chars: a cap on each context's length (``maxLength``; local decoding only),
            so that all the contexts fit the reply's tokens and the JSON is never cut.
    """
    ids = list(chunk_ids)
    if not ids:
        raise ValueError("an SWB batch has at least one chunk")
    context: JSONObject = {"type": "string"}
    if max_context_chars is not None:
        context.update(minLength=1, maxLength=int(max_context_chars))
    if ordered:
        items: JSONObject = {
            "prefixItems": [_object({"number": {"const": n}, "context": context}) for n in range(1, len(ids) + 1)],
            "items": False,
        }
    else:
        items = {"items": _object({"chunk_id": {"type": "string", "enum": list(ids)}, "context": context})}
    contexts = {"type": "array", **items, "minItems": len(ids), "maxItems": len(ids)}
    return ReplySchema("swb_contexts", _object({"contexts": contexts}))


def window_answer_schema(max_tokens: int | None = None) -> ReplySchema:
    """The ``window_answer`` reply: ``{"answer", "confidence", "evidence"}`` (NO_ANSWER is an answer).

    ``max_tokens`` (local decoding only): cap the answer and the evidence so that the whole JSON
    fits a reply of that many tokens (and bound the confidence to [0, 1]).
    """
    text: JSONObject = {"type": "string"}
    confidence: JSONObject = {"type": "number"}
    if max_tokens is not None:
        room = max(8, max_tokens - 24)  # the keys, quotes and the number
        text = {"type": "string", "maxLength": max(12, CHARS_PER_TOKEN_FLOOR * room // 2)}
        confidence = {"type": "number", "minimum": 0, "maximum": 1}
    return ReplySchema("window_answer", _object({"answer": text, "confidence": confidence, "evidence": text}))


#: A question for a local decoder: one line ending at its only question mark, 8 to 150 characters.
QUESTION_PATTERN = r'^[^"\\\n?]{8,150}\?$'


_REGEX_SPECIAL = frozenset(".^$*+?()[]{}|\\")


def _regex_literal(text: str) -> str:
    r"""``text`` as a regular expression matching it: each special character as a one-character
    class (``[\x2E]`` for ``.``), everything else as it is. Not :func:`re.escape`, whose ``\ ``
    and ``\.`` llama.cpp's schema-to-grammar converter copies into the grammar as escapes it
    does not know.

    >>> _regex_literal("U.S. $5 (approx.)")
    'U[\\x2E]S[\\x2E] [\\x24]5 [\\x28]approx[\\x2E][\\x29]'
    """
    return "".join(f"[\\x{ord(c):02X}]" if c in _REGEX_SPECIAL else c for c in text)


def substring_pattern(text: str, *, max_words: int = 8) -> str:
    """A regular expression (anchored) matching exactly the runs of 1 to ``max_words`` whole
    words of ``text``, as they are written there (with the punctuation between them): an answer
    decoded under it is a verbatim part of ``text``. Its size grows with ``len(text) * max_words``.

    Example::

        >>> import re
        >>> p = re.compile(substring_pattern("Rollo, the Norse leader, came."))
        >>> [bool(p.match(a)) for a in ("Rollo", "the Norse leader", "Norse lead", "Rollo the")]
        [True, True, False, False]
    """
    words = [(m.start(), m.end()) for m in re.finditer(r"[^\W_](?:\S*[^\W_])?", text)]
    alternatives = []
    for i, (a, b) in enumerate(words):
        tail = ""
        for j in range(min(len(words), i + max_words) - 1, i, -1):
            tail = f"({_regex_literal(text[words[j - 1][1] : words[j][1]])}{tail})?"
        alternatives.append(_regex_literal(text[a:b]) + tail)
    if not alternatives:
        raise ValueError(f"no word to answer from in {text[:60]!r}")
    # plain groups, not (?:…): llama.cpp's schema-to-grammar converter takes no other
    return "^(" + "|".join(alternatives) + ")$"


def qa_schema(
    name: str,
    quotes: Mapping[str, Sequence[str]],
    texts: Sequence[str],
    *,
    max_chars: int | None = None,
    answer_within: str | None = None,
    no_answer: str = "",
) -> ReplySchema:
    """The reply of a question-generation prompt: each field of ``quotes`` is one of its
    sentences (an ``enum``: the model copies a sentence, it cannot invent one), then the free
    ``texts`` fields in order (``answer``, ``question``…).

    For a local decoder (which supports all of JSON Schema), ``max_chars`` caps each free text
    so that the whole JSON fits the reply, ``question`` must be one question
    (:data:`QUESTION_PATTERN`), and ``answer_within`` (a quote field) makes the ``answer`` a
    verbatim run of words of the sentence quoted there (one ``anyOf`` branch per sentence,
    :func:`substring_pattern`); the empty quote, when it is an option, goes with the answer
    ``no_answer``. A server gets the subset OpenAI's strict mode accepts.

    Example::

        >>> s = qa_schema("qa_single", {"quote": ["A b.", "C d."]}, ["answer", "question"])
        >>> s.schema["required"], s.schema["properties"]["quote"]["enum"]
        (['quote', 'answer', 'question'], ['A b.', 'C d.'])
        >>> local = qa_schema("qa_single", {"quote": ["A b.", "C d."]}, ["answer", "question"], max_chars=80, answer_within="quote")
        >>> [b["properties"]["quote"]["const"] for b in local.schema["anyOf"]]
        ['A b.', 'C d.']
    """
    text: JSONObject = {"type": "string"}
    if max_chars is not None:
        text = {"type": "string", "minLength": 1, "maxLength": int(max_chars)}
    properties: JSONObject = {}
    sentences: dict[str, list[str]] = {}
    for key, options in quotes.items():
        sentences[key] = choices = list(dict.fromkeys(options))
        if not choices:
            raise ValueError(f"the quote field {key!r} needs at least one sentence to choose from")
        properties[key] = {"type": "string", "enum": list(choices)}
    for key in texts:
        properties[key] = dict(text)
        if key == "question" and max_chars is not None:
            properties[key] = {"type": "string", "pattern": QUESTION_PATTERN}
    if answer_within is None or max_chars is None:
        return ReplySchema(name, _object(properties))
    if answer_within not in quotes or "answer" not in texts:
        raise ValueError(f"answer_within={answer_within!r} needs that quote field and an 'answer' field")
    branches = [
        _object(
            {
                **properties,
                answer_within: {"const": sentence},
                "answer": {"type": "string", "pattern": substring_pattern(sentence)}
                if sentence
                else {"const": no_answer},
            }
        )
        for sentence in sentences[answer_within]
    ]
    return ReplySchema(name, {"type": "object", "anyOf": branches})


def tighten_for_decoding(
    schema: Mapping[str, object], max_chars: int, *, max_items: int | None = None
) -> dict[str, object]:
    """``schema`` made fit for a decoder that must finish the JSON within a reply's tokens, for a
    schema someone else wrote (a judge's verdict from a pydantic model): every string it leaves
    unbounded gets ``maxLength: max_chars``, every integer without bounds six digits at most, and
    every object that does not say otherwise ``additionalProperties: false`` (nested objects,
    arrays and ``$defs`` included), and with ``max_items`` every array without a bound at most
    that many items. Otherwise a small model fills the reply with free-text
    reasons, endless numbers and keys of its own, and never closes it.

    Example::

        >>> s = tighten_for_decoding({"type": "object", "properties": {"why": {"type": "string"}}}, 40)
        >>> s["properties"]["why"], s["additionalProperties"]
        ({'type': 'string', 'maxLength': 40}, False)
        >>> tighten_for_decoding({"type": "array", "items": {"type": "string"}}, 40, max_items=5)["maxItems"]
        5
    """

    def walk(node: object) -> object:
        if isinstance(node, Mapping):
            return tighten(node)
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    def tighten(node: Mapping[str, object]) -> dict[str, object]:
        out = {k: walk(v) for k, v in node.items()}
        if out.get("type") == "string" and "maxLength" not in out and "enum" not in out and "const" not in out:
            out["maxLength"] = max_chars
        if out.get("type") == "array" and max_items is not None and "maxItems" not in out:
            least = out.get("minItems", 0)
            if not isinstance(least, (int, float, str)):
                raise TypeError(f"minItems must be a number; got {least!r}")
            out["maxItems"] = max(int(least), max_items)  # a small model repeats items without end
        if out.get("type") == "object" and "additionalProperties" not in out:
            out["additionalProperties"] = False
        if out.get("type") == "integer" and "enum" not in out and "const" not in out:
            out.setdefault("minimum", -999_999)  # digits end: a small model may write hundreds
            out.setdefault("maximum", 999_999)
        return out

    return tighten(schema)
