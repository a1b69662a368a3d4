"""The shared base of the embedders: window fitting, dedupe, cache, stats and normalization.

:class:`CachedEmbedder` does everything but encoding: a text longer than the model's window is
embedded in pieces that are pooled (or cut by the model and counted), repeated texts are
encoded once, vectors are kept in a :class:`~ctxwin_dagster.backends.calls.cache.ResponseCache` under
:func:`embedding_cache_key`, and rows are :func:`l2_normalize`-d. What it did is counted in
:class:`EmbeddingStats`. Subclasses (:class:`~ctxwin_dagster.backends.embeddings.local.LocalEmbedder`,
:class:`~ctxwin_dagster.backends.embeddings.openai.OpenAIEmbedder`) say what their model reads
and encode the misses.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import cast

import numpy as np

from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.calls.null_cache import NullCache
from ctxwin_dagster.backends.embeddings.identity import EmbedderIdentity
from ctxwin_dagster.core.budget.embedding_rows import RowPlan
from ctxwin_dagster.core.budget.embedding_window import (
    OVERSIZE_MODES,
    EmbeddingLimits,
    EmbeddingTokenizer,
    Oversize,
    fit_text,
)

__all__ = [
    "CachedEmbedder",
    "EmbeddingStats",
    "ProgressFn",
    "embedding_cache_key",
    "l2_normalize",
]

#: ``fn(done, total)`` called after each block of texts is encoded.
ProgressFn = Callable[[int, int], None]

#: Memory for the vectors of recently embedded texts that fit the window, per embedder.
RECENT_VECTORS_BYTES = 64 * 2**20


@dataclass(slots=True)
class EmbeddingStats:
    """What an embedder did since it was created (or :meth:`reset`).

    ``texts_requested`` counts every text passed to ``embed`` (duplicates included);
    ``texts_encoded`` the texts actually run through the model or sent to the server;
    ``cache_hits`` the texts served from the cache; ``duplicates`` the repeats within one call
    that were encoded only once. ``requested = encoded + cache_hits + duplicates``.
    ``texts_over_window`` counts texts longer than the model's window: with ``oversize="pool"``
    they were embedded in ``extra_pieces`` more pieces and pooled, with ``"truncate"`` the model
    cut ``tokens_cut`` tokens of them.
    """

    calls: int = 0
    texts_requested: int = 0
    texts_encoded: int = 0
    cache_hits: int = 0
    duplicates: int = 0
    batches: int = 0
    encode_seconds: float = 0.0
    texts_over_window: int = 0
    extra_pieces: int = 0
    tokens_cut: int = 0

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)

    def to_dict(self) -> dict[str, int | float]:
        d: dict[str, int | float] = asdict(self)
        d["encode_seconds"] = round(d["encode_seconds"], 3)
        return d


def embedding_cache_key(model: str, text: str) -> str:
    """The cache key of ``text``'s vector under ``model``: ``make_key("emb", model, sha256(text))``."""
    return ResponseCache.make_key("emb", model, hashlib.sha256(text.encode("utf-8")).hexdigest())


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length, as float32 (all-zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: np.ndarray = (vectors / norms).astype(np.float32, copy=False)
    return unit


class CachedEmbedder:
    """Shared logic: dedupe, cache lookups, encoding of the misses, stats, normalization."""

    model: str
    dim: int
    #: who serves the model: ``"local"`` or ``"openai"`` (an OpenAI-compatible server)
    provider: str = ""
    #: the numbers the model runs in (``"float32"``/``"bfloat16"`` locally; a server's own choice)
    precision: str = "as the server runs it"

    def __init__(
        self, cache: ResponseCache | NullCache | None, progress: ProgressFn | None, oversize: str = "pool"
    ) -> None:
        if oversize not in OVERSIZE_MODES:
            raise ValueError(f"oversize must be one of {OVERSIZE_MODES}; got {oversize!r}")
        self.cache = cache if cache is not None else NullCache()
        self.progress = progress
        self.oversize = oversize
        self.stats = EmbeddingStats()
        self._stats_lock = threading.Lock()
        self._tokenizer: EmbeddingTokenizer | None = None
        # Texts already counted and found within the window, with their vectors (least recently
        # used first): asking one question after another embeds the same sentences again and
        # again, and neither their tokens nor the disk cache need reading twice.
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()

    # Subclasses say what their model reads.
    @property
    def limits(self) -> EmbeddingLimits:  # pragma: no cover - abstract
        raise NotImplementedError

    def _make_tokenizer(self) -> EmbeddingTokenizer:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def identity(self) -> EmbedderIdentity:
        """The model's name, vector size (0 while a server's is not known yet) and provider:
        what an index records and compares (:mod:`~ctxwin_dagster.backends.embeddings.identity`)."""
        return EmbedderIdentity(self.model, int(self._known_dim() or 0), self.provider)

    @property
    def tokenizer(self) -> EmbeddingTokenizer:
        """The model's own tokenizer (loaded on first use)."""
        if self._tokenizer is None:
            self._tokenizer = self._make_tokenizer()
        return self._tokenizer

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalized float32 vectors of ``texts``, shape ``(len(texts), dim)``.

        Nothing is cut silently: a text longer than the model's window (counted with the
        model's own tokenizer) is embedded in window-sized pieces whose vectors are pooled
        (``oversize="pool"``, the default); with ``oversize="truncate"`` the model cuts it and
        the tokens lost are counted in :attr:`stats`. Repeated texts are encoded once; texts
        whose vector is in the cache are not encoded.
        """
        texts = self._check_texts(texts)
        if not texts:
            return self._embed_fitting(texts)
        known = self._recent_vectors(texts)
        new = [t for t in dict.fromkeys(texts) if t not in known]
        if not new:
            return self._embed_fitting(texts, known=known)
        limits = self.limits
        offsets = self.tokenizer.offsets_many(new)
        fits = {
            t: fit_text(t, self.tokenizer, limits, oversize=cast(Oversize, self.oversize), offsets=o)
            for t, o in zip(new, offsets, strict=True)
        }
        over = {t: f for t, f in fits.items() if f.over_window}
        if over:
            times = Counter(t for t in texts if t in over)  # every occurrence counts, as it is embedded
            with self._stats_lock:
                self.stats.texts_over_window += sum(times.values())
                self.stats.tokens_cut += sum(times[t] * f.tokens_cut for t, f in over.items())
                self.stats.extra_pieces += sum(times[t] * (len(f.pieces) - 1) for t, f in over.items() if f.pieces)
        if not any(len(f.pieces) > 1 for f in fits.values()):
            out = self._embed_fitting(texts, known=known)
        else:
            out = self._pool(
                [
                    [(f.pieces or ("",), f.weights or (1.0,), 1.0)] if (f := fits.get(t)) else [((t,), (1.0,), 1.0)]
                    for t in texts
                ],
                known=known,
            )
        self._remember(texts, out, [t for t, f in fits.items() if not f.over_window and t])
        return out

    def _recent_vectors(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The remembered vectors of ``texts`` (each a text known to fit the window)."""
        if not self._recent:
            return {}
        found: dict[str, np.ndarray] = {}
        with self._stats_lock:
            for t in texts:
                vec = self._recent.get(t)
                if vec is not None and t not in found:
                    self._recent.move_to_end(t)
                    found[t] = vec
        return found

    def _remember(self, texts: Sequence[str], vectors: np.ndarray, fitting: Sequence[str]) -> None:
        """Keep the vectors of ``fitting`` (texts of ``texts`` found within the window) in memory,
        dropping the least recently used beyond :data:`RECENT_VECTORS_BYTES`."""
        if not fitting or not len(vectors):
            return
        row = {t: i for i, t in reversed(list(enumerate(texts)))}
        most = max(1, RECENT_VECTORS_BYTES // (4 * vectors.shape[1]))
        with self._stats_lock:
            for t in fitting:
                self._recent[t] = vectors[row[t]].copy()
            while len(self._recent) > most:
                self._recent.popitem(last=False)

    def embed_plans(self, plans: Sequence[RowPlan]) -> np.ndarray:
        """The vectors of index rows planned by :func:`~ctxwin_dagster.core.budget.embedding_window.plan_row`.

        Each part's pieces are embedded and pooled by their weights, the parts combined by
        theirs, and the row vector L2-normalized. The pieces already fit the window (or are
        given as they are under ``oversize="truncate"``), so they are not fitted again.
        """
        return self._pool(
            [[(p.pieces or ("",), p.piece_weights or (1.0,), p.weight) for p in plan.parts] for plan in plans]
        )

    def _pool(
        self,
        rows: Sequence[Sequence[tuple[Sequence[str], Sequence[float], float]]],
        known: Mapping[str, np.ndarray] | None = None,
    ) -> np.ndarray:
        flat: list[str] = [piece for parts in rows for pieces, _, _ in parts for piece in pieces]
        vecs = self._embed_fitting(flat, known=known)
        out = np.zeros((len(rows), vecs.shape[1] if len(flat) else self.dim), dtype=np.float32)
        i = 0
        for r, parts in enumerate(rows):
            for pieces, weights, weight in parts:
                n = len(pieces)
                out[r] += weight * (np.asarray(weights, dtype=np.float32)[:, None] * vecs[i : i + n]).sum(axis=0)
                i += n
        return l2_normalize(out)

    # Subclasses encode a list of unique, uncached texts into an (n, dim) array.
    def _encode(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def texts_encoded(self) -> int:
        """Texts run through the model (not served from the cache)."""
        return self.stats.texts_encoded

    @property
    def cache_hits(self) -> int:
        """Texts served from the cache."""
        return self.stats.cache_hits

    @staticmethod
    def _check_texts(texts: Sequence[str]) -> list[str]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of texts; wrap a single text in a list")
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] is a {type(t).__name__}; embed() takes strings")
        return texts

    def _embed_fitting(self, texts: list[str], known: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Vectors of texts that fit the window (or are to be cut by the model): dedupe, cache,
        encode the misses, normalize. ``known``: vectors already at hand (counted as cache hits)."""
        n = len(texts)
        with self._stats_lock:
            self.stats.calls += 1
            self.stats.texts_requested += n
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)

        first_index: dict[str, int] = {}
        for i, t in enumerate(texts):
            first_index.setdefault(t, i)
        unique = list(first_index)
        vectors: dict[str, np.ndarray] = {t: known[t] for t in unique if t in known} if known else {}
        keys: dict[str, str] = {}
        use_cache = not isinstance(self.cache, NullCache)
        if use_cache:
            expected = self._known_dim()
            for t in unique:
                if t in vectors:
                    continue
                key = embedding_cache_key(self._cache_model(), t)
                keys[t] = key
                blob = self.cache.get_blob(key)
                if blob is not None and len(blob) % 4 == 0 and len(blob):
                    vec = np.frombuffer(blob, dtype=np.float32)
                    if expected is None or vec.shape[0] == expected:
                        vectors[t] = vec
        misses = [t for t in unique if t not in vectors]
        if misses:
            start = time.perf_counter()
            encoded = l2_normalize(self._encode(misses))
            elapsed = time.perf_counter() - start
            if encoded.shape[0] != len(misses):
                raise RuntimeError(f"{self.model} returned {encoded.shape[0]} vectors for {len(misses)} texts")
            for t, vec in zip(misses, encoded, strict=True):
                vectors[t] = vec
            if use_cache:
                for t in misses:
                    self.cache.put_blob(keys[t], vectors[t].tobytes())
            with self._stats_lock:
                self.stats.encode_seconds += elapsed
        with self._stats_lock:
            self.stats.texts_encoded += len(misses)
            self.stats.cache_hits += len(unique) - len(misses)
            self.stats.duplicates += n - len(unique)

        dim = len(vectors[texts[0]])
        out = np.empty((n, dim), dtype=np.float32)
        for i, t in enumerate(texts):
            row = vectors[t]
            if row.shape[0] != dim:
                raise RuntimeError(f"{self.model} gave vectors of different sizes ({row.shape[0]} and {dim})")
            out[i] = row
        return out

    def _known_dim(self) -> int | None:
        """The vector size if known without a request (cached vectors of another size are ignored)."""
        return self.dim

    def _cache_model(self) -> str:
        """The model name used in cache keys."""
        return self.model
