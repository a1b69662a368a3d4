"""Fixtures the tests share: the repository's sample, the AI Act, one local embedding model for
the whole session, the project's default resources, and the asking tests' small index
(``workspace``; one ``conftest.py`` only, since the test folders are not packages).

The embedding model is loaded once per test session and keeps one embedding cache, so a text the
AI Act tests embed in one module is not embedded again in the next (tests that count the
embedder's work wrap it in a counter of their own). Everything here is in the repository: the
sample in ``data/`` and the fixtures under ``tests/fixtures/`` (see their README for sources).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# `ctxwin ask` starts a background ask server that outlives the command (ctxwin_dagster/ask/server.py).
# Tests answer in their own process, and their subprocesses inherit this; the server's own tests
# turn it on and stop every server they start.
os.environ["CTXWIN_ASK_SERVER"] = "off"

# What is read from a GGUF file's header (ctxwin_dagster/backends/chat/gguf_cache.py) is kept for
# this test run only, not in the user's ~/.cache: pytest's own process sets the folder before it
# starts the test processes, which inherit it (as do the commands they start), and removes it at the end.
_GGUF_CACHE = Path(tempfile.gettempdir()) / f"ctxwin-tests-gguf-{os.getpid()}"
_OWN_GGUF_CACHE = "CTXWIN_GGUF_CACHE" not in os.environ
os.environ.setdefault("CTXWIN_GGUF_CACHE", str(_GGUF_CACHE))


def pytest_sessionfinish(session, exitstatus):
    if _OWN_GGUF_CACHE and not hasattr(session.config, "workerinput"):  # the run's own process, at its end
        shutil.rmtree(_GGUF_CACHE, ignore_errors=True)


@pytest.fixture(autouse=True)
def _endpoints_found_out_afresh():
    """What structured output an endpoint accepts is remembered per process and keyed by its URL;
    a test server on a port an earlier test's server used must be found out again."""
    from ctxwin_dagster.backends.chat import capabilities
    from ctxwin_dagster.backends.chat.structured import ReplyFormats

    ReplyFormats.forget()
    capabilities.forget()  # what each endpoint can do: asked again (PROBE_REQUESTS chat requests)
    yield


@pytest.fixture(autouse=True)
def _signal_handlers_kept():
    """SIGTERM and SIGINT as they were before the test. Dagster's in-process execution, when it
    ends, points SIGTERM at whatever SIGINT does (``dagster._utils.interrupts``); where SIGINT is
    ignored (a background job, ``nohup``, some CI runners) SIGTERM is then ignored by this test
    process and by every process it starts afterwards: a later test's ``multiprocessing`` pool hung
    in ``terminate()``, and servers stopped with SIGTERM waited for SIGKILL."""
    import signal

    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in kept.items():
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)


_SAMPLE_CACHE = ROOT / "data" / "cache"


def _sample_cache_files() -> dict[str, tuple[int, int]]:
    if not _SAMPLE_CACHE.is_dir():
        return {}
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in _SAMPLE_CACHE.iterdir() if p.is_file()}


@pytest.fixture(autouse=True)
def _the_samples_cache_untouched():
    """No test writes the sample's caches (``data/cache``, the default ``cache_dir`` of every
    model resource): what a test leaves there is read by the next ``make run`` instead of being
    computed (71 replies left by an in-process run of two sample documents once changed the
    sample's T-RAG figures). A test gives every resource it builds a ``cache_dir`` of its own."""
    before = _sample_cache_files()
    yield
    after = _sample_cache_files()
    assert after == before, (
        f"the test wrote into the sample's cache {_SAMPLE_CACHE} ({sorted(set(after) ^ set(before)) or 'changed files'}): "
        "give every resource it builds a cache_dir under tmp_path (with several test processes, the writer "
        "may be a test running beside this one)"
    )


@pytest.fixture(scope="session", autouse=True)
def _one_embedding_server_for_the_commands(tmp_path_factory):
    """The ``ctxwin`` commands the tests run (``ctxwin_dagster.testing.projects.ctxwin_env``)
    embed through one embedding server for the session, started when the first command needs it,
    instead of each starting its own (torch and the model: about 11 s of CPU a command). Tests of
    a command's own server ask for it (``own_servers=True``)."""
    from ctxwin_dagster.backends.embeddings.local import LOCAL_MODEL_NAME
    from ctxwin_dagster.backends.embeddings.server import EmbeddingService
    from ctxwin_dagster.testing import projects

    started: list[tuple[EmbeddingService, str]] = []

    def address() -> str:
        if not started:
            log = tmp_path_factory.mktemp("shared-embeddings") / "ctxwin-embeddings.log"
            service = EmbeddingService([LOCAL_MODEL_NAME], log=log)
            started.append((service, service.start()))
        return started[0][1]

    projects.share_embedding_server(address)
    yield
    projects.share_embedding_server(None)
    for service, _ in started:
        service.stop()


@pytest.fixture(scope="session")
def sample_documents() -> Path:
    """The sample's documents folder, ``data/documents`` (read only: copy it to change it)."""
    return ROOT / "data" / "documents"


