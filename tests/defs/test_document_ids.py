"""A document's id never changes because another file changed, and a file that cannot be read
keeps its id (a failed partition, not a removed document). Plain Python, no Dagster runs."""

from __future__ import annotations

import json
import os

import pytest

import ctxwin_dagster.core.text.folder as document_folder_module
from ctxwin_dagster.core.text.documents import DocumentError, read_document
from ctxwin_dagster.core.text.folder import load_id_registry, save_id_registry, scan_documents


def _scan_and_remember(docs, registry):
    known = load_id_registry(registry)
    folder = scan_documents(docs, known=known)
    save_id_registry(registry, folder, known)
    return folder


def test_ids_stay_put_when_other_files_come_go_or_empty(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    registry = tmp_path / "state" / "doc_ids.json"
    (docs / "x.txt").write_text("the text document", encoding="utf-8")
    assert _scan_and_remember(docs, registry).assignments() == {"x.txt": "x"}
    assert json.loads(registry.read_text(encoding="utf-8")) == {"x.txt": "x"}

    # x.md sorts first and would take 'x' without the registry; with it x.txt keeps its id.
    (docs / "x.md").write_text("the markdown document", encoding="utf-8")
    assert scan_documents(docs).assignments() == {"x.md": "x", "x.txt": "x_txt"}
    folder = _scan_and_remember(docs, registry)
    assert folder.assignments() == {"x.md": "x_md", "x.txt": "x"}
    assert "x.md -> x_md ('x' is taken by 'x.txt')" in "\n".join(folder.report_lines())

    # An emptied file keeps its id: it is a document with a problem, not a removed one.
    (docs / "x.md").write_bytes(b"")
    folder = _scan_and_remember(docs, registry)
    assert folder.assignments() == {"x.md": "x_md", "x.txt": "x"}
    assert [(f.doc_id, f.problem.split(";")[0]) for f in folder.problems()] == [("x_md", "empty (0 bytes)")]

    # A file that is gone keeps its id in the registry; nobody else gets it, and it comes back with it.
    (docs / "x.md").unlink()
    folder = _scan_and_remember(docs, registry)
    assert folder.assignments() == {"x.txt": "x"}
    assert json.loads(registry.read_text(encoding="utf-8")) == {"x.md": "x_md", "x.txt": "x"}
    (docs / "x.md").write_text("back again", encoding="utf-8")
    assert _scan_and_remember(docs, registry).assignments() == {"x.md": "x_md", "x.txt": "x"}


def test_a_new_file_never_takes_the_id_of_a_known_file_that_is_gone(tmp_path):
    (tmp_path / "x md.txt").write_text("text", encoding="utf-8")  # would be 'x_md' on its own
    folder = scan_documents(tmp_path, known={"x.md": "x_md", "old.txt": "old"})
    [f] = folder.files
    assert f.doc_id == "x_md_txt" and "kept for it while the file is gone" in f.note


def test_two_files_the_registry_gives_one_id_the_first_by_name_keeps_it(tmp_path):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("text", encoding="utf-8")
    folder = scan_documents(tmp_path, known={"a.txt": "same", "b.txt": "same", "c.txt": "../bad id"})
    assert folder.assignments() == {"a.txt": "same", "b.txt": "b"}


def test_registry_missing_or_corrupt_reads_as_empty_and_is_written_whole(tmp_path):
    registry = tmp_path / "doc_ids.json"
    assert load_id_registry(registry) == {}
    registry.write_text("{not json", encoding="utf-8")
    with pytest.warns(UserWarning, match="cannot be read"):
        assert load_id_registry(registry) == {}
    registry.write_text("[1, 2]", encoding="utf-8")
    with pytest.warns(UserWarning, match="not a JSON object"):
        assert load_id_registry(registry) == {}
    registry.write_text('{"a.txt": "a", "b.txt": 3}', encoding="utf-8")
    assert load_id_registry(registry) == {"a.txt": "a"}
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "c.txt").write_text("text", encoding="utf-8")
    assert save_id_registry(registry, scan_documents(docs), {"a.txt": "a"}) == {"a.txt": "a", "c.txt": "c"}
    assert json.loads(registry.read_text(encoding="utf-8")) == {"a.txt": "a", "c.txt": "c"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc_ids.json", "docs"]  # no temporary file left


def test_empty_and_unreadable_document_files_keep_an_id_with_their_problem(tmp_path, monkeypatch):
    (tmp_path / "good.txt").write_text("text", encoding="utf-8")
    (tmp_path / "blank.md").write_text(" \n", encoding="utf-8")
    (tmp_path / "locked.txt").write_text("secret", encoding="utf-8")
    (tmp_path / "sheet.xlsx").write_bytes(b"PK")
    real_access = os.access
    monkeypatch.setattr(
        document_folder_module.os, "access", lambda p, mode: _basename(p) != "locked.txt" and real_access(p, mode)
    )
    folder = scan_documents(tmp_path)
    assert folder.ids() == ["blank", "good", "locked"]
    assert {f.path.name: f.problem.split(" (")[0] for f in folder.problems()} == {
        "blank.md": "empty",
        "locked.txt": "unreadable",
    }
    assert [s.path.name for s in folder.skipped] == ["sheet.xlsx"]
    report = "\n".join(folder.report_lines())
    assert (
        "2 document file(s)" in report and "locked.txt: unreadable (permission denied); fix its permissions" in report
    )
    folder.require_documents()  # good.txt is usable
    (tmp_path / "good.txt").unlink()
    with pytest.raises(
        DocumentError, match=r"no usable document: blank\.md: empty .*locked\.txt: unreadable.*sheet\.xlsx: unsupported"
    ):
        scan_documents(tmp_path).require_documents()


def _basename(p) -> str:
    return os.path.basename(os.fspath(p))


def test_reading_an_unreadable_file_is_a_document_error_naming_the_fix(tmp_path, monkeypatch):
    path = tmp_path / "locked.txt"
    path.write_text("secret", encoding="utf-8")

    def denied(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(type(path), "read_bytes", denied)
    with pytest.raises(
        DocumentError, match=r"'locked\.txt' .* cannot be read \(Permission denied\); fix its permissions"
    ):
        read_document(path)


def test_project_settings_keep_ids_in_their_registry_file(tmp_path):
    from ctxwin_dagster.defs.resources import ProjectSettings

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "x.txt").write_text("text", encoding="utf-8")
    plain = ProjectSettings(documents_dir=str(docs))
    plain.remember_ids(plain.document_folder())  # no registry set: nothing written
    assert list(tmp_path.iterdir()) == [docs]
    settings = ProjectSettings(documents_dir=str(docs), doc_ids_file=str(tmp_path / "ids.json"))
    settings.remember_ids(settings.document_folder())
    (docs / "x.md").write_text("text", encoding="utf-8")
    assert settings.document_ids() == ["x_md", "x"]
    assert settings.document_file("x") == docs / "x.txt"


def test_a_documents_file_is_found_from_the_registry_as_the_scan_finds_it_without_scanning(tmp_path, monkeypatch):
    from ctxwin_dagster.core.text.folder import registered_file
    from ctxwin_dagster.defs.resources import ProjectSettings

    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a.txt", "b.txt", "x.txt", "x.md", "x md.txt", ".hidden.txt"):
        (docs / name).write_text(f"text of {name}", encoding="utf-8")
    (docs / "sub.txt").mkdir()  # a folder named as a document: never a document
    known = {"a.txt": "same", "b.txt": "same", "x.txt": "x", "x.md": "x_md", "sub.txt": "sub", ".hidden.txt": "hidden"}
    known |= {"gone.txt": "gone", "c.txt": "../bad id"}
    scanned = scan_documents(docs, known=known)
    for doc_id in [*scanned.ids(), "gone", "sub", "hidden", "../bad id", "nobody"]:
        found = registered_file(docs, known, doc_id)
        # the registry's answer is the scan's whenever it has one (else the scan decides)
        assert found is None or found == scanned.path_of(doc_id), doc_id
    assert registered_file(docs, known, "same") == docs / "a.txt"
    assert registered_file(docs, known, "x") == docs / "x.txt"
    assert [registered_file(docs, known, i) for i in ("gone", "sub", "hidden", "x_md_txt")] == [None] * 4

    registry = tmp_path / "ids.json"
    save_id_registry(registry, scanned, known)
    settings = ProjectSettings(documents_dir=str(docs), doc_ids_file=str(registry))
    with monkeypatch.context() as m:
        m.setattr(document_folder_module, "_problem", lambda p: pytest.fail(f"the folder was scanned ({p.name})"))
        assert settings.document_file("x_md") == docs / "x.md"
        assert settings.document_file("same") == docs / "a.txt"
    # a file the registry does not know yet is still found, by a scan
    (docs / "new.txt").write_text("new", encoding="utf-8")
    assert settings.document_file("new") == docs / "new.txt"
    (docs / "x.md").unlink()
    with pytest.raises(DocumentError, match="has no file"):
        settings.document_file("x_md")
