"""Reference spans are checked against their document's text before any run: one outside it
stops `ctxwin evaluate` and `ctxwin run --qa` naming the QA file, the line and the fix, and fails
the ``qa_sets`` asset with the same message (no Dagster runs)."""

from __future__ import annotations

import json

import pytest

from ctxwin_dagster.core.evaluation.qa.items import QAFormatError, QAItem, load_qa_folder
from ctxwin_dagster.core.evaluation.qa.resolve import ResolvedQuestions, check_reference_spans, resolve_questions
from ctxwin_dagster.core.text.documents import read_document
from ctxwin_dagster.core.text.folder import scan_documents

TEXT = "The Normans came from Normandy.\n"


def _folders(tmp_path, spans_of_q2):
    docs, qa = tmp_path / "docs", tmp_path / "qa"
    docs.mkdir()
    qa.mkdir()
    (docs / "Normans (draft).txt").write_text(TEXT, encoding="utf-8")
    (docs / "empty.txt").write_bytes(b"")
    rows = [
        {
            "question_id": "q1",
            "doc_id": "Normans (draft).txt",
            "question": "From where?",
            "reference_answer": "Normandy",
            "reference_spans": [[22, 30]],
        },
        {
            "question_id": "q2",
            "doc_id": "Normans (draft).txt",
            "question": "Who?",
            "reference_answer": "The Normans",
            "reference_spans": spans_of_q2,
        },
        {
            "question_id": "q3",
            "doc_id": "empty.txt",
            "question": "?",
            "reference_answer": "x",
            "reference_spans": [[0, 1]],
        },
    ]
    (qa / "set.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return docs, qa


def _reader(folder):
    return lambda doc_id: read_document(folder.path_of(doc_id), doc_id=doc_id).text


def test_items_keep_the_file_and_line_they_were_read_from(tmp_path):
    _, qa = _folders(tmp_path, [[0, 11]])
    items = load_qa_folder(qa)
    assert [(i.source, i.line) for i in items] == [(str(qa / "set.jsonl"), n) for n in (1, 2, 3)]
    assert items[1].where == f"{qa / 'set.jsonl'}, line 2"
    # Where an item was read is not part of it.
    assert items[1] == QAItem("q2", "Normans (draft).txt", "Who?", "The Normans", [[0, 11]])
    assert "source" not in items[1].to_dict()


def test_spans_inside_the_text_pass_and_an_unreadable_document_is_left_to_its_run(tmp_path):
    docs, qa = _folders(tmp_path, [[0, 11], [22, len(TEXT)]])
    folder = scan_documents(docs)
    resolved = resolve_questions(load_qa_folder(qa), folder)
    assert TEXT[22:30] == "Normandy"
    assert check_reference_spans(resolved, _reader(folder)) == ["empty"]


def test_a_span_past_the_end_of_the_text_names_the_file_line_and_fix(tmp_path):
    docs, qa = _folders(tmp_path, [[0, 11], [20, 500]])
    folder = scan_documents(docs)
    resolved = resolve_questions(load_qa_folder(qa), folder)
    with pytest.raises(QAFormatError) as info:
        check_reference_spans(resolved, _reader(folder))
    message = str(info.value)
    assert message.startswith("1 reference span(s) outside their document")
    assert (
        f"{qa / 'set.jsonl'}, line 2: question 'q2': reference_spans[1] = [20, 500] lies outside document 'Normans_draft'"
        in message
    )
    assert f"({len(TEXT)} characters; a span needs 0 <= start <= end <= {len(TEXT)}); fix the offsets" in message


@pytest.mark.parametrize("span", [(-1, 3), (5, 2), (0, 99)])
def test_every_kind_of_span_outside_the_text_is_caught_for_items_made_in_code(span):
    item = QAItem("q", "d", "?", "b")
    object.__setattr__(item, "reference_spans", (span,))  # past QAItem's own checks
    with pytest.raises(
        QAFormatError,
        match=rf"^1 reference span\(s\) outside their document:\n  question 'q': reference_spans\[0\] = \[{span[0]}, {span[1]}\] lies outside",
    ):
        check_reference_spans(ResolvedQuestions(by_doc={"d": [item]}), lambda doc_id: "abcdef")


def test_ctxwin_evaluate_stops_before_any_run_on_a_span_outside_its_document(tmp_path, monkeypatch, capsys):
    from ctxwin_dagster.cli import main

    docs, qa = _folders(tmp_path, [[20, 500]])
    monkeypatch.chdir(tmp_path)

    def no_run(*args, **kwargs):
        raise AssertionError("no run may start")

    from ctxwin_dagster.runner.runs import RunPlanner

    monkeypatch.setattr(RunPlanner, "run", no_run)
    monkeypatch.chdir(tmp_path)  # the experiment's home is made under data/experiments/ here
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))  # restored after the command sets its own
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--name", "spans", "--documents", str(docs), "--qa", str(qa)])
    assert info.value.code not in (0, None)
    message = str(info.value.code)
    assert message.startswith("ctxwin: 1 reference span(s) outside their document")
    assert "set.jsonl, line 2" in message and "fix the offsets" in message
    assert not (tmp_path / "data" / "experiments" / "spans").exists()


