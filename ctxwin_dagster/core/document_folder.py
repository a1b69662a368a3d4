"""A documents folder as users have it: every file becomes a document, or a reason why not.

Real file names hold spaces, commas, brackets and accents (``Acme, Inc. [2019] – Supply
Agreement.txt``). Each file gets a ``doc_id`` that is safe as a Dagster partition key, a
LanceDB filter value and a file name, readable, and stable: it depends only on the file's own
name, except when two files would get the same id (then see below)::

    folder = scan_documents("data/documents")
    folder.ids()                  # ['Acme_Inc._2019_-_Supply_Agreement', 'eu_ai_act_2024_1689_EN', ...]
    folder.path_of("Acme_Inc._2019_-_Supply_Agreement")   # Path('data/documents/Acme, Inc. [2019] – ...')
    folder.resolve("Acme, Inc. [2019] – Supply Agreement.txt")   # the same id: name, stem or id
    print("\\n".join(folder.report_lines()))   # renamed files, collisions, files not taken

Rules:

* A stem of letters, digits, ``_``, ``.`` and ``-`` (at most 120 characters) is its own id.
* Otherwise accents are dropped (``é`` → ``e``, ``ß`` → ``ss``), every run of other characters
  becomes one ``_``, and ``_ . -`` are trimmed from the ends; a name with nothing left (all
  CJK, say) becomes ``doc_`` + 8 hex digits of the name's SHA-1; an id over 120 characters is
  cut and ends in 6 hex digits of the name's SHA-1, so long names stay distinct.
* Collisions (``a b.txt`` and ``a_b.txt``; ``x.txt`` and ``x.pdf``): a file whose stem *is*
  the id keeps it (the first by name if several); every other file gets ``{id}_{suffix}``
  (``x_pdf``), or ``{id}_{sha1[:6]}`` if that is taken too. Each one is reported.
* Files not taken, each with its reason: an unsupported type, an empty (0 bytes, or only white
  space) file, a file that cannot be read (permissions), a sub-folder. Hidden files (``.*``)
  are ignored without a word (``.gitkeep``, ``.DS_Store``).

Plain Python only: this module imports neither dagster, ragas nor lancedb.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ctxwin_dagster.core.documents import MAX_DOC_ID_CHARS, SUPPORTED_SUFFIXES, TEXT_SUFFIXES, DocumentError, derive_doc_id

__all__ = [
    "MAX_DOC_ID_CHARS",
    "DocumentFile",
    "SkippedFile",
    "DocumentFolder",
    "derive_doc_id",
    "scan_documents",
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
    """

    path: Path
    doc_id: str
    note: str = ""

    @property
    def renamed(self) -> bool:
        return self.doc_id != self.path.stem


@dataclass(frozen=True)
class SkippedFile:
    """A file (or sub-folder) of the documents folder that is not a document, and why."""

    path: Path
    reason: str


@dataclass(frozen=True)
class DocumentFolder:
    """The result of :func:`scan_documents`: documents by id, and the files not taken."""

    folder: Path
    files: tuple[DocumentFile, ...]
    skipped: tuple[SkippedFile, ...]

    def ids(self) -> list[str]:
        """The doc_ids, in the order of the file names."""
        return [f.doc_id for f in self.files]

    def path_of(self, doc_id: str) -> Path | None:
        """The file behind ``doc_id``, or None."""
        for f in self.files:
            if f.doc_id == doc_id:
                return f.path
        return None

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
        """Lines for a console or a log: renamed files, collisions, files not taken."""
        lines = [f"  {f.path.name} -> {f.doc_id}" + (f" ({f.note})" if f.note else "") for f in self.files if f.renamed]
        if lines:
            lines.insert(0, f"{len(lines)} file name(s) are not usable ids as they are; their doc_ids:")
        if self.skipped:
            lines.append(f"{len(self.skipped)} file(s) in {self.folder} not taken:")
            lines += [f"  {s.path.name}: {s.reason}" for s in self.skipped]
        return lines

    def require_documents(self) -> None:
        """Raise :class:`DocumentError` when the folder holds no usable document."""
        if self.files:
            return
        if self.skipped:
            reasons = "; ".join(f"{s.path.name}: {s.reason}" for s in self.skipped[:10])
            more = f" (and {len(self.skipped) - 10} more)" if len(self.skipped) > 10 else ""
            raise DocumentError(
                f"documents folder {str(self.folder)!r} holds no usable document: {reasons}{more}. "
                f"Put {', '.join(SUPPORTED_SUFFIXES)} files with text in it."
            )
        raise DocumentError(
            f"documents folder {str(self.folder)!r} is empty; put the documents "
            f"({', '.join(SUPPORTED_SUFFIXES)} files) in it, or point the settings at the folder that has them."
        )


def _skip_reason(p: Path) -> str | None:
    """Why ``p`` is not a document, or None when it is one."""
    if p.is_dir():
        return "a folder (sub-folders are not read; move its documents up or point the settings at it)"
    suffix = p.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        got = f"type {p.suffix!r}" if p.suffix else "no file type (suffix)"
        return f"unsupported {got}; supported: {', '.join(SUPPORTED_SUFFIXES)}. Convert it, or remove it from the folder"
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
    return None


def scan_documents(folder: str | Path) -> DocumentFolder:
    """Every entry of ``folder`` (not recursive): a :class:`DocumentFile` or a :class:`SkippedFile`.

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
    return DocumentFolder(root, _assign_ids(taken), tuple(skipped))


def _assign_ids(paths: list[Path]) -> tuple[DocumentFile, ...]:
    """Give each file its id, resolving collisions as the module's docstring says."""
    base = {p: derive_doc_id(p.stem) for p in paths}
    groups: dict[str, list[Path]] = {}
    for p in paths:
        groups.setdefault(base[p], []).append(p)
    ids: dict[Path, str] = {}
    notes: dict[Path, str] = {}
    used: set[str] = set()
    # First every id one file claims alone, or the one file of a group whose stem is the id.
    losers: list[Path] = []
    for doc_id, members in groups.items():
        owner = next((p for p in members if p.stem == doc_id), members[0])
        ids[owner] = doc_id
        used.add(doc_id)
        losers += [p for p in members if p is not owner]
    for p in losers:
        owner_name = next(q.name for q in paths if ids.get(q) == base[p])
        candidates = [f"{base[p]}_{p.suffix.lower().lstrip('.')}", f"{base[p]}_{_sha1(p.name)[:6]}"]
        # The last resort, a longer SHA-1 prefix, is taken only if the others are.
        new_id = next((c for c in candidates if c not in used and c not in groups), f"{base[p]}_{_sha1(p.name)[:12]}")
        ids[p] = new_id
        used.add(new_id)
        notes[p] = f"{base[p]!r} is taken by {owner_name!r}"
    return tuple(DocumentFile(p, ids[p], notes.get(p, "")) for p in paths)
