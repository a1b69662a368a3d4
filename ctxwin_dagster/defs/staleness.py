"""What needs a run: the assets of a document partition whose inputs changed since their last
materialization.

An asset partition is up to date when its latest materialization was made

* by the asset's current code version (Dagster's ``code_version``, recorded as the
  materialization's ``dagster/code_version`` tag),
* after the latest materialization of each of its inputs in the same partition (the event
  log's order; the provenance tags Dagster records name the latest materialization of an
  input asset across all partitions, so they cannot tell partitions apart), and for
  ``raw_documents`` from the file as it is now (its ``sha256`` metadata is the file's SHA-256,
  so a changed file changes everything downstream of it),
* with the same settings: the code location folds a hash of the settings an asset's resources
  hold that change results (models, chunking, retrieval; not keys, caches or timeouts) into the
  asset's code version (:func:`~ctxwin_dagster.defs.versions.with_settings_versions`:
  ``2+settings.1a2b3c4d``), so Dagster
  itself records them with every materialization, whoever launched it — ``ctxwin run``, the UI,
  the hourly automation — and the UI marks the asset changed when the experiment's settings change; and
  ``qa_sets`` records the hash of its document's questions in its metadata (``qa_version``).

Anything else — never materialized, a different code version, a changed document, changed
settings, an upstream asset rematerialized since — makes the asset stale, and everything
downstream of it in the job with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import dagster as dg

from ctxwin_dagster.defs.materializations import latest_materialization, latest_materializations, metadata_entry
from ctxwin_dagster.defs.run_reasons import ON_REQUEST, short_reason
from ctxwin_dagster.defs.versions import file_sha256, qa_versions

if TYPE_CHECKING:
    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
    from ctxwin_dagster.defs.resources import ProjectSettings

#: Inputs an asset reads outside Dagster, per asset key: {name: the metadata entry that records
#: its version}; the caller passes the current versions as ``extra``.
EXTRA_INPUTS = {"qa_sets": {"qa": "qa_version"}}

#: What a code version changed, said once with the reason of the runs it causes: {(asset, new
#: code version): what changed and what the run does about it}.
CODE_VERSION_NOTES = {
    # two files with the same text keep their own index rows; every index is rebuilt once
    ("chunks", "2"): "chunk ids now include the document id",
}

_DATA_VERSION = "dagster/data_version"
_CODE_VERSION = "dagster/code_version"


class AssetNode(Protocol):
    """What the staleness rules read of one asset of Dagster's asset graph."""

    @property
    def is_partitioned(self) -> bool: ...

    @property
    def code_version(self) -> str | None: ...

    @property
    def parent_keys(self) -> Set[dg.AssetKey]: ...

    @property
    def child_keys(self) -> Set[dg.AssetKey]: ...


class AssetGraph(Protocol):
    """What the staleness rules read of Dagster's asset graph (``Definitions.resolve_asset_graph()``,
    a repository's or an automation context's ``asset_graph``)."""

    def get(self, key: dg.AssetKey) -> AssetNode: ...

    def get_all_asset_keys(self) -> Set[dg.AssetKey]: ...

    @property
    def toposorted_asset_keys(self) -> Sequence[dg.AssetKey]: ...


def _file_hash(record: dg.EventLogRecord, tags: Mapping[str, str]) -> str | None:
    """The file hash a ``raw_documents`` materialization recorded: its ``sha256`` metadata (a run
    of several documents records it per document; the data version is one per step), else the
    data version (runs made before the metadata held it)."""
    recorded = metadata_entry(record, "sha256")
    return recorded if isinstance(recorded, str) else tags.get(_DATA_VERSION)


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

    def label(self) -> str:
        """The run's tag: :func:`short_reason` of the first stale asset (what the UI's list of
        runs shows in full; :meth:`summary` is the console's longer line)."""
        if not self.reasons:
            return ON_REQUEST
        key, why = next(iter(self.reasons.items()))
        return short_reason(key.to_user_string(), why)


