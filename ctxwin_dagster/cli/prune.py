"""``ctxwin prune``: delete what documents whose file is gone left behind — explicitly, logged
with counts, and undoable.

Nothing else deletes a document's data: the documents sensor and ``ctxwin run`` only add
partitions, and leave a document without a file out of retrieval and the comparison. ``prune``
lists such documents with their index rows and result files; with ``--yes`` it

1. copies their rows of every variant's LanceDB table to ``<home>/ctxwin_trash/<stamp>/rows/<variant>.arrow``
   (the table's versions before and after are recorded too: LanceDB keeps them until a cleanup),
   then deletes them;
2. moves their answer and score files into the same folder;
3. deletes their partitions;
4. appends one line with the counts to ``<home>/ctxwin_prune.log``.

``ctxwin prune --undo`` puts the last prune back: the rows (merged on ``chunk_id``), the files
and the partitions.

A documents folder that is missing, or that holds no document at all (a share that is not
mounted looks so), is refused: nothing is listed as gone and nothing deleted. ``--allow-empty``
prunes every document of an empty folder anyway, as asked.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypedDict

from ctxwin_dagster.cli.options import Subcommands
from ctxwin_dagster.core.defaults import VARIANTS

if TYPE_CHECKING:
    from ctxwin_dagster.defs.resources import EvaluationSettings

TRASH = "ctxwin_trash"
LOG = "ctxwin_prune.log"


class PruneReport(TypedDict):
    """What :func:`prune` found: the documents without a file, their index rows per variant and
    their result files."""

    doc_ids: list[str]
    rows: dict[str, int]
    files: int


class UndoReport(TypedDict):
    """What :func:`undo` put back: index rows per variant, result files and partitions."""

    rows: dict[str, int]
    files: int
    partitions: int


def _home(args: argparse.Namespace) -> Path:
    from ctxwin_dagster.core.experiment import default_home

    home = Path(args.dagster_home) if args.dagster_home else default_home(args.experiment)
    if args.experiment != "sample" and not (home / "ctxwin_experiment.json").is_file():
        raise SystemExit(
            f"ctxwin: no experiment {args.experiment!r} in {home}; run it first (ctxwin evaluate / ctxwin run --documents)"
        )
    return home


def _result_files(evaluation: EvaluationSettings, doc_ids: list[str]) -> list[Path]:
    root = evaluation.results_path()
    return [
        p
        for kind in ("answers", "scores")
        for v in VARIANTS
        for d in doc_ids
        if (p := root / kind / v / f"{d}.jsonl").is_file()
    ]


def _log(home: Path, entry: Mapping[str, object]) -> None:
    with (home / LOG).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, ensure_ascii=False) + "\n")


def prune(home: Path, *, delete: bool, allow_empty: bool = False, out: TextIO = sys.stdout) -> PruneReport:
    """List (and with ``delete`` remove) the data of the documents of ``home`` whose file is gone.
    A folder with no document at all stops the command unless ``allow_empty``."""
    from dagster import DagsterInstance

    from ctxwin_dagster.backends.index.rows import export_rows, table_version, write_rows
    from ctxwin_dagster.core.text.documents import DocumentError
    from ctxwin_dagster.definitions import home_resources
    from ctxwin_dagster.defs.partitions import DOCUMENTS_PARTITION

    instance = DagsterInstance.get()
    resources = home_resources(home)
    settings, index, evaluation = resources["settings"], resources["lancedb"].index(), resources["evaluation"]
    try:
        folder = settings.document_folder()
    except DocumentError as exc:
        raise SystemExit(
            f"ctxwin prune: {exc}; nothing was deleted (a missing folder never deletes documents)"
        ) from None
    partitions = list(instance.get_dynamic_partitions(DOCUMENTS_PARTITION))
    present = set(folder.ids())
    gone = sorted(d for d in partitions if d not in present)
    if gone and not present and not allow_empty:
        raise SystemExit(
            f"ctxwin prune: the documents folder {str(folder.folder)!r} has no documents, so it would prune all "
            f"{len(gone)} document(s) of the home; it may be a share or a drive that is not mounted. Nothing was deleted. "
            "Mount it (or point the experiment at the folder that has the documents), or give --allow-empty "
            "to prune them anyway"
        )
    rows = {v: {d: index.count(v, doc_id=d) for d in gone} for v in VARIANTS}
    files = _result_files(evaluation, gone)
    report: PruneReport = {
        "doc_ids": gone,
        "rows": {v: sum(c.values()) for v, c in rows.items()},
        "files": len(files),
    }
    if not gone:
        print(f"every document partition has its file in {settings.documents_dir}; nothing to prune", file=out)
        return report
    for d in gone:
        print(f"  {d}: " + ", ".join(f"{v} {rows[v][d]} rows" for v in VARIANTS), file=out)
    total = sum(report["rows"].values())
    if not delete:
        print(
            f"{len(gone)} document(s) without a file: {total} index rows, {len(files)} result files. Nothing deleted; "
            "`ctxwin prune --yes` deletes them (undoable with `ctxwin prune --undo`)",
            file=out,
        )
        return report
    stamp = time.strftime("%Y%m%d-%H%M%S")
    trash = home / TRASH / stamp
    (trash / "rows").mkdir(parents=True, exist_ok=True)
    versions: dict[str, list[int | None]] = {}
    for v in VARIANTS:
        if not sum(rows[v].values()):
            continue
        before = table_version(index, v)
        write_rows(trash / "rows" / f"{v}.arrow", export_rows(index, v, gone))
        for d in gone:
            index.delete_document(v, d)
        versions[v] = [before, table_version(index, v)]
    moved = []
    root = evaluation.results_path()
    for p in files:
        target = trash / "results" / p.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(p), target)
        moved.append([str(p), str(target)])
    for d in gone:
        instance.delete_dynamic_partition(DOCUMENTS_PARTITION, d)
    manifest = {
        "stamp": stamp,
        "doc_ids": gone,
        "rows": report["rows"],
        "files": moved,
        "table_versions": versions,
        "lancedb": index.uri,
    }
    (trash / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False), encoding="utf-8")
    _log(
        home,
        {
            "action": "prune",
            **{k: manifest[k] for k in ("stamp", "doc_ids", "rows", "table_versions")},
            "files": len(moved),
        },
    )
    print(
        f"pruned {len(gone)} document(s): deleted {total} index rows ({', '.join(f'{v} {n}' for v, n in report['rows'].items())}), "
        f"moved {len(moved)} result files and removed {len(gone)} partitions; kept in {trash}; `ctxwin prune --undo` puts them back",
        file=out,
    )
    return report


def undo(home: Path, *, out: TextIO = sys.stdout) -> UndoReport:
    """Put back what the last prune of ``home`` deleted."""
    from dagster import DagsterInstance

    from ctxwin_dagster.backends.index.rows import read_rows, restore_rows
    from ctxwin_dagster.definitions import home_resources
    from ctxwin_dagster.defs.partitions import DOCUMENTS_PARTITION

    manifests = sorted((home / TRASH).glob("*/manifest.json"))
    if not manifests:
        raise SystemExit(f"ctxwin prune --undo: nothing to undo in {home / TRASH}")
    path = manifests[-1]
    manifest = json.loads(path.read_text(encoding="utf-8"))
    index = home_resources(home)["lancedb"].index()
    restored: dict[str, int] = {}
    for v in VARIANTS:
        stored = path.parent / "rows" / f"{v}.arrow"
        if stored.is_file():
            restored[v] = restore_rows(index, v, read_rows(stored))
    for original, moved in manifest["files"]:
        Path(original).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(moved, original)
    instance = DagsterInstance.get()
    have = set(instance.get_dynamic_partitions(DOCUMENTS_PARTITION))
    again = [d for d in manifest["doc_ids"] if d not in have]
    if again:
        instance.add_dynamic_partitions(DOCUMENTS_PARTITION, again)
    path.rename(path.with_name("manifest.undone.json"))
    _log(
        home,
        {
            "action": "undo",
            "stamp": manifest["stamp"],
            "rows": restored,
            "files": len(manifest["files"]),
            "partitions": len(again),
        },
    )
    print(
        f"undid the prune of {manifest['stamp']}: {sum(restored.values())} index rows, {len(manifest['files'])} result files "
        f"and {len(again)} partitions are back",
        file=out,
    )
    return {"rows": restored, "files": len(manifest["files"]), "partitions": len(again)}


def cmd_prune(args: argparse.Namespace) -> int:
    from ctxwin_dagster.runner.home_setup import prepare_home
    from ctxwin_dagster.runner.homes import HomeLock

    home = prepare_home(str(_home(args)))
    with HomeLock(home, out=sys.stdout):
        if args.undo:
            undo(home)
        else:
            prune(home, delete=args.yes, allow_empty=args.allow_empty)
    return 0


def register(sub: Subcommands) -> None:
    """Add ``prune`` to the ``ctxwin`` command's subcommands (``sub``)."""
    prune = sub.add_parser(
        "prune", help="delete the index rows, results and partitions of documents whose file is gone (logged, undoable)"
    )
    prune.add_argument("experiment", nargs="?", default="sample", help="experiment name (default: the sample)")
    prune.add_argument("--dagster-home", help="the Dagster home (default: the experiment's)")
    prune.add_argument("--yes", action="store_true", help="delete (without it: only list what would be deleted)")
    prune.add_argument("--undo", action="store_true", help="put back what the last prune deleted")
    prune.add_argument(
        "--allow-empty",
        action="store_true",
        help="prune even when the documents folder holds no document (without it such a folder, e.g. a share "
        "that is not mounted, is refused)",
    )
    prune.set_defaults(func=cmd_prune)
