"""A documents folder as users have it: every file becomes a document, or a reason why not.

Real file names hold spaces, commas, brackets and accents (``Acme, Inc. [2019] – Supply
Agreement.txt``). Each file gets a ``doc_id`` that is safe as a Dagster partition key, a
LanceDB filter value and a file name, readable, and stable: it depends only on the file's own
name, except when two files would get the same id (then see below)::

    folder = scan_documents("data/documents")
    folder.ids()                  # ['Acme_Inc._2019_-_Supply_Agreement', 'eu_ai_act_2024_1689_EN', ...]
    folder.path_of("Acme_Inc._2019_-_Supply_Agreement")   # Path('data/documents/Acme, Inc. [2019] – ...')
    folder.resolve("Acme, Inc. [2019] – Supply Agreement.txt")   # the same id: name, stem or id
    print("\\n".join(folder.report_lines()))   # renamed files, collisions, problems, files not taken

Rules:

* A stem of letters, digits, ``_``, ``.`` and ``-`` (at most 120 characters) is its own id.
* Otherwise accents are dropped (``é`` → ``e``, ``ß`` → ``ss``), every run of other characters
  becomes one ``_``, and ``_ . -`` are trimmed from the ends; a name with nothing left (all
  CJK, say) becomes ``doc_`` + 8 hex digits of the name's SHA-1; an id over 120 characters is
  cut and ends in 6 hex digits of the name's SHA-1, so long names stay distinct.
* Collisions (``a b.txt`` and ``a_b.txt``; ``x.txt`` and ``x.pdf``): a file whose stem *is*
  the id keeps it (the first by name if several); every other file gets ``{id}_{suffix}``
  (``x_pdf``), or ``{id}_{sha1[:6]}`` if that is taken too. Each one is reported.
* Ids stay put when other files change: pass ``known`` (file name -> the id it was given
  before, from :func:`load_id_registry`) and a file in it keeps its id; a new file never takes
  an id a known file holds, even one whose file is gone for now (it gets its old id back when
  it returns). Without ``known``, adding ``x.md`` beside ``x.txt`` would take ``x`` from it.
* A document file that cannot be used as it is, an empty (0 bytes, or only white space) file or
  one that cannot be read (permissions), is still a :class:`DocumentFile` with its ``problem``:
  it keeps its id and its partition, whose run fails naming the fix (nothing built from it is
  removed). Files not taken, each with its reason: an unsupported type, a sub-folder. Hidden
  files (``.*``) are ignored without a word (``.gitkeep``, ``.DS_Store``).

Plain Python only: this module imports neither dagster, ragas nor lancedb.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ctxwin_dagster.core.text.documents import DocumentError
from ctxwin_dagster.core.text.file_names import (
    DOC_ID_PATTERN,
    MAX_DOC_ID_CHARS,
    SUPPORTED_SUFFIXES,
    TEXT_SUFFIXES,
    derive_doc_id,
)

__all__ = [
    "MAX_DOC_ID_CHARS",
    "DocumentFile",
    "SkippedFile",
    "DocumentFolder",
    "derive_doc_id",
    "scan_documents",
    "registered_file",
    "load_id_registry",
    "save_id_registry",
]

# A text file this small is read to see whether it holds only white space (a larger one that
# does fails its own partition with that message).
_BLANK_CHECK_BYTES = 4096


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class DocumentFile:
    """A file taken as a document.

    Attributes:
        path: the file.
        doc_id: its id (the partition key).
        note: why the id differs from the stem ("" when it is the stem).
        problem: why the file cannot be read as a document as it is, with the fix ("" when
            fine); such a file keeps its id and partition, and its run fails with the reason.
    """

    path: Path
    doc_id: str
    note: str = ""
    problem: str = ""

    @property
    def renamed(self) -> bool:
        return self.doc_id != self.path.stem


@dataclass(frozen=True)
class SkippedFile:
    """A file (or sub-folder) of the documents folder that is not a document (an unsupported
    type, a sub-folder), and why."""

    path: Path
    reason: str


@dataclass(frozen=True)
class DocumentFolder:
    """The result of :func:`scan_documents`: documents by id, and the files not taken."""

    folder: Path
    files: tuple[DocumentFile, ...]
    skipped: tuple[SkippedFile, ...]

    def ids(self) -> list[str]:
        """The doc_ids, in the order of the file names (files with a problem included: each keeps
        its partition, which fails until the file is fixed)."""
        return [f.doc_id for f in self.files]

    def usable(self) -> tuple[DocumentFile, ...]:
        """The document files without a problem."""
        return tuple(f for f in self.files if not f.problem)

    def problems(self) -> tuple[DocumentFile, ...]:
        """The document files that cannot be read as they are (empty, unreadable)."""
        return tuple(f for f in self.files if f.problem)

    def assignments(self) -> dict[str, str]:
        """File name -> doc_id, for the files of this scan (what :func:`save_id_registry` keeps)."""
        return {f.path.name: f.doc_id for f in self.files}

    def path_of(self, doc_id: str) -> Path | None:
        """The file behind ``doc_id``, or None."""
        return self._paths.get(doc_id)

    @cached_property
    def _paths(self) -> dict[str, Path]:
        return {f.doc_id: f.path for f in self.files}

    @cached_property
    def aliases(self) -> dict[str, str | None]:
        """Every name a user may call a document by -> its doc_id (None when ambiguous).

        The id itself, the file name and the stem, and the id derived from the stem (what
        the document was called before a collision was resolved). An id always means itself.
        """
        out: dict[str, str | None] = {}
        for f in self.files:
            for alias in (f.path.name, f.path.stem, derive_doc_id(f.path.stem)):
                if alias in out and out[alias] != f.doc_id:
                    out[alias] = None
                else:
                    out[alias] = f.doc_id
        for f in self.files:
            out[f.doc_id] = f.doc_id
        return out

    def resolve(self, ref: str) -> str | None:
        """The doc_id a question's ``doc_id`` field means: the id, the file name or its stem.

        Returns None when nothing matches, or when the name fits several files (``x`` with
        ``x.txt`` and ``x.pdf``; use the file name or the id then); :meth:`lookup` tells which.
        """
        return self.lookup(ref)[0]

    def lookup(self, ref: str) -> tuple[str | None, bool]:
        """``(doc_id or None, ambiguous)`` for a name a user gave a document."""
        ref = ref.strip()
        aliases = self.aliases
        if ref not in aliases:
            stem = Path(ref).stem if Path(ref).suffix.lower() in SUPPORTED_SUFFIXES else ref
            ref = derive_doc_id(stem) if stem else ref
        if ref not in aliases:
            return None, False
        doc_id = aliases[ref]
        return doc_id, doc_id is None

    def report_lines(self) -> list[str]:
        """Lines for a console or a log: renamed files, collisions, files with a problem, files not taken."""
        lines = [f"  {f.path.name} -> {f.doc_id}" + (f" ({f.note})" if f.note else "") for f in self.files if f.renamed]
        if lines:
            lines.insert(0, f"{len(lines)} file name(s) are not usable ids as they are; their doc_ids:")
        problems = self.problems()
        if problems:
            lines.append(
                f"{len(problems)} document file(s) in {self.folder} cannot be read as they are (their runs fail until fixed):"
            )
            lines += [f"  {f.path.name}: {f.problem}" for f in problems]
        if self.skipped:
            lines.append(f"{len(self.skipped)} file(s) in {self.folder} not taken:")
            lines += [f"  {s.path.name}: {s.reason}" for s in self.skipped]
        return lines

    def require_documents(self) -> None:
        """Raise :class:`DocumentError` when the folder holds no usable document (no file
        without a problem)."""
        if self.usable():
            return
        named = sorted([(f.path.name, f.problem) for f in self.files] + [(s.path.name, s.reason) for s in self.skipped])
        if named:
            reasons = "; ".join(f"{name}: {reason}" for name, reason in named[:10])
            more = f" (and {len(named) - 10} more)" if len(named) > 10 else ""
            raise DocumentError(
                f"documents folder {str(self.folder)!r} holds no usable document: {reasons}{more}. "
                f"Put {', '.join(SUPPORTED_SUFFIXES)} files with text in it."
            )
        raise DocumentError(
            f"documents folder {str(self.folder)!r} is empty; put the documents "
            f"({', '.join(SUPPORTED_SUFFIXES)} files) in it, or point the settings at the folder that has them."
        )


def _skip_reason(p: Path) -> str | None:
    """Why ``p`` is not a document at all, or None when it is one."""
    if p.is_dir():
        return "a folder (sub-folders are not read; move its documents up or point the settings at it)"
    if p.suffix.lower() not in SUPPORTED_SUFFIXES:
        got = f"type {p.suffix!r}" if p.suffix else "no file type (suffix)"
        return (
            f"unsupported {got}; supported: {', '.join(SUPPORTED_SUFFIXES)}. Convert it, or remove it from the folder"
        )
    return None


def _problem(p: Path) -> str:
    """Why the document file ``p`` cannot be read as it is, with the fix, or "" when it can."""
    suffix = p.suffix.lower()
    try:
        size = p.stat().st_size
        if not os.access(p, os.R_OK):
            raise PermissionError("permission denied")
        with p.open("rb") as fh:
            head = fh.read(_BLANK_CHECK_BYTES if size <= _BLANK_CHECK_BYTES else 1)
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc}); fix its permissions, or remove it"
    if size == 0:
        return "empty (0 bytes); put the document's text in it, or remove it"
    if suffix in TEXT_SUFFIXES and size <= _BLANK_CHECK_BYTES:
        body = head.removeprefix(b"\xef\xbb\xbf")
        if not body.strip():
            return f"empty (only white space, {size} bytes); put the document's text in it, or remove it"
    return ""


def scan_documents(folder: str | Path, *, known: Mapping[str, str] | None = None) -> DocumentFolder:
    """Every entry of ``folder`` (not recursive): a :class:`DocumentFile` or a :class:`SkippedFile`.

    Args:
        folder: the documents folder.
        known: file name -> the doc_id it was given before (:func:`load_id_registry`), files
            gone included: a file in it keeps its id, and no new file takes one of these ids.

    Raises:
        DocumentError: ``folder`` does not exist or is not a folder.
    """
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise DocumentError(
            f"documents folder {str(root)!r} does not exist or is not a folder; create it "
            f"and put the documents ({', '.join(SUPPORTED_SUFFIXES)} files) in it."
        )
    taken: list[Path] = []
    skipped: list[SkippedFile] = []
    for p in sorted(root.iterdir(), key=lambda q: q.name):
        if p.name.startswith("."):
            continue
        reason = _skip_reason(p)
        if reason is None:
            taken.append(p)
        else:
            skipped.append(SkippedFile(p, reason))
    files = tuple(
        DocumentFile(f.path, f.doc_id, f.note, _problem(f.path)) for f in _assign_ids(taken, _valid_known(known))
    )
    return DocumentFolder(root, files, tuple(skipped))


def registered_file(folder: str | Path, known: Mapping[str, str], doc_id: str) -> Path | None:
    """The file :func:`scan_documents` would give ``doc_id`` because ``known`` gives it that id,
    found without reading the rest of the folder; None when no such file is there now (then only
    a scan can say which file, if any, has the id).

    A run's documents each look up their own file: a scan of the whole folder each time made the
    cost of a document grow with the folder (70 ms a document at 1,000 files). The rule is the
    scan's: of the files present that ``known`` names with this id, the first by name.
    """
    root = Path(folder).expanduser()
    for name in sorted(n for n, i in _valid_known(known).items() if i == doc_id):
        path = root / name
        if not name.startswith(".") and path.is_file() and _skip_reason(path) is None:
            return path
    return None


def _valid_known(known: Mapping[str, str] | None) -> dict[str, str]:
    """The entries of ``known`` whose id is a usable doc_id (a hand-edited registry may hold others)."""
    return {
        name: doc_id
        for name, doc_id in (known or {}).items()
        if isinstance(name, str)
        and isinstance(doc_id, str)
        and len(doc_id) <= MAX_DOC_ID_CHARS
        and DOC_ID_PATTERN.fullmatch(doc_id)
        and not doc_id.startswith(".")
    }


def _assign_ids(paths: list[Path], known: Mapping[str, str]) -> tuple[DocumentFile, ...]:
    """Give each file its id, keeping known ones and resolving collisions as the module's docstring says."""
    ids: dict[Path, str] = {}
    notes: dict[Path, str] = {}
    # A file named in ``known`` keeps its id (the first by name, if the registry gives two files one id).
    for p in paths:
        doc_id = known.get(p.name)
        if doc_id is not None and doc_id not in ids.values():
            ids[p] = doc_id
            if doc_id != derive_doc_id(p.stem):
                notes[p] = "its id since it was first seen"
    holder = {doc_id: name for name, doc_id in sorted(known.items(), reverse=True)}
    holder.update({doc_id: p.name for p, doc_id in ids.items()})
    present = {p.name for p in paths}
    used: set[str] = set(holder)  # ids of known files, present or gone, are never handed out again
    new = [p for p in paths if p not in ids]
    base = {p: derive_doc_id(p.stem) for p in new}
    groups: dict[str, list[Path]] = {}
    for p in new:
        groups.setdefault(base[p], []).append(p)
    # First every id one new file claims alone, or the one file of a group whose stem is the id.
    losers: list[Path] = []
    for doc_id, members in groups.items():
        if doc_id in used:
            losers += members
            continue
        owner = next((p for p in members if p.stem == doc_id), members[0])
        ids[owner] = doc_id
        holder[doc_id] = owner.name
        used.add(doc_id)
        losers += [p for p in members if p is not owner]
    for p in losers:
        owner_name = holder[base[p]]
        candidates = [f"{base[p]}_{p.suffix.lower().lstrip('.')}", f"{base[p]}_{_sha1(p.name)[:6]}"]
        # The last resort, a longer SHA-1 prefix, is taken only if the others are.
        new_id = next((c for c in candidates if c not in used and c not in groups), f"{base[p]}_{_sha1(p.name)[:12]}")
        ids[p] = new_id
        used.add(new_id)
        gone = "" if owner_name in present else " (kept for it while the file is gone)"
        notes[p] = f"{base[p]!r} is taken by {owner_name!r}{gone}"
    return tuple(DocumentFile(p, ids[p], notes.get(p, "")) for p in paths)


