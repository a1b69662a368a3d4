"""What the fake OpenAI-compatible server (:mod:`.server`) answers, as plain functions of a request.

* :func:`default_responder`: a short deterministic reply to a chat request (JSON when the request
  asks for it), and :func:`schema_instance`, a value of a JSON schema made from a text;
* :func:`fake_embedding`: a deterministic unit vector for a text;
* :func:`chat_reply`, :func:`embeddings_reply` and :func:`model_list`: the JSON bodies the server
  sends back (a chat reply cut at the request's token limit);
* :func:`message_text`: the text of a message of a chat request, for responders.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias

import numpy as np

from ctxwin_dagster.core.budget.tokens import TokenCounter, get_token_counter
from ctxwin_dagster.core.json_types import JSONObject, JSONValue
from ctxwin_dagster.testing.faults import ErrorReply, bad_request

__all__ = [
    "Responder",
    "chat_reply",
    "default_responder",
    "embedding_list",
    "embeddings_reply",
    "fake_embedding",
    "json_list",
    "json_object",
    "message_text",
    "model_list",
    "schema_instance",
]

#: ``fn(request_body) -> assistant content``: what the server answers to a chat request.
Responder: TypeAlias = Callable[[JSONObject], str]


def json_object(value: object) -> JSONObject:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def json_list(value: object) -> list[JSONValue]:
    """``value`` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def message_text(body: Mapping[str, object], index: int = -1) -> str:
    """The text of message ``index`` of a chat request (the last by default; the text parts of a
    list content joined by spaces; "" when there is none).

    Example::

        >>> message_text({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
        'hi'
    """
    messages = json_list(body.get("messages")) or [{}]
    content = json_object(messages[index]).get("content", "")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def default_responder(body: JSONObject) -> str:
    """A short deterministic reply derived from the last message of a chat request.

    With ``response_format={"type": "json_object"}`` the reply is a JSON object.

    Example::

        >>> default_responder({"messages": [{"role": "user", "content": "What is Article 5?"}]})
        'Reply baa2d0730af2: What is Article 5?'
    """
    content = message_text(body)
    digest = hashlib.sha256(content.encode("utf-8")).hexdigest()[:12]
    head = " ".join(content.split()[:12])
    fmt = json_object(body.get("response_format"))
    if fmt.get("type") == "json_schema":
        schema = json_object(json_object(fmt.get("json_schema")).get("schema"))
        return json.dumps(schema_instance(schema, f"{digest} {head}"))
    if fmt.get("type") == "json_object" and isinstance(fmt.get("schema"), dict):  # llama.cpp's grammar
        return json.dumps(schema_instance(json_object(fmt["schema"]), f"{digest} {head}"))
    if fmt.get("type") == "json_object":
        return json.dumps({"reply": digest, "echo": head}, ensure_ascii=False)
    return f"Reply {digest}: {head}"


def schema_instance(schema: JSONObject, text: str, name: str = "") -> JSONValue:
    """A value of ``schema`` (the subset the project's reply schemas use), its strings made from
    ``text``: what a server with structured output would return. An array of ``enum`` items gets
    the values in order, each once, so an SWB batch reply names every chunk.

    Example::

        >>> schema_instance({"type": "object", "properties": {"a": {"type": "number"}}}, "x")
        {'a': 0.5}
    """
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return json_list(schema["enum"])[0]
    kind = schema.get("type")
    if kind == "object":
        return {k: schema_instance(json_object(v), text, k) for k, v in json_object(schema.get("properties")).items()}
    if kind == "array":
        return _array_instance(schema, text)
    if kind in ("number", "integer"):
        return 0.5 if kind == "number" else 1
    if kind == "boolean":
        return True
    value = f"{name} {text}".strip() if name else text
    limit = schema.get("maxLength")
    return value[: int(limit)] if isinstance(limit, (int, float)) else value


def _array_instance(schema: JSONObject, text: str) -> list[JSONValue]:
    """The array of :func:`schema_instance`: its ``prefixItems``, else ``minItems`` items (at
    least one), whose ``enum`` properties take their values in turn."""
    prefix = json_list(schema.get("prefixItems"))
    if prefix:
        return [schema_instance(json_object(item), f"{text} {i}") for i, item in enumerate(prefix, start=1)]
    least = schema.get("minItems")
    n = int(least) if isinstance(least, (int, float)) and least else 1
    items = json_object(schema.get("items"))
    out: list[JSONValue] = []
    for i in range(n):
        value = schema_instance(items, f"{text} {i + 1}")
        if isinstance(value, dict):  # enum properties take their i-th value
            for k, sub in json_object(items.get("properties")).items():
                if "enum" in json_object(sub):
                    choices = json_list(json_object(sub)["enum"])
                    value[k] = choices[i % len(choices)]
        out.append(value)
    return out


