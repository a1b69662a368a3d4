"""What a launched run's events say, for the console of ``ctxwin run``: the message of its
failure, the documents a failed batch named, the step it is at, the warnings it logged, and the
figures its materializations recorded (summed per asset for the summary)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ctxwin_dagster.defs.materializations import plain_metadata

if TYPE_CHECKING:
    import dagster as dg

#: Materialization metadata summed per asset for the summary.
SUMMARY_FIELDS = (
    "n_chunks",
    "n_rows",
    "n_chars",
    "n_tokens",
    "input_tokens",
    "input_chars",
    "calls",
    "cache_hits",
    "cost_usd",
    "paid_usd",
    "runtime_s",
)


class _ErrorInfo(Protocol):
    """The error Dagster records with a failed step or run, and the error that caused it."""

    @property
    def message(self) -> str: ...

    @property
    def cause(self) -> _ErrorInfo | None: ...


def _root_message(error: _ErrorInfo | None) -> str:
    """The user's exception message under Dagster's wrappers, on one line."""
    while error is not None and error.cause is not None:
        error = error.cause
    text = ((error.message if error is not None else "") or "").strip()
    return " ".join(text.split())


def failure_message(instance: dg.DagsterInstance, run_id: str) -> str:
    """``step: message`` of the run's first failed step (or of the run's failure)."""
    from dagster import DagsterEventType

    steps = instance.get_records_for_run(run_id, of_type=DagsterEventType.STEP_FAILURE, limit=1).records
    if steps:
        event = steps[0].event_log_entry.dagster_event
        if event is not None:
            return f"{event.step_key}: {_root_message(event.step_failure_data.error)}"
    runs = instance.get_records_for_run(run_id, of_type=DagsterEventType.RUN_FAILURE, limit=1).records
    if runs:
        entry = runs[0].event_log_entry
        data = entry.dagster_event.job_failure_data if entry.dagster_event else None
        error = data.error if data is not None else None
        return _root_message(error) or " ".join((entry.message or "run failed").split())
    return "run failed (no step failed; see the run in the Dagster UI)"


def materialization_metadata(instance: dg.DagsterInstance, run_id: str) -> list[tuple[str, dict[str, object]]]:
    """(asset key, metadata) of each materialization in ``run_id`` (one per document of a batch);
    the entries of a ``figures`` JSON entry (the comparison's) count as the metadata's own."""
    from dagster import DagsterEventType

    out: list[tuple[str, dict[str, object]]] = []
    for rec in instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records:
        mat = rec.event_log_entry.asset_materialization
        if mat is not None:
            meta = plain_metadata(mat.metadata)
            figures = meta.get("figures")
            out.append((mat.asset_key.to_user_string(), {**meta, **(figures if isinstance(figures, dict) else {})}))
    return out


def add_totals(totals: dict[str, dict[str, float]], instance: dg.DagsterInstance, run_id: str) -> None:
    """Add the :data:`SUMMARY_FIELDS` of the run's materializations to ``totals`` (per asset)."""
    for asset, meta in materialization_metadata(instance, run_id):
        agg = totals.setdefault(asset, {})
        for name in SUMMARY_FIELDS:
            value = meta.get(name)
            if isinstance(value, int | float):
                agg[name] = agg.get(name, 0) + value


def failed_documents(instance: dg.DagsterInstance, run_id: str) -> dict[str, str]:
    """``{doc_id: message}`` of the documents a batch run's failed step named (empty: none named)."""
    from dagster import DagsterEventType

    from ctxwin_dagster.defs.batches import FAILED_DOCUMENTS

    out: dict[str, str] = {}
    for rec in instance.get_records_for_run(run_id, of_type=DagsterEventType.STEP_FAILURE).records:
        event = rec.event_log_entry.dagster_event
        data = event.step_failure_data.user_failure_data if event is not None else None
        named = plain_metadata(data.metadata or {}).get(FAILED_DOCUMENTS) if data is not None else None
        if isinstance(named, dict):
            out.update({str(k): str(v) for k, v in named.items()})
    return out


@dataclass(frozen=True)
class RunLogNews:
    """What a run's log gained after a cursor (:func:`run_log_news`)."""

    started: str  # the step started last among the new events ("": none started)
    finished: int  # how many steps succeeded among them
    warnings: list[str]  # the messages logged at WARNING or above, as ``step: message``
    cursor: str | None  # where the log was read up to


def run_log_news(instance: dg.DagsterInstance, run_id: str, cursor: str | None) -> RunLogNews:
    """The events of ``run_id`` after ``cursor``, read once: the step it started last, the steps
    it finished, and the messages it logged at WARNING or above (a model call being retried, a
    step's warning). The console of ``ctxwin run`` asks this of every run in flight each second,
    so it is one query of the new events only (with SQLite each query opens the run's database)."""
    from dagster import DagsterEventType

    def level(value: str | int) -> int:  # Dagster keeps a level as its number or its name
        return value if isinstance(value, int) else logging.getLevelNamesMapping().get(value.upper(), 0)

    got = instance.get_records_for_run(run_id, cursor=cursor)
    started, finished, warnings = "", 0, []
    for entry in (r.event_log_entry for r in got.records):
        event = entry.dagster_event
        if event is not None:
            if event.event_type == DagsterEventType.STEP_START:
                started = event.step_key or ""
            elif event.event_type == DagsterEventType.STEP_SUCCESS:
                finished += 1
        elif level(entry.level) >= logging.WARNING and not entry.user_message.startswith("Dependencies for step"):
            # (a step skipped after a failure is said once, by the failure)
            warnings.append(f"{entry.step_key or 'run'}: {entry.user_message}")
    return RunLogNews(started, finished, warnings, got.cursor or cursor)
