"""A comparison report of variants: Markdown + PNG plots + a self-contained HTML page.

:func:`render_report` writes into ``out_dir``:

* ``report.md`` — quality means per variant and metric (with 95 % CIs), the paired tests
  (p, Bonferroni-corrected p, effect size, CI of the mean difference, dropped pairs), the
  efficiency table, and Table 4 (human review) when given; images linked relatively;
* ``quality.png`` — metric means per variant with CI error bars;
* ``efficiency.png`` — one bar chart per efficiency column (log scale for character counts);
* ``report.html`` — the same tables as HTML, plots embedded (one file to send around).

Inputs are DataFrames or lists of dicts:

* ``comparison_df``: :func:`ctxwin_dagster.core.evaluation.stats.compare_variants` output;
* ``quality_df``: long rows ``variant, metric, mean[, ci_low, ci_high, n, n_missing, n_nan]``
  (:func:`ctxwin_dagster.core.evaluation.metrics.aggregation.aggregate` output), or a wide frame indexed by variant
  with one column per metric;
* ``efficiency_df``: one row per variant (a ``variant`` column or the index) with numeric
  columns such as ``runtime_s, calls, input_tokens, input_chars, output_tokens, cost_usd,
  cache_hits`` (:func:`ctxwin_dagster.core.evaluation.metrics.aggregation.aggregate_efficiency` output, or the
  indexing costs of each variant);
* ``table4``: :func:`ctxwin_dagster.core.evaluation.review.table4` output.

Plotting uses matplotlib's object API (``matplotlib.figure.Figure``), so no global backend is
set and nothing needs a display.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

from ctxwin_dagster.core.evaluation.stats import format_p

__all__ = ["FrameLike", "efficiency_panels", "markdown_table", "render_report"]

#: A table as the report takes it: a DataFrame, rows as dicts, or None (an empty table).
FrameLike: TypeAlias = "pd.DataFrame | Iterable[Mapping[str, Any]] | None"

_EFFICIENCY_ORDER = (
    "n_questions",
    "runtime_s",
    "mean_latency_s",
    "calls",
    "input_tokens",
    "input_chars",
    "context_chars",
    "context_chars_per_question",
    "output_tokens",
    "cost_usd",
    "paid_usd",
    "cache_hits",
)


# --------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _fmt(v: Any, digits: int = 3) -> str:
    if _is_missing(v):
        return "—"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isinf(f):
            return "∞" if f > 0 else "−∞"
        if f.is_integer() and abs(f) >= 1000:
            return f"{int(f):,}"
        if abs(f) >= 1000:
            return f"{f:,.1f}"
        if f != 0 and abs(f) < 10 ** (-digits):
            return f"{f:.2e}"
        return f"{f:.{digits}f}"
    return str(v)


#: Fewer non-zero paired differences than this: the rank-biserial effect is not shown.
MIN_NONZERO_FOR_EFFECT = 10


def _fmt_p(p: Any, m: int = 1) -> str:
    """A p-value; ``m`` tests: printed precisely enough to fall on the right side of 0.05 / m."""
    return "—" if _is_missing(p) else format_p(p, m=m)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table (cells already formatted as strings or formatted here).

    Example::

        >>> print(markdown_table(["a", "b"], [[1, 0.5]]))
        | a | b |
        | --- | --- |
        | 1 | 0.500 |
    """
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(_md_cell(c if isinstance(c, str) else _fmt(c)) for c in row) + " |")
    return "\n".join(lines)


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c if isinstance(c, str) else _fmt(c))}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# --------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------


def _frame(data: FrameLike, name: str) -> pd.DataFrame:
    if data is None:
        return pd.DataFrame()
    if isinstance(data, pd.DataFrame):
        return data.copy()
    try:
        return pd.DataFrame(list(data))
    except Exception as exc:  # noqa: BLE001 - re-raised with the fix
        raise TypeError(f"{name} must be a DataFrame or a list of dicts; got {type(data).__name__}") from exc


