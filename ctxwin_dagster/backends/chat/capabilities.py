"""What an OpenAI-compatible endpoint can do, asked once and kept in the home.

Servers that speak OpenAI's API differ in what they take and what they say: a JSON schema in
``response_format`` (OpenAI, vLLM) or a grammar (llama.cpp), the usage of each reply and the
prompt tokens served from their cache, their context length, a tokenizer of their own. ctxwin
asks each endpoint (base URL and model) once, with a few tiny requests:

* **structured output**: a reply held to a two-key schema; the answer is the format the endpoint
  took (``schema``, ``grammar``, ``json_object`` or ``text``, see :mod:`.structured`) and whether
  the reply parsed;
* **usage and prompt caching**: two prompts that share a long prefix; whether the replies carry
  usage, and the prompt tokens the second says were served from cache
  (``usage.prompt_tokens_details.cached_tokens``);
* **context length**: where the server says it (``/v1/models``: vLLM's ``max_model_len``,
  ``context_length``, llama.cpp's ``meta.n_ctx_train``; llama-server's ``/props``), beside the one
  ctxwin's limits use;
* **token counts**: the server's own tokenizer (llama-cpp-python's ``/extras/tokenize``,
  llama-server's and vLLM's ``/tokenize``) on a sample text, beside ctxwin's count.

The record is kept in ``ctxwin-endpoints.json`` in the Dagster home (``DAGSTER_HOME``), keyed by
the endpoint and model, so later runs read it instead of asking again; the contexts' and the
summaries' materializations show it (``endpoint`` in their metadata). Delete the file to ask
again (an upgraded server).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from ctxwin_dagster.backends.base import ChatRequest
from ctxwin_dagster.core.json_types import JSONObject, JSONValue

if TYPE_CHECKING:
    from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend

__all__ = ["FILE", "PROBE_REQUESTS", "endpoint_capabilities", "forget", "probe"]

#: The record's file in the Dagster home.
FILE = "ctxwin-endpoints.json"
#: Chat completions one probe sends (one with a schema, two that share a prefix), more where the
#: endpoint refuses a reply format before it takes one.
PROBE_REQUESTS = 3
_SCHEMA_PROBE = {
    "type": "object",
    "properties": {"colour": {"type": "string", "enum": ["blue", "green", "red"]}, "sure": {"type": "boolean"}},
    "required": ["colour", "sure"],
    "additionalProperties": False,
}
#: A text of a few hundred tokens: the shared prefix of the caching probe, and the tokenizer's sample.
_SAMPLE = " ".join(
    f"Article {n}. The provider shall keep the records of each system for {n + 4} years and make them "
    "available to the authority on request, in a form that a person can read."
    for n in range(1, 11)
)
_MEMO: dict[str, JSONObject] = {}
_LOCK = threading.Lock()


def _key(chat: OpenAIChatBackend) -> str:
    return f"{chat.backend_id} {chat.model}"


def probe(chat: OpenAIChatBackend) -> JSONObject:
    """Ask the endpoint of ``chat`` what it can do (a few tiny requests; see the module docstring)."""
    from ctxwin_dagster.backends.chat.structured import ENFORCED
    from ctxwin_dagster.core.methods.prompts.schemas import ReplySchema

    out: JSONObject = {"endpoint": chat.base_url, "model": chat.model, "asked": time.strftime("%Y-%m-%d %H:%M:%S")}
    nonce = uuid.uuid4().hex[:8]  # the response cache must not answer for the server
    user = {"role": "user", "content": f"({nonce}) What colour is a clear sky? Reply in JSON."}
    try:
        reply = chat.complete(
            ChatRequest(
                messages=(user,), schema=ReplySchema("colour_probe", _SCHEMA_PROBE), max_tokens=24, temperature=0.0
            )
        )
        try:
            parsed = json.loads(reply.text)
            ok = isinstance(parsed, dict) and set(parsed) == {"colour", "sure"}
        except ValueError:
            ok = False
        fmt = reply.record.reply_format
        out["structured_output"] = {
            "format": fmt,
            "held_to_the_schema": fmt in ENFORCED,
            "reply_parsed": ok,
        }
    except Exception as exc:  # noqa: BLE001 - a capability the endpoint lacks is an answer too
        out["structured_output"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    try:
        first, second = (
            chat.complete(
                ChatRequest(
                    messages=({"role": "user", "content": f"{_SAMPLE}\n\n({nonce}) Question {i}: which article?"},),
                    max_tokens=2,
                    temperature=0.0,
                )
            )
            for i in (1, 2)
        )
        out["usage"] = (
            "reported" if not first.record.usage_counted else "not reported (counted with ctxwin's tokenizer)"
        )
        out["cached_prompt_tokens"] = {
            "reported": second.record.cached_tokens > 0,
            "second_of_two_prompts_with_a_shared_prefix": f"{second.record.cached_tokens} of {second.record.input_tokens}",
        }
    except Exception as exc:  # noqa: BLE001
        out["usage"] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
    out["context_length"] = {"server": _served_context(chat), "ctxwin": chat.limits.context_length}
    out["tokenizer"] = _tokenize(chat)
    return out


def _client(chat: OpenAIChatBackend) -> httpx.Client:
    from ctxwin_dagster.backends.calls.endpoint import resolve_api_key

    key = resolve_api_key(None, chat.base_url, what=f"the chat model {chat.model!r}") if not chat.is_openai else None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(headers=headers, timeout=httpx.Timeout(20.0, connect=5.0))


def _root(chat: OpenAIChatBackend) -> str:
    return chat.base_url.rstrip("/").removesuffix("/v1")


def _served_context(chat: OpenAIChatBackend) -> JSONObject | None:
    """The context length the server states, and where; None when it states none."""
    if chat.is_openai:
        return None
    with _client(chat) as client:
        with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
            entries = client.get(chat.base_url.rstrip("/") + "/models").json().get("data") or []
            for entry in entries:
                if not isinstance(entry, dict) or entry.get("id") != chat.model:
                    continue
                meta = entry["meta"] if isinstance(entry.get("meta"), dict) else {}
                for where, value in (
                    ("/v1/models max_model_len", entry.get("max_model_len")),
                    ("/v1/models context_length", entry.get("context_length")),
                    ("/v1/models meta.n_ctx", meta.get("n_ctx")),
                    ("/v1/models meta.n_ctx_train", meta.get("n_ctx_train")),
                ):
                    if isinstance(value, int) and value > 0:
                        return {"tokens": value, "from": where}
        with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
            props = client.get(_root(chat) + "/props").json()
            n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
            if isinstance(n_ctx, int) and n_ctx > 0:
                return {"tokens": n_ctx, "from": "/props default_generation_settings.n_ctx"}
    return None


def _tokenize(chat: OpenAIChatBackend) -> JSONObject:
    """The server's own count of :data:`_SAMPLE`, beside ctxwin's (the model's tokenizer, or an estimate)."""
    ours = chat.counter.count(_SAMPLE)
    if chat.is_openai:
        return {"server": None, "ctxwin": ours}
    root = _root(chat)
    attempts = (
        (root + "/extras/tokenize", {"input": _SAMPLE, "model": chat.model}),  # llama-cpp-python
        (root + "/tokenize", {"content": _SAMPLE}),  # llama.cpp's llama-server
        (root + "/tokenize", {"model": chat.model, "prompt": _SAMPLE}),  # vLLM
    )
    with _client(chat) as client:
        for url, body in attempts:
            with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
                response = client.post(url, json=body)
                if response.status_code == 200:
                    data = response.json()
                    tokens = data.get("tokens")
                    count = len(tokens) if isinstance(tokens, list) else data.get("count")
                    if isinstance(count, int):
                        return {"server": count, "from": url.removeprefix(root), "ctxwin": ours}
    return {"server": None, "ctxwin": ours}


def endpoint_capabilities(chat: OpenAIChatBackend, home: Path | None = None) -> JSONObject:
    """The record of ``chat``'s endpoint: from the home's file (``home``, default ``DAGSTER_HOME``),
    else asked now (:func:`probe`) and written there. Asked at most once per process."""
    key = _key(chat)
    with _LOCK:
        if key in _MEMO:
            return _MEMO[key]
        folder = home or (Path(os.environ["DAGSTER_HOME"]) if os.environ.get("DAGSTER_HOME") else None)
        path = folder / FILE if folder is not None else None
        kept = _read(path).get(key)
        if isinstance(kept, dict):
            _MEMO[key] = kept
            return kept
        record = probe(chat)
        _MEMO[key] = record
        if path is not None:
            with contextlib.suppress(OSError):  # the record is worth keeping, not worth failing a run
                known = {**_read(path), key: record}
                tmp = path.with_name(f".{FILE}.{os.getpid()}")
                tmp.write_text(json.dumps(known, indent=2) + "\n", encoding="utf-8")
                tmp.replace(path)
        return record


def _read(path: Path | None) -> dict[str, JSONValue]:
    if path is None or not path.is_file():
        return {}
    try:
        data: JSONValue = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def forget() -> None:
    """Forget what this process asked (tests)."""
    with _LOCK:
        _MEMO.clear()
