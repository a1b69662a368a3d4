"""Audit LanceDB index tables: does any row lose chunk text to the embedding model's window?

Counts with all-MiniLM-L6-v2's own tokenizer (256 word pieces, ``[CLS]``/``[SEP]`` included).
For a table written before rows recorded how they were embedded (no ``embed_pieces`` column),
the row's ``embedded_text`` is what the model was given: the tokens past the window that belong
to the chunk text are counted as cut. For a table with the columns, each row is planned again
from its chunk text, context and ``embed_strategy`` and every piece is counted, so the recorded
``chunk_tokens_cut`` is checked against the tokenizer rather than trusted.

Run::

    .venv/bin/python evaluations/embedding_window_audit.py data/lancedb
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxwin_dagster.backends.embeddings.local import LocalEmbedder  # noqa: E402
from ctxwin_dagster.core.budget.embedding_rows import plan_row  # noqa: E402


def audit(uri: str) -> list[dict]:
    import lancedb

    emb = LocalEmbedder()
    tok, lim = emb.tokenizer, emb.limits
    db = lancedb.connect(uri)
    names = db.list_tables()
    names = sorted(getattr(names, "tables", names))
    out = []
    for name in names:
        table = db.open_table(name)
        cols = set(table.schema.names)
        recorded = "embed_pieces" in cols
        rows = table.to_arrow().drop_columns(["vector"]).to_pylist()
        over = cut_rows = cut_tokens = pooled = mismatches = 0
        for r in rows:
            if recorded and r.get("embed_pieces") is not None:
                plan = plan_row(
                    r["text"],
                    r.get("context") or "",
                    strategy=r["embed_strategy"] if r["context"] else "context_budget",
                    tokenizer=tok,
                    limits=lim,
                )
                too_long = [p for part in plan.parts for p in part.pieces if tok.count(p) > lim.max_tokens]
                over += plan.over_window
                pooled += plan.embed_pieces > len(plan.parts)
                cut = int(r.get("chunk_tokens_cut") or 0) + (len(too_long) and 1)
                mismatches += plan.chunk_tokens_cut != int(r.get("chunk_tokens_cut") or 0)
            else:
                text = r["embedded_text"]
                offs = tok.offsets(text)
                if len(offs) <= lim.content_tokens:
                    continue
                over += 1
                start = text.rfind(r["text"])
                cut = sum(1 for a, _ in offs[lim.content_tokens :] if a >= start)
            if cut:
                cut_rows += 1
                cut_tokens += cut
        out.append(
            {
                "table": name,
                "rows": len(rows),
                "recorded": recorded,
                "over_window": over,
                "pooled": pooled,
                "rows_with_chunk_cut": cut_rows,
                "chunk_tokens_cut": cut_tokens,
                "mismatches": mismatches,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("uri", nargs="?", default="data/lancedb")
    args = ap.parse_args(argv)
    results = audit(args.uri)
    print("| table | rows | over the window | pooled | rows with chunk text cut | chunk word pieces cut |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(
            f"| {r['table']} | {r['rows']:,} | {r['over_window']:,} | {r['pooled']:,} | {r['rows_with_chunk_cut']:,} | {r['chunk_tokens_cut']:,} |"
        )
        if r["mismatches"]:
            print(
                f"  {r['mismatches']} rows record a chunk_tokens_cut that the tokenizer does not confirm",
                file=sys.stderr,
            )
    return 1 if any(r["chunk_tokens_cut"] or r["mismatches"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
