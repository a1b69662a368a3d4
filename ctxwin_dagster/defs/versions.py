"""The versions a materialization is compared by besides its inputs: a hash of the settings
that change results, folded into each asset's code version (``2+settings.1a2b3c4d``), the hash
of a document's questions (``qa_sets``' ``qa_version``), and the SHA-256 of a document's file
(``raw_documents``' data version)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import BaseModel

if TYPE_CHECKING:
    from ctxwin_dagster.core.text.folder import DocumentFolder

#: Resource fields that never change a result (keys, caches, transport).
NOT_RESULT_FIELDS = frozenset(
    {
        "api_key",
        "cache_dir",
        "max_concurrency",
        "max_retries",
        "timeout_s",
        "connect_timeout_s",
        "deadline_s",
        "batch_size",
    }
)


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def resource_fields(resource: object) -> dict[str, object]:
    """The fields of a resource (a pydantic model, as Dagster's configurable resources are) and
    their values; empty for anything else (None included)."""
    if not isinstance(resource, BaseModel):
        return {}
    fields = type(resource).model_fields
    return {name: value for name, value in resource if name in fields}


def resource_versions(defaults: Mapping[str, object]) -> dict[str, str]:
    """resource key -> hash of the settings that change results (``defaults``: the resource
    objects of the :class:`~dagster.Definitions`)."""
    out: dict[str, str] = {}
    for key, resource in defaults.items():
        values = resource_fields(resource)
        out[key] = _digest({k: v for k, v in values.items() if k not in NOT_RESULT_FIELDS})
    return out


def with_settings_versions(
    assets: Iterable[dg.AssetsDefinition], resources: Mapping[str, object]
) -> list[dg.AssetsDefinition]:
    """``assets`` with the hash of the settings of the resources each one uses added to its code
    version (``"2"`` -> ``"2+settings.1a2b3c4d"``). Dagster then records the settings with every
    materialization, and "code version changed" is also "settings changed"."""
    versions = resource_versions(resources)
    out = []
    for asset in assets:
        used = sorted(set(asset.required_resource_keys) & set(versions))
        digest = _digest({k: versions[k] for k in used})[:8]

        def versioned(spec: dg.AssetSpec, d: str = digest) -> dg.AssetSpec:
            return spec.replace_attributes(code_version=f"{spec.code_version or '0'}+settings.{d}")

        out.append(asset.map_asset_specs(versioned))
    return out


def qa_version(items: Iterable[Mapping[str, object]]) -> str:
    """Hash of a document's question set (what ``qa_sets`` reads besides its inputs)."""
    return _digest(sorted((dict(i) for i in items), key=lambda i: str(i.get("question_id"))))


def qa_versions(
    folder: Path, doc_ids: Iterable[str], documents: DocumentFolder | None = None
) -> tuple[dict[str, str], dict[str, bool]]:
    """Per document: the :func:`qa_version` of its questions in ``folder``, and whether it has any.

    ``documents`` (a :class:`~ctxwin_dagster.core.text.folder.DocumentFolder`) resolves the
    names questions give their documents (a file name, a stem) to doc_ids, as ``qa_sets`` does.

    A folder that does not load gives every document the same marker version (its ``qa_sets``
    fails with the loader's message when it runs).
    """
    from ctxwin_dagster.core.evaluation.qa.items import load_qa_folder

    doc_ids = list(doc_ids)
    try:
        items = load_qa_folder(folder) if folder.is_dir() else []
    except Exception as exc:
        return {k: f"unreadable: {exc}"[:60] for k in doc_ids}, dict.fromkeys(doc_ids, True)
    by_doc: dict[str, list[Mapping[str, object]]] = {}
    if documents is not None:
        from ctxwin_dagster.core.evaluation.qa.resolve import resolve_questions

        for doc_id, qs in resolve_questions(items, documents).by_doc.items():
            by_doc[doc_id] = [q.to_dict() for q in qs]
    else:
        for q in items:
            by_doc.setdefault(q.doc_id, []).append(q.to_dict())
    return {k: qa_version(by_doc.get(k, [])) for k in doc_ids}, {k: bool(by_doc.get(k)) for k in doc_ids}


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes (``raw_documents``' data version)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
