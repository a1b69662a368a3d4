"""Documents: reading plain-text files into :class:`Document` records.

A document is one file in the documents folder (``data/documents/`` by default). Its
``doc_id`` is the file stem, so it is stable across runs and readable in the Dagster UI
(one dynamic partition per document).

The document ``text`` is the file's bytes decoded as UTF-8, with a leading byte-order mark
removed and **no other change** (line endings are kept as they are). Every character offset
in the project - chunk ``start``/``end``, QA ``reference_spans`` - indexes this string::

    doc = read_text_document("data/documents/squad_Normans.txt")
    doc.doc_id, doc.n_chars      # ('squad_Normans', 25404)

Plain Python only: this module imports neither dagster, ragas nor lancedb.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "SUPPORTED_SUFFIXES",
    "DOC_ID_PATTERN",
    "Document",
    "DocumentError",
    "doc_id_from_path",
    "safe_doc_id",
    "read_text_document",
    "read_document",
    "TEXT_SUFFIXES",
    "list_documents",
]

#: File suffixes :func:`read_text_document` accepts (compared case-insensitively).
TEXT_SUFFIXES: tuple[str, ...] = (".md", ".txt")
#: File suffixes :func:`read_document` accepts: text, HTML (BeautifulSoup) and PDF (pypdf).
SUPPORTED_SUFFIXES: tuple[str, ...] = TEXT_SUFFIXES + (".html", ".htm", ".pdf")

#: What a ``doc_id`` (a file stem) may contain.
DOC_ID_PATTERN = re.compile(r"[A-Za-z0-9_.\-]+")

_TITLE_MAX_CHARS = 200
_UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
# Share of control characters (other than tab, newline, carriage return, form feed,
# vertical tab) above which decoded text is treated as binary.
_MAX_CONTROL_SHARE = 0.10
# Share of bytes that are neither printable ASCII nor common whitespace above which an
# undecodable file is reported as binary rather than as "not UTF-8".
_MAX_NONTEXT_BYTE_SHARE = 0.30


class DocumentError(ValueError):
    """A document file cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class Document:
    """One source document.

    Attributes:
        doc_id: Stable id, the file stem (``[A-Za-z0-9_.-]+``).
        sha256: Hex SHA-256 of the file's bytes (changes whenever the file changes).
        text: The decoded text; all character offsets in the project index this string.
        title: First non-empty line (trimmed to 200 characters), or the doc_id.
        source_path: Path of the file as given.
        n_chars: ``len(text)``.
        n_tokens: Token count from the injected counter, or ``None`` if none was given.
    """

    doc_id: str
    sha256: str
    text: str
    title: str
    source_path: str
    n_chars: int
    n_tokens: int | None = None

    def to_dict(self, *, include_text: bool = True) -> dict[str, Any]:
        """Return the fields as a plain dict (JSON-serializable).

        >>> Document("a", "00", "hi", "hi", "a.txt", 2).to_dict(include_text=False)["n_chars"]
        2
        """
        data = asdict(self)
        if not include_text:
            del data["text"]
        return data


def doc_id_from_path(path: str | Path) -> str:
    """Return the ``doc_id`` of a document file: its stem, validated.

    >>> doc_id_from_path("data/documents/eu_ai_act_2024_1689_EN.txt")
    'eu_ai_act_2024_1689_EN'

    Raises:
        DocumentError (a ``ValueError``): the stem is empty or holds characters outside
            ``[A-Za-z0-9_.-]`` (spaces, commas, accents...). The message names the file and
            suggests a safe name.
    """
    p = Path(path)
    stem = p.stem
    if stem and DOC_ID_PATTERN.fullmatch(stem):
        return stem
    bad = sorted({ch for ch in stem if not DOC_ID_PATTERN.fullmatch(ch)})
    shown = ", ".join(repr(ch) for ch in bad) if bad else "an empty name"
    suggestion = safe_doc_id(stem) if stem else "document"
    raise DocumentError(
        f"{p.name!r} ({p}) cannot be used as a document: its name (the doc_id) may only "
        f"contain letters, digits, '_', '.' and '-', but it has {shown}. "
        f"Rename the file, e.g. to {suggestion + p.suffix!r}."
    )


