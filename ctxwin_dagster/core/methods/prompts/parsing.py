"""Parsing model replies: JSON in prose or code fences, SWB contexts, answers with citations, window answers.

Every parser raises :class:`PromptOutputError` (saying what is wrong) when a reply does not
have the form its prompt asked for; the task engines count those and retry or fall back.

Plain Python only: no Dagster, RAGAS or LanceDB.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxwin_dagster.core.methods.prompts.tables import NO_ANSWER, NOT_IN_DOCUMENTS

__all__ = [
    "ParsedAnswer",
    "PromptOutputError",
    "WindowAnswer",
    "extract_json",
    "parse_answer",
    "parse_swb_contexts",
    "parse_window_answer",
]


class PromptOutputError(ValueError):
    """A model's reply does not have the form the prompt asked for; the message says what is wrong."""


_FENCE_RE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """The first JSON value in a model reply, tolerating code fences and surrounding prose.

    The value is an object or an array as :func:`json.loads` gives it (typed as that gives it:
    the reply's fields are checked by whoever reads them).

    Tries, in order: the whole reply; the content of each fenced block; the first balanced
    ``{...}`` or ``[...]`` found by decoding from every opening brace.

    Raises:
        PromptOutputError: no JSON object or array in the reply.

    Example::

        >>> extract_json('Sure! ```json\\n{"a": 1}\\n``` Hope this helps.')
        {'a': 1}
    """
    if not isinstance(text, str):
        raise PromptOutputError(f"expected the reply as a string; got {type(text).__name__}")
    stripped = text.strip()
    candidates = [stripped] + [m.group(1).strip() for m in _FENCE_RE.finditer(text)]
    # An opening fence that was never closed (a truncated reply).
    if stripped.startswith("```"):
        candidates.append(stripped.split("\n", 1)[1] if "\n" in stripped else "")
    for cand in candidates:
        try:
            value = json.loads(cand)
        except ValueError:
            continue
        if isinstance(value, dict | list):
            return value
    decoder = json.JSONDecoder()
    for m in re.finditer(r"[\[{]", text):
        try:
            value, _end = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(value, dict | list):
            return value
    raise PromptOutputError(f"no JSON object in the reply: {_preview(text)}")


def _preview(text: object, n: int = 120) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= n else text[:n] + "…")


def _match_chunk_id(raw: object, chunk_ids: Sequence[str], position: int | None) -> str | None:
    """Which chunk id an entry refers to: exact id, a unique prefix (≥ 8 chars), or its number."""
    if raw is None and position is not None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return chunk_ids[raw - 1] if 1 <= raw <= len(chunk_ids) else None
    s = str(raw).strip().strip("[]<>\"'").strip()
    if s in chunk_ids:
        return s
    if s.isdigit() and 1 <= int(s) <= len(chunk_ids):
        return chunk_ids[int(s) - 1]
    if len(s) >= 8:
        hits = [c for c in chunk_ids if c.startswith(s)]
        if len(hits) == 1:
            return hits[0]
    return None


def parse_swb_contexts(text: str, chunk_ids: Sequence[str], *, strict: bool = True) -> dict[str, str]:
    """The contexts of an ``swb_batch`` reply, by chunk id.

    Accepted forms (repairs): the object ``{"contexts": [...]}``, the same inside a code fence or
    prose, a bare list of ``{"chunk_id", "context"}`` entries, or an object mapping chunk ids to
    contexts. An entry's chunk id may be the exact id, a unique prefix of at least 8 characters,
    or the chunk's number in the batch (``1``…``n``).

    With ``strict=True`` (default) every chunk must get exactly one non-empty context, else
    :class:`PromptOutputError` says what is wrong. With ``strict=False`` the valid entries are
    returned (possibly fewer than the chunks); a reply with no JSON at all still raises.

    Example::

        >>> parse_swb_contexts('{"contexts": [{"chunk_id": "abc", "context": "In Art. 5."}]}', ["abc"])
        {'abc': 'In Art. 5.'}
    """
    ids = list(chunk_ids)
    value = extract_json(text)
    entries: list[tuple[object, object]] = []
    if isinstance(value, dict):
        inner = None
        for key in ("contexts", "chunks", "results", "items"):
            if isinstance(value.get(key), list):
                inner = value[key]
                break
        if inner is None:
            if "chunk_id" in value and "context" in value:
                inner = [value]
            else:  # {"<chunk_id>": "<context>", ...}
                entries = [(k, v) for k, v in value.items()]
        if inner is not None:
            value = inner
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                raw_id = next((item[k] for k in ("chunk_id", "id", "chunk", "number") if k in item), None)
                entries.append((raw_id, item.get("context")))
            else:
                entries.append((None, item))

    found: dict[str, str] = {}
    problems: list[str] = []
    for pos, (raw_id, ctx) in enumerate(entries, start=1):
        cid = _match_chunk_id(raw_id, ids, pos)
        if cid is None:
            problems.append(f"entry {pos} names no chunk of this batch ({_preview(raw_id, 40)})")
            continue
        if not isinstance(ctx, str) or not ctx.strip():
            problems.append(f"entry {pos} ({cid[:12]}) has no context text")
            continue
        if cid in found:
            problems.append(f"chunk {cid[:12]} has more than one context")
            continue
        found[cid] = ctx.strip()
    missing = [c for c in ids if c not in found]
    if strict and (missing or problems):
        detail = "; ".join(problems[:3])
        raise PromptOutputError(
            f"swb reply has {len(found)} valid contexts for {len(ids)} chunks"
            + (f"; missing {[c[:12] for c in missing]}" if missing else "")
            + (f"; {detail}" if detail else "")
        )
    return found