def _span_error(docs, qa) -> str:
    """The message of the shared check for the folders of :func:`_folders`."""
    folder = scan_documents(docs)
    with pytest.raises(QAFormatError) as info:
        check_reference_spans(resolve_questions(load_qa_folder(qa), folder), _reader(folder))
    return str(info.value)


def test_ctxwin_run_with_qa_stops_before_any_run_with_the_same_message(tmp_path):
    """``ctxwin run --documents D --qa Q`` refuses a span past its document's end as ``ctxwin
    evaluate`` does, before the experiment's home is made (so before Dagster runs anything)."""
    import subprocess
    import sys

    from ctxwin_dagster.testing.projects import ctxwin_env

    docs, qa = _folders(tmp_path, [[0, 11], [20, 500]])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxwin_dagster.cli",
            "run",
            "--documents",
            str(docs),
            "--qa",
            str(qa),
            "--name",
            "spans",
        ],
        cwd=tmp_path,
        env=ctxwin_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0, done.stdout + done.stderr
    expected = _span_error(docs, qa)
    assert f"{qa / 'set.jsonl'}, line 2: question 'q2'" in expected and "fix the offsets" in expected
    assert done.stderr.strip().endswith(f"ctxwin: {expected}"), done.stderr[-3000:]
    assert not (tmp_path / "data" / "experiments" / "spans").exists()


def test_the_qa_sets_asset_refuses_the_span_with_the_same_message(tmp_path):
    """A run no command checked (a question file changed after ``ctxwin run`` started, the UI)
    fails in ``qa_sets`` with the message of the check before the runs, never scoring a miss."""
    import dagster as dg

    from ctxwin_dagster.defs.evaluation.qa_sets import qa_sets
    from ctxwin_dagster.defs.resources import ProjectSettings

    bad, good = tmp_path / "bad", tmp_path / "good"
    for folder in (bad, good):
        folder.mkdir()
    docs, qa = _folders(bad, [[0, 11], [20, 500]])
    document = read_document(scan_documents(docs).path_of("Normans_draft"), doc_id="Normans_draft")
    with dg.build_asset_context(partition_key="Normans_draft") as context, pytest.raises(QAFormatError) as info:
        qa_sets(
            context=context,
            settings=ProjectSettings(documents_dir=str(docs), qa_dir=str(qa)),
            raw_documents=document,
            chunks=[],
        )
    assert str(info.value) == _span_error(docs, qa)
    # The same question set with its spans inside the text passes; the check says how many it checked.
    docs, qa = _folders(good, [[0, 11], [22, len(TEXT)]])
    with dg.build_asset_context(partition_key="Normans_draft") as context:
        result = qa_sets(
            context=context,
            settings=ProjectSettings(documents_dir=str(docs), qa_dir=str(qa)),
            raw_documents=document,
            chunks=[],
        )
    check = result.check_results[0]
    assert check.passed and check.metadata["spans_checked"].value == 3
    assert [row["question_id"] for row in result.value] == ["q1", "q2"]
