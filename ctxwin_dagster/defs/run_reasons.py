"""Why a run runs, as the console and the run's tags say it: the tags ``ctxwin/reason`` and
``ctxwin/documents``, a short reason for the UI's list of runs, one reason for a run of several
documents, and the documents of a run named as a person reads them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: A run's tag naming why it was launched.
REASON_TAG = "ctxwin/reason"
#: The tag of a run of several documents that names them as a person reads them (the range's own
#: tags, ``dagster/asset_partition_range_*``, are hidden in the UI's list of runs).
DOCUMENTS_TAG = "ctxwin/documents"


def documents_label(keys: Sequence[str]) -> str:
    """The documents of a run, as the console and the run's tag name them.

    >>> documents_label(["a", "b", "c"])
    'a … c (3 documents)'
    >>> documents_label(["a"])
    'a'
    """
    return f"{keys[0]} … {keys[-1]} ({len(keys)} documents)" if len(keys) > 1 else "".join(keys)


def short_reason(asset: str, why: str) -> str:
    """A reason as a run's tag shows it: the cause first, in a few words, then the asset it
    starts at (the UI's list of runs clips a tag at about 40 characters).

    >>> short_reason("raw_documents", "never materialized")
    'new document'
    >>> short_reason("chunks", "code version 1 -> 2 (chunk ids now include the document id)")
    'code changed: chunks'
    >>> short_reason("t_rag_ragas_scores", "upstream t_rag_answers rematerialized since")
    't_rag_answers rematerialized'
    >>> short_reason("qa_sets", "qa changed")
    'questions changed: qa_sets'
    """
    if asset == "raw_documents" and why == "never materialized":
        return "new document"
    if why == "document changed":
        return why
    if why.startswith("upstream ") and why.endswith(" rematerialized since"):
        return f"{why.removeprefix('upstream ').removesuffix(' since')}"
    if why.startswith("upstream ") and why.endswith(" reruns"):
        return f"{why.removeprefix('upstream ').removesuffix(' reruns')} reruns"
    words = {
        "code version": "code changed",
        "settings changed": "settings changed",
        "settings unknown": "settings unknown",
        "qa changed": "questions changed",
        "qa unknown": "questions unknown",
        "never materialized": "never materialized",
    }
    cause = next((short for long, short in words.items() if why.startswith(long)), why)
    return f"{cause}: {asset}"


#: The reason of a run of documents that are up to date, launched on request (the UI, a backfill).
ON_REQUEST = "up to date; run on request"


def combined_reason(reasons: Iterable[str]) -> str:
    """One reason for a run of several documents: the first, and how many others there are.

    >>> combined_reason(["document changed", "document changed", "new document"])
    'document changed (+1 other reason)'
    >>> combined_reason(["new document", "document changed", "code changed: chunks"])
    'new document (+2 other reasons)'
    """
    distinct = list(dict.fromkeys(reasons))
    if len(distinct) <= 1:
        return distinct[0] if distinct else ""
    more = len(distinct) - 1
    return f"{distinct[0]} (+{more} other reason{'s' if more > 1 else ''})"
