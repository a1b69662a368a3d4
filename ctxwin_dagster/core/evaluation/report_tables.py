"""The comparison report's cells and tables: how numbers and p-values are printed, Markdown and
HTML tables, and the rows of the quality, paired-test, efficiency and Table 4 sections.

Each ``*_table`` function takes the report's normalized frame and returns ``(headers, rows)``
with every cell already a string; :func:`markdown_table` and :func:`html_table` lay them out.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import SupportsFloat

import numpy as np
import pandas as pd

from ctxwin_dagster.core.evaluation.stats import format_p

__all__ = [
    "COMPACT_PAIRED",
    "MIN_NONZERO_FOR_EFFECT",
    "comparison_table",
    "efficiency_table",
    "format_cell",
    "format_p_cell",
    "html_table",
    "is_missing",
    "markdown_table",
    "ordered_unique",
    "quality_table",
    "table4_table",
]

#: Fewer non-zero paired differences than this: the rank-biserial effect is not shown.
MIN_NONZERO_FOR_EFFECT = 10

#: The paired tests' columns in the report the Dagster UI shows (the files have them all).
COMPACT_PAIRED = ["metric", "A vs B", "pairs", "Δ (B−A)", "95% CI of Δ", "p (Bonferroni)", "effect size"]

#: A table: its header cells and its rows of cells.
Table = tuple[list[str], list[list[str]]]


def is_missing(v: object) -> bool:
    """Whether a cell has no value: None, NaN, NaT or pandas' NA."""
    if v is None:
        return True
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def format_cell(v: object, digits: int = 3) -> str:
    """A value as a table cell: ``—`` when missing, yes/no, integers with separators, floats
    with ``digits`` decimals (scientific when smaller, one decimal from 1,000 on)."""
    if is_missing(v):
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


def format_p_cell(p: object, m: int = 1) -> str:
    """A p-value; ``m`` tests: printed precisely enough to fall on the right side of 0.05 / m."""
    return "—" if is_missing(p) else format_p(p, m=m)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table (cells already formatted as strings or formatted here).

    Example::

        >>> print(markdown_table(["a", "b"], [[1, 0.5]]))
        | a | b |
        | --- | --- |
        | 1 | 0.500 |
    """
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(_md_cell(c if isinstance(c, str) else format_cell(c)) for c in row) + " |")
    return "\n".join(lines)


def html_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """The same table as :func:`markdown_table`, as an HTML ``<table>``."""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c if isinstance(c, str) else format_cell(c))}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def ordered_unique(values: Sequence[object]) -> list[object]:
    """``values`` without repeats, in the order they first appear."""
    out: list[object] = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def quality_table(q: pd.DataFrame) -> tuple[list[str], list[list[str]], str]:
    """One row per metric, one column per variant: ``mean [CI] (n=…)``; and a note naming the
    values not averaged (missing or NaN), "" when there are none."""
    variants = ordered_unique(list(q["variant"]))
    metrics = ordered_unique(list(q["metric"]))
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
                if not is_missing(r[c]) and int(r[c]) > 0
            ]
            if lost:
                notes.append(f"{m} / {v}: {', '.join(lost)}")
            if is_missing(r["mean"]):
                row.append("—")
                continue
            cell = format_cell(r["mean"])
            if not is_missing(r["ci_low"]) and not is_missing(r["ci_high"]):
                cell += f" [{format_cell(r['ci_low'])}, {format_cell(r['ci_high'])}]"
            if not is_missing(r["n"]):
                cell += f" (n={int(r['n'])})"
            row.append(cell)
        rows.append(row)
    note = ("Not averaged (counted): " + "; ".join(notes) + ".") if notes else ""
    return headers, rows, note


def _effect_cell(r: pd.Series) -> str:
    """The effect size of a paired test, or why it is not shown."""
    if is_missing(r.get("effect_size")):
        return "—"
    name = {"cohen_dz": "d_z", "rank_biserial": "r_rb"}.get(r.get("effect_size_name"), r.get("effect_size_name") or "")
    effect = f"{name} = {format_cell(r['effect_size'])}"
    nonzero = r.get("n_nonzero")
    if name == "r_rb" and not is_missing(nonzero) and int(nonzero) < MIN_NONZERO_FOR_EFFECT:
        # ±1 over one or two non-zero differences among hundreds says nothing of the effect
        effect = f"— (r_rb over {int(nonzero)} of {int(r['n_pairs'])} differences, the others zero)"
    return effect


def comparison_table(c: pd.DataFrame) -> Table:
    """One row per paired test (every column; :data:`COMPACT_PAIRED` names the few the UI shows)."""
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
        ci = "—"
        if not is_missing(r.get("ci_low")):
            ci = f"[{format_cell(r['ci_low'])}, {format_cell(r['ci_high'])}]"
        p_bonf = format_p_cell(r.get("p_bonferroni"))
        if not is_missing(r.get("p_bonferroni")):
            p_bonf += f" (m={int(r['n_comparisons'])})" + (" *" if bool(r.get("significant")) else "")
        rows.append(
            [
                str(r["metric"]),
                f"{r['variant_a']} vs {r['variant_b']}",
                format_cell(int(r["n_pairs"])),
                format_cell(int(r.get("n_dropped_nan", 0) or 0)),
                format_cell(int(r.get("n_unpaired", 0) or 0)),
                format_cell(r.get("mean_a")),
                format_cell(r.get("mean_b")),
                format_cell(r.get("mean_diff")),
                ci,
                str(r.get("test") or "none"),
                format_p_cell(r.get("p_value"), int(r.get("n_comparisons") or 1)),
                p_bonf,
                _effect_cell(r),
                str(r.get("reason") or ""),
            ]
        )
    return headers, rows


def _format_amount(v: object) -> str:
    """Counts as integers with separators, other amounts with 4 significant digits."""
    if is_missing(v) or isinstance(v, (bool, np.bool_, str)) or not isinstance(v, SupportsFloat):
        return format_cell(v)
    f = float(v)
    if f.is_integer():
        return f"{int(f):,}"
    if abs(f) >= 1000:
        return f"{f:,.0f}"
    return f"{f:.4g}"


def efficiency_table(e: pd.DataFrame) -> Table:
    """One row per variant (the index), one column per efficiency measure."""
    headers = ["variant"] + [str(c) for c in e.columns]
    rows = [[str(idx)] + [_format_amount(v) for v in r] for idx, r in zip(e.index, e.itertuples(index=False))]
    return headers, rows


def table4_table(t4: pd.DataFrame) -> Table:
    """The human review's Table 4: one row per complexity (the index)."""
    headers = [t4.index.name or "complexity"] + [str(c) for c in t4.columns]
    rows = [[str(idx)] + [format_cell(v) for v in r] for idx, r in zip(t4.index, t4.itertuples(index=False))]
    return headers, rows
