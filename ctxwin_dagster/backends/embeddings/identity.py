"""Which embedding model made a vector: its name, its vector size and the backend serving it.

An index is searchable only with the model that built it; the index records an
:class:`EmbedderIdentity` and compares it with the one asking
(:class:`~ctxwin_dagster.backends.index.vectorstore.ChunkIndex`). Two identities are the same
embedder when model name and dimension agree; the provider is kept for the messages (the same
model served locally or by a server gives the same vectors).

Example::

    >>> a = EmbedderIdentity("all-MiniLM-L6-v2", 384, "local")
    >>> a.same_model(EmbedderIdentity("all-MiniLM-L6-v2", 384, "openai")), a.describe()
    (True, 'all-MiniLM-L6-v2 (384 dimensions, local)')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ctxwin_dagster.backends.base import Embedder

__all__ = ["EmbedderIdentity", "Identified", "Provided", "identity_of"]


@dataclass(frozen=True)
class EmbedderIdentity:
    """An embedding model's name, its vector size (0: not known yet) and its provider."""

    model: str
    dim: int = 0
    provider: str = ""

    def same_model(self, other: EmbedderIdentity) -> bool:
        """Same model name, and same dimension when both are known."""
        return self.model == other.model and (not self.dim or not other.dim or self.dim == other.dim)

    def describe(self) -> str:
        parts = [f"{self.dim} dimensions"] if self.dim else []
        if self.provider:
            parts.append(self.provider)
        return f"{self.model} ({', '.join(parts)})" if parts else self.model


@runtime_checkable
class Identified(Protocol):
    """An embedder that knows its own identity (every embedder of this package)."""

    @property
    def identity(self) -> EmbedderIdentity: ...


@runtime_checkable
class Provided(Protocol):
    """An embedder that names who serves its model."""

    @property
    def provider(self) -> str: ...


def identity_of(embedder: Embedder | EmbedderIdentity | str, *, dim: int | None = None) -> EmbedderIdentity:
    """The identity of ``embedder``: an :class:`EmbedderIdentity`, an embedder (its
    ``identity``, else its ``model`` and ``dim``) or a bare model name. ``dim`` (the width of
    vectors at hand) fills in or overrides a dimension the embedder does not know yet."""
    if isinstance(embedder, EmbedderIdentity):
        ident = embedder
    elif isinstance(embedder, str):
        ident = EmbedderIdentity(embedder)
    elif isinstance(embedder, Identified) and isinstance(found := embedder.identity, EmbedderIdentity):
        ident = found
    else:
        ident = _named(embedder)
    if dim:
        ident = EmbedderIdentity(ident.model, int(dim), ident.provider)
    return ident


def _named(embedder: object) -> EmbedderIdentity:
    """The identity of an embedder that does not give one: its ``model``, ``dim`` and ``provider``."""
    if not isinstance(embedder, Embedder) or not isinstance(embedder.model, str) or not embedder.model:
        raise TypeError(f"an embedder needs a model name (a .model or .identity); got {type(embedder).__name__}")
    provider = embedder.provider if isinstance(embedder, Provided) else ""
    return EmbedderIdentity(embedder.model, int(embedder.dim or 0), str(provider or ""))
