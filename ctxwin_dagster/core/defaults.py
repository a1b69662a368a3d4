"""One place for the variants and the paper's settings that every layer uses as defaults.

The SWB-RAG paper (Danter & Mühle, AHFE 2025) fixes: 1,000-character chunks with a 100-character
overlap; a global summary of at most 4,000 tokens from segments of at most 1,000,000 characters;
batches of 5 chunks with 20,000 characters before and after; contextualization at temperature
0.2, top-p 0.95, at most 2,048 output tokens, with Gemini 1.5 Flash; answers by GPT-4o.
Resources, the CLI, planning and the task engines take their defaults from here.

Example::

    >>> PAPER.chunk_size, PAPER.swb_batch_size, VARIANT_LABELS["swb_rag"]
    (1000, 5, 'SWB-RAG')
    >>> normalize_variant("cc")
    'cc_rag'
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PAPER", "PaperSettings", "VARIANTS", "VARIANT_LABELS", "normalize_variant"]

#: The three designs, in the order reports show them (also the LanceDB table prefixes).
VARIANTS: tuple[str, ...] = ("t_rag", "cc_rag", "swb_rag")

#: How the designs are named for people.
VARIANT_LABELS: dict[str, str] = {"t_rag": "T-RAG", "cc_rag": "CC-RAG", "swb_rag": "SWB-RAG"}

_ALIASES = {
    "t": "t_rag",
    "t_rag": "t_rag",
    "t-rag": "t_rag",
    "trag": "t_rag",
    "cc": "cc_rag",
    "cc_rag": "cc_rag",
    "cc-rag": "cc_rag",
    "ccrag": "cc_rag",
    "swb": "swb_rag",
    "swb_rag": "swb_rag",
    "swb-rag": "swb_rag",
    "swbrag": "swb_rag",
}


def normalize_variant(variant: str) -> str:
    """``"t"``/``"cc"``/``"swb"`` (or ``"t_rag"``, ``"T-RAG"``…) → the variant name.

    Raises:
        ValueError: an unknown variant (the message lists the known ones).
    """
    key = str(variant).strip().lower()
    if key not in _ALIASES:
        raise ValueError(f"unknown variant {variant!r}; use t, cc or swb (or {', '.join(VARIANTS)})")
    return _ALIASES[key]


@dataclass(frozen=True, slots=True)
class PaperSettings:
    """The paper's settings (see the module docstring)."""

    chunk_size: int = 1000
    chunk_overlap: int = 100
    summary_max_tokens: int = 4000
    summary_segment_chars: int = 1_000_000
    swb_batch_size: int = 5
    swb_window_chars: int = 20_000
    temperature: float = 0.2
    top_p: float = 0.95
    max_output_tokens: int = 2048
    contextualizer_model: str = "gemini-1.5-flash"
    answer_model: str = "gpt-4o"


#: The paper's settings.
PAPER = PaperSettings()
