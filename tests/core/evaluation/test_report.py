"""The comparison report (ctxwin_dagster.core.evaluation.report): files, PNGs, tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from ctxwin_dagster.core.evaluation.metrics.aggregation import aggregate, aggregate_efficiency
from ctxwin_dagster.core.evaluation.metrics.scoring import score_answers
from ctxwin_dagster.core.evaluation.report import render_report
from ctxwin_dagster.core.evaluation.report_tables import markdown_table
from ctxwin_dagster.core.evaluation.stats import compare_variants

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_records() -> list[dict]:
    """15 questions x 3 variants; the relevant chunk sits at a random rank, answers right or wrong."""
    rng = np.random.default_rng(0)
    recs = []
    for variant, p_first, p_right, chars in (
        ("t_rag", 0.5, 0.5, 3000),
        ("cc_rag", 0.8, 0.7, 3000),
        ("swb_rag", 0.85, 0.75, 3100),
    ):
        for i in range(15):
            rank = 1 if rng.random() < p_first else int(rng.integers(2, 4))
            ids = [5, 6, 7]
            ids[rank - 1] = 1  # chunk 1 (1000..2000) holds the reference span
            retrieved = [
                {
                    "chunk_id": f"c{c}",
                    "doc_id": "d",
                    "start": 1000 * c,
                    "end": 1000 * c + 1000,
                    "text": "",
                    "score": 1 - k / 10,
                }
                for k, c in enumerate(ids)
            ]
            recs.append(
                {
                    "question_id": f"q{i}",
                    "doc_id": "d",
                    "variant": variant,
                    "question": "?",
                    "answer": "Marie Curie" if rng.random() < p_right else "Pierre Curie",
                    "not_found": False,
                    "reference_answer": "Marie Curie",
                    "reference_spans": [[1010, 1040]],
                    "retrieved": retrieved,
                    "contexts": ["x" * chars],
                    "context_spans": [[1000 * ids[0], 1000 * ids[0] + chars // 3]],
                    "latency_s": float(rng.uniform(0.5, 2.0)),
                    "input_tokens": 800,
                    "output_tokens": 30,
                    "cost_usd": 0.001,
                    "input_chars": chars + 200,
                    "calls": 1,
                    "cache_hits": i % 2,
                }
            )
    return recs


@pytest.fixture(scope="module")
def inputs():
    rows = score_answers(make_records())
    metrics = ["span_hit", "mrr", "hit@1", "answer_f1", "exact_match"]
    quality = aggregate(rows, metrics=metrics, n_boot=300)
    comparison = compare_variants(
        rows, metrics=metrics, pairs=[("t_rag", "swb_rag"), ("cc_rag", "swb_rag")], n_boot=500
    )
    efficiency = aggregate_efficiency(rows)
    t4 = pd.DataFrame(
        [[3, 7, 4, 1, 15], [2, 5, 1, 2, 10], [5, 12, 5, 3, 25]],
        index=pd.Index(["simple", "complex", "total"], name="complexity"),
        columns=["t_rag preferred", "swb_rag preferred", "both equal", "both wrong", "n"],
    )
    return comparison, quality, efficiency, t4


def test_report_writes_markdown_html_and_valid_pngs(inputs, tmp_path):
    comparison, quality, efficiency, t4 = inputs
    out = render_report(comparison, quality, efficiency, tmp_path / "rep", title="T vs CC vs SWB", table4=t4)
    paths = out["paths"]
    for key in ("markdown", "html", "quality_png", "efficiency_png"):
        assert paths[key].is_file() and paths[key].stat().st_size > 0, key
    for key in ("quality_png", "efficiency_png"):
        data = paths[key].read_bytes()
        assert data.startswith(PNG_MAGIC)
        with Image.open(paths[key]) as im:
            im.verify()
        with Image.open(paths[key]) as im:
            assert im.size[0] > 300 and im.size[1] > 200
            # not a blank canvas: bars and text draw more than one colour
            assert len(im.convert("RGB").getcolors(maxcolors=1_000_000) or []) > 10
    md = out["markdown"]
    assert md == paths["markdown"].read_text(encoding="utf-8")
    assert md.startswith("# T vs CC vs SWB")
    for heading in ("## Quality", "## Paired tests", "## Efficiency", "## Human evaluation (Table 4)"):
        assert heading in md
    assert "| metric | t_rag | cc_rag | swb_rag |" in md
    assert "t_rag vs swb_rag" in md and "cc_rag vs swb_rag" in md
    assert "p (Bonferroni)" in md and "95% CI of Δ" in md and "effect size" in md
    assert "| variant | n_questions | runtime_s |" in md
    assert "| complexity | t_rag preferred | swb_rag preferred | both equal | both wrong | n |" in md
    assert "| total | 5 | 12 | 5 | 3 | 25 |" in md
    assert "![Quality per variant](quality.png)" in md and "![Efficiency per variant](efficiency.png)" in md
    # every comparison row is in the table
    assert md.count(" vs swb_rag |") == len(comparison)
    # The report the Dagster UI shows: the paired tests in 7 columns, the files with all 14
    inline = out["markdown_inline"]
    paired = [line for line in inline.splitlines() if " vs swb_rag |" in line]
    assert len(paired) == len(comparison) and all(line.count("|") == 8 for line in paired)
    assert "| metric | A vs B | pairs | Δ (B−A) | 95% CI of Δ | p (Bonferroni) | effect size |" in inline
    assert "report.md, report.html" in inline and md.count("| dropped (NaN) |") == 1
    assert all(line.count("|") == 15 for line in md.splitlines() if " vs swb_rag |" in line)
    html = paths["html"].read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") == 2
    assert "<th>dropped (NaN)</th>" in html
    assert "<table>" in html and "T vs CC vs SWB" in html and "swb_rag preferred" in html


def test_report_values_are_formatted_from_the_inputs(inputs, tmp_path):
    comparison, quality, efficiency, _ = inputs
    md = render_report(comparison, quality, efficiency, tmp_path, title="x")["markdown"]
    q = {(r["variant"], r["metric"]): r for r in quality}
    r = q[("swb_rag", "mrr")]
    assert f"{r['mean']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] (n={r['n']})" in md
    row = comparison.iloc[0]
    assert f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]" in md
    assert "Table 4" not in md  # no human evaluation given


def test_report_counts_nan_and_degenerate_rows(tmp_path):
    quality = [
        {
            "variant": "a",
            "metric": "faithfulness",
            "mean": 0.8,
            "ci_low": 0.7,
            "ci_high": 0.9,
            "n": 10,
            "n_missing": 0,
            "n_nan": 3,
        },
        {
            "variant": "b",
            "metric": "faithfulness",
            "mean": None,
            "ci_low": None,
            "ci_high": None,
            "n": 0,
            "n_missing": 2,
            "n_nan": 0,
        },
    ]
    comparison = compare_variants(
        {"a": {"q1": 1.0, "q2": float("nan")}, "b": {"q1": 1.0, "q2": 0.5}}, metrics=["faithfulness"]
    )
    efficiency = pd.DataFrame(
        {"runtime_s": [1.0, 0.0], "input_chars": [5e8, 0.0], "cost_usd": [1.0, 0.02]}, index=["a", "b"]
    )
    out = render_report(comparison, quality, efficiency, tmp_path, title="edge")
    md = out["markdown"]
    assert "faithfulness / a: 3 nan" in md and "faithfulness / b: 2 missing" in md
    assert "| faithfulness | a vs b | 1 | 1 |" in md  # one pair kept, one dropped for NaN
    assert "only 1 pair(s)" in md
    assert out["paths"]["efficiency_png"].read_bytes().startswith(PNG_MAGIC)  # a zero on a log axis still plots


def test_report_with_wide_quality_and_without_data(tmp_path):
    wide = pd.DataFrame({"context_recall": [0.7, 0.8], "context_precision": [0.5, 0.6]}, index=["t_rag", "swb_rag"])
    out = render_report(pd.DataFrame(), wide, None, tmp_path, title="wide")
    assert "| context_recall | 0.700 | 0.800 |" in out["markdown"]
    assert out["paths"]["efficiency_png"] is None
    assert "No paired comparison was given." in out["markdown"]
    out = render_report(None, [], [], tmp_path / "empty", title="empty")
    assert out["paths"]["quality_png"] is None and out["paths"]["markdown"].is_file()


def test_markdown_table_escapes_pipes():
    assert markdown_table(["a|b"], [["x|y"]]).splitlines()[2] == "| x\\|y |"


def test_a_measure_zero_for_every_variant_is_named_not_drawn_as_empty_axes(tmp_path):
    """Nothing priced (the offline engine): the cost panels would be empty axes around 0."""
    from ctxwin_dagster.core.evaluation.report_plots import efficiency_panels
    from ctxwin_dagster.core.evaluation.report_plots import efficiency_plot as _efficiency_plot

    e = pd.DataFrame(
        {"calls": [3, 5], "cost_usd": [0.0, 0.0], "paid_usd": [0.0, None], "input_chars": [1200, 900]},
        index=["t_rag", "swb_rag"],
    )
    assert efficiency_panels(e) == (["calls", "input_chars"], ["cost_usd", "paid_usd"])
    assert _efficiency_plot(e, tmp_path / "e.png", "t") and (tmp_path / "e.png").stat().st_size > 0
    e.loc["swb_rag", "cost_usd"] = 0.002
    assert efficiency_panels(e)[0] == ["calls", "cost_usd", "input_chars"]


def test_an_effect_over_a_handful_of_nonzero_differences_is_not_shown_as_an_effect(tmp_path):
    # 477 questions where the two variants differ on one: Wilcoxon keeps one difference, and its
    # rank-biserial r would read -1.000, a perfect effect.
    scores = {
        "a": {f"q{i}": {"hit": 1.0} for i in range(477)},
        "b": {f"q{i}": {"hit": 0.0 if i == 0 else 1.0} for i in range(477)},
    }
    comparison = compare_variants(scores, ["hit"], n_boot=200)
    row = comparison.iloc[0]
    assert row["test"] == "wilcoxon" and row["n_nonzero"] == 1 and row["effect_size"] == -1.0
    quality = [
        {"variant": v, "metric": "hit", "mean": m, "ci_low": m, "ci_high": m, "n": 477}
        for v, m in (("a", 1.0), ("b", 476 / 477))
    ]
    md = render_report(comparison, quality, [], tmp_path, title="x")["markdown"]
    assert "r_rb = -1.000" not in md and "r_rb over 1 of 477 differences, the others zero" in md


def test_raw_p_is_printed_on_the_right_side_of_the_bonferroni_threshold():
    from ctxwin_dagster.core.evaluation.report_tables import format_p_cell as _fmt_p

    # m = 27 tests: 0.05 / 27 = 0.00185; three decimals would print both as 0.002
    assert (_fmt_p(0.00157, 27), _fmt_p(0.00203, 27)) == ("0.0016", "0.002")
    assert _fmt_p(0.0186, 1) == "0.019" and _fmt_p(0.0004, 27) == "<0.001"
