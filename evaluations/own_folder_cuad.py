"""A user's folder as it comes: the first N CUAD dev contracts (sorted by file name) under their
own file names — spaces, commas, brackets and all — and their questions in the project's QA
format, naming each document by its file name. Then ``ctxwin evaluate`` runs on it end to end.

    python evaluations/own_folder_cuad.py --out data/experiments/cuad40/corpus --n 40
    ctxwin evaluate --name cuad40 --documents data/experiments/cuad40/corpus/documents --qa data/experiments/cuad40/corpus/qa

Reads ``../shared/corpus/cuad_dev`` (CUAD v1, Hendrycks et al. 2021, The Atticus Project, CC BY 4.0).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--corpus",
        default=str(Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "cuad_dev"),
        help="CUAD dev folder (default: shared/corpus/cuad_dev beside the project)",
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--n", type=int, default=40)
    args = parser.parse_args()
    corpus, out = Path(args.corpus), Path(args.out)
    names = sorted(p.name for p in (corpus / "contracts").glob("*.txt"))[: args.n]
    (out / "documents").mkdir(parents=True, exist_ok=True)
    (out / "qa").mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(corpus / "contracts" / name, out / "documents" / name)
    lines = []
    for line in (corpus / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        if q["doc"] not in names:
            continue
        spans = [list(p) for a in q["answers"] for p in (a.get("pieces") or [[a["answer_start"], a["answer_end"]]])]
        lines.append(
            json.dumps(
                {
                    "question_id": q["id"],
                    "doc_id": q["doc"],
                    "question": q["question"],
                    "reference_answer": "\n".join(a["text"] for a in q["answers"]),
                    "reference_spans": spans,
                    "is_impossible": q["is_impossible"],
                    "category": q["category"],
                },
                ensure_ascii=False,
            )
        )
    (out / "qa" / "contracts.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(names)} contracts and {len(lines)} questions in {out}")


if __name__ == "__main__":
    main()
