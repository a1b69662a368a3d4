"""How often the local model's JSON replies parse now that they are decoded under their schema.

The inputs are those of ``make run-llm`` (``evaluations/local_llm.py``: the first ~5,500
characters of one SQuAD and one CUAD sample document, their questions, chunks of 1,000/100, SWB
batches of 5 with ±20,000 characters, replies of at most 256 tokens, temperature 0.2 / top-p
0.95), with SmolLM2-135M-Instruct in process. For each kind of reply that must parse it counts
the replies, those held to their schema, those that parsed, and the retries and fallbacks:

1. SWB batch contexts (after a global summary by the same model, as in the pipeline);
2. sliding-window answers (``window_answer``): each question over each excerpt as one window;
3. the judge's verdicts: RAGAS ``context_recall`` by the same model on the answerable
   questions, with the reference answer as the answer and the chunks holding the reference
   span as the contexts (what is measured is whether the verdict parses, not the answers).

The "before" figures are those of ``local_model.md`` in the same folder, measured by
``make run-llm`` before constrained decoding.

Run::

    nice -n 10 .venv/bin/python evaluations/structured_output.py

Writes ``evaluations/reports/local_smollm2/structured_output.md`` and ``.json``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_llm import CORPUS, MODEL, REPORTS, prepare  # noqa: E402

EXP = json.loads((ROOT / "evaluations" / "experiments" / "local_smollm2.json").read_text(encoding="utf-8"))
PIPE = EXP["pipeline"]


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--judge-max-tokens", type=int, default=384, help="most tokens of a verdict (default 384, as make run-llm)"
    )
    args = ap.parse_args(argv)
    from ctxwin_dagster.backends.calls.cache import ResponseCache
    from ctxwin_dagster.backends.chat.local import LocalChatBackend
    from ctxwin_dagster.backends.ragas.evaluate import evaluate_records
    from ctxwin_dagster.backends.ragas.judge import JudgeConfig
    from ctxwin_dagster.backends.tasks.llm import LLMTasks
    from ctxwin_dagster.backends.tasks.window_readers import LLMWindowReader
    from ctxwin_dagster.core.retrieval.window import Window
    from ctxwin_dagster.core.text.splitting import RecursiveSplitter

    covered = prepare(3)
    cache = ResponseCache(ROOT / "data" / "experiments" / "local_smollm2" / "structured_cache.sqlite")
    chat = LocalChatBackend(model=MODEL, max_new_tokens=EXP["contextualizer"]["max_new_tokens"], cache=cache)
    tasks = LLMTasks(chat, max_tokens=PIPE["max_output_tokens"])
    reader = LLMWindowReader(chat, max_tokens=EXP["answerer"]["max_new_tokens"])
    splitter = RecursiveSplitter(
        chunk_size=EXP["settings"]["chunk_size"], chunk_overlap=EXP["settings"]["chunk_overlap"]
    )
    judge_rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    seconds: dict[str, float] = {"summary": 0.0, "swb": 0.0, "windows": 0.0, "judge": 0.0}
    chunks_total = fallbacks = 0
    for doc_id in covered:
        text = (CORPUS / "documents" / f"{doc_id}.txt").read_text(encoding="utf-8")
        chunks = splitter.split(text, doc_id=doc_id, doc_sha256=doc_id)
        t = time.perf_counter()
        summary = tasks.summarize(text, doc_id=doc_id, max_tokens=PIPE["summary_max_tokens"])
        seconds["summary"] += time.perf_counter() - t
        t = time.perf_counter()
        contexts = tasks.contextualize_swb(
            text,
            chunks,
            summary.text,
            doc_id=doc_id,
            batch_size=PIPE["swb_batch_size"],
            window_chars=PIPE["swb_window_chars"],
        )
        seconds["swb"] += time.perf_counter() - t
        chunks_total += len(chunks)
        fallbacks += sum(c.fallback for c in contexts)
        rows = [
            json.loads(x) for x in (CORPUS / "qa" / f"{doc_id}.jsonl").read_text(encoding="utf-8").splitlines() if x
        ]
        window = Window(doc_id=doc_id, start=0, end=len(text), text=text, score=0.0, chunk_ids=())
        t = time.perf_counter()
        for row in rows:
            reader.read(row["question"], [window], numbers=[1], total=1)
            if row.get("reference_spans"):
                s, e = row["reference_spans"][0]
                held = [c.text for c in chunks if c.start < e and s < c.end]
                judge_rows.append(
                    {
                        "question_id": row["question_id"],
                        "doc_id": doc_id,
                        "variant": "reference",
                        "question": row["question"],
                        "answer": text[s:e],
                        "reference_answer": row.get("reference_answer") or text[s:e],
                        "contexts": held,
                        "is_impossible": False,
                    }
                )
        seconds["windows"] += time.perf_counter() - t
    t = time.perf_counter()
    config = JudgeConfig(
        model=MODEL,
        metrics=("context_recall",),
        max_tokens=args.judge_max_tokens,
        timeout_s=1800,
        max_retries=0,
        attempts=1,
    )
    result = evaluate_records(judge_rows, judge=config, n_boot=50)
    seconds["judge"] += time.perf_counter() - t
    counts = result.counts("context_recall")
    stats = dict(tasks.stats)
    note = {
        "model": MODEL,
        "documents": covered,
        "swb": {
            "batches": stats.get("swb_batches", 0),
            "chunks": chunks_total,
            "schema_enforced": stats.get("swb_schema_enforced", 0),
            "first_replies_unusable": stats.get("swb_invalid", 0),
            "repaired": stats.get("swb_repaired", 0),
            "retried": stats.get("swb_retried", 0),
            "unusable_after_retry": stats.get("swb_retry_invalid", 0),
            "fallback_chunks": fallbacks,
        },
        "windows": {
            "replies": reader.stats.get("windows", 0),
            "schema_enforced": reader.stats.get("schema_enforced", 0),
            "first_replies_unusable": reader.stats.get("invalid_replies", 0),
            "unusable_after_retry": reader.stats.get("retry_invalid", 0),
        },
        "model_calls": {k: chat.ledger.totals()[k] for k in ("calls", "cache_hits")},
        "judge": {
            "metric": "context_recall",
            "max_tokens": args.judge_max_tokens,
            "records": len(judge_rows),
            "scored": counts["n"],
            "nan": counts["n_nan"],
            "failed": counts["n_failed"],
            "failures": [f["error"][:200] for f in result.failures[:3]],
            "usage": result.judge_usage,
        },
        "seconds": {k: round(v, 1) for k, v in seconds.items()} | {"all": round(time.perf_counter() - started, 1)},
    }
    write(note)
    print(json.dumps(note, indent=2))
    return 0


def _pct(part: int, whole: int) -> str:
    return "n/a" if not whole else f"{100 * part / whole:.0f} %"


def write(note: dict[str, Any]) -> None:
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / "structured_output.json").write_text(json.dumps(note, indent=2) + "\n", encoding="utf-8")
    s, w, j = note["swb"], note["windows"], note["judge"]
    parsed_first = s["batches"] - s["first_replies_unusable"]
    lines = [
        "# Structured output on the local model: SmolLM2-135M-Instruct held to its reply schemas",
        "",
        "Made by `evaluations/structured_output.py` with the inputs of `make run-llm` (`local_model.md` in this",
        "folder): " + "; ".join(f"`{d}` ({v['chars']:,} characters)" for d, v in note["documents"].items()) + ".",
        "Replies are decoded under their JSON schema with llguidance (constrained decoding). Before: the",
        "figures of `local_model.md`, measured without it.",
        "",
        "| kind of reply | replies | held to the schema | parsed at once | unusable after the retry | fallbacks | before |",
        "|---|---:|---:|---:|---:|---:|---|",
        f"| SWB batch contexts | {s['batches']} | {s['schema_enforced']} | {parsed_first} ({_pct(parsed_first, s['batches'])}) "
        f"| {s['unusable_after_retry']} | {s['fallback_chunks']} of {s['chunks']} chunks "
        f"| 0 of 4 batches parsed, 17 of 17 chunks fell back |",
        f"| sliding-window answers | {w['replies']} | {w['schema_enforced']} | {w['replies'] - w['first_replies_unusable']} "
        f"({_pct(w['replies'] - w['first_replies_unusable'], w['replies'])}) | {w['unusable_after_retry']} | — | not measured |",
        f"| judge verdicts (`{j['metric']}`) | {j['records']} | {j['records']} | {j['scored'] + j['nan']} scored "
        f"({_pct(j['scored'] + j['nan'], j['records'])}; {j['nan']} NaN) | {j['failed']} failed | — | 0 of 3 scored |",
        "",
        f"SWB replies that needed a repair: {s['repaired']}. Judge verdicts of at most {j['max_tokens']} tokens, "
        "one attempt each. Seconds: "
        + ", ".join(f"{k} {v}" for k, v in note["seconds"].items())
        + f" (2 shared cores; {note['model_calls']['calls']} model calls made in this run and "
        f"{note['model_calls']['cache_hits']} answered from the response cache of an earlier run, so a stage "
        "that took 0 s was read from it; the judge's calls are not cached).",
    ]
    if j["failures"]:
        lines += ["", "Judge failures:", *[f"- `{f}`" for f in j["failures"]]]
    lines += [
        "",
        "The judge's inputs are the reference answer as the answer and the chunks holding the reference span as",
        "the contexts: this measures whether its verdicts parse, not the quality of any variant's answers.",
    ]
    (REPORTS / "structured_output.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
