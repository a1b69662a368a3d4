"""Sensors: keep one dynamic partition per document file in the documents folder."""

import hashlib

import dagster as dg

from ctxwin_dagster.core.document_folder import DocumentFolder
from ctxwin_dagster.core.documents import DocumentError
from ctxwin_dagster.defs.partitions import documents_partitions
from ctxwin_dagster.defs.resources import EvaluationSettings, LanceDBResource, ProjectSettings
from ctxwin_dagster.core.defaults import VARIANTS


def partition_changes(settings: ProjectSettings, existing: list[str], folder: DocumentFolder | None = None) -> tuple[list[str], list[str]]:
    """(to add, to remove) so that the partitions match the files in the documents folder."""
    on_disk = (folder or settings.document_folder()).ids()
    have = set(existing)
    want = set(on_disk)
    return [d for d in on_disk if d not in have], sorted(have - want)


def remove_from_indexes(lancedb: LanceDBResource, doc_ids: list[str]) -> int:
    """Delete the rows of ``doc_ids`` from every variant's table; returns how many."""
    index = lancedb.index()
    return sum(index.delete_document(variant, doc_id) for variant in VARIANTS for doc_id in doc_ids)


def remove_results(evaluation: EvaluationSettings, doc_ids: list[str]) -> int:
    """Delete the evaluation result files of ``doc_ids`` (``answers/<variant>/<doc_id>.jsonl`` and
    ``scores/<variant>/<doc_id>.jsonl`` under the experiment's results folder, the exports
    ``ctxwin review`` reads); returns how many files were deleted."""
    root = evaluation.results_path()
    deleted = 0
    for kind in ("answers", "scores"):
        for variant in VARIANTS:
            for doc_id in doc_ids:
                path = root / kind / variant / f"{doc_id}.jsonl"
                if path.is_file():
                    path.unlink()
                    deleted += 1
    return deleted


# Every two minutes: the daemon logs two lines per tick, and documents arrive rarely (``ctxwin
# run`` syncs the partitions itself before it runs).
@dg.sensor(minimum_interval_seconds=120, default_status=dg.DefaultSensorStatus.RUNNING)
def documents_sensor(
    context: dg.SensorEvaluationContext, settings: ProjectSettings, lancedb: LanceDBResource, evaluation: EvaluationSettings
) -> dg.SensorResult:
    """Adds a partition for every new document file; removes the partitions, index rows and
    evaluation result files of documents whose file is gone (so the next comparison leaves
    them out)."""
    try:
        folder = settings.document_folder()
    except DocumentError as exc:
        return dg.SensorResult(skip_reason=str(exc))
    listing = folder.report_lines()
    seen = hashlib.sha1("\n".join(listing).encode("utf-8")).hexdigest()[:12]
    if listing and not (context.cursor or "").endswith(seen):
        # Said once per change of the folder, not every tick.
        context.log.warning("\n".join(listing))
    try:
        settings.remember_ids(folder)
    except OSError as exc:
        context.log.warning(f"could not record the document ids in {settings.doc_ids_file!r} ({exc}); check that its folder is writable")
    existing = list(context.instance.get_dynamic_partitions(documents_partitions.name))
    added, removed = partition_changes(settings, existing, folder)
    if removed:
        deleted = remove_from_indexes(lancedb, removed)
        files = remove_results(evaluation, removed)
        context.log.info(f"removed documents {removed}: deleted {deleted} index rows and {files} result files")
    requests = []
    if added:
        requests.append(documents_partitions.build_add_request(added))
    if removed:
        requests.append(documents_partitions.build_delete_request(removed))
    count = f"{len(existing) + len(added) - len(removed)} documents"
    not_taken = f"; {len(folder.skipped)} file(s) not taken: " + ", ".join(f"{s.path.name} ({s.reason.split(';')[0]})" for s in folder.skipped[:5]) if folder.skipped else ""
    problems = folder.problems()
    unreadable = f"; {len(problems)} file(s) cannot be read (their runs fail): " + ", ".join(f"{f.path.name} ({f.problem.split(';')[0]})" for f in problems[:5]) if problems else ""
    cursor = f"{count} {seen}"
    if not requests:
        empty = " (no usable document in the folder)" if not folder.usable() else ""
        return dg.SensorResult(skip_reason=f"{count}, none added or removed{empty}{unreadable}{not_taken}", cursor=cursor)
    return dg.SensorResult(dynamic_partitions_requests=requests, cursor=cursor)
