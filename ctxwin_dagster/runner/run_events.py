"""What a launched run's events say, for the console of ``ctxwin run``: the message of its
failure, the documents a failed batch named, the step it is at, the warnings it logged, and the
figures its materializations recorded (summed per asset for the summary)."""

from __future__ import annotations

import logging
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


def current_stage(instance: dg.DagsterInstance, run_id: str) -> tuple[str, int]:
    """(the step the run started last, how many steps it finished)."""
    from dagster import DagsterEventType

    recs = instance.get_records_for_run(run_id, of_type=DagsterEventType.STEP_START, limit=1, ascending=False).records
    done = len(instance.get_records_for_run(run_id, of_type=DagsterEventType.STEP_SUCCESS).records)
    event = recs[0].event_log_entry.dagster_event if recs else None
    return ((event.step_key or "") if event is not None else "", done)


def run_warnings(instance: dg.DagsterInstance, run_id: str, cursor: str | None) -> tuple[list[str], str | None]:
    """The messages logged at WARNING or above in the run (a model call being retried, a step's
    warning) after ``cursor``, as ``step: message``, and the cursor after them."""

    def level(value: str | int) -> int:  # Dagster keeps a level as its number or its name
        return value if isinstance(value, int) else logging.getLevelNamesMapping().get(value.upper(), 0)

    got = instance.get_records_for_run(run_id, cursor=cursor)
    lines = [
        f"{e.step_key or 'run'}: {e.user_message}"
        for e in (r.event_log_entry for r in got.records)
        if not e.is_dagster_event
        and level(e.level) >= logging.WARNING
        and not e.user_message.startswith("Dependencies for step")  # a step skipped after a failure: said once
    ]
    return lines, got.cursor or cursor
