"""What a document file's name tells: whether it is read as a document (its suffix) and its id.

:data:`SUPPORTED_SUFFIXES` are the suffixes of the files read as documents (:data:`TEXT_SUFFIXES`
as plain text). A ``doc_id`` names a document in the index, in result files and as its Dagster
partition, so it is readable and stable: the file stem when that is a valid id (letters, digits,
``_ . -``), otherwise a readable ASCII id derived from it (:func:`derive_doc_id`). The corpus
importers make ids from arbitrary names with :func:`safe_doc_id`.

Example::

    >>> doc_id_from_path("data/documents/Müller & Söhne.txt")
    'Muller_Sohne'
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from pathlib import Path

__all__ = [
    "DOC_ID_PATTERN",
    "MAX_DOC_ID_CHARS",
    "SUPPORTED_SUFFIXES",
    "TEXT_SUFFIXES",
    "derive_doc_id",
    "doc_id_from_path",
    "safe_doc_id",
]

#: File suffixes read as plain text (compared case-insensitively).
TEXT_SUFFIXES: tuple[str, ...] = (".md", ".txt")
#: File suffixes read as documents: text, Word (python-docx), HTML (BeautifulSoup), PDF (pypdf).
SUPPORTED_SUFFIXES: tuple[str, ...] = TEXT_SUFFIXES + (".docx", ".html", ".htm", ".pdf")

#: What a ``doc_id`` may contain (a file stem with other characters gets a derived id).
DOC_ID_PATTERN = re.compile(r"[A-Za-z0-9_.\-]+")
#: Longest ``doc_id`` derived from a file name (longer names are cut and end in a hash).
MAX_DOC_ID_CHARS = 120
# Letters NFKD does not decompose into ASCII, written the way a reader would.
_SPECIAL_LETTERS = str.maketrans(
    {
        "ß": "ss",
        "æ": "ae",
        "Æ": "AE",
        "œ": "oe",
        "Œ": "OE",
        "ø": "o",
        "Ø": "O",
        "ł": "l",
        "Ł": "L",
        "đ": "d",
        "Đ": "D",
        "þ": "th",
        "Þ": "Th",
        "ð": "d",
        "Ð": "D",
        "ı": "i",
    }
)


def doc_id_from_path(path: str | Path) -> str:
    """Return the ``doc_id`` a document file gets on its own: its stem when that is a valid id,
    otherwise the readable id derived from it (:func:`derive_doc_id`). In a folder, two files
    that would share an id are told apart by
    :func:`ctxwin_dagster.core.text.folder.scan_documents`.

    >>> doc_id_from_path("data/documents/eu_ai_act_2024_1689_EN.txt")
    'eu_ai_act_2024_1689_EN'
    >>> doc_id_from_path("contracts/Acme, Inc. [2019] - Supply Agreement.txt")
    'Acme_Inc._2019_-_Supply_Agreement'
    """
    return derive_doc_id(Path(path).stem)


def derive_doc_id(stem: str) -> str:
    """The ``doc_id`` of a file stem: the stem itself when it is a valid id (letters, digits,
    ``_ . -``, at most :data:`MAX_DOC_ID_CHARS` characters), otherwise a readable ASCII id.

    Accents are dropped (``é`` -> ``e``, ``ß`` -> ``ss``), every run of other characters becomes
    one ``_`` and ``_ . -`` are trimmed from the ends; a name with nothing left (all CJK, say)
    becomes ``doc_`` + 8 hex digits of the name's SHA-1; an id over the limit is cut and ends in
    6 hex digits of the name's SHA-1, so long names stay distinct.

    >>> derive_doc_id("eu_ai_act_2024_1689_EN")
    'eu_ai_act_2024_1689_EN'
    >>> derive_doc_id("GWG HOLDINGS, INC. - ORDERLY MARKETING AGREEMENT")
    'GWG_HOLDINGS_INC._-_ORDERLY_MARKETING_AGREEMENT'
    >>> derive_doc_id("Müller & Söhne [Entwurf] – Vertrag")
    'Muller_Sohne_Entwurf_Vertrag'
    >>> derive_doc_id("合同")
    'doc_59404d40'
    """
    if stem and len(stem) <= MAX_DOC_ID_CHARS and DOC_ID_PATTERN.fullmatch(stem) and not stem.startswith("."):
        return stem
    ascii_text = "".join(
        ch for ch in unicodedata.normalize("NFKD", stem.translate(_SPECIAL_LETTERS)) if not unicodedata.combining(ch)
    )
    cleaned = re.sub(r"_{2,}", "_", re.sub(r"[^A-Za-z0-9_.\-]+", "_", ascii_text)).strip("_.-")
    digest = hashlib.sha1(stem.encode("utf-8")).hexdigest()
    if not cleaned:
        return f"doc_{digest[:8]}"
    if len(cleaned) > MAX_DOC_ID_CHARS:
        cleaned = cleaned[: MAX_DOC_ID_CHARS - 7].rstrip("_.-") + "_" + digest[:6]
    return cleaned


def safe_doc_id(name: str) -> str:
    """Turn an arbitrary name into a valid ``doc_id`` the way the corpus importers always have:
    runs of characters outside ``[A-Za-z0-9_.-]`` become one ``_``, leading/trailing ``_`` are
    dropped, no length limit (the ids of existing experiments stay as they are).

    >>> safe_doc_id("GWG HOLDINGS, INC. - ORDERLY MARKETING AGREEMENT")
    'GWG_HOLDINGS_INC._-_ORDERLY_MARKETING_AGREEMENT'
    """
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]+", "_", name).strip("_")
    if not cleaned:
        raise ValueError(f"cannot make a doc_id from {name!r}: no letters or digits in it")
    return cleaned
