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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHARS_PER_TOKEN_FLOOR",
    "ReplySchema",
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
    schema: Mapping[str, Any]

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "_-" for c in self.name):
            raise ValueError(f"a reply schema's name is letters, digits, _ and - only; got {self.name!r}")
        if not isinstance(self.schema, Mapping) or self.schema.get("type") != "object":
            raise ValueError(f"a reply schema must describe a JSON object; got {self.schema!r:.80}")

    def dumps(self) -> str:
        """The schema as canonical JSON (part of a response's cache key)."""
        return json.dumps({"name": self.name, "schema": self.schema}, sort_keys=True, ensure_ascii=False)

    def response_format(self) -> dict[str, Any]:
        """The ``response_format`` of an OpenAI-compatible request (strict structured output)."""
        return {"type": "json_schema", "json_schema": {"name": self.name, "schema": dict(self.schema), "strict": True}}


def _object(properties: Mapping[str, Any]) -> dict[str, Any]:
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
    context: dict[str, Any] = {"type": "string"}
    if max_context_chars is not None:
        context.update(minLength=1, maxLength=int(max_context_chars))
    if ordered:
        items: dict[str, Any] = {
            "prefixItems": [_object({"number": {"const": n}, "context": context}) for n in range(1, len(ids) + 1)],
            "items": False,
        }
    else:
        items = {"items": _object({"chunk_id": {"type": "string", "enum": ids}, "context": context})}
    contexts = {"type": "array", **items, "minItems": len(ids), "maxItems": len(ids)}
    return ReplySchema("swb_contexts", _object({"contexts": contexts}))


def window_answer_schema(max_tokens: int | None = None) -> ReplySchema:
    """The ``window_answer`` reply: ``{"answer", "confidence", "evidence"}`` (NO_ANSWER is an answer).

    ``max_tokens`` (local decoding only): cap the answer and the evidence so that the whole JSON
    fits a reply of that many tokens (and bound the confidence to [0, 1]).
    """
    text: dict[str, Any] = {"type": "string"}
    confidence: dict[str, Any] = {"type": "number"}
    if max_tokens is not None:
        room = max(8, max_tokens - 24)  # the keys, quotes and the number
        text = {"type": "string", "maxLength": max(12, CHARS_PER_TOKEN_FLOOR * room // 2)}
        confidence = {"type": "number", "minimum": 0, "maximum": 1}
    return ReplySchema("window_answer", _object({"answer": text, "confidence": confidence, "evidence": text}))


def tighten_for_decoding(schema: Mapping[str, Any], max_chars: int) -> dict[str, Any]:
    """``schema`` made fit for a decoder that must finish the JSON within a reply's tokens, for a
    schema someone else wrote (a judge's verdict from a pydantic model): every string it leaves
    unbounded gets ``maxLength: max_chars``, every integer without bounds six digits at most, and
    every object that does not say otherwise ``additionalProperties: false`` (nested objects,
    arrays and ``$defs`` included). Otherwise a small model fills the reply with free-text
    reasons, endless numbers and keys of its own, and never closes it.

    Example::

        >>> s = tighten_for_decoding({"type": "object", "properties": {"why": {"type": "string"}}}, 40)
        >>> s["properties"]["why"], s["additionalProperties"]
        ({'type': 'string', 'maxLength': 40}, False)
    """

    def walk(node: Any) -> Any:
        if isinstance(node, Mapping):
            out = {k: walk(v) for k, v in node.items()}
            if out.get("type") == "string" and "maxLength" not in out and "enum" not in out and "const" not in out:
                out["maxLength"] = max_chars
            if out.get("type") == "object" and "additionalProperties" not in out:
                out["additionalProperties"] = False
            if out.get("type") == "integer" and "enum" not in out and "const" not in out:
                out.setdefault("minimum", -999_999)  # digits end: a small model may write hundreds
                out.setdefault("maximum", 999_999)
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)
