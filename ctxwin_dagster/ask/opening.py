"""Opening an :class:`~ctxwin_dagster.ask.service.Asker` over an experiment's indexes: the
index, the embedder (built as the index assets build theirs), the answer engine and its caches."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwin_dagster.ask.results import AskError

if TYPE_CHECKING:
    from ctxwin_dagster.backends.base import Embedder


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
    max_concurrency: int | None,
    max_tokens: int | None,
    doc_ids_file: str | Path | None,
    chat_options: Mapping[str, Any] | None = None,
    sampling: Mapping[str, Any] | None = None,
) -> Any:
    """What :meth:`Asker.open <ctxwin_dagster.ask.service.Asker.open>` does (see there): the chat
    model and task engine come from :mod:`~ctxwin_dagster.backends.assembly`, as the evaluation's."""
    from ctxwin_dagster.backends.assembly import ChatSpec, Sampling, open_chat, task_engine
    from ctxwin_dagster.backends.embeddings.factory import embedder_from_settings
    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex

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
    spec = ChatSpec.from_section(
        dict(chat_options or {}),
        model=model or "",
        base_url=base_url or "",
        api_key=api_key,
        cache_dir=None if cache_folder is None else str(cache_folder),
        max_concurrency=max_concurrency,
    )
    chat = open_chat(spec)
    # doc_ids_file: the ids the experiment's runs gave the files (see core/text/folder.py)
    return cls(
        index=ChunkIndex(uri),
        embedder=embedder,
        tasks=task_engine(
            chat,
            embedder,
            sampling=Sampling.from_section(sampling or {}, max_tokens=max_tokens),
            cache_dir=cache_folder,
        ),
        documents_dir=documents,
        doc_ids_file=doc_ids_file,
        closers=() if chat is None else (chat.close,),
    )
