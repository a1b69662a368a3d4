"""Versioned prompt templates (English and German) and the parsers for their answers.

Every model call ctxwin makes is rendered from a :class:`PromptTemplate`. A template has a
``name``, a ``version`` and a ``language``; its :attr:`PromptTemplate.id`
(``"swb_batch.en.v1"``) is stored with every result, so a changed prompt is visible in the data
and never answered from a cache filled by the old one.

Templates (see :data:`TEMPLATES`), each in English and German:

``summarize_segment``  one part (≤ 1,000,000 characters) of a long document → a summary of at
                       most ``max_tokens`` tokens (the map step of the global summary);
``summarize_overview`` the segment summaries → one overview of at most ``max_tokens`` tokens
                       (the reduce step);
``cc_context``         contextual retrieval (CC-RAG): the whole document, then one chunk → a
                       short context situating the chunk (the document comes first, so
                       providers' prompt caching can reuse it across the chunks);
``swb_batch``          SWB-RAG: the global summary, the text before, a numbered batch of chunks
                       with their ids and the text after → ``{"contexts": [{"chunk_id", "context"}]}``;
``answer``             passages labelled with their chunk ids and a question → an answer citing
                       chunk ids in square brackets, or exactly :data:`NOT_IN_DOCUMENTS`;
``window_answer``      one window of a long document and a question → JSON
                       ``{"answer", "confidence", "evidence"}`` with ``answer`` = :data:`NO_ANSWER`
                       when the window does not hold it.

Pick one with :func:`get_template` (English fallback when a language has no template), and the
language of a document with :func:`detect_language`.

Plain Python only: no Dagster, RAGAS or LanceDB.

Example::

    >>> t = get_template("answer", "de")
    >>> t.id
    'answer.de.v1'
    >>> msgs = t.render(question="Was ist verboten?", passages=format_passages([("c1", "Text.")]))
    >>> [m["role"] for m in msgs]
    ['system', 'user']
    >>> parse_answer("Social scoring is banned [c1].", ["c1", "c2"]).cited_chunk_ids
    ('c1',)
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LANGUAGES",
    "NOT_IN_DOCUMENTS",
    "NO_ANSWER",
    "TEMPLATES",
    "ParsedAnswer",
    "PromptOutputError",
    "PromptTemplate",
    "WindowAnswer",
    "detect_language",
    "extract_json",
    "format_chunk_batch",
    "format_passages",
    "format_summaries",
    "get_template",
    "parse_answer",
    "parse_swb_contexts",
    "parse_window_answer",
    "summary_block",
]

#: Languages with templates; anything else falls back to English.
LANGUAGES = ("en", "de")

#: What the answer prompt asks the model to reply when the passages do not hold the answer.
NOT_IN_DOCUMENTS = "NOT_IN_DOCUMENTS"

#: What the window prompt asks the model to answer when the window does not hold the answer.
NO_ANSWER = "NO_ANSWER"

_FORMATTER = string.Formatter()


class PromptOutputError(ValueError):
    """A model's reply does not have the form the prompt asked for; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """A chat prompt as two ``str.format`` templates (system and user) plus identity.

    ``system`` may be empty (then only a user message is sent). Literal braces in the
    templates are doubled (``{{`` ``}}``); values substituted into them are never parsed, so a
    document full of braces is safe. ``defaults`` gives values for optional variables.

    Example::

        >>> t = PromptTemplate("greet", "1", "en", "", "Hello {name}!")
        >>> t.render(name="Ada")
        [{'role': 'user', 'content': 'Hello Ada!'}]
        >>> t.variables
        ('name',)
    """

    name: str
    version: str
    language: str
    system: str
    user: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name or not self.version:
            raise ValueError("a PromptTemplate needs a name and a version")
        if not self.user:
            raise ValueError(f"template {self.name!r} has an empty user prompt")
        unknown = set(self.defaults) - set(self.variables)
        if unknown:
            raise ValueError(f"template {self.name!r}: defaults for unknown variables {sorted(unknown)}")

    @property
    def id(self) -> str:
        """``"<name>.<language>.v<version>"``: what results store as their prompt version."""
        return f"{self.name}.{self.language}.v{self.version}"

    @property
    def variables(self) -> tuple[str, ...]:
        """The names the templates use, in order of first appearance."""
        seen: dict[str, None] = {}
        for text in (self.system, self.user):
            for _literal, name, _spec, _conv in _FORMATTER.parse(text):
                if name is not None:
                    if not name.isidentifier():
                        raise ValueError(f"template {self.name!r}: use named fields only; got {{{name}}}")
                    seen.setdefault(name, None)
        return tuple(seen)

    def render(self, **variables: Any) -> list[dict[str, str]]:
        """The chat messages with ``variables`` filled in.

        Raises:
            KeyError: a variable the template needs is missing.
            TypeError: a variable the template does not use was passed (likely a typo).
        """
        names = self.variables
        values = {**self.defaults, **variables}
        missing = [n for n in names if n not in values]
        if missing:
            raise KeyError(f"template {self.id} needs {missing}; pass them to render()")
        extra = sorted(set(variables) - set(names))
        if extra:
            raise TypeError(f"template {self.id} does not use {extra}; it takes {list(names)}")
        messages: list[dict[str, str]] = []
        if self.system:
            messages.append({"role": "system", "content": self.system.format(**values)})
        messages.append({"role": "user", "content": self.user.format(**values)})
        return messages


# --------------------------------------------------------------------------------------
# Templates
# --------------------------------------------------------------------------------------

_SUMMARY_SYSTEM_EN = (
    "You write faithful, dense summaries of long documents. You use only information from the "
    "text you are given and keep the names of its parts (chapters, sections, articles, annexes)."
)
_SUMMARY_SYSTEM_DE = (
    "Du schreibst genaue, dichte Zusammenfassungen langer Dokumente. Du verwendest nur "
    "Informationen aus dem vorgelegten Text und behältst die Namen seiner Teile (Kapitel, "
    "Abschnitte, Artikel, Anhänge) bei."
)

_SUMMARIZE_SEGMENT_EN = PromptTemplate(
    "summarize_segment",
    "1",
    "en",
    _SUMMARY_SYSTEM_EN,
    "Below is part {part} of {parts} of a long document.\n\n"
    "<segment>\n{text}\n</segment>\n\n"
    "Summarize this part in at most {max_tokens} tokens. Cover what it is about and how it is "
    "organised, and its main definitions, rules, obligations, rights, actors, procedures, "
    "deadlines, figures and exceptions, naming the chapters, sections or articles they are in. "
    "Write plain prose in English and add nothing that is not in the text.",
    description="map step of the global summary: one segment of ≤1,000,000 characters",
)
_SUMMARIZE_SEGMENT_DE = PromptTemplate(
    "summarize_segment",
    "1",
    "de",
    _SUMMARY_SYSTEM_DE,
    "Es folgt Teil {part} von {parts} eines langen Dokuments.\n\n"
    "<segment>\n{text}\n</segment>\n\n"
    "Fasse diesen Teil in höchstens {max_tokens} Tokens zusammen. Beschreibe, worum es geht und "
    "wie er aufgebaut ist, sowie die wichtigsten Begriffsbestimmungen, Regeln, Pflichten, Rechte, "
    "Beteiligten, Verfahren, Fristen, Zahlen und Ausnahmen, jeweils mit den Kapiteln, Abschnitten "
    "oder Artikeln, in denen sie stehen. Schreibe Fließtext auf Deutsch und füge nichts hinzu, "
    "was nicht im Text steht.",
    description="Map-Schritt der globalen Zusammenfassung: ein Segment von ≤1.000.000 Zeichen",
)

_SUMMARIZE_OVERVIEW_EN = PromptTemplate(
    "summarize_overview",
    "1",
    "en",
    _SUMMARY_SYSTEM_EN,
    "Below are summaries of the {parts} consecutive parts of one long document, in order.\n\n"
    "{summaries}\n\n"
    "Combine them into one overview of the whole document in at most {max_tokens} tokens: its "
    "purpose and scope, its structure, and the key definitions, rules, obligations, actors, "
    "procedures and exceptions, naming the parts they are in. Remove repetition, keep the "
    "document's order, write plain prose in English and add nothing that is not in the summaries.",
    description="reduce step of the global summary: segment summaries → overview of ≤N tokens",
)
_SUMMARIZE_OVERVIEW_DE = PromptTemplate(
    "summarize_overview",
    "1",
    "de",
    _SUMMARY_SYSTEM_DE,
    "Es folgen Zusammenfassungen der {parts} aufeinanderfolgenden Teile eines langen Dokuments, "
    "in ihrer Reihenfolge.\n\n"
    "{summaries}\n\n"
    "Fasse sie zu einem Überblick über das ganze Dokument in höchstens {max_tokens} Tokens "
    "zusammen: Zweck und Anwendungsbereich, Aufbau sowie die wichtigsten Begriffsbestimmungen, "
    "Regeln, Pflichten, Beteiligten, Verfahren und Ausnahmen, jeweils mit den Teilen, in denen sie "
    "stehen. Vermeide Wiederholungen, behalte die Reihenfolge des Dokuments bei, schreibe "
    "Fließtext auf Deutsch und füge nichts hinzu, was nicht in den Zusammenfassungen steht.",
    description="Reduce-Schritt der globalen Zusammenfassung",
)

# Anthropic's contextual-retrieval prompt form, in our own words. The document comes first in
# the only message, so the prompt prefix is identical for every chunk of a document.
_CC_CONTEXT_EN = PromptTemplate(
    "cc_context",
    "1",
    "en",
    "",
    "<document>\n{document}\n</document>\n\n"
    "Here is a chunk from the document above that we want to place within the whole document:\n"
    "<chunk>\n{chunk}\n</chunk>\n\n"
    "Write a short, succinct context that situates this chunk within the overall document, "
    "to improve search retrieval of the chunk. Answer only with the succinct context and "
    "nothing else.",
    description="CC-RAG: whole document + one chunk → situating context (Anthropic's form)",
)
_CC_CONTEXT_DE = PromptTemplate(
    "cc_context",
    "1",
    "de",
    "",
    "<document>\n{document}\n</document>\n\n"
    "Hier ist ein Abschnitt aus dem obigen Dokument, den wir im Gesamtdokument einordnen "
    "möchten:\n"
    "<chunk>\n{chunk}\n</chunk>\n\n"
    "Schreibe einen kurzen, prägnanten Kontext, der diesen Abschnitt im Gesamtdokument einordnet, "
    "um das Auffinden des Abschnitts bei der Suche zu verbessern. Antworte nur mit dem kurzen "
    "Kontext und nichts anderem.",
    description="CC-RAG: ganzes Dokument + ein Abschnitt → einordnender Kontext",
)

_SWB_SYSTEM_EN = (
    "You situate chunks of a long document within the whole document, to improve search "
    "retrieval of the chunks. You reply with one JSON object and nothing else."
)
_SWB_SYSTEM_DE = (
    "Du ordnest Abschnitte eines langen Dokuments in das Gesamtdokument ein, um ihr Auffinden "
    "bei der Suche zu verbessern. Du antwortest mit genau einem JSON-Objekt und nichts anderem."
)
_SWB_BATCH_EN = PromptTemplate(
    "swb_batch",
    "1",
    "en",
    _SWB_SYSTEM_EN,
    "<summary>\n{summary}\n</summary>\n\n"
    "<text_before>\n{before}\n</text_before>\n\n"
    "<chunks>\n{chunks}\n</chunks>\n\n"
    "<text_after>\n{after}\n</text_after>\n\n"
    "The summary describes the whole document; text_before and text_after are the text directly "
    "before and after the chunks. For each of the {n} chunks, write a short, succinct context "
    "(one to three sentences) that situates the chunk within the overall document for the "
    "purposes of improving search retrieval of the chunk: say which part of the document it "
    "belongs to and what it is about. Reply only with a JSON object with one entry per chunk, "
    "in the order of the chunks, copying each chunk_id exactly:\n"
    '{{"contexts": [{{"chunk_id": "<chunk_id>", "context": "<context>"}}]}}',
    description="SWB-RAG: summary + window before + batch of chunks + window after → JSON contexts",
)
_SWB_BATCH_DE = PromptTemplate(
    "swb_batch",
    "1",
    "de",
    _SWB_SYSTEM_DE,
    "<summary>\n{summary}\n</summary>\n\n"
    "<text_before>\n{before}\n</text_before>\n\n"
    "<chunks>\n{chunks}\n</chunks>\n\n"
    "<text_after>\n{after}\n</text_after>\n\n"
    "Die Zusammenfassung beschreibt das ganze Dokument; text_before und text_after sind der Text "
    "unmittelbar vor und nach den Abschnitten. Schreibe für jeden der {n} Abschnitte einen kurzen, "
    "prägnanten Kontext (ein bis drei Sätze), der den Abschnitt im Gesamtdokument einordnet, um "
    "sein Auffinden bei der Suche zu verbessern: Nenne den Teil des Dokuments, zu dem er gehört, "
    "und worum es darin geht. Antworte nur mit einem JSON-Objekt mit einem Eintrag pro Abschnitt, "
    "in der Reihenfolge der Abschnitte, und übernimm jede chunk_id exakt:\n"
    '{{"contexts": [{{"chunk_id": "<chunk_id>", "context": "<Kontext>"}}]}}',
    description="SWB-RAG: Zusammenfassung + Fenster davor + Abschnitte + Fenster danach → JSON",
)

_ANSWER_EN = PromptTemplate(
    "answer",
    "1",
    "en",
    "You answer questions about documents using only the passages you are given. Each passage "
    "is labelled with its chunk id in square brackets.",
    "Passages:\n\n{passages}\n\n"
    "Question: {question}\n\n"
    "Answer the question using only the passages above. After each statement, cite the "
    "passages it comes from by their chunk ids in square brackets, e.g. [chunk_id]. If the "
    f"passages do not contain the answer, reply exactly {NOT_IN_DOCUMENTS} and nothing else.",
    description="answer from retrieved passages with [chunk_id] citations or the NOT_IN_DOCUMENTS sentinel",
)
_ANSWER_DE = PromptTemplate(
    "answer",
    "1",
    "de",
    "Du beantwortest Fragen zu Dokumenten ausschließlich anhand der vorgelegten Textstellen. "
    "Jede Textstelle ist mit ihrer Chunk-ID in eckigen Klammern gekennzeichnet.",
    "Textstellen:\n\n{passages}\n\n"
    "Frage: {question}\n\n"
    "Beantworte die Frage ausschließlich anhand der obigen Textstellen. Gib nach jeder Aussage "
    "die Textstellen, aus denen sie stammt, mit ihren Chunk-IDs in eckigen Klammern an, z. B. "
    "[chunk_id]. Wenn die Textstellen die Antwort nicht enthalten, antworte genau "
    f"{NOT_IN_DOCUMENTS} und nichts anderes.",
    description="Antwort aus Textstellen mit [chunk_id]-Belegen oder NOT_IN_DOCUMENTS",
)

_WINDOW_ANSWER_EN = PromptTemplate(
    "window_answer",
    "1",
    "en",
    "You answer questions about one window of a long document, using only that window. You "
    "reply with one JSON object and nothing else.",
    "{summary_block}"
    "Below is window {window} of {windows} of the document.\n\n"
    "<window>\n{text}\n</window>\n\n"
    "Question: {question}\n\n"
    "If the window contains the answer, answer using only the window. If it does not, the answer "
    f"is {NO_ANSWER}. Reply only with a JSON object: "
    f'{{{{"answer": "<the answer, or {NO_ANSWER}>", "confidence": <a number from 0 to 1: how sure '
    'you are that the window holds the answer>, "evidence": "<a short quote from the window, or an '
    'empty string>"}}',
    defaults={"summary_block": ""},
    description="sliding-window QA: one window → JSON answer/NO_ANSWER with confidence",
)
_WINDOW_ANSWER_DE = PromptTemplate(
    "window_answer",
    "1",
    "de",
    "Du beantwortest Fragen zu einem Fenster eines langen Dokuments ausschließlich anhand dieses "
    "Fensters. Du antwortest mit genau einem JSON-Objekt und nichts anderem.",
    "{summary_block}"
    "Es folgt Fenster {window} von {windows} des Dokuments.\n\n"
    "<window>\n{text}\n</window>\n\n"
    "Frage: {question}\n\n"
    "Wenn das Fenster die Antwort enthält, beantworte die Frage ausschließlich anhand des "
    f"Fensters. Wenn nicht, lautet die Antwort {NO_ANSWER}. Antworte nur mit einem JSON-Objekt: "
    f'{{{{"answer": "<die Antwort oder {NO_ANSWER}>", "confidence": <eine Zahl von 0 bis 1: wie '
    'sicher du bist, dass das Fenster die Antwort enthält>, "evidence": "<ein kurzes Zitat aus dem '
    'Fenster oder eine leere Zeichenkette>"}}',
    defaults={"summary_block": ""},
    description="Sliding-Window-QA: ein Fenster → JSON-Antwort/NO_ANSWER mit Konfidenz",
)

#: Every template by ``(name, language)``.
TEMPLATES: dict[tuple[str, str], PromptTemplate] = {
    (t.name, t.language): t
    for t in (
        _SUMMARIZE_SEGMENT_EN,
        _SUMMARIZE_SEGMENT_DE,
        _SUMMARIZE_OVERVIEW_EN,
        _SUMMARIZE_OVERVIEW_DE,
        _CC_CONTEXT_EN,
        _CC_CONTEXT_DE,
        _SWB_BATCH_EN,
        _SWB_BATCH_DE,
        _ANSWER_EN,
        _ANSWER_DE,
        _WINDOW_ANSWER_EN,
        _WINDOW_ANSWER_DE,
    )
}

_SUMMARY_BLOCK = {
    "en": "Summary of the whole document:\n<summary>\n{summary}\n</summary>\n\n",
    "de": "Zusammenfassung des ganzen Dokuments:\n<summary>\n{summary}\n</summary>\n\n",
}


def get_template(name: str, language: str | None = "en") -> PromptTemplate:
    """The template ``name`` in ``language``, or its English version when there is none.

    Raises:
        KeyError: no template has that name.

    Example::

        >>> get_template("cc_context", "fr").language
        'en'
    """
    lang = (language or "en").lower()
    found = TEMPLATES.get((name, lang)) or TEMPLATES.get((name, "en"))
    if found is None:
        names = sorted({n for n, _ in TEMPLATES})
        raise KeyError(f"no prompt template named {name!r}; known: {names}")
    return found


# --------------------------------------------------------------------------------------
# Formatting helpers for template variables
# --------------------------------------------------------------------------------------


def format_passages(passages: Iterable[tuple[str, str]]) -> str:
    """Passages as ``[chunk_id]`` followed by the text, separated by blank lines.

    Example::

        >>> print(format_passages([("a1", "First."), ("b2", "Second.")]))
        [a1]
        First.
        <BLANKLINE>
        [b2]
        Second.
    """
    return "\n\n".join(f"[{cid}]\n{text}" for cid, text in passages)


def format_chunk_batch(chunks: Iterable[tuple[str, str]]) -> str:
    """A numbered batch of chunks for ``swb_batch``: ``<chunk number=".." chunk_id="..">``.

    Example::

        >>> print(format_chunk_batch([("a1", "Text.")]))
        <chunk number="1" chunk_id="a1">
        Text.
        </chunk>
    """
    return "\n\n".join(
        f'<chunk number="{i}" chunk_id="{cid}">\n{text}\n</chunk>' for i, (cid, text) in enumerate(chunks, start=1)
    )


def format_summaries(summaries: Sequence[str]) -> str:
    """Segment summaries for ``summarize_overview``: ``<summary part="i">`` blocks.

    Example::

        >>> print(format_summaries(["A.", "B."]))
        <summary part="1">
        A.
        </summary>
        <BLANKLINE>
        <summary part="2">
        B.
        </summary>
    """
    return "\n\n".join(f'<summary part="{i}">\n{s}\n</summary>' for i, s in enumerate(summaries, start=1))


def summary_block(summary: str | None, language: str | None = "en") -> str:
    """The optional ``summary_block`` of ``window_answer``: empty when there is no summary."""
    if not summary:
        return ""
    lang = language if language in _SUMMARY_BLOCK else "en"
    return _SUMMARY_BLOCK[lang].format(summary=summary)


# --------------------------------------------------------------------------------------
# Language detection
# --------------------------------------------------------------------------------------

_WORD_RE = re.compile(r"[^\W\d_]+")
_STOP_EN = frozenset(
    "the and of to in is that for with as on be by this are it or shall from which an at not "
    "have has was were such its their any where these those".split()
)
_STOP_DE = frozenset(
    "der die das und ist nicht mit von zu den dem des für eine einer eines ein auf im sich "
    "werden wird sind oder auch als bei nach über durch diese dieser dieses gemäß sowie".split()
)


def detect_language(text: str, *, sample_chars: int = 20_000) -> str:
    """``"de"`` when German stop words outnumber English ones in a sample of ``text``, else ``"en"``.

    The sample is up to ``sample_chars`` characters from the start and the middle of the text.

    Example::

        >>> detect_language("Die Kommission erlässt delegierte Rechtsakte gemäß Artikel 97.")
        'de'
        >>> detect_language("The Commission shall adopt delegated acts in accordance with Article 97.")
        'en'
    """
    if len(text) > sample_chars:
        half = sample_chars // 2
        mid = len(text) // 2
        text = text[:half] + " " + text[mid : mid + half]
    en = de = 0
    for word in _WORD_RE.findall(text.lower()):
        if word in _STOP_EN:
            en += 1
        elif word in _STOP_DE:
            de += 1
    return "de" if de > en else "en"


# --------------------------------------------------------------------------------------
# Parsing model output
# --------------------------------------------------------------------------------------

_FENCE_RE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """The first JSON value in a model reply, tolerating code fences and surrounding prose.

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


def _preview(text: str, n: int = 120) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= n else text[:n] + "…")


def _match_chunk_id(raw: Any, chunk_ids: Sequence[str], position: int | None) -> str | None:
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
    entries: list[tuple[Any, Any]] = []
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
    evidence = value.get("evidence") if isinstance(value.get("evidence"), str) else ""
    return WindowAnswer(answer if found else NO_ANSWER, confidence if found else min(confidence, 1.0), evidence, found)
