"""Opening an :class:`~ctxwin_dagster.ask.service.Asker` over an experiment's indexes: the
index, the embedder (built as the index assets build theirs), the answer engine and its caches."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwin_dagster.ask.results import AskError

if TYPE_CHECKING:
    from ctxwin_dagster.backends.base import Embedder
    from ctxwin_dagster.backends.tasks.results import TaskEngine


def open_asker(
    cls: Any,
    *,
    lancedb: str | Path,
    documents: str | Path | None,
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    cache_dir: str | Path | None,
    embedder: Embedder | None,
    embeddings: Mapping[str, Any] | None,
    max_concurrency: int,
    max_tokens: int | None,
    doc_ids_file: str | Path | None,
    chat_waits: Mapping[str, Any] | None = None,
) -> Any:
    """What :meth:`Asker.open <ctxwin_dagster.ask.service.Asker.open>` does (see there)."""
    from ctxwin_dagster.backends.calls.cache import ResponseCache
    from ctxwin_dagster.backends.embeddings.factory import embedder_from_settings
    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
    from ctxwin_dagster.backends.tasks.extractive import ExtractiveTasks
    from ctxwin_dagster.backends.tasks.llm import LLMTasks

    uri = str(lancedb)
    if "://" not in uri and not Path(uri).expanduser().is_dir():
        raise AskError(
            f"no index at {uri!r}: build it with `ctxwin run` (it writes data/lancedb), or pass the folder "
            "that holds the *_chunks.lance tables (--lancedb)"
        )
    cache_folder = None if cache_dir is None else Path(cache_dir).expanduser()
    if embedder is not None and embeddings is not None:
        raise AskError("pass embedder= or embeddings= (the settings of one), not both")
    if embedder is None:
        try:
            embedder = embedder_from_settings(embeddings or {}, cache_dir=cache_folder)
        except ValueError as exc:
            raise AskError(str(exc)) from exc
    closers: list[Callable[[], None]] = []
    if model:
        from ctxwin_dagster.backends.chat.factory import make_chat_backend

        chat = make_chat_backend(
            model,
            base_url=base_url or None,
            api_key=api_key,
            cache=None if cache_folder is None else ResponseCache(cache_folder / "responses.sqlite"),
            max_concurrency=max_concurrency,
            **dict(chat_waits or {}),
        )
        closers.append(chat.close)
        tasks: TaskEngine = LLMTasks(chat, max_tokens=max_tokens) if max_tokens else LLMTasks(chat)
    else:
        tasks = ExtractiveTasks(embedder)
    # doc_ids_file: the ids the experiment's runs gave the files (see core/text/folder.py)
    asker = cls(
        index=ChunkIndex(uri), embedder=embedder, tasks=tasks, documents_dir=documents, doc_ids_file=doc_ids_file
    )
    asker._closers.extend(closers)
    return asker