@dataclass(frozen=True, slots=True)
class ParsedAnswer:
    """An answer reply: its text, the chunk ids it cites, and whether it said "not found"."""

    text: str
    cited_chunk_ids: tuple[str, ...]
    not_found: bool
    unknown_citations: tuple[str, ...] = ()


_CITATION_RE = re.compile(r"\[([^\[\]\n]{1,200})\]")


def parse_answer(text: str, chunk_ids: Sequence[str]) -> ParsedAnswer:
    """Citations and the not-found sentinel of an ``answer`` reply.

    A citation is ``[id]`` or ``[id1, id2]``; ids are matched like in
    :func:`parse_swb_contexts` (exact or a unique prefix of ≥ 8 characters). Bracketed text that
    matches no passage is returned in ``unknown_citations``. The reply is "not found" when it is
    :data:`NOT_IN_DOCUMENTS` (possibly with punctuation or quotes around it).

    Example::

        >>> parse_answer("NOT_IN_DOCUMENTS.", ["a"]).not_found
        True
        >>> parse_answer("Yes [a, b].", ["a", "b"]).cited_chunk_ids
        ('a', 'b')
    """
    clean = text.strip()
    bare = clean.strip(" \t\n.\"'`*")
    if bare == NOT_IN_DOCUMENTS or bare.upper().replace(" ", "_") == NOT_IN_DOCUMENTS:
        return ParsedAnswer(NOT_IN_DOCUMENTS, (), True)
    ids = list(chunk_ids)
    cited: dict[str, None] = {}
    unknown: dict[str, None] = {}
    for m in _CITATION_RE.finditer(clean):
        for part in re.split(r"[,;]\s*", m.group(1)):
            part = part.strip()
            if not part:
                continue
            cid = part if part in ids else _match_chunk_id(part, ids, None) if len(part) >= 8 else None
            if cid is None:
                unknown.setdefault(part, None)
            else:
                cited.setdefault(cid, None)
    return ParsedAnswer(clean, tuple(cited), False, tuple(unknown))


@dataclass(frozen=True, slots=True)
class WindowAnswer:
    """A ``window_answer`` reply: ``found`` is False for :data:`NO_ANSWER`."""

    answer: str
    confidence: float
    evidence: str
    found: bool


def parse_window_answer(text: str) -> WindowAnswer:
    """The JSON of a ``window_answer`` reply (a bare ``NO_ANSWER`` is accepted too).

    Raises:
        PromptOutputError: the reply has no usable answer.

    Example::

        >>> parse_window_answer('{"answer": "NO_ANSWER", "confidence": 0.1, "evidence": ""}').found
        False
    """
    if text.strip().strip(".\"'` ") == NO_ANSWER:
        return WindowAnswer(NO_ANSWER, 0.0, "", False)
    value = extract_json(text)
    if not isinstance(value, dict) or not isinstance(value.get("answer"), str):
        raise PromptOutputError(f"window reply has no string 'answer': {_preview(text)}")
    answer = value["answer"].strip()
    try:
        confidence = float(value.get("confidence", 0.0))
    except (TypeError, ValueError):
        raise PromptOutputError(f"window reply has a non-numeric confidence: {_preview(text)}") from None
    confidence = min(1.0, max(0.0, confidence))
    found = bool(answer) and answer.strip(".\"' ").upper() != NO_ANSWER
    raw_evidence = value.get("evidence")
    evidence = raw_evidence if isinstance(raw_evidence, str) else ""
    return WindowAnswer(answer if found else NO_ANSWER, confidence if found else min(confidence, 1.0), evidence, found)
