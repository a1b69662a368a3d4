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

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.text.file_names import SUPPORTED_SUFFIXES, TEXT_SUFFIXES, doc_id_from_path

__all__ = ["Document", "DocumentError", "read_document", "read_text_document"]

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
        encoding: What the file's bytes were read as: ``utf-8``, a BOM's UTF-16/32, or an
            encoding told from the bytes (``windows-1252``, ``cp1251``…; see
            :mod:`ctxwin_dagster.core.text.charsets`); ``docx``/``pdf``/``html`` for extracted text.
        pages: For PDFs, ``(page number, start offset)`` of every page with text, in order.
        replaced_bytes: Bytes of a UTF-8 file that were not UTF-8 (a few stray bytes) and
            became ``U+FFFD``; 0 otherwise. See :meth:`encoding_warning`.
    """

    doc_id: str
    sha256: str
    text: str
    title: str
    source_path: str
    n_chars: int
    n_tokens: int | None = None
    encoding: str = "utf-8"
    pages: tuple[tuple[int, int], ...] = ()
    replaced_bytes: int = 0

    def encoding_warning(self) -> str:
        """What a reader should be told about how the file was decoded, with the fix ("" when
        nothing: UTF-8 or extracted text).

        >>> print(Document("a", "00", "x\ufffd", "x", "a.txt", 2, replaced_bytes=1).encoding_warning())  # doctest: +NORMALIZE_WHITESPACE
        a.txt: read as UTF-8, but 1 byte(s) are not UTF-8 and were replaced by U+FFFD;
        re-save the file as UTF-8 (fix or remove those bytes) to keep every character
        """
        name = Path(self.source_path).name
        if self.replaced_bytes:
            return (
                f"{name}: read as UTF-8, but {self.replaced_bytes} byte(s) are not UTF-8 and were replaced by U+FFFD; "
                "re-save the file as UTF-8 (fix or remove those bytes) to keep every character"
            )
        if self.encoding in ("utf-8", "docx", "pdf", "html", "htm"):
            return ""
        return f"{name}: not UTF-8; read as {self.encoding} (told from its bytes). Re-save it as UTF-8 to be sure."

    def page_at(self, offset: int) -> int | None:
        """The page number holding character ``offset`` (PDFs), or None.

        >>> Document("a", "00", "one\\n\\ntwo\\n", "one", "a.pdf", 9, pages=((1, 0), (3, 5))).page_at(6)
        3
        """
        page = None
        for number, start in self.pages:
            if start > offset:
                break
            page = number
        return page

    def to_dict(self, *, include_text: bool = True) -> JSONObject:
        """Return the fields as a plain dict (JSON-serializable).

        >>> Document("a", "00", "hi", "hi", "a.txt", 2).to_dict(include_text=False)["n_chars"]
        2
        """
        data = asdict(self)
        if not include_text:
            del data["text"]
        return data


def _check_suffix(p: Path, allowed: tuple[str, ...] = TEXT_SUFFIXES) -> None:
    if p.suffix.lower() not in allowed:
        supported = ", ".join(allowed)
        got = repr(p.suffix) if p.suffix else "no suffix"
        raise DocumentError(
            f"{p.name!r} ({p}) has {got}; supported document types are {supported}. "
            "Convert it to plain UTF-8 text and save it with one of those suffixes."
        )


def _decode(p: Path, data: bytes) -> tuple[str, str, int]:
    """Decode document bytes into (text, encoding, bytes replaced), raising a :class:`DocumentError` that names the fix."""
    from ctxwin_dagster.core.text.charsets import EncodingUnknown, decode_text

    name = f"{p.name!r} ({p})"
    if not data:
        raise DocumentError(f"{name} is empty (0 bytes); put the document's text in it or remove it.")
    nul = data.find(b"\x00")
    if nul != -1 and not data.startswith(_UTF16_BOMS):
        raise DocumentError(
            f"{name} contains NUL bytes (first at byte {nul}), so it looks like a binary "
            "file, not text (UTF-16 without a byte-order mark looks the same); extract its "
            "text and save it as a UTF-8 .txt file."
        )
    try:
        decoded = decode_text(data)
    except EncodingUnknown as exc:
        if data.startswith(_UTF16_BOMS) or data.startswith(b"\x00\x00\xfe\xff"):
            raise DocumentError(f"{name}: {exc}; re-save it as UTF-8.") from None
        body = data[len(_UTF8_BOM) :] if data.startswith(_UTF8_BOM) else data
        nontext = sum(1 for b in body if not (32 <= b < 127 or b in b"\t\n\r\f\v"))
        if body and nontext / len(body) > _MAX_NONTEXT_BYTE_SHARE:
            raise DocumentError(
                f"{name} is mostly non-text bytes, so it looks like a binary file; extract "
                "its text and save it as a UTF-8 .txt file."
            ) from None
        try:
            body.decode("utf-8")
            offset_note = ""
        except UnicodeDecodeError as err:
            offset_note = f" (the first byte that is not UTF-8 is 0x{body[err.start]:02x} at byte {err.start + len(data) - len(body)})"
        raise DocumentError(f"{name}: {exc}{offset_note}; re-save it as UTF-8.") from None
    text = decoded.text
    if text:
        controls = sum(1 for ch in text if (ord(ch) < 32 and ch not in "\t\n\r\f\v") or ord(ch) == 127)
        if controls / len(text) > _MAX_CONTROL_SHARE:
            raise DocumentError(
                f"{name} is mostly control characters, so it looks like a binary file; "
                "extract its text and save it as a UTF-8 .txt file."
            )
    if not text.strip():
        raise DocumentError(
            f"{name} holds only white space ({len(data)} bytes); put the document's text in it or remove it."
        )
    return text, decoded.encoding, decoded.replaced


def _read_bytes(p: Path) -> bytes:
    """The file's bytes; a file that exists but cannot be read is a :class:`DocumentError` naming the fix."""
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise DocumentError(
            f"{p.name!r} ({p}) is a folder, not a document file; move its documents up or remove it."
        ) from None
    except OSError as exc:
        raise DocumentError(
            f"{p.name!r} ({p}) cannot be read ({exc.strerror or exc}); fix its permissions "
            "(e.g. `chmod u+r` on it, or give the user that runs the pipeline read access), or remove it from the folder."
        ) from None