class StalenessChecker:
    """Compares the instance's latest materializations with what a run would use now.

    Args:
        instance: the Dagster instance.
        graph: the project's asset graph (``Definitions.resolve_asset_graph()``), whose code
            versions carry the settings (:func:`~ctxwin_dagster.defs.versions.with_settings_versions`).
    """

    def __init__(self, instance: dg.DagsterInstance, graph: AssetGraph) -> None:
        self.instance = instance
        self.graph = graph
        # prefetched: (key, partition) -> record or None
        self._known: dict[tuple[dg.AssetKey, str | None], dg.EventLogRecord | None] = {}

    def latest(self, key: dg.AssetKey, partition: str | None) -> dg.EventLogRecord | None:
        """The latest materialization record of ``key`` (in ``partition``), prefetched or queried."""
        if (key, partition) in self._known:
            return self._known[(key, partition)]
        return latest_materialization(self.instance, key, partition or None)

    def prefetch(self, keys: Iterable[dg.AssetKey], partitions: Iterable[str]) -> None:
        """Read the latest materialization of every partition of the partitioned ``keys`` at
        once (:func:`latest_materializations`): a corpus of 1,000 documents is checked in a few
        queries per asset instead of one per asset and document."""
        partitions = list(partitions)
        for key in keys:
            if self.graph.get(key).is_partitioned:
                found = latest_materializations(self.instance, key, partitions)
                self._known.update({(key, p): found.get(p) for p in partitions})

    def _code_version(self, key: dg.AssetKey) -> str | None:
        return self.graph.get(key).code_version

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
        versions = dict(extra or {})
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

    def _reason(
        self,
        key: dg.AssetKey,
        partition: str | None,
        versions: Mapping[str, str],
        document_sha256: str | None,
        stale: Mapping[dg.AssetKey, str],
        rerun: Set[dg.AssetKey],
        current: dict[dg.AssetKey, int | None],
    ) -> str | None:
        parents = [p for p in self.graph.get(key).parent_keys]
        for parent in parents:
            if parent in stale or parent in rerun:
                return f"upstream {parent.to_user_string()} reruns"
        rec = self.latest(key, partition if self.graph.get(key).is_partitioned else None)
        if rec is None or rec.asset_materialization is None:
            return "never materialized"
        tags = rec.asset_materialization.tags or {}
        current[key] = rec.storage_id
        recorded, now = tags.get(_CODE_VERSION) or "", self._code_version(key) or ""
        if recorded != now:
            (code_then, _, settings_then), (code_now, _, _) = (
                recorded.partition("+settings."),
                now.partition("+settings."),
            )
            if code_then == code_now:
                return (
                    "settings changed" if settings_then else "settings unknown (materialized before they were recorded)"
                )
            note = CODE_VERSION_NOTES.get((key.to_user_string(), code_now))
            return f"code version {code_then or None} -> {code_now}" + (f" ({note})" if note else "")
        if (
            key.to_user_string() == "raw_documents"
            and document_sha256 is not None
            and _file_hash(rec, tags) != document_sha256
        ):
            return "document changed"
        for name, recorded_key in EXTRA_INPUTS.get(key.to_user_string(), {}).items():
            entry = metadata_entry(rec, recorded_key)
            if name in versions and entry != versions[name]:
                return f"{name} changed" if entry else f"{name} unknown (materialized before it was recorded)"
        for parent in parents:
            parent_partitioned = self.graph.get(parent).is_partitioned
            if parent_partitioned and not self.graph.get(key).is_partitioned:
                continue  # the comparison: handled by the caller through rerun_upstream
            if parent not in current:
                prec = self.latest(parent, partition if parent_partitioned else None)
                current[parent] = prec.storage_id if prec else None
            then = current[parent]
            if then is None or then > rec.storage_id:
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


def index_variants(job_keys: Iterable[dg.AssetKey]) -> dict[dg.AssetKey, str]:
    """The index assets among ``job_keys`` and their variants."""
    from ctxwin_dagster.core.defaults import VARIANTS

    keys = set(job_keys)
    return {k: v for v in VARIANTS if (k := dg.AssetKey(f"{v}_index")) in keys}


