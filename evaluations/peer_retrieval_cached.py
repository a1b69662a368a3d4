"""Run the peers' own retrieval code (``../shared/tools/peer_retrieval.py``, unchanged) with
their embeddings memoized, for the report split of ``retrieval_quality.py``.

``SentenceTransformer.encode`` is wrapped: a text's vector is taken from a file of earlier runs
(so the TOPK=8 run does not embed the chunks again) or from the project's embedding cache when
the project embedded the same text with the same model (all-MiniLM-L6-v2 through
sentence-transformers, L2-normalized — the same vectors, checked to 1e-8) and it fits the
model's 256-token window; every other text is embedded by the peers' code as usual.
``--no-llamaindex`` blocks the LlamaIndex import, so only the LangChain rows (top-k and ±1) are
measured (the sentence-window row is measured once, at top-4). ``--pages`` adds two metrics for
evidence given as whole pages (FinanceBench), computed from the blocks the peers' code chose, with
its own interval helpers: ``page_hit`` (the context overlaps an evidence page) and ``all_pages``
(it overlaps every one); the peers' retrieval and their other metrics are unchanged.

Run with a Python that has the peers' packages (``PEERS_VENV``: a virtual environment made as
``../shared/tools/README.md`` says) and this project on ``PYTHONPATH``::

    python evaluations/retrieval_quality.py --export-peer-folders data/peer_export
    PYTHONPATH=. PROJECT_CACHE=data/cache/retrieval_eval_embeddings.sqlite \
        PEERS_VENV/bin/python evaluations/peer_retrieval_cached.py 4 data/cache/peer_cuad.npz \
        data/peer_export/cuad_report evaluations/reports/peer_retrieval/peer_cuad_report_top4.json
    ... 8 data/cache/peer_cuad.npz --no-llamaindex data/peer_export/cuad_report .../peer_cuad_report_top8.json

Usage: peer_retrieval_cached.py TOPK CACHE.npz [--no-llamaindex] [--pages] FOLDER OUT.json
"""

import atexit
import hashlib
import os
import runpy
import sys
from pathlib import Path

import numpy as np

topk, cache_path = sys.argv[1], sys.argv[2]
args = sys.argv[3:]
os.environ["TOPK"] = topk
if args[0] == "--no-llamaindex":
    sys.modules["llama_index"] = None  # the tool records C as unavailable and stops after A/B
    args = args[1:]
pages = args[0] == "--pages"
if pages:
    args = args[1:]
from sentence_transformers import SentenceTransformer  # noqa: E402 - after the llama_index switch above

cache = {}
if os.path.exists(cache_path):
    z = np.load(cache_path)
    cache = dict(zip(z["keys"].tolist(), z["vecs"]))
# Texts the project's evaluation already embedded with the same model (sentence-transformers,
# all-MiniLM-L6-v2, L2-normalized) are read from its cache when they fit the model's 256-token
# window (longer ones are embedded here, truncated as the peers' code does).
from ctxwin_dagster.backends.calls.cache import ResponseCache  # noqa: E402
from ctxwin_dagster.backends.embeddings.cached import embedding_cache_key  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
project = ResponseCache(
    os.environ.get("PROJECT_CACHE", str(ROOT / "data" / "cache" / "retrieval_eval_embeddings.sqlite"))
)
TOOL = os.environ.get("PEER_TOOL", str(ROOT.parent / "shared" / "tools" / "peer_retrieval.py"))
reused = [0]
fresh = [0]
SAVE_EVERY = 4000
orig = SentenceTransformer.encode


def encode(self, sentences, *a, **kw):
    single = isinstance(sentences, str)
    texts = [sentences] if single else list(sentences)
    keys = [hashlib.sha256((str(kw.get("normalize_embeddings")) + t).encode()).hexdigest() for t in texts]
    for i, k in enumerate(keys):
        if k not in cache and kw.get("normalize_embeddings"):
            blob = project.get_blob(embedding_cache_key("all-MiniLM-L6-v2", texts[i]))
            if blob is not None and len(self.tokenizer(texts[i])["input_ids"]) <= self.max_seq_length:
                cache[k] = np.frombuffer(blob, dtype=np.float32)
                reused[0] += 1
    miss = [i for i, k in enumerate(keys) if k not in cache]
    if miss:
        out = orig(self, [texts[i] for i in miss], *a, **kw)
        for i, v in zip(miss, out):
            cache[keys[i]] = np.asarray(v)
        fresh[0] += len(miss)
        if fresh[0] >= SAVE_EVERY:  # a long run that is stopped keeps what it embedded
            save()
            fresh[0] = 0
    res = np.stack([cache[k] for k in keys])
    return res[0] if single else res


SentenceTransformer.encode = encode


def save():
    print("vectors reused from the project cache:", reused[0], "held:", len(cache), flush=True)
    tmp = cache_path + ".tmp.npz"
    np.savez(tmp, keys=np.array(list(cache)), vecs=np.stack(list(cache.values())) if cache else np.zeros((0, 384)))
    os.replace(tmp, cache_path)


atexit.register(save)
sys.argv = ["peer_retrieval.py"] + args
if not pages:
    runpy.run_path(TOOL, run_name="__main__")
else:
    tool = runpy.run_path(TOOL, run_name="peer_retrieval")  # defines, does not run main
    peer_score, peer_summarize = tool["score"], tool["summarize"]

    def score_with_pages(q, blocks, block_texts):
        row = peer_score(q, blocks, block_texts)
        union = tool["merge"](blocks)
        touched = [tool["overlap"]([list(p) for p in sp], union) > 0 for sp in q["spans"]]
        row.update(page_hit=any(touched), all_pages=all(touched))
        return row

    def summarize_with_pages(rows):
        out = peer_summarize(rows)
        for k in ("page_hit", "all_pages"):
            out[k] = float(np.mean([r[k] for r in rows]))
        return out

    live = tool["main"].__globals__  # run_path returns a copy; main reads the module's own globals
    live["score"], live["summarize"] = score_with_pages, summarize_with_pages
    tool["main"](args[0], args[1])
