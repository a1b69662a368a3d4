"""The models an embedding server holds (:mod:`.server`): loaded once, in the background from the
moment the server starts, and encoded one request at a time (the model uses every core for each).

A model asked for in its other precision is loaded in that one too, on first use, so a request
gets the vectors its sender would compute itself; a text over the model's window is refused unless
the request lets the model cut it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import numpy as np

from ctxwin_dagster.backends.embeddings.local import LOCAL_MODEL_NAME, LocalEmbedder, resolve_precision
from ctxwin_dagster.core.json_types import JSONObject

__all__ = ["ModelHost"]

log = logging.getLogger(__name__)


class ModelHost:
    """The served models: loaded once (in the background), encoded one request at a time."""

    def __init__(self, models: list[str], *, device: str = "cpu") -> None:
        self.embedders: dict[str, LocalEmbedder] = {}
        for name in models or [LOCAL_MODEL_NAME]:
            if name == LOCAL_MODEL_NAME:
                emb = LocalEmbedder(device=device)
            else:
                folder = Path(name).expanduser().resolve()
                if not folder.is_dir():
                    raise SystemExit(
                        f"embedding server: --model {name!r} is not a folder with a sentence-transformers model"
                    )
                emb = LocalEmbedder(model_path=folder, device=device)
                name = str(folder)
            self.embedders[name] = emb
        self._lock = threading.Lock()
        self._variants: dict[tuple[int, str], LocalEmbedder] = {}
        self._loaded = threading.Event()
        self.load_error: str = ""
        self.load_seconds = 0.0

    def load_in_background(self) -> None:
        def load() -> None:
            started = time.perf_counter()
            try:
                for emb in self.embedders.values():
                    emb.load()
                    emb.sentence_transformer.encode(["warm up"], show_progress_bar=False)
            except Exception as exc:  # reported to every request and by /health
                self.load_error = f"{type(exc).__name__}: {exc}"
                log.error("embedding server: loading failed: %s", self.load_error)
            self.load_seconds = time.perf_counter() - started
            self._loaded.set()

        threading.Thread(target=load, name="load-models", daemon=True).start()

    @property
    def loaded(self) -> bool:
        """Whether loading has ended (see :attr:`load_error` for how)."""
        return self._loaded.is_set()

    def describe(self) -> list[JSONObject]:
        return [
            {
                "id": name,
                "object": "model",
                "owned_by": "ctxwin",
                "model": emb.model,
                "dim": emb.dim,
                "max_tokens": emb.limits.max_tokens,
                "provider": emb.provider,
                "precision": emb.precision,
            }
            for name, emb in self.embedders.items()
        ]

    def find(self, model: str, precision: str | None = None) -> LocalEmbedder:
        """The served model ``model`` in ``precision`` (None: the one it was loaded in). A model
        asked for in its other precision is loaded in that one too, on first use, so a request
        gets the vectors its sender would compute itself.

        Raises:
            KeyError: a model not served here.
            ValueError: an unknown precision.
        """
        emb = self.embedders.get(model)
        if emb is None and model and os.path.isdir(model):
            emb = self.embedders.get(str(Path(model).resolve()))
        if emb is None:
            raise KeyError(f"model {model!r} is not served here; served: {sorted(self.embedders)}")
        if precision is None:
            return emb
        wanted = resolve_precision(precision, emb.device)
        if wanted == emb.precision:
            return emb
        with self._lock:
            key = (id(emb), wanted)
            other = self._variants.get(key)
            if other is None:
                other = LocalEmbedder(model_path=emb.model_path, device=emb.device, precision=wanted)
                self._variants[key] = other
        return other

    def encode(
        self, model: str, texts: list[str], *, batch_size: int, truncate: bool, precision: str | None = None
    ) -> tuple[np.ndarray, int]:
        """Vectors (unnormalized, as ``SentenceTransformer.encode`` gives them) and tokens read."""
        emb = self.find(model, precision)
        tok = emb.tokenizer
        counts = [len(o) + tok.special_tokens for o in tok.offsets_many(texts)]  # special tokens included
        limit = emb.limits.max_tokens
        if not truncate:
            for i, n in enumerate(counts):
                if n > limit:
                    raise ValueError(
                        f"input[{i}] is {n} word pieces (special tokens included); {emb.model} reads at most {limit}. "
                        "Fit it first (the ctxwin embedder does), or send truncate: true to let the model cut it"
                    )
        if not self._loaded.wait(600):
            raise RuntimeError("the embedding model is still loading after 600 s")
        if self.load_error:
            raise RuntimeError(f"the embedding model failed to load: {self.load_error}")
        with self._lock:
            vecs = emb.sentence_transformer.encode(
                texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
            )
        return np.asarray(vecs, dtype=np.float32), int(sum(min(n, limit) for n in counts))