def _title_of(text: str, fallback: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:_TITLE_MAX_CHARS].rstrip()
    return fallback


def read_text_document(
    path: str | Path, *, count_tokens: Callable[[str], int] | None = None, doc_id: str | None = None
) -> Document:
    """Read a ``.txt`` or ``.md`` file into a :class:`Document`.

    The bytes are decoded as UTF-8 (a leading BOM is dropped; line endings are kept); a UTF-8
    file with a few stray bytes is still read as UTF-8, those bytes replaced by ``U+FFFD`` and
    counted in ``replaced_bytes`` (never read as another code page); a file that is not UTF-8 is read with the encoding told from its bytes (a UTF-16/32 BOM,
    Windows-1252/Latin-1, or what charset-normalizer finds with confidence; see
    :mod:`ctxwin_dagster.core.text.charsets`) and that encoding is recorded, or it is rejected
    with the fix. The SHA-256 is taken over the file's bytes, and the title is the first
    non-empty line (trimmed to 200 characters) or the doc_id.

    Args:
        path: The file.
        count_tokens: Optional token counter (e.g. a tiktoken-based one); when given,
            ``n_tokens`` is ``count_tokens(text)``.
        doc_id: The id to give it (a folder's scan tells colliding names apart); default
            :func:`doc_id_from_path`.

    Raises:
        DocumentError: unsupported suffix, empty or whitespace-only file, a file that cannot be
            read (permissions), binary content, or bytes in no encoding that can be told. The
            message names the file and the fix.
        FileNotFoundError: the file does not exist.

    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "note.txt"
    >>> _ = p.write_text("Title line\\nBody.", encoding="utf-8")
    >>> d = read_text_document(p, count_tokens=lambda s: len(s.split()))
    >>> (d.doc_id, d.title, d.n_chars, d.n_tokens, d.encoding)
    ('note', 'Title line', 16, 3, 'utf-8')
    """
    p = Path(path)
    _check_suffix(p)
    data = _read_bytes(p)
    text, encoding, replaced = _decode(p, data)
    doc = _document(p, doc_id or doc_id_from_path(p), data, text, count_tokens, encoding=encoding)
    return dataclasses.replace(doc, replaced_bytes=replaced) if replaced else doc


