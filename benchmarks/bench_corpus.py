"""A corpus, not a folder: what ``ctxwin run`` costs per document as the corpus grows.

``curve``
    For each size N (default 10 and 100): N documents of about 10,000 characters, pieces of the
    CUAD contracts and then of the FinanceBench filings in ``../shared/corpus`` (cut at paragraph
    ends, each piece its own file), no questions; a cold ``ctxwin run --documents DIR --workers W``
    in a fresh project folder. Reported per N: wall time; CPU seconds of every Python process by
    kind (the command, the daemon, the code server, the run workers, the embedding server) and in
    all; the largest peak resident memory of one process; the size of the Dagster home (the
    event log) and of the LanceDB folder; and the runs launched. Then ``ctxwin run`` again with
    nothing changed, and with one document added.
``floor``
    The same documents' work without Dagster's machinery: each per-document asset's body called
    directly in this process (Dagster's direct invocation of an asset: no instance, no run, no
    event log), document after document, with the same embedded defaults: reading, chunking, the
    global summary, the CC and SWB contexts, the three indexes (embedding and LanceDB writes);
    not the question sets, answers and scores, which have no questions to work on (in a run they
    still import their libraries, a cost of the run's process). With ``curve``'s wall time it gives the
    overhead per document: ``(wall - floor) / N``. The floor is not divided by the workers: torch
    embeds on both cores in this one process (its CPU is about 1.7 times its wall time), so the
    floor already uses the machine as the job's two runs do.
``sample``
    The repository's sample (``data/documents`` and ``data/qa``, 7 documents and their questions)
    as ``make run`` runs it: a cold ``ctxwin run --workers W`` in a fresh project folder, then the
    floor of the same work in this process: the bodies of ``floor``, and also each document's
    question set, answers and scores, and the comparison's report. The embedding model and RAGAS
    are loaded before the floor's clock starts (reported as ``floor_warmup_s``). Reported: both
    wall times and their ratio (issue 38's target: at most 1.5).

Run::

    .venv/bin/python benchmarks/bench_corpus.py curve [--sizes 10 100 1000] [--workers 2] [--batch-size B]
    .venv/bin/python benchmarks/bench_corpus.py floor [--sizes 10 100]
    .venv/bin/python benchmarks/bench_corpus.py sample [--workers 2]
    .venv/bin/python benchmarks/bench_corpus.py resume --keep DIR --sizes 1000 [--add 60] [--kill-after 90]

``resume``
    On a project ``curve --keep DIR`` left (``DIR/nN``): ``--add`` more documents, ``ctxwin run``
    killed with SIGKILL ``--kill-after`` seconds into it (a person's ``kill -9``), then started
    again. Reported: what the second command planned and its wall time, the documents in each
    index, and the rows that share a ``chunk_id`` (duplicates; 0 is right).

Nothing is asserted; the figures go in the issue notes. Print the machine's load with them
(``uptime``): on 2 cores a busy neighbour doubles every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_runs import ENV, ROOT, cpu_by_kind, cpu_env, peak_rss_mib  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
PIECE_CHARS = 10_000


def pieces(n: int, chars: int = PIECE_CHARS) -> dict[str, str]:
    """``n`` documents of about ``chars`` characters: pieces of the CUAD contracts, then of the
    FinanceBench filings, each cut at the last paragraph end of its stretch."""
    sources = sorted((CORPUS / "cuad_dev" / "contracts").glob("*.txt"))
    sources += sorted((CORPUS / "financebench_dev" / "documents").rglob("*.txt"))
    out: dict[str, str] = {}
    for path in sources:
        text = path.read_text(encoding="utf-8", errors="replace")
        start = 0
        while start < len(text) - chars // 2 and len(out) < n:
            piece = text[start : start + chars]
            cut = piece.rfind("\n\n")
            piece = piece[: cut if cut > chars // 2 else len(piece)]
            out[f"piece_{len(out):04d}"] = piece
            start += len(piece)
        if len(out) >= n:
            return out
    raise SystemExit(f"the corpus in {CORPUS} gives only {len(out)} pieces of {chars} characters; ask for fewer")


def folder_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20 if path.exists() else 0.0


def ctxwin(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "ctxwin_dagster.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    took = time.perf_counter() - started
    if out.returncode != 0:
        print(out.stdout[-3000:], out.stderr[-3000:])
        raise SystemExit(f"ctxwin {' '.join(args)} failed")
    return took, out.stdout


def project(base: Path, docs: dict[str, str]) -> tuple[Path, Path]:
    root = base / "project"
    (root / "data" / "qa").mkdir(parents=True)
    shutil.copy(ROOT / "workspace.yaml", root / "workspace.yaml")
    folder = base / "documents"
    folder.mkdir()
    for name, text in docs.items():
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
    return root, folder


def bench_curve(base: Path, sizes: list[int], workers: int, batch_size: int | None) -> list[dict]:
    rows = []
    for n in sizes:
        docs = pieces(n + 1)
        extra = docs.pop(f"piece_{n:04d}")
        root, folder = project(base / f"n{n}", docs)
        env = {**ENV, **cpu_env(base / f"n{n}" / "cpu")}
        env.pop("DAGSTER_HOME", None)
        args = ["run", "--documents", str(folder), "--name", f"curve{n}", "--workers", str(workers)]
        if batch_size:
            args += ["--batch-size", str(batch_size)]
        load = os.getloadavg()[0]
        wall, out = ctxwin(args, root, env)
        kinds = cpu_by_kind(base / f"n{n}" / "cpu")
        rss = peak_rss_mib(base / f"n{n}" / "cpu")
        home = root / "data" / "experiments" / f"curve{n}"
        planned = next((line for line in out.splitlines() if "documents to run" in line), "")
        again, out_again = ctxwin(args, root, env)
        (folder / "added.txt").write_text(extra, encoding="utf-8")
        added, out_added = ctxwin(args, root, env)
        row = {
            "documents": n,
            "chars": sum(len(t) for t in docs.values()),
            "load_before": round(load, 2),
            "wall_s": round(wall, 1),
            "wall_per_doc_s": round(wall / n, 2),
            "cpu_s": round(sum(t for _, t in kinds.values()), 1),
            "cpu_by_kind": {k: [c, round(t, 1)] for k, (c, t) in sorted(kinds.items())},
            "peak_rss_mib": round(max(rss.values(), default=0.0), 0),
            "peak_rss_by_kind_mib": {k: round(v) for k, v in sorted(rss.items())},
            "home_mib": round(folder_mib(home / "dagster_home"), 1),
            "lancedb_mib": round(folder_mib(home / "lancedb"), 1),
            "planned": planned.strip(),
            "unchanged_wall_s": round(again, 1),
            "unchanged": next((x for x in out_again.splitlines() if "documents to run" in x), "").strip(),
            "one_added_wall_s": round(added, 1),
            "one_added": next((x for x in out_added.splitlines() if "documents to run" in x), "").strip(),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def _floor_resources(base: Path, folder: Path, qa_dir: Path):
    """The embedded defaults' resources for a floor in ``base``: cold (the caches the resources
    keep by default, ``data/cache`` with the contexts' responses among them, are the new
    project's, not this checkout's: this process's working folder becomes ``base/project``)."""
    from ctxwin_dagster.definitions import default_resources
    from ctxwin_dagster.defs.model_resources import EmbeddingsResource
    from ctxwin_dagster.defs.resources import LanceDBResource, ProjectSettings

    os.chdir(base / "project")
    r = default_resources()
    r["settings"] = ProjectSettings(documents_dir=str(folder), qa_dir=str(qa_dir))
    r["embeddings"] = EmbeddingsResource(cache_dir=str(base / "cache"))
    r["lancedb"] = LanceDBResource(uri=str(base / "lancedb"))
    return r


