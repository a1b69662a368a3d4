"""How :meth:`Asker.ask <ctxwin_dagster.ask.service.Asker.ask>` reads: retrieve passages, slide over
the whole document, or choose (``auto``). Light to import: ``ctxwin ask`` offers these as choices
before it loads the asking stack."""

from __future__ import annotations

from typing import Literal

__all__ = ["ASK_MODES", "AskMode"]

AskMode = Literal["retrieve", "sliding", "auto"]
ASK_MODES: tuple[str, ...] = ("retrieve", "sliding", "auto")