def verify_indexes(index: ChunkIndex | None, job_keys: Iterable[dg.AssetKey]) -> None:
    """Check the table of every index asset among ``job_keys`` (its version against the
    project's last write, and a full scan: :meth:`~ctxwin_dagster.backends.index.vectorstore.ChunkIndex.verify`).

    A damaged table stops the caller instead of marking documents stale: a document's run cannot
    repair it (a merge into a table that lost its newest versions would hide the loss, and one
    into a garbled file fails), and rebuilding it means setting the table aside, which only the
    user asks for (``ctxwin run --rebuild-index VARIANT``).

    Raises:
        DamagedIndexError: naming the table, what is wrong and the fix.
    """
    if index is not None:
        for variant in index_variants(job_keys).values():
            index.verify(variant)


def missing_rows(
    checker: StalenessChecker,
    counts: Mapping[str, Mapping[str, int]],
    job_keys: Iterable[dg.AssetKey],
    partition: str,
) -> dict[dg.AssetKey, str]:
    """Staleness the event log cannot see: an index asset whose table holds another number of
    rows for the document (``counts``: each variant's rows per document,
    :meth:`ChunkIndex.counts_by_document`) than its latest ``chunks`` materialization made (rows
    deleted or lost behind the project's back). :func:`stale_documents` checks the tables first
    (:func:`verify_indexes`)."""
    wanted = index_variants(job_keys)
    if not wanted:
        return {}
    expected = metadata_entry(checker.latest(dg.AssetKey("chunks"), partition), "n_chunks")
    if not isinstance(expected, int):
        return {}
    out = {}
    for key, variant in wanted.items():
        have = counts.get(variant, {}).get(partition, 0)
        if have != expected:
            out[key] = f"{have} of {expected} rows in the {variant} index"
    return out


def stale_documents(
    instance: dg.DagsterInstance,
    graph: AssetGraph,
    settings: ProjectSettings,
    index: ChunkIndex,
    job_keys: Iterable[dg.AssetKey],
    doc_ids: Iterable[str],
) -> tuple[dict[str, Staleness], dict[str, bool]]:
    """The one staleness algorithm of ``ctxwin run`` and the hourly automation (:mod:`ctxwin_dagster.defs.automation`): per document, why the
    assets of ``job_keys`` need a run (an empty :class:`Staleness` when up to date) — the file's
    SHA-256, code and settings versions, the questions' hash, the event log's order, and the
    index rows (:func:`missing_rows`); and whether each document has questions.

    Raises:
        DamagedIndexError: a table of the job's index assets is damaged (:func:`verify_indexes`):
            no document is called up to date on a damaged index.
    """
    job_keys = set(job_keys)
    verify_indexes(index, job_keys)
    doc_ids = list(doc_ids)
    folder = settings.document_folder()  # scanned once, not once per document
    uses_qa = any(k.to_user_string() == "qa_sets" for k in job_keys)
    qa, has_questions = qa_versions(Path(settings.qa_dir), doc_ids, folder) if uses_qa else ({}, {})
    checker = StalenessChecker(instance, graph)
    checker.prefetch(job_keys | {dg.AssetKey("chunks")}, doc_ids)
    variants = index_variants(job_keys) if index is not None else {}
    counts = {variant: index.counts_by_document(variant) for variant in variants.values()}
    out: dict[str, Staleness] = {}
    for doc_id in doc_ids:
        try:
            path = folder.path_of(doc_id)
            sha: str | None = file_sha256(path) if path is not None else None
        except OSError:
            sha = None  # the partition's raw_documents reports the file's problem
        st = checker.check(job_keys, doc_id, document_sha256=sha, extra={"qa": qa[doc_id]} if uses_qa else {})
        if not st.stale:
            st.reasons.update(missing_rows(checker, counts, job_keys, doc_id))
        out[doc_id] = st
    return out, has_questions
