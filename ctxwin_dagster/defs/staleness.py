"""What needs a run: the assets of a document partition whose inputs changed since their last
materialization.

An asset partition is up to date when its latest materialization was made

* by the asset's current code version (Dagster's ``code_version``, recorded as the
  materialization's ``dagster/code_version`` tag),
* after the latest materialization of each of its inputs in the same partition (the event
  log's order; the provenance tags Dagster records name the latest materialization of an
  input asset across all partitions, so they cannot tell partitions apart), and for
  ``raw_documents`` from the file as it is now (its data version is the file's SHA-256, so a
  changed file changes everything downstream of it),
* with the same settings: each run launched by ``ctxwin run`` carries one tag per resource
  (``ctxwin/config/<resource>``) holding a hash of the resource's settings that change results
  (models, chunking, retrieval; not keys, caches or timeouts), and the question set of a
  document is hashed into ``qa_sets``'s own entry.

Anything else — never materialized, a different code version, a changed document, changed
settings, an upstream asset rematerialized since — makes the asset stale, and everything
downstream of it in the job with it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

CONFIG_TAG_PREFIX = "ctxwin/config/"
#: A run's tag naming why it was launched.
REASON_TAG = "ctxwin/reason"
#: Resource fields that never change a result (keys, caches, transport).
NOT_RESULT_FIELDS = frozenset({"api_key", "cache_dir", "max_concurrency", "max_retries", "timeout_s", "batch_size"})
#: Entries that are not resources but inputs an asset reads outside Dagster (per asset key).
EXTRA_INPUTS = {"qa_sets": "qa"}

_DATA_VERSION = "dagster/data_version"
_CODE_VERSION = "dagster/code_version"


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def resource_versions(defaults: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
    """resource key -> hash of the settings that change results.

    ``defaults`` are the resource objects of the :class:`~dagster.Definitions`;
    ``overrides`` the ``resources`` section of a run config (``{key: {"config": {...}}}``).
    """
    overrides = overrides or {}
    out: dict[str, str] = {}
    for key, resource in defaults.items():
        fields = getattr(type(resource), "model_fields", {})
        values = {name: getattr(resource, name, None) for name in fields}
        values.update((overrides.get(key) or {}).get("config") or {})
        out[key] = _digest({k: v for k, v in values.items() if k not in NOT_RESULT_FIELDS})
    return out


def qa_version(items: Iterable[Mapping[str, Any]]) -> str:
    """Hash of a document's question set (what ``qa_sets`` reads besides its inputs)."""
    return _digest(sorted((dict(i) for i in items), key=lambda i: str(i.get("question_id"))))


def qa_versions(folder: Path, doc_ids: Iterable[str], documents: Any = None) -> tuple[dict[str, str], dict[str, bool]]:
    """Per document: the :func:`qa_version` of its questions in ``folder``, and whether it has any.

    ``documents`` (a :class:`~ctxwin_dagster.core.document_folder.DocumentFolder`) resolves the
    names questions give their documents (a file name, a stem) to doc_ids, as ``qa_sets`` does.

    A folder that does not load gives every document the same marker version (its ``qa_sets``
    fails with the loader's message when it runs).
    """
    from ctxwin_dagster.core.qa.items import load_qa_folder

    doc_ids = list(doc_ids)
    try:
        items = load_qa_folder(folder) if folder.is_dir() else []
    except Exception as exc:
        return {k: f"unreadable: {exc}"[:60] for k in doc_ids}, dict.fromkeys(doc_ids, True)
    by_doc: dict[str, list[dict]] = {}
    if documents is not None:
        from ctxwin_dagster.core.qa.resolve import resolve_questions

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


def config_tags(versions: Mapping[str, str]) -> dict[str, str]:
    """The run tags that record ``versions``."""
    return {CONFIG_TAG_PREFIX + key: value for key, value in versions.items()}


@dataclass
class Staleness:
    """Why each asset of one partition needs a run (empty: nothing to do)."""

    partition: str | None
    reasons: dict[dg.AssetKey, str] = field(default_factory=dict)

    @property
    def stale(self) -> bool:
        return bool(self.reasons)

    def summary(self) -> str:
        """The first reason, and how many assets are stale."""
        if not self.reasons:
            return "up to date"
        key, why = next(iter(self.reasons.items()))
        more = len(self.reasons) - 1
        return f"{key.to_user_string()}: {why}" + (f" (+{more} assets downstream)" if more else "")


