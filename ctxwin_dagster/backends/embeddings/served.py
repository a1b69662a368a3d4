"""The command's embedding server seen from a run: a model on it, called the way a loaded
``SentenceTransformer`` is (:mod:`.server` is the server; :class:`~.local.LocalEmbedder` sends its
texts through :func:`served_model` when the server serves its model).

A server that is unreachable, or serves another model or size, is reported once in the log and
not used; one that goes away later is reported once and the model is loaded in this process
instead (the ``fallback``).
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ServedModel", "served_model"]

log = logging.getLogger(__name__)

#: Loads the model in this process (a ``SentenceTransformer``): what a served model falls back to.
Fallback = Callable[[], Any]

# (server url, model, precision) -> the server's model, or None when it is unusable
_SERVED: dict[tuple[str, str, str], ServedModel | None] = {}
_LOCK = threading.Lock()


class ServedModel:
    """A model on the command's embedding server, with ``SentenceTransformer.encode``'s call."""

    def __init__(self, url: str, model: str, dim: int, truncate: bool, precision: str, fallback: Fallback) -> None:
        import httpx

        self.url, self.model, self.dim, self.truncate = url, model, dim, truncate
        self.precision = precision
        self.fallback = fallback
        self.gone = False
        self._client = httpx.Client(base_url=url, timeout=httpx.Timeout(900.0, connect=5.0))

    def encode(
        self, texts: list[str], *, batch_size: int, convert_to_numpy: bool = True, show_progress_bar: bool = False
    ) -> np.ndarray:
        """The vectors of ``texts`` (unnormalized, float32), encoded ``batch_size`` at a time."""
        import httpx

        if not self.gone:
            try:
                reply = self._client.post(
                    "/v1/embeddings",
                    json={
                        "model": self.model,
                        "input": texts,
                        "encoding_format": "base64",
                        "batch_size": batch_size,
                        "truncate": self.truncate,
                        "precision": self.precision,
                    },
                )
            except httpx.TransportError as exc:
                log.warning(
                    "the embedding server %s went away (%s: %s); loading the model in this process",
                    self.url,
                    type(exc).__name__,
                    exc,
                )
                self.gone = True
        if self.gone:
            return np.asarray(
                self.fallback().encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False),
                dtype=np.float32,
            )
        if reply.status_code != 200:
            raise RuntimeError(
                f"the embedding server {self.url} refused {len(texts)} texts: {reply.status_code} {reply.text[:500]}"
            )
        data = sorted(reply.json()["data"], key=lambda d: d["index"])
        return np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in data]).astype(np.float32)


def served_model(
    url: str, model: str, dim: int, truncate: bool, precision: str, fallback: Fallback
) -> ServedModel | None:
    """The server's model ``model`` (None, logged once, when the server is unreachable or
    serves another model or size). Each request names ``precision``, which the server runs."""
    key = (url, model, precision)
    with _LOCK:
        if key in _SERVED:
            return _SERVED[key]
        served = None
        try:
            import httpx

            listed = httpx.get(f"{url.rstrip('/')}/v1/models", timeout=5.0).json()["data"]
            match = [m for m in listed if m["id"] == model]
            if not match:
                log.warning(
                    "the embedding server %s does not serve %s (it serves %s); loading the model in this process",
                    url,
                    model,
                    [m["id"] for m in listed],
                )
            elif int(match[0]["dim"]) != dim:
                log.warning(
                    "the embedding server %s gives %s-dim vectors for %s, not %s; loading the model in this process",
                    url,
                    match[0]["dim"],
                    model,
                    dim,
                )
            else:
                served = ServedModel(url, model, dim, truncate, precision, fallback)
        except Exception as exc:  # unreachable, or not our server
            log.warning(
                "the embedding server %s cannot be used (%s: %s); loading the model in this process",
                url,
                type(exc).__name__,
                exc,
            )
        _SERVED[key] = served
        return served
