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

The cells and tables are in :mod:`~ctxwin_dagster.core.evaluation.report_tables`, the plots in
:mod:`~ctxwin_dagster.core.evaluation.report_plots`.

Plotting uses matplotlib's object API (``matplotlib.figure.Figure``), so no global backend is
set and nothing needs a display.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias, TypedDict

import numpy as np
import pandas as pd

from ctxwin_dagster.core.evaluation.report_plots import efficiency_plot, quality_plot
from ctxwin_dagster.core.evaluation.report_tables import (
    COMPACT_PAIRED,
    Table,
    comparison_table,
    efficiency_table,
    html_table,
    markdown_table,
    quality_table,
    table4_table,
)

__all__ = ["FrameLike", "ReportResult", "render_report"]

#: A table as the report takes it: a DataFrame, rows as dicts, or None (an empty table).
FrameLike: TypeAlias = "pd.DataFrame | Iterable[Mapping[str, object]] | None"

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

#: The plots by key (``<key>_png`` in the paths), with their titles, also their images' alt text.
_PLOTS = {"quality": "Quality per variant", "efficiency": "Efficiency per variant"}

_PAIRED = "Paired tests"
_PAIRED_NOTE = (
    "Δ = mean of per-question differences B − A. Shapiro–Wilk on the differences picks the paired "
    "t-test (p > 0.05, effect d_z) or the Wilcoxon signed-rank test (effect r_rb, matched-pairs "
    "rank-biserial); p corrected by Bonferroni over m comparisons; * = significant at 0.05 after "
    "correction. Pairs with a NaN on either side are dropped and counted."
)


class ReportResult(TypedDict):
    """What :func:`render_report` returns (see there)."""

    paths: dict[str, Path | None]
    markdown: str
    markdown_inline: str


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


def _table4(table4: FrameLike) -> pd.DataFrame | None:
    if table4 is None:
        return None
    t4 = _frame(table4, "table4")
    if isinstance(table4, pd.DataFrame):
        t4.index.name = table4.index.name
    return t4


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Section:
    """A section of the report: its table (None: no table) and the note under it; ``plot``
    names the plot shown under it (a key of :data:`_PLOTS`), if any."""

    heading: str
    headers: list[str]
    rows: list[list[str]] | None
    note: str
    plot: str = ""


def _sections(
    quality: pd.DataFrame, paired: Table | None, efficiency: pd.DataFrame, t4: pd.DataFrame | None
) -> list[_Section]:
    qh, qr, qnote = quality_table(quality) if not quality.empty else (["metric"], [], "")
    sections = [
        _Section("Quality", qh, qr, qnote or "Mean per question [95% bootstrap CI] (n questions).", plot="quality")
    ]
    if paired is not None:
        sections.append(_Section(_PAIRED, *paired, _PAIRED_NOTE))
    else:
        sections.append(_Section(_PAIRED, [], None, "No paired comparison was given."))
    if not efficiency.empty:
        sections.append(_Section("Efficiency", *efficiency_table(efficiency), "", plot="efficiency"))
    else:
        sections.append(_Section("Efficiency", [], None, "No efficiency data was given.", plot="efficiency"))
    if t4 is not None and not t4.empty:
        sections.append(
            _Section(
                "Human evaluation (Table 4)",
                *table4_table(t4),
                "Blinded pairwise review; counts per question complexity.",
            )
        )
    return sections


def _markdown_template(
    title: str, verdict: str, notes: Sequence[str], sections: Sequence[_Section], paths: Mapping[str, Path | None]
) -> str:
    """The Markdown with a marker (``\\x00<name>``) where the paired tests and each plot go."""
    md = [f"# {title}", ""]
    if verdict:
        md.extend([verdict.rstrip(), ""])
    md.extend(f"> {n}" for n in notes)
    if notes:
        md.append("")
    for s in sections:
        md.extend([f"## {s.heading}", ""])
        if s.rows is not None and s.heading == _PAIRED:
            md.extend(["\x00paired", ""])
        elif s.rows is not None:
            md.extend([markdown_table(s.headers, s.rows), ""])
        if s.note:
            md.extend([s.note, ""])
        if s.plot and paths[f"{s.plot}_png"] is not None:
            md.extend([f"\x00{s.plot}", ""])
    return "\n".join(md).rstrip() + "\n"