def _quality_long(quality: FrameLike) -> pd.DataFrame:
    df = _frame(quality, "quality_df")
    if df.empty:
        return pd.DataFrame(columns=["variant", "metric", "mean", "ci_low", "ci_high", "n"])
    if "metric" not in df.columns:  # wide: index = variant, columns = metrics
        if "variant" in df.columns:
            df = df.set_index("variant")
        df.index.name = "variant"
        df = df.reset_index().melt(id_vars="variant", var_name="metric", value_name="mean")
    if "variant" not in df.columns:
        raise ValueError("quality_df needs a 'variant' column (or variants as the index of a wide frame)")
    for col in ("ci_low", "ci_high", "n", "n_missing", "n_nan"):
        if col not in df.columns:
            df[col] = np.nan
    return df


def _efficiency(efficiency: FrameLike) -> pd.DataFrame:
    df = _frame(efficiency, "efficiency_df")
    if df.empty:
        return df
    if "variant" in df.columns:
        df = df.set_index("variant")
    df.index = df.index.astype(str)
    df.index.name = "variant"
    # Per-field missing counts are shown only where something is missing.
    drop = [
        c
        for c in df.columns
        if str(c).startswith("n_missing_") and not (pd.to_numeric(df[c], errors="coerce").fillna(0) > 0).any()
    ]
    df = df.drop(columns=drop)
    ordered = [c for c in _EFFICIENCY_ORDER if c in df.columns]
    return df[ordered + [c for c in df.columns if c not in ordered]]