def safe_doc_id(name: str) -> str:
    """Turn an arbitrary name into a valid ``doc_id``.

    Runs of characters outside ``[A-Za-z0-9_.-]`` become one ``_``; leading/trailing
    ``_`` are dropped.

    >>> safe_doc_id("GWG HOLDINGS, INC. - ORDERLY MARKETING AGREEMENT")
    'GWG_HOLDINGS_INC._-_ORDERLY_MARKETING_AGREEMENT'
    """
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]+", "_", name).strip("_")
    if not cleaned:
        raise ValueError(f"cannot make a doc_id from {name!r}: no letters or digits in it")
    return cleaned


def _check_suffix(p: Path, allowed: tuple[str, ...] = TEXT_SUFFIXES) -> None:
    if p.suffix.lower() not in allowed:
        supported = ", ".join(allowed)
        got = repr(p.suffix) if p.suffix else "no suffix"
        raise DocumentError(
            f"{p.name!r} ({p}) has {got}; supported document types are {supported}. "
            "Convert it to plain UTF-8 text and save it with one of those suffixes."
        )


def _decode(p: Path, data: bytes) -> str:
    """Decode document bytes, raising a :class:`DocumentError` that names the fix."""
    name = f"{p.name!r} ({p})"
    if not data:
        raise DocumentError(
            f"{name} is empty (0 bytes); put the document's text in it or remove it."
        )
    if data.startswith(_UTF16_BOMS):
        raise DocumentError(
            f"{name} looks like UTF-16 (it starts with a UTF-16 byte-order mark); "
            "re-save it as UTF-8."
        )
    nul = data.find(b"\x00")
    if nul != -1:
        raise DocumentError(
            f"{name} contains NUL bytes (first at byte {nul}), so it looks like a binary "
            "file, not text; extract its text and save it as a UTF-8 .txt file."
        )
    body = data[len(_UTF8_BOM) :] if data.startswith(_UTF8_BOM) else data
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start + (len(data) - len(body))
        nontext = sum(1 for b in body if not (32 <= b < 127 or b in b"\t\n\r\f\v"))
        if body and nontext / len(body) > _MAX_NONTEXT_BYTE_SHARE:
            raise DocumentError(
                f"{name} is mostly non-text bytes, so it looks like a binary file; extract "
                "its text and save it as a UTF-8 .txt file."
            ) from None
        raise DocumentError(
            f"{name} is not valid UTF-8 at byte {offset} "
            f"(byte 0x{body[exc.start]:02x}); re-save it as UTF-8 "
            "(it may be Latin-1 / Windows-1252)."
        ) from None
    if text:
        controls = sum(
            1 for ch in text if (ord(ch) < 32 and ch not in "\t\n\r\f\v") or ord(ch) == 127
        )
        if controls / len(text) > _MAX_CONTROL_SHARE:
            raise DocumentError(
                f"{name} is mostly control characters, so it looks like a binary file; "
                "extract its text and save it as a UTF-8 .txt file."
            )
    if not text.strip():
        raise DocumentError(
            f"{name} holds only white space ({len(data)} bytes); put the document's text "
            "in it or remove it."
        )
    return text


def _title_of(text: str, fallback: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:_TITLE_MAX_CHARS].rstrip()
    return fallback


def read_text_document(
    path: str | Path, *, count_tokens: Callable[[str], int] | None = None
) -> Document:
    """Read a ``.txt`` or ``.md`` file into a :class:`Document`.

    The bytes are decoded as UTF-8 (a leading BOM is dropped; line endings are kept), the
    SHA-256 is taken over the file's bytes, and the title is the first non-empty line
    (trimmed to 200 characters) or the doc_id.

    Args:
        path: The file. Its stem becomes the ``doc_id`` (see :func:`doc_id_from_path`).
        count_tokens: Optional token counter (e.g. a tiktoken-based one); when given,
            ``n_tokens`` is ``count_tokens(text)``.

    Raises:
        DocumentError: unsupported suffix, bad file name, empty or whitespace-only file,
            binary content, or bytes that are not UTF-8. The message names the file.
        FileNotFoundError: the file does not exist.

    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "note.txt"
    >>> _ = p.write_text("Title line\\nBody.", encoding="utf-8")
    >>> d = read_text_document(p, count_tokens=lambda s: len(s.split()))
    >>> (d.doc_id, d.title, d.n_chars, d.n_tokens)
    ('note', 'Title line', 16, 3)
    """
    p = Path(path)
    _check_suffix(p)
    doc_id = doc_id_from_path(p)
    data = p.read_bytes()
    return _document(p, doc_id, data, _decode(p, data), count_tokens)