def load_id_registry(path: str | Path) -> dict[str, str]:
    """The ids files were given before (``{file name: doc_id}`` in JSON), for ``known``.

    A missing file reads as ``{}``; so does a corrupt one (with a warning: it is written again
    whole by the next :func:`save_id_registry`). Entries that are not name -> string are dropped.
    """
    p = Path(path).expanduser()
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        warnings.warn(
            f"document id registry {str(p)!r} cannot be read ({exc}); starting from no known ids", stacklevel=2
        )
        return {}
    if not isinstance(data, dict):
        warnings.warn(f"document id registry {str(p)!r} is not a JSON object; starting from no known ids", stacklevel=2)
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def save_id_registry(path: str | Path, folder: DocumentFolder, previous: Mapping[str, str]) -> dict[str, str]:
    """Write ``previous`` updated with ``folder``'s ids (:meth:`DocumentFolder.assignments`).

    Entries of files that are gone are kept, so their ids are not handed to another file and
    come back with them; an earlier entry whose id another file now holds is dropped. The file
    is written through a temporary file and ``os.replace`` (never half-written), and only when
    it changes. Returns the registry written.
    """
    current = folder.assignments()
    taken = set(current.values())
    merged = {name: doc_id for name, doc_id in previous.items() if name not in current and doc_id not in taken}
    merged.update(current)
    merged = dict(sorted(merged.items()))
    p = Path(path).expanduser()
    if p.is_file() and load_id_registry(p) == merged:
        return merged
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(merged, fh, ensure_ascii=False, indent=1)
            fh.write("\n")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return merged