class StalenessChecker:
    """Compares the instance's latest materializations with what a run would use now.

    Args:
        instance: the Dagster instance.
        graph: the project's asset graph (``Definitions.resolve_asset_graph()``).
        versions: :func:`resource_versions` of the run to be launched, plus the extra
            entries of :data:`EXTRA_INPUTS` (e.g. ``"qa"``) per partition via ``extra``.
    """

    def __init__(self, instance: dg.DagsterInstance, graph: Any, versions: Mapping[str, str]) -> None:
        self.instance = instance
        self.graph = graph
        self.versions = dict(versions)
        self._run_tags: dict[str, Mapping[str, str]] = {}

    def _latest(self, key: dg.AssetKey, partition: str | None):
        flt = dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None)
        records = self.instance.fetch_materializations(flt, limit=1).records
        return records[0] if records else None

    def _tags_of_run(self, run_id: str) -> Mapping[str, str]:
        if run_id not in self._run_tags:
            run = self.instance.get_run_by_id(run_id)
            self._run_tags[run_id] = dict(run.tags) if run is not None else {}
        return self._run_tags[run_id]

    def _code_version(self, key: dg.AssetKey) -> str | None:
        return self.graph.get(key).code_version

    def _needs(self, key: dg.AssetKey) -> list[str]:
        node = self.graph.get(key)
        needed = sorted(getattr(node.assets_def, "required_resource_keys", set()) & set(self.versions))
        extra = EXTRA_INPUTS.get(key.to_user_string())
        return needed + ([extra] if extra else [])

    def check(
        self,
        keys: Iterable[dg.AssetKey],
        partition: str | None,
        *,
        document_sha256: str | None = None,
        extra: Mapping[str, str] | None = None,
        rerun_upstream: Iterable[dg.AssetKey] = (),
    ) -> Staleness:
        """Staleness of ``keys`` (in one job) for ``partition``.

        ``document_sha256`` is the current data version of ``raw_documents``; ``extra`` the
        versions of :data:`EXTRA_INPUTS` for this partition; ``rerun_upstream`` assets outside
        ``keys`` that will run first (e.g. the partitions feeding a comparison).
        """
        versions = {**self.versions, **(extra or {})}
        selected = set(keys)
        order = [k for k in self.graph.toposorted_asset_keys if k in selected]
        out = Staleness(partition)
        rerun = set(rerun_upstream)
        current: dict[dg.AssetKey, int | None] = {}
        for key in order:
            why = self._reason(key, partition, versions, document_sha256, out.reasons, rerun, current)
            if why:
                out.reasons[key] = why
        return out

    def _reason(self, key, partition, versions, document_sha256, stale, rerun, current) -> str | None:
        parents = [p for p in self.graph.get(key).parent_keys]
        for parent in parents:
            if parent in stale or parent in rerun:
                return f"upstream {parent.to_user_string()} reruns"
        rec = self._latest(key, partition if self.graph.get(key).is_partitioned else None)
        if rec is None:
            return "never materialized"
        tags = rec.asset_materialization.tags or {}
        current[key] = rec.storage_id
        if tags.get(_CODE_VERSION) != self._code_version(key):
            return f"code version {tags.get(_CODE_VERSION)} -> {self._code_version(key)}"
        if key.to_user_string() == "raw_documents" and document_sha256 is not None and tags.get(_DATA_VERSION) != document_sha256:
            return "document changed"
        run_tags = self._tags_of_run(rec.run_id)
        for need in self._needs(key):
            recorded = run_tags.get(CONFIG_TAG_PREFIX + need)
            if recorded != versions.get(need):
                return f"{need} settings changed" if recorded else f"{need} settings unknown (materialized outside ctxwin)"
        for parent in parents:
            parent_partitioned = self.graph.get(parent).is_partitioned
            if parent_partitioned and not self.graph.get(key).is_partitioned:
                continue  # the comparison: handled by the caller through rerun_upstream
            if parent not in current:
                prec = self._latest(parent, partition if parent_partitioned else None)
                current[parent] = prec.storage_id if prec else None
            if current[parent] is None or current[parent] > rec.storage_id:
                return f"upstream {parent.to_user_string()} rematerialized since"
        return None

    def document_keys(self, keys: Iterable[dg.AssetKey]) -> list[dg.AssetKey]:
        """The partitioned ones of ``keys``."""
        return [k for k in keys if self.graph.get(k).is_partitioned]

    def downstream_closure(self, stale: Iterable[dg.AssetKey], within: Iterable[dg.AssetKey]) -> set[dg.AssetKey]:
        """``stale`` and everything downstream of it inside ``within``."""
        allowed = set(within)
        out = set(stale)
        frontier = list(out)
        while frontier:
            key = frontier.pop()
            for child in self.graph.get(key).child_keys:
                if child in allowed and child not in out:
                    out.add(child)
                    frontier.append(child)
        return out
