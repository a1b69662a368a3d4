"""Prepare an evaluation corpus from ../shared/corpus: documents and QA files for `ctxwin evaluate`.

    python evaluations/prepare_corpus.py --out data/experiments/corpus_dev --squad-docs 16 --cuad-contracts 20
    # the paper's second phase at its scale: every FinanceBench filing and CUAD contract (192 documents)
    python evaluations/prepare_corpus.py --out data/experiments/scale192 --squad-docs 0 --cuad-contracts 151 --financebench 41

Writes ``<out>/documents/*.txt`` (byte-identical texts, so offsets stay valid) and
``<out>/qa/{squad,cuad}.jsonl`` in the project's QA format. SQuAD: the first N articles of the
CS224N dev half (all 16 by default), all their questions (answerable and not). CUAD: the first N
contracts of the dev split in sorted file order, all their questions (about a third answerable).
FinanceBench (``--financebench N``, default none): the first N filings in sorted file order, all
their analysts' questions (already in the project's QA format).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ctxwin_dagster.core.evaluation.qa.corpora import cuad_to_qa, squad_to_qa
from ctxwin_dagster.core.evaluation.qa.items import QAItem, validate_spans, write_qa_jsonl
from ctxwin_dagster.core.text.file_names import safe_doc_id

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--squad-docs", type=int, default=16)
    parser.add_argument("--cuad-contracts", type=int, default=20)
    parser.add_argument("--financebench", type=int, default=0, help="FinanceBench filings (default none)")
    args = parser.parse_args(argv)
    docs_dir, qa_dir = args.out / "documents", args.out / "qa"
    docs_dir.mkdir(parents=True, exist_ok=True)
    qa_dir.mkdir(parents=True, exist_ok=True)
    texts: dict[str, str] = {}

    squad_root = args.corpus / "squad_v2_dev_half"
    with (squad_root / "squad_v2_dev_half_docs.jsonl").open(encoding="utf-8") as fh:
        articles = [json.loads(line) for line in fh if line.strip()][: args.squad_docs]
    for art in articles:
        doc_id = "squad_" + safe_doc_id(art["doc_id"])
        (docs_dir / f"{doc_id}.txt").write_bytes(art["text"].encode("utf-8"))
        texts[doc_id] = art["text"]
    squad = squad_to_qa(squad_root / "squad_v2_dev_half_questions.jsonl", doc_ids=[a["doc_id"] for a in articles])

    cuad_root = args.corpus / "cuad_dev"
    contracts = sorted(p.name for p in (cuad_root / "contracts").glob("*.txt"))[: args.cuad_contracts]
    cuad = cuad_to_qa(cuad_root / "questions.jsonl", contracts=contracts)
    for name in contracts:
        data = (cuad_root / "contracts" / name).read_bytes()
        doc_id = next((q.doc_id for q in cuad if q.meta.get("source_doc") == name), None)
        if doc_id is None:
            continue
        (docs_dir / f"{doc_id}.txt").write_bytes(data)
        texts[doc_id] = data.decode("utf-8").removeprefix("\ufeff")

    fb_root = args.corpus / "financebench_dev"
    filings = sorted((fb_root / "documents").glob("*.txt"))[: args.financebench]
    fb_ids = {safe_doc_id(p.stem): p for p in filings}
    for doc_id, path in fb_ids.items():
        data = path.read_bytes()
        (docs_dir / f"{doc_id}.txt").write_bytes(data)
        texts[doc_id] = data.decode("utf-8").removeprefix("\ufeff")
    finance = []
    if fb_ids:
        with (fb_root / "qa.jsonl").open(encoding="utf-8") as fh:
            finance = [QAItem.from_dict(json.loads(line)) for line in fh if line.strip()]
        finance = [q for q in finance if q.doc_id in fb_ids]

    sets = {"squad": squad, "cuad": cuad, "financebench": finance}
    every = [q for items in sets.values() for q in items]
    validate_spans(every, texts)
    for name, items in sets.items():
        if items:
            write_qa_jsonl(items, qa_dir / f"{name}.jsonl")
    n_ans = sum(1 for q in every if not q.is_impossible)
    chars = sum(len(t) for t in texts.values())
    print(f"{len(texts)} documents ({chars:,} characters), {len(every)} questions ({n_ans} answerable) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