def _document(
    p: Path,
    doc_id: str,
    data: bytes,
    text: str,
    count_tokens: Callable[[str], int] | None,
    *,
    encoding: str,
    pages: tuple[tuple[int, int], ...] = (),
) -> Document:
    """The :class:`Document` of a file's bytes and its extracted text."""
    return Document(
        doc_id=doc_id,
        sha256=hashlib.sha256(data).hexdigest(),
        text=text,
        title=_title_of(text, doc_id),
        source_path=str(p),
        n_chars=len(text),
        n_tokens=None if count_tokens is None else int(count_tokens(text)),
        encoding=encoding,
        pages=pages,
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


def _docx_text(p: Path) -> str:
    """Text of a Word .docx file (python-docx): paragraphs and table rows in document order,
    separated by a blank line; a table row's cells joined by `` | ``."""
    import zipfile

    from docx import Document as DocxDocument
    from docx.table import Table

    try:
        doc = DocxDocument(str(p))
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise DocumentError(
            f"{p.name!r} ({p}) is not a readable .docx file ({exc}); open it in Word or LibreOffice "
            "and save it again as .docx, or save it as .txt."
        ) from None
    blocks: list[str] = []
    for block in doc.iter_inner_content():
        if isinstance(block, Table):
            for row in block.rows:
                cells = [" ".join(c.text.split()) for c in row.cells]
                line = " | ".join(c for c in dict.fromkeys(cells) if c)
                if line:
                    blocks.append(line)
        else:
            text = block.text.strip()
            if text:
                blocks.append(text)
    return "\n\n".join(blocks) + "\n"


def _pdf_text(p: Path) -> tuple[str, tuple[tuple[int, int], ...]]:
    """Text of a PDF, pages separated by a blank line, and (page number, start offset) per page with text."""
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
        raise DocumentError(
            f"{p.name!r} ({p}) is not a readable PDF ({exc}); re-export it as PDF or as text."
        ) from None
    parts: list[str] = []
    starts: list[tuple[int, int]] = []
    offset = 0
    for number, page_text in enumerate(pages, start=1):
        if not page_text:
            continue
        if parts:
            offset += 2
        starts.append((number, offset))
        parts.append(page_text)
        offset += len(page_text)
    return "\n\n".join(parts) + "\n", tuple(starts)


# How the bytes of a file of a suffix start, and what to say when they do not.
_SIGNATURES = {
    ".pdf": (b"%PDF", "does not start like a PDF file; check the file or its suffix."),
    ".docx": (
        b"PK",
        "is not a .docx file (a .docx is a zip archive; an old binary .doc renamed?); save it from Word or "
        "LibreOffice as .docx or .txt.",
    ),
}
# What to say when the text extracted from a file of a suffix is empty.
_NO_TEXT = {
    ".pdf": "has no extractable text (image-only or scanned PDF); run OCR on it (e.g. ocrmypdf) and use the "
    "result, or provide a .txt version.",
    ".docx": "has no text in its paragraphs or tables; check the file, or provide a .txt version.",
    ".html": "has no visible text; check the file, or provide a .txt version.",
}


def read_document(
    path: str | Path, *, count_tokens: Callable[[str], int] | None = None, doc_id: str | None = None
) -> Document:
    """Read a ``.txt``, ``.md``, ``.docx``, ``.html``/``.htm`` or ``.pdf`` file into a :class:`Document`.

    Text files are read as by :func:`read_text_document`. Word files give their paragraphs and
    table rows (python-docx); HTML is reduced to its visible text with BeautifulSoup; PDF text
    is extracted with pypdf, pages joined by a blank line, and ``pages`` records where each
    page starts so a citation can name its page. The ``sha256`` is always over the file's
    bytes. A PDF with no extractable text (scanned pages) raises :class:`DocumentError` telling
    to run OCR first.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return read_text_document(p, count_tokens=count_tokens, doc_id=doc_id)
    _check_suffix(p, SUPPORTED_SUFFIXES)
    doc_id = doc_id or doc_id_from_path(p)
    data = _read_bytes(p)
    if not data:
        raise DocumentError(f"{p.name!r} ({p}) is empty (0 bytes); put the document in it or remove it.")
    signature = _SIGNATURES.get(suffix)
    if signature is not None and not data.startswith(signature[0]):
        raise DocumentError(f"{p.name!r} ({p}) {signature[1]}")
    pages: tuple[tuple[int, int], ...] = ()
    if suffix == ".pdf":
        text, pages = _pdf_text(p)
    elif suffix == ".docx":
        text = _docx_text(p)
    else:
        text = _html_text(p, data)
    if not text.strip():
        raise DocumentError(f"{p.name!r} ({p}) {_NO_TEXT.get(suffix, _NO_TEXT['.html'])}")
    return _document(p, doc_id, data, text, count_tokens, encoding=suffix.lstrip("."), pages=pages)
