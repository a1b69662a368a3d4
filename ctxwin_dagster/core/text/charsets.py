"""Telling the encoding of a text file that is not UTF-8, without garbling it.

Order, first match wins:

1. UTF-8 (a leading byte-order mark is dropped);
2. a UTF-16 or UTF-32 byte-order mark: decoded with it;
3. UTF-8 with a few stray bytes: the bytes hold valid multi-byte UTF-8 sequences (``ð`` is
   ``c3 b0``), and at least as many as stray bytes that are not UTF-8. The text is decoded as
   UTF-8, each stray run becoming ``U+FFFD``, and ``replaced`` counts the bytes replaced (the
   caller warns and says to re-save the file as UTF-8). Reading such a file as a code page
   would garble every accented letter (``Norðmaðr`` as cp775 or cp949) to save a few bytes;
   a file in a code page rarely holds even one valid multi-byte sequence, and never more of
   them than of bytes that are not UTF-8, so it still goes on to the steps below;
4. Windows-1252 (a superset of Latin-1 for text) when the decoded text reads like a Western
   European language: accented letters inside words, typographic quotes and dashes, but no
   run of four accented letters and no symbol wedged between two letters (what Cyrillic or
   Central European bytes look like when read as Windows-1252);
5. the encoding `charset-normalizer <https://github.com/jawah/charset_normalizer>`_ finds,
   when its "chaos" measure is at most 0.1 and its words read as a language (coherence at
   least 0.2; a valid multi-byte CJK encoding counts as that) — it tells Cyrillic, Greek,
   Central European, Japanese… apart;
6. otherwise :class:`EncodingUnknown`: the caller rejects the file and asks for UTF-8.

Step 4 exists because charset-normalizer alone takes short Windows-1252 English with curly
quotes for DOS code page 852 and turns ``’`` into ``Æ``; a wrong guess would be silent.

Plain Python only.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["Decoded", "EncodingUnknown", "decode_text", "utf8_sequences"]

_UTF8_BOM = b"\xef\xbb\xbf"
_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
# Non-ASCII characters that Western European prose written in Windows-1252 uses besides letters.
_WESTERN_MARKS = set("’‘“”„‚–—…€•™«»°§©®·£¥¢¡¿ªº\u00a0")
_MAX_CHAOS = 0.1
_MIN_COHERENCE = 0.2
# A well-formed multi-byte UTF-8 sequence (no overlong forms, no surrogates, at most U+10FFFF),
# or else one byte that is not ASCII (a stray byte).
_UTF8_SEQUENCE = re.compile(
    rb"([\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]"
    rb"|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2})|[\x80-\xff]"
)
_MULTIBYTE = {
    "cp932",
    "shift_jis",
    "euc_jp",
    "iso2022_jp",
    "gb2312",
    "gbk",
    "gb18030",
    "big5",
    "big5hkscs",
    "cp949",
    "euc_kr",
    "cp950",
}


class EncodingUnknown(ValueError):
    """The bytes are not UTF-8 and no encoding could be told with confidence."""


@dataclass(frozen=True)
class Decoded:
    """Text and the encoding it was read with; ``detected`` is False for UTF-8 and BOMs."""

    text: str
    encoding: str
    detected: bool = False
    #: Bytes that were not UTF-8 and became ``U+FFFD`` (UTF-8 with a few stray bytes), else 0.
    replaced: int = 0


def utf8_sequences(data: bytes) -> tuple[int, int]:
    """``(valid multi-byte UTF-8 sequences, stray non-ASCII bytes that are in none)`` of ``data``.

    >>> utf8_sequences("Norðmaðr".encode("utf-8") + b"\\x9d")
    (2, 1)
    """
    valid = stray = 0
    for m in _UTF8_SEQUENCE.finditer(data):
        if m.group(1) is None:
            stray += 1
        else:
            valid += 1
    return valid, stray


def _reads_western(text: str) -> bool:
    """Whether ``text`` (Windows-1252-decoded) looks like Western European prose."""
    run = 0
    prev = ""
    for i, ch in enumerate(text):
        if ord(ch) < 128:
            run = 0
            prev = ch
            continue
        if ch.isalpha():
            if not unicodedata.name(ch, "").startswith("LATIN"):
                return False
            run += 1
            if run >= 4:
                return False
        else:
            run = 0
            if ch not in _WESTERN_MARKS:
                return False
            nxt = text[i + 1] if i + 1 < len(text) else ""
            if ch not in "’·" and prev.isalpha() and nxt.isalpha():
                return False
        prev = ch
    return True


def decode_text(data: bytes) -> Decoded:
    """Decode ``data`` (see the module's order). Raises :class:`EncodingUnknown`.

    >>> decode_text("Müller".encode("utf-8"))
    Decoded(text='Müller', encoding='utf-8', detected=False, replaced=0)
    >>> decode_text("Die Müller GmbH und die Söhne AG".encode("latin-1")).encoding
    'windows-1252'
    >>> decode_text("Supplier’s “as is” terms".encode("cp1252")).text
    'Supplier’s “as is” terms'
    >>> decode_text("Norðmaðr".encode("utf-8") + b"\\x9d!")
    Decoded(text='Norðmaðr\ufffd!', encoding='utf-8', detected=False, replaced=1)
    """
    body = data[len(_UTF8_BOM) :] if data.startswith(_UTF8_BOM) else data
    try:
        return Decoded(body.decode("utf-8"), "utf-8")
    except UnicodeDecodeError:
        pass
    for bom, name in _BOMS:
        if data.startswith(bom):
            try:
                return Decoded(
                    data[len(bom) :].decode(name),
                    name.upper().replace("-LE", " LE").replace("-BE", " BE") + " with BOM",
                )
            except UnicodeDecodeError as exc:
                raise EncodingUnknown(
                    f"it starts with a {name} byte-order mark but is not valid {name} at byte {exc.start + len(bom)}"
                ) from None
    valid, stray = utf8_sequences(body)
    if valid and stray <= valid:
        return Decoded(body.decode("utf-8", errors="replace"), "utf-8", replaced=stray)
    try:
        western = data.decode("cp1252")
    except UnicodeDecodeError:
        western = None
    if western is not None and _reads_western(western):
        return Decoded(western, "windows-1252", detected=True)
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    # Few stray bytes decode "cleanly" in many single-byte code pages; only a text whose words
    # read as a language (coherence), or a valid multi-byte CJK text, is taken.
    if (
        best is not None
        and best.chaos <= _MAX_CHAOS
        and best.encoding not in ("utf_8", "ascii")
        and (best.coherence >= _MIN_COHERENCE or best.encoding in _MULTIBYTE)
    ):
        return Decoded(str(best), best.encoding, detected=True)
    raise EncodingUnknown("it is not valid UTF-8 and its encoding could not be told with confidence")
