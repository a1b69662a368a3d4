"""``ctxwin qa import``: question sets as users have them (SQuAD JSON, CUAD JSON, CSV/JSONL tables)
turned into the project's QA JSONL, with a report of every answer not found or found twice."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ctxwin_dagster.core.experiment import DEFAULT_DOCUMENTS_DIR, DEFAULT_QA_DIR


def _add_arguments(qa: argparse.ArgumentParser) -> None:
    qsub = qa.add_subparsers(dest="qa_command", required=True)
    imp = qsub.add_parser(
        "import",
        help="import SQuAD 2.0 JSON, CUAD JSON, or a CSV/JSONL table of question, answer and document",
        description=(
            "SQuAD and CUAD JSON carry the texts: each article or contract is written to the documents "
            "folder as <title>.txt. A table names documents already in the folder (by file name, stem or "
            "doc_id) and its answers are located in their text; answers not found or found more than once "
            "are listed."
        ),
    )
    imp.add_argument("source", help="the file to import (.json, .csv, .tsv or .jsonl)")
    imp.add_argument("--format", choices=["auto", "squad", "cuad", "csv", "jsonl"], default="auto")
    imp.add_argument(
        "--documents",
        default=DEFAULT_DOCUMENTS_DIR,
        help="documents folder (written for SQuAD/CUAD JSON, read for tables)",
    )
    imp.add_argument("--out", help="QA JSONL to write (default data/qa/<source name>.jsonl)")
    imp.add_argument(
        "--overwrite", action="store_true", help="replace a document file or QA file that exists with other content"
    )
    imp.set_defaults(func=cmd_qa_import)


def cmd_qa_import(args: argparse.Namespace) -> int:
    from ctxwin_dagster.core.evaluation.qa.importers import detect_format, import_squad_json, import_table
    from ctxwin_dagster.core.evaluation.qa.items import QAFormatError, write_qa_jsonl
    from ctxwin_dagster.core.text.documents import DocumentError, read_document
    from ctxwin_dagster.core.text.folder import scan_documents

    source = Path(args.source)
    if not source.is_file():
        raise SystemExit(f"ctxwin qa import: {source} does not exist")
    docs = Path(args.documents)
    out = Path(args.out) if args.out else Path(DEFAULT_QA_DIR) / f"{source.stem}.jsonl"
    try:
        fmt = detect_format(source) if args.format == "auto" else args.format
        if fmt in ("squad", "cuad"):
            result = import_squad_json(source, kind=fmt)
            clashes = [
                n
                for n, text in result.documents.items()
                if (docs / n).is_file() and (docs / n).read_text(encoding="utf-8", errors="replace") != text
            ]
            if clashes and not args.overwrite:
                raise SystemExit(
                    f"ctxwin qa import: {len(clashes)} document file(s) in {docs} exist with other text "
                    f"({', '.join(clashes[:5])}); pass --overwrite to replace them, or --documents another folder"
                )
            docs.mkdir(parents=True, exist_ok=True)
            for name, text in result.documents.items():
                (docs / name).write_text(text, encoding="utf-8", newline="")
        else:
            folder = scan_documents(docs)
            folder.require_documents()

            def read_text(doc_id: str) -> str:
                path = folder.path_of(doc_id)
                assert path is not None
                return read_document(path, doc_id=doc_id).text

            result = import_table(source, folder.resolve, read_text)
    except (QAFormatError, DocumentError) as exc:
        raise SystemExit(f"ctxwin qa import: {exc}") from None
    for line in result.report.lines():
        print(line)
    if not result.items:
        raise SystemExit(f"ctxwin qa import: no question of {source} could be imported; see the report above")
    if out.exists() and not args.overwrite:
        raise SystemExit(f"ctxwin qa import: {out} exists; pass --overwrite or --out another file")
    write_qa_jsonl(result.items, out)
    if result.documents:
        print(f"wrote {len(result.documents)} documents to {docs}")
    print(f"wrote {len(result.items)} questions to {out}")
    sys.stdout.flush()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``qa`` and its subcommands to the ``ctxwin`` command's subcommands (``sub``, from ``add_subparsers``)."""
    qa = sub.add_parser("qa", help="question sets: import SQuAD JSON, CUAD JSON or CSV/JSONL tables into the QA format")
    _add_arguments(qa)