def fake_embedding(text: str, dim: int) -> np.ndarray:
    """A deterministic L2-normalized float32 vector for ``text`` (seeded by its SHA-256).

    Example::

        >>> v = fake_embedding("hello", 8)
        >>> v.shape, round(float((v ** 2).sum()), 5)
        ((8,), 1.0)
    """
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    vec = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vec / np.float32(np.linalg.norm(vec) or 1.0)


def chat_reply(body: JSONObject, responder: Responder, *, truncated: bool, cached_tokens: int | None) -> JSONObject:
    """The chat completion of ``responder``'s reply to ``body``, cut at the request's
    ``max_completion_tokens`` (or ``max_tokens``), or half-way when ``truncated``; with a
    ``usage`` that reports ``cached_tokens`` (None: without ``usage``)."""
    model = str(body.get("model") or "")
    counter = get_token_counter(model or None)
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    content, finish = _cut_reply(str(responder(body)), counter, truncated=truncated, max_tokens=max_tokens)
    usage = None
    if cached_tokens is not None:
        messages = [json_object(m) for m in json_list(body.get("messages"))]
        prompt_tokens = counter.count_messages(messages) if messages else 0
        usage = _chat_usage(prompt_tokens, counter.count(content), cached_tokens)
    return _chat_completion(model, content, finish, usage=usage)


def _cut_reply(content: str, counter: TokenCounter, *, truncated: bool, max_tokens: JSONValue) -> tuple[str, str]:
    """``(content, finish_reason)``: with ``truncated`` the reply cut about half-way (``"length"``),
    else cut at ``max_tokens`` tokens when it is longer (``"length"``), else whole (``"stop"``)."""
    if truncated:
        tokens = counter.encode(content)
        if len(tokens) > 1:
            return counter.decode(tokens[: max(1, len(tokens) // 2)]), "length"
        return content[: len(content) // 2], "length"
    if isinstance(max_tokens, int) and max_tokens > 0:
        tokens = counter.encode(content)
        if len(tokens) > max_tokens:
            return counter.decode(tokens[:max_tokens]), "length"
    return content, "stop"


def _chat_completion(model: str, content: str, finish: str, *, usage: JSONObject | None) -> JSONObject:
    """The body of a chat completion with one choice (``usage`` None: without one)."""
    response: JSONObject = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": finish,
            }
        ],
    }
    if usage is not None:
        response["usage"] = usage
    return response


def _chat_usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> JSONObject:
    """The ``usage`` of a chat completion (``cached_tokens`` capped by the prompt's tokens)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": min(cached_tokens, prompt_tokens)},
    }


def embedding_list(texts: Sequence[str], dim: int, *, model: JSONValue, as_base64: bool) -> JSONObject:
    """The body of an embeddings reply: a :func:`fake_embedding` of each text (float lists, or
    base64 of little-endian float32), and the tokens of the texts as its usage."""
    data: list[JSONValue] = []
    for i, text in enumerate(texts):
        vec = fake_embedding(text, dim)
        emb: JSONValue = base64.b64encode(vec.astype("<f4").tobytes()).decode("ascii") if as_base64 else vec.tolist()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    n_tokens = sum(get_token_counter(None).count_many(texts))
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    }


def embeddings_reply(body: JSONObject, default_dim: int) -> JSONObject | ErrorReply:
    """The reply to an embeddings request: its :func:`embedding_list` (token arrays taken as
    text), or the 400 of an ``input`` or ``dimensions`` that is not valid."""
    inputs = body.get("input")
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs:
        return bad_request("'input' must be a non-empty string or list")
    texts = [x if isinstance(x, str) else " ".join(map(str, json_list(x))) for x in inputs]
    dim = body.get("dimensions") or default_dim
    if not isinstance(dim, int) or dim < 1:
        return bad_request(f"'dimensions' must be a positive integer; got {dim!r}")
    return embedding_list(texts, dim, model=body.get("model"), as_base64=body.get("encoding_format") == "base64")


def model_list(models: Sequence[str]) -> JSONObject:
    """The body of ``GET /v1/models``."""
    return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in models]}
