"""Sensors: keep one dynamic partition per document file in the experiment's documents folder.

The sensor only ever adds. A document whose file is gone keeps its partition, its index rows
and its results; it is left out of retrieval and of the comparison (both follow the folder), and
``ctxwin prune`` deletes what it left behind — explicitly, logged with counts, undoable. A
folder that is missing, empty or unreadable on a tick changes nothing.
"""

import hashlib

import dagster as dg

from ctxwin_dagster.core.text.documents import DocumentError
from ctxwin_dagster.core.text.folder import DocumentFolder
from ctxwin_dagster.defs.partitions import DOCUMENTS_PARTITION, documents_partitions
from ctxwin_dagster.defs.resources import ProjectSettings


def partition_changes(
    settings: ProjectSettings, existing: list[str], folder: DocumentFolder | None = None
) -> tuple[list[str], list[str]]:
    """(to add, without a file now) so that every file in the documents folder has a partition.

    The second list is what ``ctxwin prune`` would delete; nothing here deletes it.
    """
    on_disk = (folder or settings.document_folder()).ids()
    have = set(existing)
    want = set(on_disk)
    return [d for d in on_disk if d not in have], sorted(have - want)


def sync_partitions(
    instance: dg.DagsterInstance, settings: ProjectSettings, folder: DocumentFolder
) -> tuple[list[str], list[str]]:
    """Add a partition for every document without one and remember the folder's ids; returns
    (added, partitions whose file is gone). Used by ``ctxwin run``; the sensor does the same
    through a ``SensorResult``."""
    existing = list(instance.get_dynamic_partitions(DOCUMENTS_PARTITION))
    added, gone = partition_changes(settings, existing, folder)
    if added:
        instance.add_dynamic_partitions(DOCUMENTS_PARTITION, added)
    settings.remember_ids(folder)
    return added, gone


# Every two minutes: the daemon logs two lines per tick, and documents arrive rarely (``ctxwin
# run`` syncs the partitions itself before it runs).
@dg.sensor(
    minimum_interval_seconds=120,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Every two minutes, adds a partition for each new document file of the experiment's folder. "
    "Never removes one: a document whose file is gone stays until `ctxwin prune` deletes its rows (logged, undoable).",
)
def documents_sensor(context: dg.SensorEvaluationContext, settings: ProjectSettings) -> dg.SensorResult:
    """Adds a partition for every new document file of the experiment's folder. Never removes
    one: a document whose file is gone is left out of retrieval and the comparison until
    ``ctxwin prune`` deletes its rows and results (logged, undoable)."""
    try:
        folder = settings.document_folder()
    except DocumentError as exc:
        return dg.SensorResult(skip_reason=f"{exc} (nothing was changed)")
    listing = folder.report_lines()
    seen = hashlib.sha1("\n".join(listing).encode("utf-8")).hexdigest()[:12]
    existing = list(context.instance.get_dynamic_partitions(DOCUMENTS_PARTITION))
    added, gone = partition_changes(settings, existing, folder)
    if gone:
        listing.append(
            f"{len(gone)} document(s) without a file in {settings.documents_dir}: {', '.join(gone[:10])}{' …' if len(gone) > 10 else ''}; "
            "they are left out of retrieval and of the comparison, and nothing of theirs is deleted. "
            "Put the files back, or delete their rows and results with `ctxwin prune` (undoable)."
        )
        seen = hashlib.sha1("\n".join(listing).encode("utf-8")).hexdigest()[:12]
    if listing and not (context.cursor or "").endswith(seen):
        # Said once per change of the folder, not every tick.
        context.log.warning("\n".join(listing))
    try:
        settings.remember_ids(folder)
    except OSError as exc:
        context.log.warning(
            f"could not record the document ids in {settings.doc_ids_file!r} ({exc}); check that its folder is writable"
        )
    count = f"{len(existing) + len(added)} document partitions"
    skipped = folder.skipped
    not_taken = (
        f"; {len(skipped)} file(s) not taken: "
        + ", ".join(f"{s.path.name} ({s.reason.split(';')[0]})" for s in skipped[:5])
        if skipped
        else ""
    )
    problems = folder.problems()
    unreadable = (
        f"; {len(problems)} file(s) cannot be read (their runs fail): "
        + ", ".join(f"{f.path.name} ({f.problem.split(';')[0]})" for f in problems[:5])
        if problems
        else ""
    )
    without = f"; {len(gone)} without a file (see `ctxwin prune`)" if gone else ""
    cursor = f"{count} {seen}"
    if not added:
        empty = " (no usable document in the folder)" if not folder.usable() else ""
        return dg.SensorResult(skip_reason=f"{count}, none added{empty}{without}{unreadable}{not_taken}", cursor=cursor)
    return dg.SensorResult(dynamic_partitions_requests=[documents_partitions.build_add_request(added)], cursor=cursor)