def _floor_pass(r: dict, doc_ids: list[str], stages: dict[str, float], *, questions: bool) -> list[dict]:
    """Each per-document asset's body called directly (Dagster's direct invocation: no run, no
    event log), document after document; with ``questions`` also the question set, the answers
    and the scores. ``stages`` gets each body's seconds added; returns the score rows."""
    import dagster as dg

    from ctxwin_dagster.core.defaults import VARIANTS
    from ctxwin_dagster.defs.contexts.assets import cc_rag_contexts, global_summaries, swb_rag_contexts
    from ctxwin_dagster.defs.evaluation import answers, scores
    from ctxwin_dagster.defs.evaluation.qa_sets import qa_sets
    from ctxwin_dagster.defs.indexes.assets import cc_rag_index, swb_rag_index, t_rag_index
    from ctxwin_dagster.defs.ingest.assets import chunks, raw_documents

    def timed(name, fn, key, **kw):
        ctx = dg.build_asset_context(partition_key=key, instance=instance)
        started = time.perf_counter()
        result = fn(ctx, **kw)
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - started
        return getattr(result, "value", result)

    instance = dg.DagsterInstance.ephemeral()  # in memory: only the partition keys are kept
    instance.add_dynamic_partitions("documents", doc_ids)
    common = {"contextualizer": r["contextualizer"], "embeddings": r["embeddings"], "pipeline": r["pipeline"]}
    index = {"embeddings": r["embeddings"], "lancedb": r["lancedb"]}
    answering = {n: r[n] for n in ("settings", "evaluation", "answerer", "embeddings", "lancedb", "pipeline")}
    scoring = {n: r[n] for n in ("evaluation", "judge", "embeddings")}
    score_rows: list[dict] = []
    for key in doc_ids:
        doc = timed("raw_documents", raw_documents, key, settings=r["settings"])
        ch = timed("chunks", chunks, key, settings=r["settings"], raw_documents=doc)
        summary = timed("global_summaries", global_summaries, key, raw_documents=doc, **common)
        cc = timed("cc_rag_contexts", cc_rag_contexts, key, raw_documents=doc, chunks=ch, **common)
        swb = timed(
            "swb_rag_contexts", swb_rag_contexts, key, raw_documents=doc, chunks=ch, global_summaries=summary, **common
        )
        timed("t_rag_index", t_rag_index, key, chunks=ch, **index)
        timed("cc_rag_index", cc_rag_index, key, chunks=ch, contexts=cc, **index)
        timed("swb_rag_index", swb_rag_index, key, chunks=ch, contexts=swb, **index)
        if not questions:
            continue
        qa = timed("qa_sets", qa_sets, key, settings=r["settings"], raw_documents=doc, chunks=ch)
        for v in VARIANTS:
            answered = timed(f"{v}_answers", getattr(answers, f"{v}_answers"), key, qa_sets=qa, **answering)
            asset = getattr(scores, f"{v}_ragas_scores")
            score_rows += timed(f"{v}_ragas_scores", asset, key, answers=answered, chunks=ch, **scoring)
    return score_rows


