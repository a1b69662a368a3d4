"""Which structured output an OpenAI-compatible endpoint accepts, found out once per endpoint.

A request with a reply schema (:class:`~ctxwin_dagster.core.methods.prompts.schemas.ReplySchema`)
is first sent with ``response_format={"type": "json_schema", "strict": true, ...}``. A server
that rejects that (HTTP 400/422 naming ``response_format`` or the schema) is asked again at once
with ``{"type": "json_object", "schema": {...}}`` (``grammar``: llama.cpp's servers turn the
schema into a grammar that decoding follows), then with ``{"type": "json_object"}`` alone, and
one that rejects that too with no ``response_format`` at all. What an endpoint accepted is remembered for the process and kept in the response cache
(when there is one), so later requests and later runs go straight to it. Every reply records the
format it was held to (``CallRecord.reply_format``), and the asset metadata counts them.

A server may also accept the schema and not follow it. The task engine's parsers read every
reply all the same; such a reply is counted there (``schema_ignored``) and repaired, retried or
replaced by the fallback, never used as it is.
"""

from __future__ import annotations

import contextlib
import logging
import threading

from ctxwin_dagster.backends.calls.cache import ResponseCache

__all__ = ["ENFORCED", "FORMATS", "ReplyFormats", "format_rejection"]

log = logging.getLogger(__name__)

#: From the most to the least a server may enforce.
FORMATS = ("schema", "grammar", "json_object", "text")
#: The formats under which the server holds the reply to the schema.
ENFORCED = ("schema", "grammar")

_WORDS = ("response_format", "json_schema", "json schema", "structured output", "response format", "json_object")


def format_rejection(exc: BaseException) -> bool:
    """Whether ``exc`` is a server refusing the request's ``response_format`` (400 or 422 whose
    message names it, or llama-cpp-python's 500 that reports the body failing validation there),
    rather than any other bad request."""
    from ctxwin_dagster.backends.calls.retry import invalid_request_body

    status = getattr(exc, "status_code", None)
    if status not in (400, 422) and not invalid_request_body(exc):
        return False
    text = str(getattr(exc, "message", "") or exc).lower()
    body = getattr(exc, "body", None)
    if body is not None:
        text += " " + str(body).lower()
    return any(w in text for w in _WORDS)


class ReplyFormats:
    """The reply format each endpoint accepts: in memory for the process, and in ``cache``.

    Args:
        cache: a response cache (``get``/``put``) that keeps the finding across runs; None: memory only.
    """

    _known: dict[tuple[str, str], str] = {}  # shared by every backend of the process
    _lock = threading.Lock()

    def __init__(self, cache: ResponseCache | None = None) -> None:
        self.cache = cache

    @staticmethod
    def _key(base_url: str, model: str) -> str:
        return f"reply-format|{base_url}|{model}"

    def get(self, base_url: str, model: str) -> str:
        """The best format the endpoint is known to accept (``schema`` until it refused it)."""
        with self._lock:
            found = self._known.get((base_url, model))
        if found is not None:
            return found
        entry = None
        if self.cache is not None:
            try:
                entry = self.cache.get(self._key(base_url, model))
            except Exception:  # noqa: BLE001 - an unreadable cache only means asking again
                entry = None
        fmt = entry.get("reply_format") if isinstance(entry, dict) else None
        fmt = fmt if fmt in FORMATS else "schema"
        with self._lock:
            self._known[(base_url, model)] = fmt
        return fmt

    def refused(self, base_url: str, model: str, fmt: str, exc: BaseException) -> str | None:
        """The next format to try after the endpoint refused ``fmt`` with ``exc``; None when
        ``exc`` is not about the format or nothing is left to try."""
        if not format_rejection(exc) or fmt not in FORMATS or fmt == FORMATS[-1]:
            return None
        lower = FORMATS[FORMATS.index(fmt) + 1]
        with self._lock:
            current = self._known.get((base_url, model), "schema")
            if FORMATS.index(current) < FORMATS.index(lower):
                self._known[(base_url, model)] = lower
        log.warning(
            "%s at %s does not accept response_format %s (%.160s); sending %s from now on, and the "
            "replies are checked by the parsers as before",
            model,
            base_url,
            fmt,
            str(getattr(exc, "message", "") or exc),
            {"grammar": "json_object with the schema", "json_object": "json_object"}.get(lower, "no response_format"),
        )
        if self.cache is not None:
            with contextlib.suppress(Exception):  # only the memory of it across runs would be lost
                self.cache.put(self._key(base_url, model), {"reply_format": lower})
        return lower

    @classmethod
    def forget(cls) -> None:
        """Forget what every endpoint accepted (tests; a server that was upgraded)."""
        with cls._lock:
            cls._known.clear()