def _data_uri(path: Path | None) -> str:
    return "" if path is None else "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _fill_markdown(
    template: str, paired: Table | None, paths: Mapping[str, Path | None], files: str
) -> tuple[str, str]:
    """(the Markdown of the files, plots linked by name; the Markdown of the Dagster UI, plots
    embedded and the paired tests cut to their main columns, ``files`` named for the rest)."""
    markdown, inline = template, template
    if paired is not None:
        # The Dagster UI shows the report in a dialog: there the paired tests keep the columns a
        # verdict rests on, and the files keep all of them.
        ch, cr = paired
        markdown = markdown.replace("\x00paired", markdown_table(ch, cr))
        keep = [ch.index(h) for h in COMPACT_PAIRED]
        inline = inline.replace(
            "\x00paired",
            markdown_table(COMPACT_PAIRED, [[row[i] for i in keep] for row in cr])
            + f"\n\nAll the columns (pairs dropped, the test, the raw p, notes): {files}.",
        )
    for key, alt in _PLOTS.items():
        path = paths[f"{key}_png"]
        if path is not None:
            markdown = markdown.replace(f"\x00{key}", f"![{alt}]({path.name})")
            inline = inline.replace(f"\x00{key}", f"![{alt}]({_data_uri(path)})")
    return markdown, inline


def _img(path: Path | None, alt: str) -> str:
    if path is None:
        return ""
    return f'<p><img alt="{html.escape(alt)}" src="{_data_uri(path)}"></p>'


def _html_page(
    title: str, verdict: str, notes: Sequence[str], sections: Sequence[_Section], paths: Mapping[str, Path | None]
) -> str:
    body = [f"<h1>{html.escape(title)}</h1>"]
    if verdict:
        from markdown_it import MarkdownIt

        body.append(MarkdownIt("commonmark", {"html": False}).enable("table").render(verdict))
    body.extend(f"<blockquote>{html.escape(n)}</blockquote>" for n in notes)
    for s in sections:
        body.append(f"<h2>{html.escape(s.heading)}</h2>")
        if s.rows is not None:
            body.append(html_table(s.headers, s.rows))
        if s.note:
            body.append(f"<p>{html.escape(s.note)}</p>")
        if s.plot:
            body.append(_img(paths[f"{s.plot}_png"], _PLOTS[s.plot]))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif;max-width:80em;margin:auto;padding:1em}}"
        "table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right}"
        "th:first-child,td:first-child{text-align:left}img{max-width:100%}</style></head><body>\n"
        + "\n".join(b for b in body if b)
        + "\n</body></html>\n"
    )


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
) -> ReportResult:
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
    t4 = _table4(table4)

    md_path, html_path = out / "report.md", out / "report.html"
    quality_png, efficiency_png = out / "quality.png", out / "efficiency.png"
    paths: dict[str, Path | None] = {
        "markdown": md_path,
        "html": html_path,
        "quality_png": quality_png if quality_plot(quality, quality_png, _PLOTS["quality"]) else None,
        "efficiency_png": efficiency_png if efficiency_plot(efficiency, efficiency_png, _PLOTS["efficiency"]) else None,
    }
    paired = comparison_table(comparison) if not comparison.empty else None
    sections = _sections(quality, paired, efficiency, t4)
    template = _markdown_template(title, verdict, notes, sections, paths)
    markdown, inline = _fill_markdown(template, paired, paths, f"{md_path.name}, {html_path.name}")
    md_path.write_text(markdown, encoding="utf-8")
    html_path.write_text(_html_page(title, verdict, notes, sections, paths), encoding="utf-8")
    return {"paths": paths, "markdown": markdown, "markdown_inline": inline}
