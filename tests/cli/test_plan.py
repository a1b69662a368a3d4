"""The pre-flight plan counts the prompts a real run would send, without calling a model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwin_dagster.backends.planning.plan import plan_document
from ctxwin_dagster.core.methods.prompts import get_template
from ctxwin_dagster.core.text.splitting import RecursiveSplitter

ROOT = Path(__file__).resolve().parents[2]
DE = ROOT / "tests" / "fixtures" / "eu_ai_act" / "eu_ai_act_2024_1689_DE.txt"


@pytest.mark.slow
def test_plan_of_the_german_ai_act_with_the_papers_settings():
    text = DE.read_text(encoding="utf-8")
    plan = plan_document(text, doc_id="ai_act_de", model="gemini-1.5-flash")
    assert plan["chunks"] == 757 and plan["batches"] == 152
    cc, swb = plan["cc_rag"], plan["swb_rag"]
    assert cc["calls"] == 757 and cc["fits"]
    assert swb["calls"] == 1 + 152 and swb["summary_calls"] == 1
    # CC input, recomputed independently: the whole document in every one of the 757 prompts
    tpl = get_template("cc_context", "de")
    chunks = RecursiveSplitter().split(text, doc_id="x", doc_sha256="x", sections=False)
    expected = sum(sum(len(m["content"]) for m in tpl.render(document=text, chunk=c.text)) for c in chunks)
    assert cc["input_chars"] == expected
    # SWB needs about 2 % of CC's input (the paper: 9.2 M vs 507.4 M characters, 1.81 %)
    ratio = swb["input_chars"] / cc["input_chars"]
    assert 0.012 < ratio < 0.03, ratio
    assert cc["cost_usd_est"] > 10 * swb["cost_usd_est"] > 0
    # With prompt caching, every chunk's prompt after the first reads the document from the cache.
    assert cc["cached_tokens_est"] > 0.95 * cc["input_tokens"]
    assert cc["cost_usd_est_cached"] < 0.6 * cc["cost_usd_est"]
    assert 0 < swb["cached_tokens_est"] < 0.6 * swb["input_tokens"]


@pytest.mark.slow
def test_plan_reports_a_document_too_long_for_cc():
    text = DE.read_text(encoding="utf-8")  # about 192 K tokens; gpt-4o takes 128 K
    plan = plan_document(text, doc_id="part", model="gpt-4o")
    assert plan["cc_rag"]["fits"] is False and "longer context" in plan["cc_rag"]["error"]
    assert plan["cc_rag"]["input_chars"] > 0 and plan["swb_rag"]["fits"]


def test_plan_command_json(tmp_path):
    (tmp_path / "a.txt").write_text("Article 1\n\nSome text about rules. " * 200, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "ctxwin_dagster.cli", "plan", str(tmp_path), "--json", "--model", "gpt-4o-mini"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    plans = json.loads(out.stdout)
    assert [p["doc_id"] for p in plans] == ["a"]
    assert plans[0]["cc_rag"]["calls"] == plans[0]["chunks"] > 1
    assert plans[0]["t_rag"]["calls"] == 0


def test_plan_prices_cc_rag_with_and_without_prompt_caching(tmp_path):
    text = "".join(f"Article {i}\n\nThe supplier shall deliver lot {i} within {i + 3} days. " * 8 for i in range(60))
    plan = plan_document(text, doc_id="a", model="gpt-4o-mini")
    cc = plan["cc_rag"]
    assert cc["calls"] == plan["chunks"] > 10
    # The first chunk's prompt pays for the whole document; the others read it from the cache, in
    # blocks of 128 tokens.
    assert cc["cached_tokens_est"] % 128 == 0
    assert 0.8 * cc["input_tokens"] < cc["cached_tokens_est"] < cc["input_tokens"] * (1 - 1 / cc["calls"])
    assert cc["cost_usd_est_cached"] < cc["cost_usd_est"]
    short = plan_document("A short note. " * 20, doc_id="b", model="gpt-4o-mini")["cc_rag"]
    assert short["cached_tokens_est"] == 0  # prompts under 1,024 tokens are not cached
    assert short["cost_usd_est_cached"] == short["cost_usd_est"]
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "ctxwin_dagster.cli", "plan", str(tmp_path), "--model", "gpt-4o-mini"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert "USD cached" in out and "% with it" in out, out


def test_the_plan_says_which_model_it_prices_and_why(tmp_path, monkeypatch):
    """No model given and none configured: the paper's model, said plainly; a configured
    contextualizer is the default; ``--model`` wins."""
    from ctxwin_dagster.cli.plan import plan_model
    from ctxwin_dagster.core.experiment import Experiment

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    model, why = plan_model(None)
    assert model == "gemini-1.5-flash" and "no chat model" in why and "--model" in why
    Experiment(name="priced", sections={"contextualizer": {"model": "gpt-4o-mini"}}).save(tmp_path)
    assert plan_model(None) == ("gpt-4o-mini", "the experiment's contextualizer")
    assert plan_model("gpt-4o")[0] == "gpt-4o"