def _ordered_unique(values: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


# --------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------


def _quality_table(q: pd.DataFrame) -> tuple[list[str], list[list[str]], str]:
    variants = _ordered_unique(list(q["variant"]))
    metrics = _ordered_unique(list(q["metric"]))
    headers = ["metric"] + [str(v) for v in variants]
    rows = []
    notes = []
    for m in metrics:
        row = [str(m)]
        for v in variants:
            sel = q[(q["metric"] == m) & (q["variant"] == v)]
            if sel.empty:
                row.append("—")
                continue
            r = sel.iloc[0]
            lost = [
                f"{int(r[c])} {c.removeprefix('n_').replace('_', ' ')}"
                for c in ("n_missing", "n_nan")
                if not _is_missing(r[c]) and int(r[c]) > 0
            ]
            if lost:
                notes.append(f"{m} / {v}: {', '.join(lost)}")
            if _is_missing(r["mean"]):
                row.append("—")
                continue
            cell = _fmt(r["mean"])
            if not _is_missing(r["ci_low"]) and not _is_missing(r["ci_high"]):
                cell += f" [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]"
            if not _is_missing(r["n"]):
                cell += f" (n={int(r['n'])})"
            row.append(cell)
        rows.append(row)
    note = ("Not averaged (counted): " + "; ".join(notes) + ".") if notes else ""
    return headers, rows, note


#: The paired tests' columns in the report the Dagster UI shows (the files have them all).
_COMPACT_PAIRED = ["metric", "A vs B", "pairs", "Δ (B−A)", "95% CI of Δ", "p (Bonferroni)", "effect size"]


def _comparison_table(c: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    headers = [
        "metric",
        "A vs B",
        "pairs",
        "dropped (NaN)",
        "unpaired",
        "mean A",
        "mean B",
        "Δ (B−A)",
        "95% CI of Δ",
        "test",
        "p",
        "p (Bonferroni)",
        "effect size",
        "note",
    ]
    rows = []
    for _, r in c.iterrows():
        effect = "—"
        if not _is_missing(r.get("effect_size")):
            name = {"cohen_dz": "d_z", "rank_biserial": "r_rb"}.get(
                r.get("effect_size_name"), r.get("effect_size_name") or ""
            )
            effect = f"{name} = {_fmt(r['effect_size'])}"
            nonzero = r.get("n_nonzero")
            if name == "r_rb" and not _is_missing(nonzero) and int(nonzero) < MIN_NONZERO_FOR_EFFECT:
                # ±1 over one or two non-zero differences among hundreds says nothing of the effect
                effect = f"— (r_rb over {int(nonzero)} of {int(r['n_pairs'])} differences, the others zero)"
        ci = "—"
        if not _is_missing(r.get("ci_low")):
            ci = f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]"
        p_bonf = _fmt_p(r.get("p_bonferroni"))
        if not _is_missing(r.get("p_bonferroni")):
            p_bonf += f" (m={int(r['n_comparisons'])})" + (" *" if bool(r.get("significant")) else "")
        rows.append(
            [
                str(r["metric"]),
                f"{r['variant_a']} vs {r['variant_b']}",
                _fmt(int(r["n_pairs"])),
                _fmt(int(r.get("n_dropped_nan", 0) or 0)),
                _fmt(int(r.get("n_unpaired", 0) or 0)),
                _fmt(r.get("mean_a")),
                _fmt(r.get("mean_b")),
                _fmt(r.get("mean_diff")),
                ci,
                str(r.get("test") or "none"),
                _fmt_p(r.get("p_value"), int(r.get("n_comparisons") or 1)),
                p_bonf,
                effect,
                str(r.get("reason") or ""),
            ]
        )
    return headers, rows


def _fmt_amount(v: Any) -> str:
    """Counts as integers with separators, other amounts with 4 significant digits."""
    if _is_missing(v) or isinstance(v, (bool, np.bool_, str)):
        return _fmt(v)
    f = float(v)
    if f.is_integer():
        return f"{int(f):,}"
    if abs(f) >= 1000:
        return f"{f:,.0f}"
    return f"{f:.4g}"


def _efficiency_table(e: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    headers = ["variant"] + [str(c) for c in e.columns]
    rows = [[str(idx)] + [_fmt_amount(v) for v in r] for idx, r in zip(e.index, e.itertuples(index=False))]
    return headers, rows


def _table4_table(t4: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    headers = [t4.index.name or "complexity"] + [str(c) for c in t4.columns]
    rows = [[str(idx)] + [_fmt(v) for v in r] for idx, r in zip(t4.index, t4.itertuples(index=False))]
    return headers, rows


# --------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------


def _quality_plot(q: pd.DataFrame, path: Path, title: str) -> bool:
    from matplotlib.figure import Figure

    q = q[~q["mean"].map(_is_missing)]
    if q.empty:
        return False
    variants = _ordered_unique(list(q["variant"]))
    metrics = _ordered_unique(list(q["metric"]))
    width = 0.8 / max(1, len(variants))
    # At most 10 inches wide: the Dagster UI shows the image at its natural size in a dialog.
    fig = Figure(figsize=(min(10.0, max(6.0, 0.75 * len(metrics) * max(1, len(variants)) ** 0.5 + 2)), 4.8), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(metrics))
    for i, v in enumerate(variants):
        means, lo, hi = [], [], []
        for m in metrics:
            sel = q[(q["metric"] == m) & (q["variant"] == v)]
            if sel.empty:
                means.append(np.nan)
                lo.append(0.0)
                hi.append(0.0)  # noqa: E702
                continue
            r = sel.iloc[0]
            mean = float(r["mean"])
            means.append(mean)
            lo.append(max(0.0, mean - float(r["ci_low"])) if not _is_missing(r["ci_low"]) else 0.0)
            hi.append(max(0.0, float(r["ci_high"]) - mean) if not _is_missing(r["ci_high"]) else 0.0)
        ax.bar(x + (i - (len(variants) - 1) / 2) * width, means, width, yerr=[lo, hi], capsize=3, label=str(v))
    ax.set_xticks(x)
    ax.set_xticklabels([str(m) for m in metrics], rotation=30, ha="right")
    ax.set_ylabel("mean (95% CI)")
    ax.set_title(title)
    # Beside the axes, where no bar can be under it.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return True


def efficiency_panels(e: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(the efficiency measures drawn as panels, the measures zero for every variant). A measure
    that is zero everywhere (the cost when no model was priced) is named under the figure, not
    drawn as empty axes."""
    cols = [
        str(c)
        for c in e.columns
        if not str(c).startswith("n_missing_") and c != "n_questions" and pd.api.types.is_numeric_dtype(e[c])
    ]
    cols = [c for c in cols if e[c].notna().any()]
    zero = [c for c in cols if not pd.to_numeric(e[c], errors="coerce").fillna(0).abs().gt(0).any()]
    return [c for c in cols if c not in zero], zero


def _efficiency_plot(e: pd.DataFrame, path: Path, title: str) -> bool:
    from matplotlib.figure import Figure

    cols, zero = efficiency_panels(e)
    if e.empty or not cols:
        return False
    ncols = min(3, len(cols))
    nrows = math.ceil(len(cols) / ncols)
    fig = Figure(figsize=(3.3 * ncols, 2.8 * nrows), dpi=100)
    variants = [str(v) for v in e.index]
    for k, col in enumerate(cols):
        ax = fig.add_subplot(nrows, ncols, k + 1)
        values = pd.to_numeric(e[col], errors="coerce").to_numpy(dtype=float)
        ax.bar(variants, np.nan_to_num(values, nan=0.0), color=[f"C{i}" for i in range(len(variants))])
        label = str(col)
        if "chars" in label:
            present = values[~np.isnan(values)]
            if present.size and np.all(present > 0):
                ax.set_yscale("log")
                # Bars start a whole decade below the smallest value, so orders of magnitude read right.
                ax.set_ylim(bottom=10 ** math.floor(math.log10(float(present.min())) - 1e-9))
                label += " (log)"
            else:
                ax.set_yscale("symlog")
                label += " (symlog)"
        ax.set_title(label, fontsize=10)
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    if zero:
        fig.text(0.01, 0.005, "zero for every variant, not drawn: " + ", ".join(map(str, zero)), fontsize=8)
    fig.tight_layout(rect=(0, 0.04 if zero else 0, 1, 1))
    fig.savefig(path, format="png")
    return True


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def render_report(
    comparison_df: FrameLike,
    quality_df: FrameLike,
    efficiency_df: FrameLike,
    out_dir: str | Path,
    *,
    title: str,
    table4: FrameLike = None,
    notes: Sequence[str] = (),
    verdict: str = "",
) -> dict[str, Any]:
    """Write ``report.md``, ``report.html``, ``quality.png`` and ``efficiency.png`` to ``out_dir``.

    ``verdict`` (Markdown, see :mod:`ctxwin_dagster.core.evaluation.verdict`) opens the report, right under
    the title. Returns ``{"paths": {"markdown", "html", "quality_png", "efficiency_png"},
    "markdown": str, "markdown_inline": str}``: ``markdown`` links the plots by file name (for
    the folder and code hosts), ``markdown_inline`` embeds them as ``data:`` URIs (for the Dagster
    UI, which cannot load local files). A plot that had nothing to show is not written and its
    path is None.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    comparison = _frame(comparison_df, "comparison_df")
    quality = _quality_long(quality_df)
    efficiency = _efficiency(efficiency_df)
    t4 = None if table4 is None else _frame(table4, "table4")
    if t4 is not None and isinstance(table4, pd.DataFrame):
        t4.index.name = table4.index.name

    md_path, html_path = out / "report.md", out / "report.html"
    quality_png, efficiency_png = out / "quality.png", out / "efficiency.png"
    paths: dict[str, Path | None] = {
        "markdown": md_path,
        "html": html_path,
        "quality_png": quality_png if _quality_plot(quality, quality_png, "Quality per variant") else None,
        "efficiency_png": efficiency_png
        if _efficiency_plot(efficiency, efficiency_png, "Efficiency per variant")
        else None,
    }

    sections: list[tuple[str, list[str], list[list[str]] | None, str]] = []  # (heading, headers, rows, note)
    qh, qr, qnote = _quality_table(quality) if not quality.empty else (["metric"], [], "")
    sections.append(("Quality", qh, qr, qnote or "Mean per question [95% bootstrap CI] (n questions)."))
    if not comparison.empty:
        ch, cr = _comparison_table(comparison)
        sections.append(
            (
                "Paired tests",
                ch,
                cr,
                "Δ = mean of per-question differences B − A. Shapiro–Wilk on the differences picks the paired "
                "t-test (p > 0.05, effect d_z) or the Wilcoxon signed-rank test (effect r_rb, matched-pairs "
                "rank-biserial); p corrected by Bonferroni over m comparisons; * = significant at 0.05 after "
                "correction. Pairs with a NaN on either side are dropped and counted.",
            )
        )
    else:
        sections.append(("Paired tests", [], None, "No paired comparison was given."))
    if not efficiency.empty:
        eh, er = _efficiency_table(efficiency)
        sections.append(("Efficiency", eh, er, ""))
    else:
        sections.append(("Efficiency", [], None, "No efficiency data was given."))
    if t4 is not None and not t4.empty:
        th, tr = _table4_table(t4)
        sections.append(
            ("Human evaluation (Table 4)", th, tr, "Blinded pairwise review; counts per question complexity.")
        )

    md = [f"# {title}", ""]
    if verdict:
        md.extend([verdict.rstrip(), ""])
    md.extend(f"> {n}" for n in notes)
    if notes:
        md.append("")
    for heading, headers, rows, note in sections:
        md.extend([f"## {heading}", ""])
        if rows is not None and heading == "Paired tests":
            md.extend(["\x00paired", ""])
        elif rows is not None:
            md.extend([markdown_table(headers, rows), ""])
        if note:
            md.extend([note, ""])
        if heading == "Quality" and paths["quality_png"] is not None:
            md.extend(["\x00quality", ""])
        if heading == "Efficiency" and paths["efficiency_png"] is not None:
            md.extend(["\x00efficiency", ""])
    template = "\n".join(md).rstrip() + "\n"
    alts = {"quality": "Quality per variant", "efficiency": "Efficiency per variant"}

    def _data_uri(path: Path | None) -> str:
        return "" if path is None else "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")

    markdown, inline = template, template
    if not comparison.empty:
        # The Dagster UI shows the report in a dialog: there the paired tests keep the columns a
        # verdict rests on, and the files keep all of them.
        markdown = markdown.replace("\x00paired", markdown_table(ch, cr))
        keep = [ch.index(h) for h in _COMPACT_PAIRED]
        inline = inline.replace(
            "\x00paired",
            markdown_table(_COMPACT_PAIRED, [[row[i] for i in keep] for row in cr])
            + f"\n\nAll the columns (pairs dropped, the test, the raw p, notes): {md_path.name}, {html_path.name}.",
        )
    for key, alt in alts.items():
        path = paths[f"{key}_png"]
        if path is not None:
            markdown = markdown.replace(f"\x00{key}", f"![{alt}]({path.name})")
            inline = inline.replace(f"\x00{key}", f"![{alt}]({_data_uri(path)})")
    md_path.write_text(markdown, encoding="utf-8")

    def _img(path: Path | None, alt: str) -> str:
        if path is None:
            return ""
        return f'<p><img alt="{html.escape(alt)}" src="{_data_uri(path)}"></p>'

    body = [f"<h1>{html.escape(title)}</h1>"]
    if verdict:
        from markdown_it import MarkdownIt

        body.append(MarkdownIt("commonmark", {"html": False}).enable("table").render(verdict))
    body.extend(f"<blockquote>{html.escape(n)}</blockquote>" for n in notes)
    for heading, headers, rows, note in sections:
        body.append(f"<h2>{html.escape(heading)}</h2>")
        if rows is not None:
            body.append(_html_table(headers, rows))
        if note:
            body.append(f"<p>{html.escape(note)}</p>")
        if heading == "Quality":
            body.append(_img(paths["quality_png"], "Quality per variant"))
        if heading == "Efficiency":
            body.append(_img(paths["efficiency_png"], "Efficiency per variant"))
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif;max-width:80em;margin:auto;padding:1em}}"
        "table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right}"
        "th:first-child,td:first-child{text-align:left}img{max-width:100%}</style></head><body>\n"
        + "\n".join(b for b in body if b)
        + "\n</body></html>\n"
    )
    html_path.write_text(page, encoding="utf-8")
    return {"paths": paths, "markdown": markdown, "markdown_inline": inline}
