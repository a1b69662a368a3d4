"""How a question's context is retrieved and enhanced — one definition for ``ctxwin ask`` and
the evaluation, so the evaluation measures what users get.

:class:`RetrievalSettings` holds every retrieval and enhancement option of ``ctxwin ask``
(``k``, the enhancement mode and its option, hybrid search, the focus signals). Named settings:

``ask``
    ``ctxwin ask``'s default, chosen on the tuning split of evaluations/retrieval_quality.py:
    sentence focus over the top-24 chunks of a hybrid search (vectors fused with BM25 over the
    document's chunks), sentences scored by the question's meaningful parts and by BM25
    (weight 0.2), windows added while within 0.23 of the best score, at most 8,000 characters,
    and the document's opening (its first 500 characters, where it names itself, its parties and
    its date; CUAD's tuning contracts 67.4 → 80.2 % span hit);
    a question that names a financial statement gets the chunks holding its title as candidates;
    a question asked of the whole folder that names a year or quarter is searched in the one
    document it most likely asks about when that period dates some documents and not others
    (``route_to=1``, chosen on FinanceBench dev's tuning companies and SQuAD's tuning articles:
    evaluations/financebench_retrieval.py, evaluations/squad_folder.py); one that points at a kind
    of document ("this agreement") is searched in the folder's documents of that kind
    (evaluations/kind_folder.py).
``focus-dense``
    the earlier default: sentence focus by vectors alone, 4,000 characters from the top-16 chunks.
``paper``
    the SWB-RAG paper's protocol: the top-4 chunks as they are, no enhancement.

Each signal can be changed on its own, e.g. ``RetrievalSettings.named("ask", hybrid=False)``. An
option of another enhancement mode picks that mode (:data:`MODE_OPTIONS`, the one table of
which option belongs to which mode): ``named("ask", num_neighbors=2)`` is the neighbors mode.
``ctxwin ask``'s options, the evaluation resource's fields and :meth:`Asker.ask
<ctxwin_dagster.ask.Asker.ask>`'s ``retrieval=`` all go through :meth:`RetrievalSettings.named`.

Example::

    >>> print(RetrievalSettings.named("paper").describe())
    top-4 chunks, no enhancement (the paper's protocol)
    >>> RetrievalSettings.named("ask", score_drop=0.3).score_drop
    0.3
    >>> RetrievalSettings.named("ask", num_neighbors=2, route_to=0).describe()
    "top-4 chunks, each with ±2 neighbouring chunks, merged (changed from 'ask')"
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

__all__ = [
    "DEFAULT_CONTEXT_WINDOW_SIZE",
    "DEFAULT_FOCUS_BUDGET_CHARS",
    "DEFAULT_FOCUS_CANDIDATES",
    "DEFAULT_FOCUS_CHUNK_WEIGHT",
    "DEFAULT_FOCUS_LEXICAL_WEIGHT",
    "DEFAULT_FOCUS_STRUCTURE",
    "DEFAULT_FOCUS_WINDOW_CHARS",
    "DEFAULT_K",
    "DEFAULT_NUM_NEIGHBORS",
    "MODES",
    "MODE_OPTIONS",
    "RETRIEVAL_PRESETS",
    "EnhanceMode",
    "RetrievalSettings",
]

EnhanceMode = Literal["none", "neighbors", "budget", "focus"]

#: The enhancement modes.
MODES: tuple[str, ...] = ("none", "neighbors", "budget", "focus")

#: Chunks added on each side of a hit in ``"neighbors"`` mode when none is given.
DEFAULT_NUM_NEIGHBORS = 1

#: Character budget of one window in ``"budget"`` mode when none is given (a 1,000-character
#: chunk plus about one neighbour on each side, overlaps counted once).
DEFAULT_CONTEXT_WINDOW_SIZE = 3000

#: ``"focus"`` mode defaults, chosen on the SQuAD/CUAD dev sets (retrieval_quality.md): the
#: largest window around one sentence, the characters of the whole context, the weight of the
#: chunk's retrieval score in a sentence's score, and how many chunks to retrieve as candidates.
DEFAULT_FOCUS_WINDOW_CHARS = 700
DEFAULT_FOCUS_BUDGET_CHARS = 4000
DEFAULT_FOCUS_CHUNK_WEIGHT = 0.5
DEFAULT_FOCUS_CANDIDATES = 16
#: The weight of a sentence's full-text (BM25) score, scaled to [0, 1], when full-text scores
#: are given, and whether windows follow the document's structure (paragraphs, clauses).
DEFAULT_FOCUS_LEXICAL_WEIGHT = 0.2
DEFAULT_FOCUS_STRUCTURE = False


#: Chunks retrieved when ``k`` is not given and the mode is not focus: the design's top-4.
DEFAULT_K = 4

#: The options of each enhancement mode; an option may only be set in its own mode. The first
#: option of a mode picks that mode when it is given without one (``--neighbors 2``).
MODE_OPTIONS: dict[str, tuple[str, ...]] = {
    "focus": (
        "focus_chars",
        "lexical_weight",
        "score_drop",
        "question_parts",
        "structure",
        "statements",
        "opening_chars",
    ),
    "neighbors": ("num_neighbors",),
    "budget": ("context_window_size",),
    "none": (),
}
_PICKS_MODE = {options[0]: mode for mode, options in MODE_OPTIONS.items() if options}


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    """Retrieval depth, enhancement and hybrid search (None = the mode's default).

    Attributes:
        enhance_mode: ``"focus"``, ``"neighbors"``, ``"budget"`` or ``"none"``.
        k: chunks retrieved (None: 16 candidates for focus, else 4; the ``ask`` setting takes 24).
        focus_chars: the focus mode's character budget (None: 4,000; the ``ask`` setting: 8,000).
        num_neighbors: chunks added on each side of a hit (neighbors mode; default 1).
        context_window_size: characters per hit (budget mode; default 3,000).
        hybrid: fuse vector search with full-text search (in focus mode: BM25 over the hit
            documents' chunks, reciprocal rank fusion; otherwise the index's full-text search).
        question_parts: score sentences by the whole question and, with added weight, its
            meaningful parts (quoted names, ``Label: text`` fields of a templated question).
        lexical_weight: weight of a sentence's BM25 score in focus mode (0 or None: off).
        structure: focus windows cover their paragraph or clause first.
        statements: a question that names a financial statement ("the cash flow statement",
            "the balance sheet") gets the chunks holding that statement's title as candidates
            (:mod:`~ctxwin_dagster.core.retrieval.statements`).
        score_drop: the adaptive budget: no window scoring more than this below the best
            (``focus_chars`` is then the cap).
        opening_chars: each document in the context also gives its opening, its first
            ``opening_chars`` characters to the last sentence end within them, on top of
            ``focus_chars`` (:func:`~ctxwin_dagster.core.retrieval.window.with_openings`: a document's name,
            parties and date are there); None or 0: no opening.
        route_to: a question asked of the whole folder (no document named) is searched in the
            ``route_to`` documents it most likely asks about
            (:class:`~ctxwin_dagster.core.retrieval.routing.DocumentRouter`: best chunk, name and
            opening, the years named, the kind of document pointed at); 0: every document is
            searched. Any enhancement mode.
        name: the named setting this came from (``ask``, ``paper``), with ``+`` when changed.
    """

    enhance_mode: str = "focus"
    k: int | None = None
    focus_chars: int | None = None
    num_neighbors: int | None = None
    context_window_size: int | None = None
    hybrid: bool = False
    question_parts: bool = False
    lexical_weight: float | None = None
    structure: bool = False
    statements: bool = False
    score_drop: float | None = None
    opening_chars: int | None = None
    route_to: int = 0
    name: str = ""

    def __post_init__(self) -> None:
        if self.enhance_mode not in MODES:
            raise ValueError(f"enhance_mode must be one of {MODES}; got {self.enhance_mode!r}")
        for field_name, minimum in (
            ("k", 1),
            ("focus_chars", 1),
            ("num_neighbors", 0),
            ("context_window_size", 1),
            ("opening_chars", 0),
        ):
            value = getattr(self, field_name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
                raise ValueError(f"{field_name} must be an int >= {minimum} or None; got {value!r}")
        if isinstance(self.route_to, bool) or not isinstance(self.route_to, int) or self.route_to < 0:
            raise ValueError(f"route_to must be an int >= 0 (0: search every document); got {self.route_to!r}")
        for field_name in ("lexical_weight", "score_drop"):
            value = getattr(self, field_name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
                raise ValueError(f"{field_name} must be a number >= 0 or None; got {value!r}")
        for mode, options in MODE_OPTIONS.items():
            for field_name in options:
                value = getattr(self, field_name)
                if value is not None and value is not False and self.enhance_mode != mode:
                    raise ValueError(
                        f"{field_name} is an option of enhance_mode={mode!r}, not {self.enhance_mode!r}; drop it or set "
                        f"enhance_mode={mode!r}"
                    )

    @classmethod
    def named(cls, name: str, **changes: Any) -> RetrievalSettings:
        """A named setting (``ask``, ``focus-dense`` or ``paper``), optionally changed (None: unchanged).

        Changing the mode starts from that mode's plain setting (no hybrid search, the mode's
        ``k``; the folder routing is kept) with the changes given. Without ``enhance_mode``, an option of one mode
        (``focus_chars``, ``num_neighbors``, ``context_window_size``) picks that mode.

        Raises:
            ValueError: an unknown name or field, options of two modes, an option of another
                mode than the one given, or a value out of range.
        """
        if name not in RETRIEVAL_PRESETS:
            raise ValueError(f"unknown retrieval setting {name!r}; use one of {sorted(RETRIEVAL_PRESETS)}")
        base = RETRIEVAL_PRESETS[name]
        changes = {k: v for k, v in changes.items() if v is not None}
        if not changes:
            return base
        picked = {field: mode for field, mode in _PICKS_MODE.items() if field in changes}
        if len(set(picked.values())) > 1:
            raise ValueError(
                f"pass one of {', '.join(_PICKS_MODE)}, not both {sorted(picked)}: each belongs to another enhancement mode"
            )
        if "enhance_mode" not in changes and picked:
            changes["enhance_mode"] = next(iter(picked.values()))
        if "enhance_mode" in changes and changes["enhance_mode"] != base.enhance_mode:
            base = cls(enhance_mode=changes["enhance_mode"], route_to=base.route_to)
        return replace(base, **changes, name=f"{name}+")

    @property
    def effective_lexical_weight(self) -> float:
        """The weight of BM25 sentence scores (0: off)."""
        return float(self.lexical_weight or 0.0)

    @property
    def effective_k(self) -> int:
        """The chunks actually retrieved."""
        if self.k is not None:
            return self.k
        return DEFAULT_FOCUS_CANDIDATES if self.enhance_mode == "focus" else DEFAULT_K

    def describe(self) -> str:
        """One line a report can print, e.g. ``"sentence focus, 4,000 characters from the top-16 chunks"``."""
        k = self.effective_k
        if self.enhance_mode == "focus":
            chars = self.focus_chars or DEFAULT_FOCUS_BUDGET_CHARS
            text = f"sentence focus, {chars:,} characters from the top-{k} chunks"
            if self.score_drop is not None:
                text = f"sentence focus from the top-{k} chunks, windows while within {self.score_drop:g} of the best score, at most {chars:,} characters"
            extras = [
                label
                for on, label in (
                    (self.question_parts, "question parts"),
                    (self.effective_lexical_weight > 0, f"BM25 sentence scores ×{self.effective_lexical_weight:g}"),
                    (self.structure, "clause-following windows"),
                    (self.statements, "financial statements by title"),
                    (bool(self.opening_chars), f"each document's opening, {self.opening_chars or 0:,} characters"),
                )
                if on
            ]
            if extras:
                text += " (" + ", ".join(extras) + ")"
        elif self.enhance_mode == "neighbors":
            n = DEFAULT_NUM_NEIGHBORS if self.num_neighbors is None else self.num_neighbors
            text = f"top-{k} chunks, each with ±{n} neighbouring chunks, merged"
        elif self.enhance_mode == "budget":
            text = f"top-{k} chunks, each grown to {self.context_window_size or DEFAULT_CONTEXT_WINDOW_SIZE:,} characters, merged"
        else:
            text = f"top-{k} chunks, no enhancement"
        if self.hybrid:
            text += ", hybrid (vector + full-text) search"
        if self.route_to:
            which = "likeliest document" if self.route_to == 1 else f"{self.route_to} likeliest documents"
            text += (
                f", a folder-wide question that names a period routed to its {which}, one that points at"
                " a kind of document ('this agreement') to the documents of that kind"
            )
        label = {
            "ask": "ctxwin ask's default",
            "paper": "the paper's protocol",
            "focus-dense": "the earlier default",
        }.get(self.name)
        if label:
            text += f" ({label})"
        elif self.name.endswith("+"):
            text += f" (changed from {self.name[:-1]!r})"
        return text


#: The named settings.
RETRIEVAL_PRESETS: dict[str, RetrievalSettings] = {
    "ask": RetrievalSettings(
        enhance_mode="focus",
        k=24,
        focus_chars=8000,
        hybrid=True,
        question_parts=True,
        lexical_weight=0.2,
        score_drop=0.23,
        statements=True,
        opening_chars=500,
        route_to=1,
        name="ask",
    ),
    "focus-dense": RetrievalSettings(
        enhance_mode="focus", k=DEFAULT_FOCUS_CANDIDATES, focus_chars=DEFAULT_FOCUS_BUDGET_CHARS, name="focus-dense"
    ),
    "paper": RetrievalSettings(enhance_mode="none", k=DEFAULT_K, name="paper"),
}
