"""Tests for ctxwin_dagster.core.text.documents (plain Python, no Dagster)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwin_dagster.core.text.documents import Document, DocumentError, read_text_document
from ctxwin_dagster.core.text.file_names import SUPPORTED_SUFFIXES, doc_id_from_path, safe_doc_id
from ctxwin_dagster.core.text.folder import scan_documents

REPO_ROOT = Path(__file__).resolve().parents[3]
DOCS_DIR = REPO_ROOT / "data" / "documents"

SAMPLE_DOCS = {
    # doc_id: (n_chars, n_bytes)
    "cuad_legacy_education_development": (46_255, 46_358),
    "cuad_paperexchange_cobranding": (92_875, 92_875),
    "cuad_todos_medical_reseller": (32_321, 32_321),
    "eu_ai_act_2024_1689_EN": (583_896, 584_595),
    "squad_1973_oil_crisis": (17_806, 17_817),
    "squad_Computational_complexity_theory": (27_532, 27_559),
    "squad_Normans": (25_404, 25_438),
}


# ---------------------------------------------------------------------------- sample data


def test_sample_documents_are_listed_in_sorted_order():
    paths = [f.path for f in scan_documents(DOCS_DIR).files]
    assert set(SAMPLE_DOCS) <= {p.stem for p in paths}
    assert [p.name for p in paths] == sorted(p.name for p in paths)


@pytest.mark.parametrize("doc_id", sorted(SAMPLE_DOCS))
def test_sample_document_loads(doc_id):
    path = DOCS_DIR / f"{doc_id}.txt"
    doc = read_text_document(path)
    n_chars, n_bytes = SAMPLE_DOCS[doc_id]
    assert doc.doc_id == doc_id == doc_id_from_path(path)
    assert doc.n_chars == len(doc.text) == n_chars
    assert len(doc.text.encode("utf-8")) == n_bytes == path.stat().st_size
    assert doc.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert doc.title and len(doc.title) <= 200 and doc.title == doc.title.strip()
    assert doc.source_path == str(path)
    assert doc.n_tokens is None


def test_sample_sha256_is_stable():
    path = DOCS_DIR / "eu_ai_act_2024_1689_EN.txt"
    first, second = read_text_document(path), read_text_document(path)
    assert first == second
    # Pinned: the sample copy must stay byte-identical to the corpus file.
    assert first.sha256 == "21a2aeebb2bf7624ad2b8780806b05542b12409c5b8b3c0b671678c6fb73b739"
    assert first.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_sha256_changes_with_content(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text("version one", encoding="utf-8")
    before = read_text_document(path).sha256
    path.write_text("version two", encoding="utf-8")
    assert read_text_document(path).sha256 != before


def test_sample_ai_act_title_and_token_count():
    doc = read_text_document(DOCS_DIR / "eu_ai_act_2024_1689_EN.txt", count_tokens=lambda s: len(s.split()))
    assert doc.title == "Official Journal"
    assert doc.n_tokens == len(doc.text.split()) > 80_000
    data = doc.to_dict(include_text=False)
    assert "text" not in data and data["doc_id"] == "eu_ai_act_2024_1689_EN"
    assert doc.to_dict()["text"] == doc.text


# ------------------------------------------------------------------------- good inputs


def test_bom_is_stripped_and_sha_covers_the_bytes(tmp_path):
    raw = b"\xef\xbb\xbfFirst line\r\nsecond \xe2\x80\x98line\xe2\x80\x99\n"
    path = tmp_path / "with_bom.txt"
    path.write_bytes(raw)
    doc = read_text_document(path)
    assert doc.text == "First line\r\nsecond \u2018line\u2019\n"  # line endings kept
    assert doc.sha256 == hashlib.sha256(raw).hexdigest()
    assert doc.title == "First line"
    assert doc.n_chars == len(doc.text)


def test_title_is_first_non_empty_line_trimmed(tmp_path):
    path = tmp_path / "long-title.md"
    path.write_text("\n   \n  " + "x" * 300 + "  \nbody\n", encoding="utf-8")
    doc = read_text_document(path)
    assert doc.title == "x" * 200
    assert doc.doc_id == "long-title"


def test_markdown_and_upper_case_suffix_are_supported(tmp_path):
    for name in ("notes.md", "REPORT.TXT", "v1.2_draft.txt"):
        (tmp_path / name).write_text("# Heading\ntext", encoding="utf-8")
        assert read_text_document(tmp_path / name).doc_id == Path(name).stem


def test_document_is_frozen():
    doc = Document("a", "00", "t", "t", "a.txt", 1)
    with pytest.raises(AttributeError):
        doc.text = "changed"  # type: ignore[misc]


# -------------------------------------------------------------------------- bad inputs

BAD_INPUTS = [
    ("empty.txt", b"", "empty"),
    ("blank.txt", b"  \n\t\r\n   \n", "white space"),
    ("bom_only.txt", b"\xef\xbb\xbf", "white space"),
    ("nul.txt", b"text\x00with\x00nul", "NUL bytes"),
    ("controls.txt", bytes(range(1, 9)) * 20, "binary"),
    ("noise.txt", bytes(range(128, 256)) * 4, "binary"),
    ("utf16_no_bom.txt", "hello".encode("utf-16-le"), "UTF-16 without a byte-order mark"),
    ("bad_utf16.txt", b"\xff\xfe" + "hi".encode("utf-16-le") + b"\x00\xd8", "not valid utf-16-le"),
    ("report.pdf", b"%PDF-1.4 fine", "supported document types are .md, .txt"),
    ("page.html", b"<html>x</html>", "supported document types"),
    ("no_suffix", b"fine text", "no suffix"),
]


@pytest.mark.parametrize(("name", "data", "phrase"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_raises_document_error_naming_the_file(tmp_path, name, data, phrase):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(DocumentError) as info:
        read_text_document(path)
    message = str(info.value)
    assert name in message
    assert phrase in message
    assert isinstance(info.value, ValueError)


# ------------------------------------------------------------------ encodings


ENCODED = [
    # (text, how the file was saved, what it is recorded as)
    (
        "Die Müller GmbH und die Söhne AG vereinbaren Änderungen schriftlich. Gerichtsstand ist München.\n",
        "latin-1",
        "windows-1252",
    ),
    ("The Supplier’s obligations – “as is” – survive termination… The fee is €500.\n", "cp1252", "windows-1252"),
    (
        "Le présent contrat est conclu entre la société Bérénice et le fournisseur; les frais sont à sa charge.\n",
        "cp1252",
        "windows-1252",
    ),
    ("Настоящий договор заключен между сторонами о поставке товаров и оказании услуг.\n", "cp1251", "cp1251"),
    ("Umowa zawarta pomiędzy stronami dotyczy dostawy towarów. Zażółć gęślą jaźń.\n", "cp1250", "cp1250"),
    ("Η παρούσα σύμβαση συνάπτεται μεταξύ των μερών για την προμήθεια αγαθών.\n", "cp1253", "cp1253"),
    ("本契約は、当事者間の物品供給に関するものである。\n", "shift_jis", "cp932"),
    ("Contract between Müller & Co. — “terms”.\n", "utf-16", "UTF-16 LE with BOM"),
    ("Contract between Müller & Co.\n", "utf-8-sig", "utf-8"),
]


@pytest.mark.parametrize(("text", "saved_as", "recorded"), ENCODED, ids=[e[1] + "-" + e[0][:8] for e in ENCODED])
def test_text_in_other_encodings_is_read_exactly_and_the_encoding_recorded(tmp_path, text, saved_as, recorded):
    path = tmp_path / "contract.txt"
    path.write_bytes(text.encode(saved_as))
    doc = read_text_document(path)
    assert doc.text == text
    assert doc.encoding == recorded
    assert doc.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_bytes_no_encoding_explains_are_rejected_with_the_fix(tmp_path):
    path = tmp_path / "mixed.txt"
    # Valid-looking text with bytes that are undefined in Windows-1252 and read as nothing sensible.
    path.write_bytes(b"Clause 1. The parties \x81\x8d\x8f\x90\x9d agree. " * 3)
    with pytest.raises(DocumentError, match=r"mixed\.txt.*could not be told.*0x81 at byte 22.*re-save it as UTF-8"):
        read_text_document(path)
    other = tmp_path / "stray.txt"
    other.write_bytes(b"Clause \xff\xfe\xfd\xfc\xfb\xfa\xf9 agree to the terms of this contract. " * 3)
    with pytest.raises(DocumentError, match=r"stray\.txt.*could not be told"):
        read_text_document(other)


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_text_document(tmp_path / "missing.txt")


# ------------------------------------------------------------------------------ doc ids


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("data/documents/eu_ai_act_2024_1689_EN.txt", "eu_ai_act_2024_1689_EN"),
        ("/x/y/squad_Normans.txt", "squad_Normans"),
        ("a-b.c_d.md", "a-b.c_d"),
        (Path("2024.report.txt"), "2024.report"),
    ],
)
def test_doc_id_from_path(path, expected):
    assert doc_id_from_path(path) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("my file.txt", "my_file"),
        ("Vertrag-Müller.txt", "Vertrag-Muller"),
        ("x;y.md", "x_y"),
        ("Straße [Entwurf], 2. Fassung.txt", "Strasse_Entwurf_2._Fassung"),
        (
            "PAPERWEIGHT DEVELOPMENT CORP. - Co-Branding Agreement_ Agency Agreement.txt",
            "PAPERWEIGHT_DEVELOPMENT_CORP._-_Co-Branding_Agreement_Agency_Agreement",
        ),
        ("...hidden-ish.txt", "hidden-ish"),
    ],
)
def test_doc_id_from_path_derives_a_readable_id(name, expected):
    assert doc_id_from_path(Path("/docs") / name) == expected


def test_long_and_letterless_names_get_distinct_ids():
    long_a, long_b = "A" * 150 + " one", "A" * 150 + " two"
    ida, idb = doc_id_from_path(long_a + ".txt"), doc_id_from_path(long_b + ".txt")
    assert ida != idb and len(ida) == len(idb) == 120
    assert doc_id_from_path("合同.txt").startswith("doc_") and doc_id_from_path("合同.txt") != doc_id_from_path(
        "契約.txt"
    )


def test_safe_doc_id():
    assert safe_doc_id("GWG HOLDINGS, INC. - ORDERLY") == "GWG_HOLDINGS_INC._-_ORDERLY"
    assert safe_doc_id("Vertrag Müller (2)") == "Vertrag_M_ller_2"
    with pytest.raises(ValueError):
        safe_doc_id(" ,; ")


# --------------------------------------------------------------------------- listing


def test_scan_takes_documents_and_names_every_file_it_does_not_take(tmp_path):
    for name in ("b.txt", "a.md", ".hidden.txt", "c.pdf", "d.json", "E.TXT"):
        (tmp_path / name).write_text("text", encoding="utf-8")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blank.md").write_text(" \n\t\n", encoding="utf-8")
    (tmp_path / "sub.txt").mkdir()
    (tmp_path / "sub.txt" / "inner.txt").write_text("text", encoding="utf-8")
    folder = scan_documents(tmp_path)
    assert [f.path.name for f in folder.usable()] == ["E.TXT", "a.md", "b.txt", "c.pdf"]
    # Empty files are documents with a problem (they keep their partition); the rest is not taken.
    problems = {f.path.name: f.problem for f in folder.problems()}
    assert set(problems) == {"empty.txt", "blank.md"}
    assert problems["empty.txt"].startswith("empty (0 bytes)")
    assert problems["blank.md"].startswith("empty (only white space")
    reasons = {s.path.name: s.reason for s in folder.skipped}
    assert set(reasons) == {"d.json", "sub.txt"}
    assert reasons["d.json"].startswith("unsupported type '.json'")
    assert reasons["sub.txt"].startswith("a folder")
    assert folder.files[0].path.parent == tmp_path


def test_scan_missing_folder(tmp_path):
    with pytest.raises(DocumentError, match="nowhere"):
        scan_documents(tmp_path / "nowhere")


def test_supported_suffixes():
    assert SUPPORTED_SUFFIXES == (".md", ".txt", ".docx", ".html", ".htm", ".pdf")


def test_core_modules_import_neither_dagster_ragas_nor_lancedb():
    code = (
        "import sys, ctxwin_dagster.core.text.documents, ctxwin_dagster.core.evaluation.qa.items, ctxwin_dagster.core.evaluation.qa.corpora\n"
        "banned = {'dagster', 'ragas', 'lancedb'}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in banned)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT)


# ---------------------------------------------------------------- HTML and PDF


@pytest.mark.slow
def test_read_document_html_and_pdf_of_the_ai_act():
    from ctxwin_dagster.core.text.documents import read_document

    folder = Path(__file__).resolve().parents[2] / "fixtures" / "eu_ai_act"
    html = read_document(folder / "L_202401689EN.000101.fmx.xml.html")
    assert html.n_chars > 500_000 and "Article 5" in html.text and "<div" not in html.text
    pdf = read_document(folder / "OJ_L_202401689_EN_TXT.pdf")
    assert pdf.n_chars > 500_000 and "Prohibited AI practices" in pdf.text
    assert len(pdf.sha256) == 64
    # Pages are kept: the Official Journal prints Article 5 on page 51 (its footer says 51/144).
    assert len(pdf.pages) == 144 and pdf.encoding == "pdf"
    article5 = pdf.text.index("Article 5\nProhibited AI practices")
    assert pdf.page_at(article5) == 51
    start51, start52 = dict(pdf.pages)[51], dict(pdf.pages)[52]
    assert "51/144" in pdf.text[start51:start52]
    from ctxwin_dagster.core.text.splitting import RecursiveSplitter, with_pages

    chunks = with_pages(
        RecursiveSplitter(chunk_size=1000, chunk_overlap=100).split(pdf.text, doc_id="act", doc_sha256=pdf.sha256), pdf
    )
    hit = next(c for c in chunks if c.start <= article5 < c.end)
    assert hit.section is not None and hit.section.startswith("page 51")


def test_image_only_pdf_fails_with_the_fix(tmp_path):
    from pypdf import PdfWriter

    from ctxwin_dagster.core.text.documents import read_document

    writer = PdfWriter()
    writer.add_blank_page(width=595, height=842)
    path = tmp_path / "scan.pdf"
    with path.open("wb") as fh:
        writer.write(fh)
    with pytest.raises(DocumentError, match=r"scan\.pdf.*no extractable text.*OCR"):
        read_document(path)
    fake = tmp_path / "fake.pdf"
    fake.write_text("not a pdf", encoding="utf-8")
    with pytest.raises(DocumentError, match=r"fake\.pdf.*does not start like a PDF"):
        read_document(fake)


def test_html_without_text_fails(tmp_path):
    from ctxwin_dagster.core.text.documents import read_document

    path = tmp_path / "blank.html"
    path.write_text(
        "<html><head><title>x</title><script>var a=1;</script></head><body> </body></html>", encoding="utf-8"
    )
    with pytest.raises(DocumentError, match=r"blank\.html.*no visible text"):
        read_document(path)
    ok = tmp_path / "page.html"
    ok.write_text("<html><body><h1>Title</h1><p>First   para.</p><p>Second</p></body></html>", encoding="utf-8")
    assert read_document(ok).text == "Title\nFirst para.\nSecond\n"


def test_utf8_with_a_few_stray_bytes_is_read_as_utf8_with_the_bytes_counted(tmp_path):
    path = tmp_path / "sagas.txt"
    # UTF-8 text with 6 stray bytes: read as a code page (cp775, cp949...) every ð would be garbled.
    path.write_bytes(("Norðmaðr " * 50).encode("utf-8").replace(b" ", b" \x9d", 6))
    doc = read_text_document(path)
    assert doc.encoding == "utf-8" and doc.replaced_bytes == 6
    assert doc.text.count("Norðmaðr") == 50 and doc.text.count("\ufffd") == 6
    warning = doc.encoding_warning()
    assert "sagas.txt" in warning and "6 byte(s) are not UTF-8" in warning and "re-save the file as UTF-8" in warning
    clean = tmp_path / "clean.txt"
    clean.write_text("Norðmaðr", encoding="utf-8")
    assert read_text_document(clean).replaced_bytes == 0 and read_text_document(clean).encoding_warning() == ""


def test_code_page_files_with_a_chance_utf8_pair_are_still_read_as_their_code_page(tmp_path):
    # "ÓŁ" in cp1250 is d3 a3, a valid UTF-8 sequence; the many other Polish letters are not UTF-8.
    text = "PÓŁNOCNY brzeg, żółć gęślą jaźń, źródło, łąka, ścieżka.\n"
    path = tmp_path / "umowa.txt"
    path.write_bytes(text.encode("cp1250"))
    doc = read_text_document(path)
    assert (doc.text, doc.encoding, doc.replaced_bytes) == (text, "cp1250", 0)
    assert "read as cp1250" in doc.encoding_warning()