@pytest.fixture(scope="session")
def ai_act_text(sample_documents) -> str:
    """The EU AI Act (Regulation (EU) 2024/1689, English), the sample's long document."""
    return (sample_documents / "eu_ai_act_2024_1689_EN.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def embedder(tmp_path_factory):
    """The local ``all-MiniLM-L6-v2``, loaded once, with an embedding cache for the session."""
    from ctxwin_dagster.backends.calls.cache import ResponseCache
    from ctxwin_dagster.backends.embeddings.local import LocalEmbedder

    return LocalEmbedder(cache=ResponseCache(tmp_path_factory.mktemp("embeddings") / "embeddings.sqlite")).load()


@pytest.fixture
def folder_resources(tmp_path):
    """``make(documents, evaluation)``: the definitions' default resources (the sample's embedded
    defaults) pointed at a documents folder, the sample's questions, and this test's own cache and
    index folders."""
    from ctxwin_dagster import definitions
    from ctxwin_dagster.core.experiment import Experiment
    from ctxwin_dagster.defs.resources import LanceDBResource, ProjectSettings

    def make(documents: Path, evaluation) -> dict:
        return {
            # every model resource's cache in this test's folder, not the sample's data/cache
            **definitions.default_resources(Experiment(cache_dir=str(tmp_path / "cache"))),
            "settings": ProjectSettings(documents_dir=str(documents), qa_dir=str(ROOT / "data" / "qa")),
            "evaluation": evaluation,
            "lancedb": LanceDBResource(uri=str(tmp_path / "lancedb")),
        }

    return make


# ------------------------------------------------------------------ the asking tests' index
WORKSPACE_DOCS = ("squad_Normans", "squad_1973_oil_crisis", "cuad_todos_medical_reseller")


def index_documents(index, docs: Path, doc_ids, embedder, variants=("t_rag", "swb_rag")) -> None:
    """Copy the sample documents ``doc_ids`` into ``docs`` and index their chunks in ``variants``
    of ``index`` (a :class:`~ctxwin_dagster.backends.index.vectorstore.ChunkIndex`)."""
    from ctxwin_dagster.core.text.splitting import RecursiveSplitter

    splitter = RecursiveSplitter(chunk_size=1000, chunk_overlap=100)
    for doc_id in doc_ids:
        src = ROOT / "data" / "documents" / f"{doc_id}.txt"
        shutil.copy(src, docs / src.name)
        data = src.read_bytes()
        text = data.decode("utf-8")
        sha = hashlib.sha256(data).hexdigest()
        chunks = splitter.split(text, doc_id=doc_id, doc_sha256=sha)
        rows = [
            {**c.to_dict(), "doc_sha256": sha, "context": "", "context_engine": "", "embedded_text": c.text}
            for c in chunks
        ]
        vectors = embedder.embed([r["embedded_text"] for r in rows])
        for variant in variants:
            index.replace_document(variant, doc_id, rows, vectors, doc_sha256=sha)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, embedder):
    """A documents folder with three sample documents and their T-RAG and SWB-RAG tables, built
    with the real local embedder (no `ctxwin run`), for the asking tests."""
    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex

    root = tmp_path_factory.mktemp("ask")
    docs = root / "documents"
    docs.mkdir()
    index = ChunkIndex(str(root / "lancedb"))
    index_documents(index, docs, WORKSPACE_DOCS, embedder)
    return {"root": root, "documents": docs, "lancedb": root / "lancedb", "index": index}


@pytest.fixture(scope="module")
def index_more(embedder):
    """``index_more(workspace, doc_ids)``: index more sample documents into a workspace."""
    return lambda ws, doc_ids: index_documents(ws["index"], ws["documents"], doc_ids, embedder)


#: Seconds each of the longest test files took in a whole run (``make test`` on a fresh clone,
#: 2026-12-07, three test processes on two cores, 16.7 min): only their order matters, longest first.
#: ``make test`` passes ``--no-loadscope-reorder``, without which pytest-xdist ignores this order.
_LONGEST_FILES = {
    "tests/cli/test_experiments.py": 418,
    "tests/cli/test_runs.py": 269,
    "tests/backends/chat/test_local_model.py": 259,
    "tests/cli/test_cli_evaluate.py": 220,
    "tests/cli/test_same_text.py": 172,
    "tests/cli/test_postgres.py": 122,
    "tests/cli/test_damaged_index_cli.py": 112,
    "tests/cli/test_webserver.py": 111,
    "tests/cli/test_qa_generate.py": 72,
    "tests/core/methods/test_sliding_qa.py": 66,
    "tests/ask/test_ask.py": 63,
    "tests/cli/test_batches.py": 55,
    "tests/defs/test_celery_executor.py": 55,
    "tests/ask/test_ask_server.py": 55,
    "tests/defs/test_pipeline.py": 46,
    "tests/cli/test_hung_server.py": 40,
    "tests/defs/test_comparison_inputs.py": 38,
    "tests/backends/embeddings/test_embedding_server_holds_up.py": 37,
    "tests/ask/test_one_assembly.py": 36,
    "tests/cli/test_secrets_cli.py": 35,
    "tests/backends/index/test_object_storage.py": 35,
    "tests/ask/test_ask_server_holds_up.py": 33,
    "tests/backends/chat/test_llama_server.py": 30,
    "tests/backends/embeddings/test_embedding_server.py": 29,
    "tests/defs/test_automation.py": 27,
    "tests/cli/test_plan.py": 24,
    "tests/backends/tasks/test_tasks.py": 20,
}


@pytest.fixture(scope="session")
def longest_files() -> dict[str, int]:
    """The order table above (its check is in ``tests/test_architecture.py``)."""
    return dict(_LONGEST_FILES)


def pytest_collection_modifyitems(config, items):
    """The longest files first, then the other files with slow tests, then the rest (the order
    within a file is kept): when the test processes take whole files (``make test``), the long
    files start early and the short ones fill in at the end, so the processes end together instead
    of one running a long file alone."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}

    def cost(item) -> tuple[bool, int]:
        seconds = _LONGEST_FILES.get(item.path.relative_to(ROOT).as_posix(), 0)
        return item.path not in slow_files and not seconds, -seconds

    items.sort(key=cost)