def bench_floor(base: Path, sizes: list[int]) -> list[dict]:
    """Every per-document asset body called directly, document after document, in this process."""
    os.environ.update({k: v for k, v in ENV.items() if k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")})
    rows = []
    for n in sizes:
        docs = pieces(n + 1)  # the last one warms up (the model load is not the documents' work)
        root, folder = project(base / f"floor{n}", docs)
        r = _floor_resources(base / f"floor{n}", folder, root / "data" / "qa")
        _floor_pass(r, [list(docs)[-1]], {}, questions=False)
        stages: dict[str, float] = {}
        cpu0, wall0 = time.process_time(), time.perf_counter()
        _floor_pass(r, list(docs)[:-1], stages, questions=False)
        row = {
            "documents": n,
            "floor_wall_s": round(time.perf_counter() - wall0, 1),
            "floor_cpu_s": round(time.process_time() - cpu0, 1),
            "by_stage_s": {k: round(v, 1) for k, v in stages.items()},
            "load_after": round(os.getloadavg()[0], 2),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def bench_sample(base: Path, workers: int) -> dict:
    """The repository's sample (``data/documents``, ``data/qa``) as ``make run`` runs it: a cold
    ``ctxwin run`` in a fresh project folder, then the floor of the same work in this process
    (every asset body, the answers, the scores and the comparison's report), and their ratio."""
    os.environ.update({k: v for k, v in ENV.items() if k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")})
    sample = ROOT / "data"
    names = sorted(p.name for p in (sample / "documents").iterdir() if p.is_file())
    roots = {}
    for kind in ("job", "floor"):
        root = base / kind / "project"
        shutil.copytree(sample / "documents", root / "data" / "documents")
        shutil.copytree(sample / "qa", root / "data" / "qa")
        shutil.copy(ROOT / "workspace.yaml", root / "workspace.yaml")
        roots[kind] = root
    env = {**ENV, **cpu_env(base / "job" / "cpu"), "DAGSTER_HOME": str(roots["job"] / ".dagster_home")}
    load = os.getloadavg()[0]
    wall, out = ctxwin(["run", "--workers", str(workers)], roots["job"], env)
    kinds = cpu_by_kind(base / "job" / "cpu")
    job = {
        "documents": len(names),
        "load_before": round(load, 2),
        "job_wall_s": round(wall, 1),
        "job_cpu_s": round(sum(t for _, t in kinds.values()), 1),
        "job_planned": next((x for x in out.splitlines() if "documents to run" in x), "").strip(),
    }
    print(json.dumps(job), flush=True)

    from ctxwin_dagster.core.evaluation.comparison import compare_experiment

    folder = roots["floor"] / "data" / "documents"
    r = _floor_resources(base / "floor", folder, roots["floor"] / "data" / "qa")
    doc_ids = sorted(r["settings"].document_folder().ids())
    # Loaded before the clock starts, as the curve's floor warms up on a document of its own:
    # the embedding model (the extractive engine ranks sentences with it) and RAGAS's imports.
    warm0 = time.perf_counter()
    r["embeddings"].embedder().embed(["a warm-up sentence"])
    from ctxwin_dagster.backends.ragas.compat import import_ragas

    import_ragas()
    warm = time.perf_counter() - warm0
    stages: dict[str, float] = {}
    cpu0, wall0 = time.process_time(), time.perf_counter()
    scores = _floor_pass(r, doc_ids, stages, questions=True)
    started = time.perf_counter()
    compare_experiment(scores, scores, {}, base / "floor" / "report", title="floor")
    stages["experiment_comparison"] = time.perf_counter() - started
    floor_wall = time.perf_counter() - wall0
    row = {
        **job,
        "floor_warmup_s": round(warm, 1),
        "floor_wall_s": round(floor_wall, 1),
        "floor_cpu_s": round(time.process_time() - cpu0, 1),
        "job_over_floor": round(wall / floor_wall, 2),
        "by_stage_s": {k: round(v, 1) for k, v in stages.items()},
        "score_rows": len(scores),
        "load_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(row), flush=True)
    return row


def bench_resume(base: Path, n: int, add: int, kill_after: float, workers: int) -> dict:
    import lancedb

    from ctxwin_dagster.core.defaults import VARIANTS

    root, folder = base / f"n{n}" / "project", base / f"n{n}" / "documents"
    have = {p.stem for p in folder.glob("*.txt")}
    new = {k: v for k, v in pieces(n + 1 + add).items() if k not in have and k != f"piece_{n:04d}"}
    for name, text in list(new.items())[:add]:
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
    env = {**ENV}
    env.pop("DAGSTER_HOME", None)
    args = ["run", "--documents", str(folder), "--name", f"curve{n}", "--workers", str(workers)]
    started = time.perf_counter()
    first = subprocess.Popen(
        [sys.executable, "-m", "ctxwin_dagster.cli", *args],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    time.sleep(kill_after)
    first.kill()
    seen = first.communicate()[0]
    killed_at = time.perf_counter() - started
    wall, out = ctxwin(args, root, env)
    db = lancedb.connect(str(root / "data" / "experiments" / f"curve{n}" / "lancedb"))
    documents, duplicates = {}, {}
    for variant in VARIANTS:
        table = db.open_table(f"{variant}_chunks").to_arrow()
        ids = table.column("chunk_id").to_pylist()
        documents[variant] = len(set(table.column("doc_id").to_pylist()))
        duplicates[variant] = len(ids) - len(set(ids))
    row = {
        "documents_before": len(have),
        "added": min(add, len(new)),
        "killed_after_s": round(killed_at, 1),
        "first_said": [x.strip() for x in seen.replace("\r", "\n").splitlines() if x.strip()][-3:],
        "second_planned": next((x for x in out.splitlines() if "documents to run" in x), "").strip(),
        "second_summary": [x.strip() for x in out.splitlines() if x.strip()][-2:],
        "second_wall_s": round(wall, 1),
        "documents_indexed": documents,
        "duplicate_rows": duplicates,
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["curve", "floor", "sample", "resume"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--add", type=int, default=60, help="resume: documents added before the killed run")
    parser.add_argument("--kill-after", type=float, default=90.0, help="resume: seconds before the kill")
    parser.add_argument("--keep", help="keep the projects in this folder (default: a temporary one, removed)")
    args = parser.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ctxwin-corpus-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        if args.what == "curve":
            bench_curve(base, args.sizes, args.workers, args.batch_size)
        elif args.what == "resume":
            bench_resume(base, args.sizes[0], args.add, args.kill_after, args.workers)
        elif args.what == "sample":
            bench_sample(base, args.workers)
        else:
            bench_floor(base, args.sizes)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
