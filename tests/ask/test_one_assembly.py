"""The evaluation measures what ``ctxwin ask`` gives: both build their chat model and answer engine
in one place (``backends/assembly.py``), so the same question over the same index gets the same
answer, with the offline engine and with a chat model (the loopback test server)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwin_dagster.ask import Asker
from ctxwin_dagster.core.experiment import Experiment
from ctxwin_dagster.defs.model_resources import ChatModelResource, EmbeddingsResource
from ctxwin_dagster.defs.resources import EvaluationSettings, PipelineSettings, build_tasks
from ctxwin_dagster.testing import FakeOpenAIServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
QUESTION, DOC_ID = "Who was the Norse leader?", "squad_Normans"
#: Settings away from the defaults, so an answer made without them would differ.
PIPELINE = {"temperature": 0.0, "top_p": 0.5, "max_output_tokens": 300}


def _responder(body: dict) -> str:
    """An answer that depends on everything the request carries: another prompt, sampling or
    budget gives another answer."""
    keys = ("messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "model")
    digest = hashlib.sha256(json.dumps({k: body.get(k) for k in keys}, sort_keys=True).encode()).hexdigest()
    return f"The request {digest[:16]} was answered."


def _evaluation_answer(workspace, answerer: ChatModelResource, cache: Path) -> dict:
    """The answer as the ``*_answers`` assets make it: the run's resources, ``build_tasks`` and the
    evaluation's retrieval setting."""
    embeddings = EmbeddingsResource(cache_dir=str(cache))
    with build_tasks(answerer, embeddings, PipelineSettings(**PIPELINE)) as tasks:
        asker = Asker(
            index=workspace["index"], embedder=embeddings.embedder(), tasks=tasks, documents_dir=workspace["documents"]
        )
        result = asker.ask(
            QUESTION, variant="t_rag", doc_id=DOC_ID, retrieval=EvaluationSettings().retrieval_settings()
        )
    answerer.teardown_after_execution(None)  # type: ignore[arg-type]
    return result.to_dict()


def _ask_answer(workspace, home: Path, answerer: dict, cache: Path) -> dict:
    """The answer ``ctxwin ask`` prints for the experiment kept in ``home`` (the CLI, a process of its own)."""
    Experiment(
        name="alike",
        documents_dir=str(workspace["documents"]),
        lancedb_uri=str(workspace["lancedb"]),
        cache_dir=str(cache),
        sections={"answerer": answerer, "pipeline": PIPELINE},
    ).save(home)
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "OPENAI_API_KEY")}
    out = subprocess.run(
        [sys.executable, "-m", "ctxwin_dagster.cli", "ask", QUESTION, "--variant", "t", "--doc", DOC_ID]
        + ["--json", "--no-server", "--dagster-home", str(home)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


ALIKE = ("answer", "not_found", "citations", "windows", "mode_used", "variant", "engine", "model")


def test_the_offline_engine_answers_the_evaluation_as_it_answers_ctxwin_ask(workspace, tmp_path):
    evaluation = _evaluation_answer(workspace, ChatModelResource(cache_dir=str(tmp_path / "a")), tmp_path / "a")
    asked = _ask_answer(workspace, tmp_path / "home", {}, tmp_path / "b")
    assert evaluation["engine"] == "extractive" and evaluation["citations"]
    assert {k: evaluation[k] for k in ALIKE} == {k: asked[k] for k in ALIKE}


def test_a_chat_model_answers_the_evaluation_as_it_answers_ctxwin_ask(workspace, tmp_path):
    with FakeOpenAIServer(responder=_responder) as server:
        settings = {"model": "test-model", "base_url": server.base_url, "max_retries": 1}
        evaluation = _evaluation_answer(
            workspace, ChatModelResource(**settings, cache_dir=str(tmp_path / "a")), tmp_path / "a"
        )
        asked = _ask_answer(workspace, tmp_path / "home", settings, tmp_path / "b")
        bodies = [b for b in server.requests if QUESTION in json.dumps(b)]
    assert evaluation["engine"] == "llm" and evaluation["answer"].startswith("The request ")
    assert {k: evaluation[k] for k in ALIKE} == {k: asked[k] for k in ALIKE}
    # Each side's own cache: both requests reached the server, and they were the same request.
    assert len(bodies) == 2 and bodies[0] == bodies[1]
    assert (bodies[0]["temperature"], bodies[0]["top_p"]) == (PIPELINE["temperature"], PIPELINE["top_p"])
