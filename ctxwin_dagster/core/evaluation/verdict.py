"""The verdict a comparison report opens with, written from its numbers.

:func:`verdict_markdown` turns the paired tests (:func:`ctxwin_dagster.core.evaluation.stats.compare_variants`),
the efficiency table (:func:`ctxwin_dagster.core.evaluation.comparison.compare_experiment`) and a
description of the set-up (:class:`ExperimentSetup`) into a few paragraphs:

* for each pair of variants, the metrics on which one is significantly better after the
  Bonferroni correction, by how much, and how many metrics show no significant difference;
* what each variant cost to build: contextualization calls, input characters, the cost of the
  work and what was paid in this run;
* which engines and models made it — contextualizer, answerer, embedding model and its window,
  with the tokens that did not fit — the retrieval setting, and, when the extractive engine made
  the contexts, that the CC/SWB comparison then measures that stand-in, not the methods.

Nothing here is written by hand for a particular result: change the numbers and the text changes.

Example::

    >>> import pandas as pd
    >>> tests = pd.DataFrame([{"metric": "mrr", "variant_a": "t_rag", "variant_b": "swb_rag", "mean_a": 0.70,
    ...     "mean_b": 0.74, "mean_diff": 0.04, "p_bonferroni": 0.001, "significant": True}])
    >>> print(verdict_markdown(tests, None, ExperimentSetup()).splitlines()[2])
    - **SWB-RAG vs T-RAG**: SWB-RAG is better on mrr (0.740 vs 0.700, +0.040, p=0.001).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from ctxwin_dagster.core.defaults import VARIANT_LABELS
from ctxwin_dagster.core.evaluation.record_values import as_float
from ctxwin_dagster.core.evaluation.stats import format_p

__all__ = ["ExperimentSetup", "verdict_headline", "verdict_markdown"]


def _label(v: str) -> str:
    return VARIANT_LABELS.get(v, v)


@dataclass(frozen=True)
class ExperimentSetup:
    """What made an experiment's numbers (for the verdict's last paragraph).

    Attributes:
        contextualizer, answerer, judge: a description of each role's engine and model.
        contextualizer_engine: ``"extractive"`` or ``"llm"``.
        embedding_model, embedding_window: the embedder and its window.
        embed_strategy: how contextualized rows fit the window.
        window: per variant, the index's window counts (``rows_over_window``, ``rows_pooled``,
            ``chunk_tokens_cut``, ``context_tokens_cut``) summed over the documents.
        retrieval: the retrieval setting (:meth:`RetrievalSettings.describe`).
        documents, questions: how many were compared.
        swb_replies: how the LLM's SWB batch replies fared, summed over the documents (the
            ``swb_rag_contexts`` metadata: ``batches``, ``n_contexts``, ``fallbacks``,
            ``replies_swb_schema_enforced``, ``replies_swb_invalid``, ``replies_swb_repaired``).
    """

    contextualizer: str = ""
    contextualizer_engine: str = ""
    answerer: str = ""
    judge: str = ""
    embedding_model: str = ""
    embedding_window: str = ""
    embed_strategy: str = ""
    window: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    retrieval: str = ""
    documents: int = 0
    questions: int = 0
    swb_replies: Mapping[str, float] = field(default_factory=dict)


def _p(p: object) -> str:
    text = format_p(p)
    return "p=—" if text == "—" else ("p" + text if text.startswith("<") else "p=" + text)


def _pair_sentence(rows: pd.DataFrame, a: str, b: str) -> str:
    better_b: list[str] = []
    better_a: list[str] = []
    n_tested = 0
    for _, r in rows.iterrows():
        if pd.isna(r.get("mean_diff")):
            continue
        n_tested += 1
        if not bool(r.get("significant")):
            continue
        d = float(r["mean_diff"])
        hi, lo = (r["mean_b"], r["mean_a"]) if d > 0 else (r["mean_a"], r["mean_b"])
        text = f"{r['metric']} ({float(hi):.3f} vs {float(lo):.3f}, {abs(d):+.3f}, {_p(r.get('p_bonferroni'))})"
        (better_b if d > 0 else better_a).append(text)
    parts = []
    if better_b:
        parts.append(f"{_label(b)} is better on {', '.join(better_b)}")
    if better_a:
        parts.append(f"{_label(a)} is better on {', '.join(better_a)}")
    rest = n_tested - len(better_a) - len(better_b)
    if not parts:
        return f"- **{_label(b)} vs {_label(a)}**: no significant difference on any of the {n_tested} metrics."
    tail = f"; no significant difference on the other {rest} metric{'s' if rest != 1 else ''}" if rest else ""
    return f"- **{_label(b)} vs {_label(a)}**: " + "; ".join(parts) + tail + "."


def _num(row: Mapping[str, object], key: str) -> float:
    try:
        v = as_float(row.get(key) or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if v != v else v


def _cost_lines(efficiency: pd.DataFrame | None) -> list[str]:
    if efficiency is None or efficiency.empty:
        return []
    eff = efficiency.reset_index() if "variant" not in efficiency.columns else efficiency
    rows = {str(r["variant"]): r for r in eff.to_dict("records")}
    lines = []
    for v, r in rows.items():
        calls, chars = _num(r, "index_calls") + _num(r, "index_cache_hits"), _num(r, "index_input_chars")
        work, paid = _num(r, "index_cost_usd"), _num(r, "index_paid_usd")
        ctx = _num(r, "context_chars_per_question")
        money = f"${work:,.4f} of work (${paid:,.4f} paid in this run)" if work or paid else "$0 (no priced model)"
        cached, tokens = _num(r, "index_cached_tokens"), _num(r, "index_input_tokens")
        if cached and tokens:
            money += f", {100 * cached / tokens:.1f} % of its {int(tokens):,} input tokens read from the server's prompt cache"
            uncached = _num(r, "index_uncached_cost_usd")
            if work and uncached > work:
                money += f" (${uncached:,.4f} without prompt caching)"
        lines.append(
            f"{_label(v)}: {int(calls):,} contextualization calls, {int(chars):,} input characters, {money}; "
            f"{ctx:,.0f} context characters per question"
        )
    base = rows.get("cc_rag")
    swb = rows.get("swb_rag")
    ratio = ""
    if base is not None and swb is not None and _num(base, "index_input_chars"):
        share = 100 * _num(swb, "index_input_chars") / _num(base, "index_input_chars")
        ratio = f" SWB-RAG read {share:.1f} % of CC-RAG's input characters to build its index."
        ratio += _cost_share(base, swb)
    return ["**Cost to build.** " + "; ".join(lines) + "." + ratio]


def _cost_share(cc: Mapping[str, object], swb: Mapping[str, object]) -> str:
    """SWB-RAG's cost to build as a share of CC-RAG's, without and with prompt caching: a server
    that caches prompt prefixes serves CC-RAG's document, repeated in every chunk's call."""
    cc_work, swb_work = _num(cc, "index_cost_usd"), _num(swb, "index_cost_usd")
    if not cc_work:
        return ""
    cc_full = _num(cc, "index_uncached_cost_usd") or cc_work
    swb_full = _num(swb, "index_uncached_cost_usd") or swb_work
    if not (_num(cc, "index_cached_tokens") or _num(swb, "index_cached_tokens")):
        return (
            f" It cost {100 * swb_work / cc_work:.1f} % of CC-RAG's; the server reported no input tokens read "
            "from a prompt cache, so both are priced without caching."
        )
    return (
        f" It cost {100 * swb_full / cc_full:.1f} % of CC-RAG's without prompt caching and "
        f"{100 * swb_work / cc_work:.1f} % with the caching the server did (CC-RAG ${cc_work:,.4f} instead of "
        f"${cc_full:,.4f})."
    )


def verdict_markdown(comparison: pd.DataFrame | None, efficiency: pd.DataFrame | None, setup: ExperimentSetup) -> str:
    """The verdict paragraphs (Markdown), generated from the numbers."""
    out = ["## Verdict", ""]
    if comparison is None or comparison.empty:
        out.append("- No paired comparison: fewer than two variants were scored.")
    else:
        pairs = list(dict.fromkeys(zip(comparison["variant_a"], comparison["variant_b"], strict=True)))
        m = (
            comparison["n_comparisons"].dropna().iloc[0]
            if "n_comparisons" in comparison and comparison["n_comparisons"].notna().any()
            else None
        )
        for a, b in pairs:
            out.append(
                _pair_sentence(comparison[(comparison["variant_a"] == a) & (comparison["variant_b"] == b)], a, b)
            )
        out.append("")
        scope = f"{setup.questions:,} questions of {setup.documents:,} documents; " if setup.questions else ""
        out.append(
            f"Significant = Bonferroni-corrected p < 0.05{f' over m={int(m)} tests' if m else ''} ({scope}paired "
            "t-test or Wilcoxon signed-rank after Shapiro–Wilk); differences are of per-question means."
        )
    out.append("")
    out.extend(_cost_lines(efficiency))
    made = []
    if setup.contextualizer:
        made.append(f"contexts and summaries by {setup.contextualizer}")
    if setup.answerer:
        made.append(f"answers by {setup.answerer}")
    if setup.judge:
        made.append(f"judged by {setup.judge}")
    if setup.embedding_model:
        emb = f"embeddings by {setup.embedding_model}"
        if setup.embedding_window:
            emb += f" (window {setup.embedding_window})"
        made.append(emb)
    if made:
        out += ["", "**Made with.** " + "; ".join(made) + "."]
    if setup.retrieval:
        out += ["", f"**Retrieval.** {setup.retrieval}."]
    if setup.window:
        parts = []
        for v, w in setup.window.items():
            parts.append(
                f"{_label(v)} {int(_num(w, 'rows_over_window')):,} rows over the window, {int(_num(w, 'rows_pooled')):,} pooled, "
                f"{int(_num(w, 'chunk_tokens_cut')):,} chunk tokens and {int(_num(w, 'context_tokens_cut')):,} context tokens cut"
            )
        strategy = f" Contextualized rows: `{setup.embed_strategy}`." if setup.embed_strategy else ""
        out += ["", "**Embedding window.** " + "; ".join(parts) + "." + strategy]
        if any(_num(w, "chunk_tokens_cut") for w in setup.window.values()):
            out.append("Chunk text was cut by the embedding model: retrieval measured here is not of the whole chunks.")
    swb = setup.swb_replies
    if setup.contextualizer_engine == "llm" and _num(swb, "batches"):
        fallbacks, n = int(_num(swb, "fallbacks")), int(_num(swb, "n_contexts"))
        line = (
            f"**SWB-RAG replies.** {int(_num(swb, 'batches')):,} batches; "
            f"{int(_num(swb, 'replies_swb_schema_enforced')):,} first replies held to their JSON schema "
            f"(structured output or constrained decoding), {int(_num(swb, 'replies_swb_invalid')):,} unusable, "
            f"{int(_num(swb, 'replies_swb_repaired')):,} repaired; {fallbacks:,} of {n:,} chunks fell back to "
            "single-chunk calls."
        )
        if fallbacks:
            line += " Those chunks were not contextualized in batches, as the paper's SWB-RAG does."
        out += ["", line]
    if setup.contextualizer_engine == "extractive":
        out += [
            "",
            "> The contexts were made by the **extractive engine** (sentences selected with the embedding model), a "
            "deterministic offline stand-in for an LLM: the CC-RAG and SWB-RAG results measure that stand-in, not "
            "contextual retrieval as the paper ran it. Configure a contextualizer model for the methods themselves.",
        ]
    return "\n".join(out).rstrip() + "\n"


def verdict_headline(verdict: str) -> str:
    """The pairwise findings of :func:`verdict_markdown` as plain text, one pair a line: what a
    person reads first (the UI shows plain text in place, Markdown behind a button).

    >>> verdict_headline("## Verdict\\n\\n- **SWB-RAG vs T-RAG**: no significant difference.\\n- **B vs A**: A is better.\\n\\nMore.")
    'SWB-RAG vs T-RAG: no significant difference.\\nB vs A: A is better.'
    """
    lines = [line[2:].replace("**", "") for line in verdict.splitlines() if line.startswith("- ")]
    return "\n".join(lines) or verdict.replace("## Verdict", "").replace("**", "").strip()