def _document(p: Path, doc_id: str, data: bytes, text: str, count_tokens: Callable[[str], int] | None) -> Document:
    """The :class:`Document` of a file's bytes and its extracted text."""
    return Document(
        doc_id=doc_id,
        sha256=hashlib.sha256(data).hexdigest(),
        text=text,
        title=_title_of(text, doc_id),
        source_path=str(p),
        n_chars=len(text),
        n_tokens=None if count_tokens is None else int(count_tokens(text)),
    )


def list_documents(folder: str | Path) -> list[Path]:
    """List the document files in ``folder`` (not recursive), sorted by name.

    Only files with a supported suffix (:data:`SUPPORTED_SUFFIXES`) are listed; hidden
    files (names starting with ``.``) and sub-folders are skipped.

    Raises:
        DocumentError: ``folder`` does not exist or is not a folder.
    """
    root = Path(folder)
    if not root.is_dir():
        raise DocumentError(
            f"documents folder {str(root)!r} does not exist or is not a folder; create it "
            f"and put the documents ({', '.join(SUPPORTED_SUFFIXES)} files) in it."
        )
    return sorted(
        (
            p
            for p in root.iterdir()
            if not p.name.startswith(".")
            and p.suffix.lower() in SUPPORTED_SUFFIXES
            and p.is_file()
        ),
        key=lambda p: p.name,
    )


def _html_text(p: Path, data: bytes) -> str:
    """Visible text of an HTML page, one block element per paragraph."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(data, "html.parser")
    for tag in soup(["script", "style", "noscript", "template", "head"]):
        tag.decompose()
    text = soup.get_text("\n")
    lines = [" ".join(line.split()) for line in text.splitlines()]
    out: list[str] = []
    for line in lines:
        if line:
            out.append(line)
        elif out and out[-1] != "":
            out.append("")
    return "\n".join(out).strip() + "\n"


def _pdf_text(p: Path) -> str:
    """Text of a PDF, pages separated by a blank line."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(str(p))
        if reader.is_encrypted:
            try:
                reader.decrypt("")
            except Exception:  # noqa: BLE001 - any failure means we cannot read it
                raise DocumentError(
                    f"{p.name!r} ({p}) is an encrypted PDF; save an unencrypted copy and use that."
                ) from None
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
    except PdfReadError as exc:
        raise DocumentError(f"{p.name!r} ({p}) is not a readable PDF ({exc}); re-export it as PDF or as text.") from None
    return "\n\n".join(t for t in pages if t) + "\n"


def read_document(path: str | Path, *, count_tokens: Callable[[str], int] | None = None) -> Document:
    """Read a ``.txt``, ``.md``, ``.html``/``.htm`` or ``.pdf`` file into a :class:`Document`.

    Text files are read as by :func:`read_text_document`. HTML is reduced to its visible text
    with BeautifulSoup; PDF text is extracted with pypdf, pages joined by a blank line. The
    ``sha256`` is always over the file's bytes. A PDF with no extractable text (scanned pages)
    raises :class:`DocumentError` telling to run OCR first.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return read_text_document(p, count_tokens=count_tokens)
    _check_suffix(p, SUPPORTED_SUFFIXES)
    doc_id = doc_id_from_path(p)
    data = p.read_bytes()
    if not data:
        raise DocumentError(f"{p.name!r} ({p}) is empty (0 bytes); put the document in it or remove it.")
    if suffix == ".pdf":
        if not data.startswith(b"%PDF"):
            raise DocumentError(f"{p.name!r} ({p}) does not start like a PDF file; check the file or its suffix.")
        text = _pdf_text(p)
        if not text.strip():
            raise DocumentError(
                f"{p.name!r} ({p}) has no extractable text (image-only or scanned PDF); run OCR on it "
                "(e.g. ocrmypdf) and use the result, or provide a .txt version."
            )
    else:
        text = _html_text(p, data)
        if not text.strip():
            raise DocumentError(f"{p.name!r} ({p}) has no visible text; check the file, or provide a .txt version.")
    return _document(p, doc_id, data, text, count_tokens)
