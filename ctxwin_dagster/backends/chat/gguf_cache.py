"""What is read from a GGUF file's header, kept on disk: its metadata and its tokenizer.

Reading them from the file itself costs about 15 s of CPU (measured on SmolLM2-135M: 4.6 s for
the metadata with ``gguf``'s reader, 11.3 s for transformers to build the tokenizer from the
vocabulary), and every process that uses the model paid it: the llama.cpp server at its start,
each run, ``ctxwin ask``, ``ctxwin plan``. Kept on disk, both load in about 3 s, most of it
importing transformers.

One folder per file version, under ``$XDG_CACHE_HOME/ctxwin/gguf`` (``~/.cache/ctxwin/gguf``), or
``$CTXWIN_GGUF_CACHE``; its name holds the file's name and a key of its path, size, modification
time and the versions of ``gguf`` and transformers, so a changed file or library reads the file
again. Each entry is written to a temporary name and then renamed, so a reader never sees half of
one. An entry that cannot be read is set aside (logged) and read from the file again; a cache that
cannot be written is only logged: the file itself is always the source.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["CACHE_VAR", "cache_dir", "cached_metadata", "cached_tokenizer"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: A folder for the cache instead of ``$XDG_CACHE_HOME/ctxwin/gguf``; ``off``: read the file every time.
CACHE_VAR = "CTXWIN_GGUF_CACHE"

_METADATA = "metadata.json"
_TOKENIZER = "tokenizer"


def _library(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "none"


def cache_dir(path: Path) -> Path | None:
    """The cache folder of the GGUF file at ``path`` (None: the cache is off)."""
    setting = os.environ.get(CACHE_VAR, "").strip()
    if setting.lower() == "off":
        return None
    root = (
        Path(setting)
        if setting
        else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ctxwin" / "gguf"
    )
    stat = path.stat()
    key = "|".join(
        (str(path.resolve()), str(stat.st_size), str(stat.st_mtime_ns), _library("gguf"), _library("transformers"))
    )
    return root.expanduser() / f"{path.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _set_aside(entry: Path, exc: Exception) -> None:
    """A damaged entry (it is only a copy of what the file holds) is removed so it is written again."""
    log.warning("the cached copy %s of a GGUF file's header cannot be read (%s); reading the file again", entry, exc)
    try:
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    except OSError as err:
        log.warning("could not remove %s (%s)", entry, err)


def _publish(folder: Path, name: str, write: Callable[[Path], bool]) -> None:
    """Write an entry under a temporary name in ``folder`` (``write`` False: nothing to keep), then
    rename it to ``name``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=folder))
        try:
            target = folder / name
            if write(tmp / name) and not target.exists():
                os.replace(tmp / name, target)  # another process may have won: theirs is the same
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:
        log.info("could not keep a copy of the GGUF header in %s (%s); it is read from the file next time", folder, exc)


def _cached(
    path: Path, name: str, load: Callable[[Path], T], read: Callable[[], T], keep: Callable[[T, Path], bool]
) -> T:
    """The entry ``name`` of the file's cache folder as ``load(entry)`` gives it, or ``read()``;
    what is read is kept when ``keep(value, target)`` writes it to ``target`` (False: not kept)."""
    folder = cache_dir(path)
    if folder is None:
        return read()
    entry = folder / name
    if entry.exists():
        try:
            return load(entry)
        except Exception as exc:  # noqa: BLE001 - JSON, OS and the tokenizers library's own errors alike
            _set_aside(entry, exc)
    value = read()
    _publish(folder, name, lambda target: keep(value, target))
    return value


def cached_metadata(path: Path, read: Callable[[], dict[str, object]]) -> dict[str, object]:
    """The file's metadata from the cache, or ``read()`` (then kept, when JSON gives it back as it is)."""

    def load(entry: Path) -> dict[str, object]:
        data = json.loads(entry.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return data

    def keep(data: dict[str, object], target: Path) -> bool:
        try:
            text = json.dumps(data, ensure_ascii=False)
        except (TypeError, ValueError):  # a value JSON cannot hold
            return False
        if json.loads(text) != data:  # tuples, say
            return False
        target.write_text(text, encoding="utf-8")
        return True

    return _cached(path, _METADATA, load, read, keep)


def cached_tokenizer(path: Path, read: Callable[[], PreTrainedTokenizerBase]) -> PreTrainedTokenizerBase:
    """The file's tokenizer (with its chat template) from the cache, or ``read()`` (then kept).

    A kept tokenizer is a fast one (its ``tokenizer.json``, which is what transformers builds from
    a GGUF file), loaded by that class rather than ``AutoTokenizer``, whose import pulls in torch
    (2 s against 7 s).
    """
    from transformers import PreTrainedTokenizerFast

    def load(entry: Path) -> PreTrainedTokenizerBase:
        tokenizer: PreTrainedTokenizerBase = PreTrainedTokenizerFast.from_pretrained(str(entry))
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("no chat template")
        return tokenizer

    def keep(tokenizer: PreTrainedTokenizerBase, target: Path) -> bool:
        if not isinstance(tokenizer, PreTrainedTokenizerFast):
            return False
        tokenizer.save_pretrained(str(target))
        return True

    return _cached(path, _TOKENIZER, load, read, keep)
