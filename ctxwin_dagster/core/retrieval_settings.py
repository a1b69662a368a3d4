"""How a question's context is retrieved and enhanced — one definition for ``ctxwin ask`` and
the evaluation, so the evaluation measures what users get.

:class:`RetrievalSettings` holds every retrieval and enhancement option of ``ctxwin ask``
(``k``, the enhancement mode and its option, hybrid search). Named settings:

``ask``
    ``ctxwin ask``'s default: sentence focus, a 4,000-character budget over the top-16 chunks.
``paper``
    the SWB-RAG paper's protocol: the top-4 chunks as they are, no enhancement.

Example::

    >>> print(RetrievalSettings.named("paper").describe())
    top-4 chunks, no enhancement (the paper's protocol)
    >>> RetrievalSettings.named("ask", focus_chars=6000).ask_kwargs()
    {'k': 16, 'hybrid': False, 'enhance_mode': 'focus', 'focus_chars': 6000}
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .enhance import (
    DEFAULT_CONTEXT_WINDOW_SIZE,
    DEFAULT_FOCUS_BUDGET_CHARS,
    DEFAULT_FOCUS_CANDIDATES,
    DEFAULT_NUM_NEIGHBORS,
    MODES,
)

__all__ = ["DEFAULT_K", "RETRIEVAL_PRESETS", "RetrievalSettings"]

#: Chunks retrieved when ``k`` is not given and the mode is not focus: the design's top-4.
DEFAULT_K = 4


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    """Retrieval depth, enhancement and hybrid search (None = the mode's default).

    Attributes:
        enhance_mode: ``"focus"``, ``"neighbors"``, ``"budget"`` or ``"none"``.
        k: chunks retrieved (default 16 candidates for focus, else 4).
        focus_chars: the focus mode's character budget (default 4,000).
        num_neighbors: chunks added on each side of a hit (neighbors mode; default 1).
        context_window_size: characters per hit (budget mode; default 3,000).
        hybrid: fuse vector search with full-text search.
        name: the named setting this came from (``ask``, ``paper``), with ``+`` when changed.
    """

    enhance_mode: str = "focus"
    k: int | None = None
    focus_chars: int | None = None
    num_neighbors: int | None = None
    context_window_size: int | None = None
    hybrid: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        if self.enhance_mode not in MODES:
            raise ValueError(f"enhance_mode must be one of {MODES}; got {self.enhance_mode!r}")
        for field_name, minimum in (("k", 1), ("focus_chars", 1), ("num_neighbors", 0), ("context_window_size", 1)):
            value = getattr(self, field_name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
                raise ValueError(f"{field_name} must be an int >= {minimum} or None; got {value!r}")
        owner = {"focus_chars": "focus", "num_neighbors": "neighbors", "context_window_size": "budget"}
        for field_name, mode in owner.items():
            if getattr(self, field_name) is not None and self.enhance_mode != mode:
                raise ValueError(
                    f"{field_name} is an option of enhance_mode={mode!r}, not {self.enhance_mode!r}; drop it or set "
                    f"enhance_mode={mode!r}"
                )

    @classmethod
    def named(cls, name: str, **changes: Any) -> RetrievalSettings:
        """A named setting (``ask`` or ``paper``), optionally changed.

        Changing the mode drops the named setting's option of another mode and its ``k``
        unless given.
        """
        if name not in RETRIEVAL_PRESETS:
            raise ValueError(f"unknown retrieval setting {name!r}; use one of {sorted(RETRIEVAL_PRESETS)}")
        base = RETRIEVAL_PRESETS[name]
        changes = {k: v for k, v in changes.items() if v is not None}
        if not changes:
            return base
        if "enhance_mode" in changes and changes["enhance_mode"] != base.enhance_mode:
            base = cls(enhance_mode=changes["enhance_mode"], hybrid=base.hybrid)
        return replace(base, **changes, name=f"{name}+")

    @property
    def effective_k(self) -> int:
        """The chunks actually retrieved."""
        if self.k is not None:
            return self.k
        return DEFAULT_FOCUS_CANDIDATES if self.enhance_mode == "focus" else DEFAULT_K

    def ask_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :meth:`ctxwin_dagster.ask.Asker.ask` for these settings."""
        kwargs: dict[str, Any] = {"k": self.effective_k, "hybrid": self.hybrid, "enhance_mode": self.enhance_mode}
        if self.enhance_mode == "focus":
            kwargs["focus_chars"] = self.focus_chars or DEFAULT_FOCUS_BUDGET_CHARS
        elif self.enhance_mode == "neighbors":
            kwargs["num_neighbors"] = DEFAULT_NUM_NEIGHBORS if self.num_neighbors is None else self.num_neighbors
        elif self.enhance_mode == "budget":
            kwargs["context_window_size"] = self.context_window_size or DEFAULT_CONTEXT_WINDOW_SIZE
        return kwargs

    def describe(self) -> str:
        """One line a report can print, e.g. ``"sentence focus, 4,000 characters from the top-16 chunks"``."""
        k = self.effective_k
        if self.enhance_mode == "focus":
            text = f"sentence focus, {self.focus_chars or DEFAULT_FOCUS_BUDGET_CHARS:,} characters from the top-{k} chunks"
        elif self.enhance_mode == "neighbors":
            n = DEFAULT_NUM_NEIGHBORS if self.num_neighbors is None else self.num_neighbors
            text = f"top-{k} chunks, each with ±{n} neighbouring chunks, merged"
        elif self.enhance_mode == "budget":
            text = f"top-{k} chunks, each grown to {self.context_window_size or DEFAULT_CONTEXT_WINDOW_SIZE:,} characters, merged"
        else:
            text = f"top-{k} chunks, no enhancement"
        if self.hybrid:
            text += ", hybrid (vector + full-text) search"
        label = {"ask": "ctxwin ask's default", "paper": "the paper's protocol"}.get(self.name)
        if label:
            text += f" ({label})"
        elif self.name.endswith("+"):
            text += f" (changed from {self.name[:-1]!r})"
        return text


#: The named settings.
RETRIEVAL_PRESETS: dict[str, RetrievalSettings] = {
    "ask": RetrievalSettings(enhance_mode="focus", name="ask"),
    "paper": RetrievalSettings(enhance_mode="none", k=DEFAULT_K, name="paper"),
}
