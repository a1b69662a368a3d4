"""``ctxwin qa``: question sets in the project's QA JSONL.

* ``ctxwin qa import`` — question sets as users have them (SQuAD JSON, CUAD JSON, CSV/JSONL
  tables) turned into the project's QA JSONL, with a report of every answer not found or found twice;
* ``ctxwin qa generate`` — questions generated from the documents by a chat model, each with a
  reference span verified in its document (:mod:`~ctxwin_dagster.backends.tasks.question_writer`),
  one file per document in a QA folder that ``ctxwin evaluate --qa`` takes as it is.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ctxwin_dagster.cli.options import Subcommands
from ctxwin_dagster.core.experiment import (
    DEFAULT_CACHE_DIR,
    DEFAULT_DOCUMENTS_DIR,
    DEFAULT_GENERATED_QA_DIR,
    DEFAULT_QA_DIR,
)

if TYPE_CHECKING:
    from ctxwin_dagster.core.text.folder import DocumentFolder

#: The kinds of generated questions (kept here so that ``ctxwin --help`` imports nothing heavy).
KINDS_HELP = ("single", "two_passages", "unanswerable")


def _add_arguments(qa: argparse.ArgumentParser) -> None:
    qsub = Subcommands(qa, dest="qa_command", required=True)
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
    imp.add_argument(
        "--format",
        choices=["auto", "squad", "cuad", "csv", "jsonl"],
        default="auto",
        help="the source's format (auto: from its extension and content)",
    )
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

    gen = qsub.add_parser(
        "generate",
        help="generate questions with verified reference spans from the documents, with a chat model",
        description=(
            "Each document gets --count questions, shared between the kinds: single (one fact of one "
            "sentence), two_passages (an answer that needs two passages far apart) and unanswerable "
            "(a question the document does not answer). Every question's reference span is found in "
            "its document; answerable questions must be answered back the same way from their passage "
            "and not answered right without the document; unanswerable ones must not be answered; "
            "near-duplicates are dropped. One QA file per document is written to --out."
        ),
    )
    gen.add_argument("--documents", default=DEFAULT_DOCUMENTS_DIR, help="documents folder (default: the sample's)")
    gen.add_argument(
        "--doc", action="append", default=[], help="only this document (file name, stem or doc_id); repeatable"
    )
    gen.add_argument(
        "--count",
        type=int,
        default=5,
        help="questions per document (default 5: 3 single, 1 two_passages, 1 unanswerable)",
    )
    gen.add_argument(
        "--kinds",
        default=",".join(KINDS_HELP),
        help=f"kinds to generate, comma-separated (default {','.join(KINDS_HELP)})",
    )
    gen.add_argument(
        "--model",
        default="local:smollm2",
        help="chat model (default local:smollm2, offline and small: its questions are poor; name a served model for good ones)",
    )
    gen.add_argument(
        "--base-url", help="OpenAI-compatible server for --model (default OpenAI; key from OPENAI_API_KEY)"
    )
    gen.add_argument(
        "--out", help="QA folder to write, one <doc_id>.jsonl per document (default data/qa_generated/<folder name>)"
    )
    gen.add_argument(
        "--overwrite",
        action="store_true",
        help="generate again for documents that have a file in --out (the old file is kept as <doc_id>.jsonl.previous)",
    )
    gen.add_argument(
        "--no-closed-book", action="store_true", help="keep questions the model answers without the document"
    )
    gen.add_argument(
        "--cache-dir", default=DEFAULT_CACHE_DIR, help="folder of the response cache (a rerun reuses the replies)"
    )
    gen.set_defaults(func=cmd_qa_generate)


def cmd_qa_import(args: argparse.Namespace) -> int:
    from ctxwin_dagster.core.evaluation.qa.importers import detect_format, import_squad_json, import_table
    from ctxwin_dagster.core.evaluation.qa.items import QAFormatError, write_qa_jsonl
    from ctxwin_dagster.core.text.documents import DocumentError, read_document

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
            folder = _folder(docs)
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


def _folder(docs: Path) -> DocumentFolder:
    """``docs`` scanned with the ids its experiment's runs gave its files (a question names the
    document its runs know), or as it is when no run has recorded any."""
    from ctxwin_dagster.core.experiment import folder_ids_file
    from ctxwin_dagster.core.text.folder import load_id_registry, scan_documents

    ids = folder_ids_file(docs)
    return scan_documents(docs, known=load_id_registry(ids) if ids is not None else None)


def _chosen_documents(refs: list[str] | None, folder: DocumentFolder, docs: Path) -> list[str]:
    """The doc_ids of ``refs`` (file names, stems or doc_ids) in ``folder``; every document without refs."""
    if not refs:
        return list(folder.ids())
    chosen = []
    for ref in refs:
        doc_id = folder.resolve(ref)
        if doc_id is None:
            raise SystemExit(
                f"ctxwin qa generate: no document {ref!r} in {docs}; give a file name, its stem or its doc_id"
            )
        chosen.append(doc_id)
    return chosen


def _write_generation_report(path: Path, run: Mapping[str, object], per_doc: dict[str, object]) -> Path:
    """Write the generation report: this ``run``'s settings and totals, and every document's
    entry (the documents of earlier runs keep theirs)."""
    import json

    earlier: dict[str, object] = {}
    if path.is_file():
        try:
            earlier = dict(json.loads(path.read_text(encoding="utf-8")).get("documents") or {})
        except ValueError:
            earlier = {}
    report = {**run, "documents": {**earlier, **per_doc}}
    path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def cmd_qa_generate(args: argparse.Namespace) -> int:
    import shlex
    import time

    from ctxwin_dagster.backends.assembly import ChatSpec, open_chat
    from ctxwin_dagster.backends.tasks.question_writer import QuestionWriter
    from ctxwin_dagster.core.evaluation.qa.generation import GenerationReport, kind_counts
    from ctxwin_dagster.core.evaluation.qa.items import write_qa_jsonl
    from ctxwin_dagster.core.experiment import experiment_name_for
    from ctxwin_dagster.core.text.documents import DocumentError, read_document

    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    try:
        kind_counts(args.count, kinds)
    except ValueError as exc:
        raise SystemExit(f"ctxwin qa generate: {exc}") from None
    docs = Path(args.documents)
    if not docs.is_dir():
        raise SystemExit(f"ctxwin qa generate: the documents folder {docs} does not exist; pass --documents")
    folder = _folder(docs)
    folder.require_documents()
    chosen = _chosen_documents(args.doc, folder, docs)
    out = Path(args.out) if args.out else Path(DEFAULT_GENERATED_QA_DIR) / experiment_name_for(docs)
    out.mkdir(parents=True, exist_ok=True)
    todo = [d for d in chosen if args.overwrite or not (out / f"{d}.jsonl").exists()]
    for d in sorted(set(chosen) - set(todo)):
        print(f"{d}: {out / (d + '.jsonl')} exists; kept (pass --overwrite to generate again)")
    if not todo:
        print(f"nothing to generate: every document has its questions in {out}")
        return 0
    try:
        chat = open_chat(ChatSpec(model=args.model, base_url=args.base_url or "", cache_dir=args.cache_dir))
    except ValueError as exc:
        raise SystemExit(f"ctxwin qa generate: {exc}") from None
    if chat is None:
        raise SystemExit("ctxwin qa generate: name the chat model that writes the questions (--model)")
    writer = QuestionWriter(chat, closed_book=not args.no_closed_book)
    total = GenerationReport()
    per_doc: dict[str, object] = {}
    written = 0
    started = time.perf_counter()
    try:
        for doc_id in todo:
            path = folder.path_of(doc_id)
            assert path is not None
            try:
                text = read_document(path, doc_id=doc_id).text
            except DocumentError as exc:
                print(f"{doc_id}: skipped: {exc}")
                continue
            result = writer.generate(
                doc_id, text, count=args.count, kinds=kinds, title=path.name, progress=lambda m: print(m, flush=True)
            )
            total.merge(result.report)
            per_doc[doc_id] = result.report.to_dict()
            target = out / f"{doc_id}.jsonl"
            if target.exists():
                target.replace(target.with_name(target.name + ".previous"))
                print(f"{doc_id}: the previous questions are kept in {target.name}.previous")
            if not result.items:  # an empty QA file would stop `ctxwin evaluate`
                print(f"{doc_id}: no question kept; no file written (see the report below)", flush=True)
                continue
            write_qa_jsonl(result.items, target)
            written += len(result.items)
            print(f"{doc_id}: {len(result.items)} question(s) written to {target}", flush=True)
    finally:
        chat.close()
    report_path = _write_generation_report(
        out / "generation_report.json",
        {
            "model": args.model,
            "count": args.count,
            "kinds": kinds,
            "closed_book_filter": not args.no_closed_book,
            "seconds": round(time.perf_counter() - started, 1),
            "calls": chat.ledger.summarize(chat.ledger.records),
            "total": total.to_dict(),  # this run's documents
        },
        per_doc,
    )
    for line in total.lines():
        print(line)
    print(f"wrote {written} question(s) for {len(per_doc)} document(s) to {out} (report: {report_path})")
    if not any(p.stat().st_size for p in out.glob("*.jsonl")):
        print(
            f"no question in {out} to evaluate: every draft was rejected (the reasons are above, by kind); "
            "try another --model, more --count, or --no-closed-book"
        )
        return 1
    name = f"{experiment_name_for(docs)}_generated"
    where = f"--documents {shlex.quote(str(docs))} --qa {shlex.quote(str(out))}"
    print(f"evaluate with them: ctxwin evaluate {where} --name {name}")
    return 0


def register(sub: Subcommands) -> None:
    """Add ``qa`` and its subcommands to the ``ctxwin`` command's subcommands (``sub``)."""
    qa = sub.add_parser(
        "qa",
        help="question sets: import SQuAD JSON, CUAD JSON or CSV/JSONL tables, or generate questions from the documents",
    )
    _add_arguments(qa)
