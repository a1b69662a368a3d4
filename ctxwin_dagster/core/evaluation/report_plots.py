"""The comparison report's plots, drawn with matplotlib's object API (no global backend, no
display): the quality means per variant with their confidence intervals, and one bar chart per
efficiency measure."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ctxwin_dagster.core.evaluation.report_tables import is_missing, ordered_unique

__all__ = ["efficiency_panels", "efficiency_plot", "quality_plot"]


def quality_plot(q: pd.DataFrame, path: Path, title: str) -> bool:
    """Write the metric means per variant, with CI error bars, to ``path`` (PNG); False when
    no mean is known (nothing written)."""
    from matplotlib.figure import Figure

    q = q[~q["mean"].map(is_missing)]
    if q.empty:
        return False
    variants = ordered_unique(list(q["variant"]))
    metrics = ordered_unique(list(q["metric"]))
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
                hi.append(0.0)
                continue
            r = sel.iloc[0]
            mean = float(r["mean"])
            means.append(mean)
            lo.append(max(0.0, mean - float(r["ci_low"])) if not is_missing(r["ci_low"]) else 0.0)
            hi.append(max(0.0, float(r["ci_high"]) - mean) if not is_missing(r["ci_high"]) else 0.0)
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


def efficiency_plot(e: pd.DataFrame, path: Path, title: str) -> bool:
    """Write one bar chart per efficiency measure (log scale for character counts) to ``path``
    (PNG); False when there is no measure to draw (nothing written)."""
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
