"""Fixtures the tests share: the repository's sample, the AI Act, one local embedding model for
the whole session, and the project's default resources.

The embedding model is loaded once per test session and keeps one embedding cache, so a text the
AI Act tests embed in one module is not embedded again in the next (tests that count the
embedder's work wrap it in a counter of their own). Everything here is in the repository: the
sample in ``data/`` and the fixtures under ``tests/fixtures/`` (see their README for sources).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# `ctxwin ask` starts a background ask server that outlives the command (ctxwin_dagster/ask/server.py).
# Tests answer in their own process, and their subprocesses inherit this; the server's own tests
# turn it on and stop every server they start.
os.environ["CTXWIN_ASK_SERVER"] = "off"


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
    from ctxwin_dagster.defs.resources import EmbeddingsResource, LanceDBResource, ProjectSettings

    def make(documents: Path, evaluation) -> dict:
        return {
            **definitions.default_resources(),
            "settings": ProjectSettings(documents_dir=str(documents), qa_dir=str(ROOT / "data" / "qa")),
            "evaluation": evaluation,
            "embeddings": EmbeddingsResource(cache_dir=str(tmp_path / "cache")),
            "lancedb": LanceDBResource(uri=str(tmp_path / "lancedb")),
        }

    return make
