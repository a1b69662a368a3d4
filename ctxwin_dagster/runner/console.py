"""The lines ``ctxwin run`` prints while it follows its runs: why each document runs, the progress
with an ETA, a failed batch and the runs that follow it, and the summary at the end.

Example::

    >>> duration(75.4)
    '1m15s'
    >>> reason_lines([Planned("a", None, "new document"), Planned("b", None, "document changed")])
    ['  a: new document', '  b: document changed']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ctxwin_dagster.runner.batches import Planned


def duration(seconds: float) -> str:
    """Seconds as the console says them: ``42s``, ``3m05s``."""
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def reason_lines(planned: Sequence[Planned], most: int = 20) -> list[str]:
    """Why each document runs: one line per document, or per reason when there are many."""
    docs = [(d, p.reason) for p in planned for d in p.documents]
    if len(docs) <= most:
        return [f"  {doc}: {reason}" for doc, reason in docs]
    by_reason: dict[str, list[str]] = {}
    for doc, reason in docs:
        by_reason.setdefault(reason, []).append(doc)
    lines = []
    for reason, names in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        lines.append(f"  {len(names)} documents ({shown}): {reason}")
    return lines


def failed_batch_line(batch: Planned, named: Mapping[str, str], why: str, following: Sequence[Planned]) -> str:
    """A batch that failed and why (``named``: the documents its failure named), and the runs
    that follow it."""
    alone = [f.name for f in following if not named or f.documents[0] in named]
    again = [f.name for f in following if f.name not in alone]
    return (
        f"  {batch.name}: a document failed ({why}); "
        + (f"run again without it: {', '.join(again)}; " if again else "")
        + f"each alone: {', '.join(alone)}"
    )


def progress_line(
    done: int, n_docs: int, total: int, elapsed: float, runs: Sequence[Planned], active: Sequence[Planned], label: str
) -> str:
    """Documents done of those to run, time elapsed, an ETA by the steps done, and what runs now."""
    steps_done = sum(p.steps_done for p in runs)
    steps_left = sum(p.steps for p in runs) - steps_done
    eta = f"ETA {duration(elapsed * steps_left / steps_done)}" if steps_done else "ETA after the first step"
    stages = ", ".join(f"{p.name or label} {p.stage or 'queued'}" for p in active[:4])
    more = f" and {len(active) - 4} more" if len(active) > 4 else ""
    return (
        f"  {done}/{n_docs} done ({total - n_docs} up to date), {duration(elapsed)} elapsed, {eta}; "
        f"running: {stages}{more}"
    )


def ui_command(home: Path) -> str:
    """The command that opens the Dagster UI of the home's experiment."""
    from ctxwin_dagster.core.experiment import default_home, home_experiment

    name = home_experiment(home).name
    ui = "ctxwin dev" if name == "sample" else f"ctxwin dev {name}"
    if Path(home).resolve() != default_home(name).resolve():
        ui += f" --dagster-home {home}"
    return ui


def summary_lines(
    elapsed: float, ok: int, fresh: int, failed: Sequence[str], ui: str, totals: Mapping[str, Mapping[str, float]]
) -> list[str]:
    """The summary: what ran, the figures summed per asset, and the documents that failed."""
    lines = [
        f"\nSummary ({elapsed:.1f}s; {ok} ran, {fresh} up to date, {len(failed)} failed; "
        f"the runs are in the Dagster UI: {ui}):"
    ]
    for asset, agg in totals.items():
        shown = ", ".join(
            f"{k}={v:,.3f}" if isinstance(v, float) and not v.is_integer() else f"{k}={int(v):,}"
            for k, v in agg.items()
        )
        lines.append(f"  {asset:<22} {shown}")
    if failed:
        lines.append(
            f"failed: {', '.join(failed)} (the messages are above; tracebacks in the runs' logs in the Dagster UI)"
        )
    return lines
