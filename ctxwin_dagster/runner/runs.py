"""Which document partitions need a run, launching those runs on the instance, and following
them on the console (documents done of total, the stage each running document is at, an ETA,
one line per failed document, a summary); and setting a damaged index aside to build it again
(``ctxwin run --rebuild-index VARIANT``)."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwin_dagster.runner.batches import Planned, after_failure, batch_limits, launch_order, make_batches
from ctxwin_dagster.runner.launch import TERMINAL, Launcher, stop_runs, workspace_file

if TYPE_CHECKING:
    from types import FrameType

    import dagster as dg

    from ctxwin_dagster.defs.resources import ProjectSettings

#: The home's folder of what was set aside rather than deleted (``ctxwin prune`` uses it too).
TRASH = "ctxwin_trash"

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


class _Stopped(Exception):
    """SIGTERM reached the command."""


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stopped()


def _root_message(error: Any) -> str:
    """The user's exception message under Dagster's wrappers, on one line."""
    while error is not None and getattr(error, "cause", None) is not None:
        error = error.cause
    text = (getattr(error, "message", "") or "").strip()
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
        data = entry.dagster_event.event_specific_data if entry.dagster_event else None
        return _root_message(getattr(data, "error", None)) or " ".join((entry.message or "run failed").split())
    return "run failed (no step failed; see the run in the Dagster UI)"


def materialization_metadata(instance: dg.DagsterInstance, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(asset key, metadata) of each materialization in ``run_id`` (one per document of a batch);
    the entries of a ``figures`` JSON entry (the comparison's) count as the metadata's own."""
    from dagster import DagsterEventType

    out: list[tuple[str, dict[str, Any]]] = []
    for rec in instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records:
        mat = rec.event_log_entry.asset_materialization
        if mat is not None:
            meta = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
            figures = meta.get("figures")
            out.append((mat.asset_key.to_user_string(), {**meta, **(figures if isinstance(figures, dict) else {})}))
    return out


def failed_documents(instance: dg.DagsterInstance, run_id: str) -> dict[str, str]:
    """``{doc_id: message}`` of the documents a batch run's failed step named (empty: none named)."""
    from dagster import DagsterEventType

    from ctxwin_dagster.defs.batches import FAILED_DOCUMENTS

    out: dict[str, str] = {}
    for rec in instance.get_records_for_run(run_id, of_type=DagsterEventType.STEP_FAILURE).records:
        event = rec.event_log_entry.dagster_event
        data = getattr(event.event_specific_data, "user_failure_data", None) if event is not None else None
        named = getattr((getattr(data, "metadata", None) or {}).get(FAILED_DOCUMENTS), "value", None)
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
    import logging

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


def _file_size(path: Path | None) -> int:
    """Bytes of a document's file (0 when it is gone or unreadable: its run reports that)."""
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class RunPlanner:
    """Plans, launches and follows the runs of one ``ctxwin run`` / ``ctxwin evaluate``.

    Args:
        instance: the Dagster instance of the home.
        defs: the project's definitions (code versions, asset graph, resources).
        home: the Dagster home (the daemon's log goes there).
        settings: the project settings of this command (documents and QA folders).
        run_config: the run config every run gets (resources, loggers).
        workers: runs of this command in the queue at once.
        workspace: the workspace file (default: :func:`workspace_file`).
        batch_size: documents per run (None: about two runs per worker, at most
            :data:`~ctxwin_dagster.defs.batches.MAX_DOCUMENTS_PER_RUN`; 1: a run per document).
    """

    def __init__(
        self,
        instance: dg.DagsterInstance,
        defs: dg.Definitions,
        *,
        home: Path,
        settings: ProjectSettings,
        run_config: dict[str, Any],
        workers: int,
        workspace: Path | None = None,
        batch_size: int | None = None,
    ) -> None:
        from ctxwin_dagster.backends.index.health import run_command_for
        from ctxwin_dagster.defs.staleness import StalenessChecker

        if workers < 1:
            raise SystemExit(f"ctxwin: --workers must be at least 1; got {workers}")
        if batch_size is not None and batch_size < 1:
            raise SystemExit(f"ctxwin: --batch-size must be at least 1; got {batch_size}")
        self.batch_size = batch_size
        self.instance = instance
        self.defs = defs
        self.home = home
        self.settings = settings
        self.run_config = run_config
        self.workers = workers
        self.workspace = workspace
        self.index = (defs.resources or {})["lancedb"].index()
        self.index.run_command = run_command_for(home)  # what the fix of a damaged table names
        self.checker = StalenessChecker(instance, defs.resolve_asset_graph())
        self.totals: dict[str, dict[str, float]] = {}
        self._has_questions: dict[str, bool] = {}
        self.out = sys.stdout
        self.launched: list[Planned] = []

    # ------------------------------------------------------------------ planning
    def plan(self, job_name: str, keys: list[str], *, force: bool) -> tuple[list[Planned], list[str]]:
        """(runs to launch, partitions up to date). A damaged index stops the command here,
        naming the table and the fix, before anything runs."""
        from ctxwin_dagster.backends.index.health import DamagedIndexError
        from ctxwin_dagster.defs.staleness import REASON_TAG, stale_documents

        job_keys = set(self.defs.resolve_job_def(job_name).asset_layer.executable_asset_keys)
        try:
            staleness, self._has_questions = stale_documents(
                self.instance, self.defs.resolve_asset_graph(), self.settings, self.index, job_keys, keys
            )
        except DamagedIndexError as exc:
            raise SystemExit(f"ctxwin: {exc}; nothing was run") from None
        planned: list[Planned] = []
        fresh: list[str] = []
        folder = self.settings.document_folder()
        for key in keys:
            st = staleness[key]
            if force:
                reason, label, selection = "--force", "--force", None
            elif not st.stale:
                fresh.append(key)
                continue
            else:
                closure = self.checker.downstream_closure(st.reasons, job_keys)
                reason, label, selection = st.summary(), st.label(), (None if closure == job_keys else closure)
            tags = {REASON_TAG: label[:200]}  # the console prints the longer reason
            planned.append(Planned(key, selection, reason, tags, sizes={key: _file_size(folder.path_of(key))}))
        size, budget = self._limits([p.size for p in planned])
        return launch_order(make_batches(planned, self._order(), size, budget)), fresh

    def _order(self) -> dict[str, int]:
        """Each document's place in the partitions' order (a batch is a range of it)."""
        from ctxwin_dagster.defs.partitions import DOCUMENTS_PARTITION

        return {k: i for i, k in enumerate(self.instance.get_dynamic_partitions(DOCUMENTS_PARTITION))}

    def _limits(self, sizes: list[int]) -> tuple[int, float]:
        """(documents, bytes) per run: ``--batch-size``, or :func:`batch_limits`' balance."""
        from ctxwin_dagster.defs.batches import MAX_DOCUMENTS_PER_RUN

        return batch_limits(sizes, self.workers, MAX_DOCUMENTS_PER_RUN, self.batch_size)

    def plan_comparison(self, ran_any: bool, force: bool) -> Planned | None:
        """The comparison's run, when its inputs or settings changed (or documents ran now)."""
        import dagster as dg

        from ctxwin_dagster.defs.materializations import latest_metadata
        from ctxwin_dagster.defs.partitions import DOCUMENTS_PARTITION
        from ctxwin_dagster.defs.staleness import REASON_TAG, short_reason

        key = dg.AssetKey("experiment_comparison")
        st = self.checker.check([key], None)
        reason = next(iter(st.reasons.values()), "")  # its own: code, settings, an input rematerialized since
        label = short_reason(key.to_user_string(), reason) if reason else ""
        if not reason and force:
            reason = label = "--force"
        if not reason and ran_any:
            reason, label = "documents ran now (their answers and scores are new)", "documents ran now"
        if not reason:
            recorded = set(latest_metadata(self.instance, key).get("doc_ids") or [])
            now = set(self.instance.get_dynamic_partitions(DOCUMENTS_PARTITION))
            if recorded - now:
                reason = f"documents removed since: {', '.join(sorted(recorded - now))}"
                label = f"documents removed: {len(recorded - now)}"
        if not reason:
            return None
        return Planned(None, None, reason, {REASON_TAG: label[:200]})

    def rebuild_indexes(self, job_name: str, variants: list[str]) -> Path:
        """Move each variant's table (damaged or not) into ``<home>/ctxwin_trash/<time>/lancedb/``
        and note what was moved and why in ``set_aside.json`` there; the plan that follows finds
        every document's rows of those variants missing and runs their index again. Returns the folder."""
        from ctxwin_dagster.backends.index.rows import set_aside

        job_keys = {k.to_user_string() for k in self.defs.resolve_job_def(job_name).asset_layer.executable_asset_keys}
        outside = [v for v in variants if f"{v}_index" not in job_keys]
        if outside:
            raise SystemExit(
                f"ctxwin: --rebuild-index {' '.join(outside)}: {job_name} does not build that index; "
                "use the job that does (all_assets_job, or the variant's own job)"
            )
        trash = self.home / TRASH / time.strftime("%Y%m%d-%H%M%S")
        moved = {}
        for variant in variants:
            try:
                where = set_aside(self.index, variant, trash / "lancedb")
            except Exception as exc:  # noqa: BLE001 - e.g. an object store, where a table cannot be moved
                raise SystemExit(f"ctxwin: --rebuild-index {variant}: {exc}; nothing was run") from None
            moved[variant] = [self.index.table_path(variant), str(where) if where else None]
            self.print(
                f"--rebuild-index {variant}: "
                + (f"the table was moved to {where}" if where else "there was no table")
                + f"; the {variant} index of every document is built again"
            )
        note = {"action": "rebuild-index", "variants": variants, "tables": moved, "lancedb": self.index.uri}
        if any(where for _, where in moved.values()):
            (trash / "set_aside.json").write_text(json.dumps(note, indent=2), encoding="utf-8")
        return trash

    # ------------------------------------------------------------------ running
    def run(self, job_name: str, keys: list[str], *, force: bool = False) -> int:
        started = time.perf_counter()
        planned, fresh = self.plan(job_name, keys, force=force)
        n_docs = sum(len(p.documents) for p in planned)
        in_runs = f" in {len(planned)} run{'s' if len(planned) > 1 else ''}" if len(planned) != n_docs else ""
        self.print(
            f"{n_docs} of {len(keys)} documents to run{in_runs} ({len(fresh)} up to date, skipped)"
            + ("; --force" if force else "")
        )
        self._print_reasons(planned)
        if planned:
            self.preflight()
        failed: list[str] = []
        workspace = self.workspace or workspace_file(self.home)
        if not workspace.is_file():
            raise SystemExit(f"ctxwin: no workspace file {workspace}")
        launcher: Launcher | None = None
        try:
            previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
        except ValueError:  # not the main thread (a test calling the CLI): SIGTERM keeps its handler
            previous = None
        try:
            if planned:
                launcher = self._launcher(workspace)
                failed += self._follow(launcher, job_name, planned, len(keys))
            if job_name == "all_assets_job" and len(keys) > len(failed):
                comparison = self._comparison(keys, bool(planned), force)
                if comparison is not None:
                    launcher = launcher or self._launcher(workspace)
                    failed += self._follow(launcher, "comparison_job", [comparison], 1, label="experiment_comparison")
        except (KeyboardInterrupt, _Stopped):
            active = [p.run_id for p in self.launched if p.run_id and not p.status]
            stopped = stop_runs(self.instance, active)
            self.print(f"\nstopped: {len(stopped)} unfinished run(s) canceled or terminated")
            return 130
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            if launcher is not None:
                launcher.__exit__(None, None, None)
        ok = [d for p in self.launched if p.status == "SUCCESS" and p.partition is not None for d in p.documents]
        from ctxwin_dagster.core.experiment import default_home, home_experiment

        name = home_experiment(self.home).name
        ui = "ctxwin dev" if name == "sample" else f"ctxwin dev {name}"
        if Path(self.home).resolve() != default_home(name).resolve():
            ui += f" --dagster-home {self.home}"
        self.print(
            f"\nSummary ({time.perf_counter() - started:.1f}s; {len(ok)} ran, {len(fresh)} up to date, {len(failed)} failed; "
            f"the runs are in the Dagster UI: {ui}):"
        )
        for asset, agg in self.totals.items():
            shown = ", ".join(
                f"{k}={v:,.3f}" if isinstance(v, float) and not v.is_integer() else f"{k}={int(v):,}"
                for k, v in agg.items()
            )
            self.print(f"  {asset:<22} {shown}")
        if failed:
            self.print(
                f"failed: {', '.join(failed)} (the messages are above; tracebacks in the runs' logs in the Dagster UI)"
            )
        return 1 if failed else 0

    def _print_reasons(self, planned: list[Planned], most: int = 20) -> None:
        """Why each document runs: one line per document, or per reason when there are many."""
        docs = [(d, p.reason) for p in planned for d in p.documents]
        if len(docs) <= most:
            for doc, reason in docs:
                self.print(f"  {doc}: {reason}")
            return
        by_reason: dict[str, list[str]] = {}
        for doc, reason in docs:
            by_reason.setdefault(reason, []).append(doc)
        for reason, names in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            self.print(f"  {len(names)} documents ({shown}): {reason}")

    def _comparison(self, keys: list[str], ran_any: bool, force: bool) -> Planned | None:
        """The comparison's run, or None (up to date, or no questions to compare)."""
        if not any(self._has_questions.get(k) for k in keys):
            self.print(f"experiment_comparison: no questions in {self.settings.qa_dir} for these documents; skipped")
            return None
        comparison = self.plan_comparison(ran_any, force)
        self.print(f"experiment_comparison: {comparison.reason if comparison else 'up to date, skipped'}")
        return comparison

    def _launcher(self, workspace: Path) -> Launcher:
        from ctxwin_dagster.backends.chat.local_model import is_local_model
        from ctxwin_dagster.backends.embeddings.server import served_models

        models = served_models(self._resource_config("embeddings"))
        chat = [model.strip() for _, model, _, _ in self.endpoints() if is_local_model(model)]
        return Launcher(
            self.instance, workspace, log=self.home / "ctxwin-daemon.log", embedding_models=models, chat_models=chat
        ).__enter__()

    def _resource_config(self, key: str) -> dict[str, Any]:
        """A resource's settings for these runs: the code location's defaults and the run config."""
        overrides = self.run_config.get("resources") or {}
        default = (self.defs.resources or {}).get(key)
        values = {n: getattr(default, n, None) for n in getattr(type(default), "model_fields", {})}
        return {**values, **((overrides.get(key) or {}).get("config") or {})}

    def endpoints(self) -> list[tuple[str, str, str | None, str | None]]:
        """(role, model, base_url, api_key) of every model endpoint the runs would call."""
        import os

        conf = self._resource_config

        def key_of(value: Any) -> str | None:
            if isinstance(value, dict) and "env" in value:
                return os.environ.get(value["env"])
            return getattr(value, "get_value", lambda: value)() if value else None

        out = []
        for role in ("contextualizer", "answerer"):
            c = conf(role)
            if (c.get("model") or "").strip():
                out.append((role, c["model"], c.get("base_url") or None, key_of(c.get("api_key"))))
        judge = conf("judge")
        if (judge.get("model") or "").strip():
            out.append(
                (
                    "judge",
                    judge["model"],
                    judge.get("base_url") or None,
                    os.environ.get(judge.get("api_key_env") or "OPENAI_API_KEY"),
                )
            )
        emb = conf("embeddings")
        if emb.get("provider") == "openai":
            out.append(("embeddings", emb["model"], emb.get("base_url") or None, key_of(emb.get("api_key"))))
        return out

    def preflight(self) -> None:
        """Check each configured endpoint once; stop with that one error before any run."""
        from ctxwin_dagster.backends.planning.preflight import EndpointError, check_endpoint

        seen = set()
        for role, model, base_url, api_key in self.endpoints():
            if (model, base_url) in seen:
                continue
            seen.add((model, base_url))
            try:
                self.print(f"checked {check_endpoint(role, model, base_url, api_key)}")
            except EndpointError as exc:
                raise SystemExit(f"ctxwin: {exc}; nothing was run") from None

    def print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _follow(
        self, launcher: Launcher, job_name: str, planned: list[Planned], total: int, *, label: str = ""
    ) -> list[str]:
        """Keep ``workers`` runs in flight until every planned run ended; returns the failed
        documents (or ``label`` for the unpartitioned run). A batch that fails is followed by
        its other documents again and each failed document alone (:func:`after_failure`)."""
        graph = self.defs.resolve_asset_graph()
        job_keys = set(self.defs.resolve_job_def(job_name).asset_layer.executable_asset_keys)
        for p in planned:
            p.steps = len(p.selection) if p.selection is not None else len(job_keys)
        pending = list(planned)
        runs = list(planned)  # every run of this call, those that follow failed batches included
        active: list[Planned] = []
        failed: list[str] = []
        n_docs = sum(len(p.documents) for p in planned) or len(planned)
        done = 0
        began = time.perf_counter()
        last_report = 0.0
        note = ""
        while pending or active:
            while pending and len(active) < self.workers:
                p = pending.pop(0)
                checks = None
                if p.selection is not None:
                    checks = [c for c in graph.asset_check_keys if c.asset_key in p.selection]
                p.request = launcher.submit(
                    job_name,
                    partition=p.partition_for_run,
                    run_config=self.run_config,
                    tags=p.tags,
                    asset_selection=p.selection,
                    asset_check_selection=checks,
                )
                p.submitted = time.perf_counter()
                self.launched.append(p)
                p.steps = len(p.selection) if p.selection is not None else len(job_keys)
                active.append(p)
            if not note:
                note = launcher.ensure_daemon()
                self.print(note)
            time.sleep(0.5)
            changed = False
            for p in list(active):
                status = launcher.status(p.request)
                p.run_id = launcher.run_ids.get(p.request, "")  # found by status() above
                if status not in TERMINAL:
                    stage = status.lower()
                    if status == "STARTED":
                        stage, p.steps_done = current_stage(self.instance, p.run_id)
                        warnings, p.log_cursor = run_warnings(self.instance, p.run_id, p.log_cursor)
                        for line in warnings:  # e.g. the retries of a model server that does not answer
                            self.print(f"  {p.name or label}: {line}")
                    changed |= stage != p.stage
                    p.stage = stage
                    continue
                active.remove(p)
                p.status, p.finished, p.steps_done = status, time.perf_counter(), p.steps
                if status != "SUCCESS" and len(p.documents) > 1 and status != "CANCELED":
                    named = failed_documents(self.instance, p.run_id)
                    following = after_failure(p, named, self._order(), len(p.documents))
                    pending[:0] = following
                    runs += following
                    why = "; ".join(f"{d}: {m}" for d, m in named.items()) or failure_message(self.instance, p.run_id)
                    alone = [f.name for f in following if not named or f.documents[0] in named]
                    again = [f.name for f in following if f.name not in alone]
                    self.print(
                        f"  {p.name}: a document failed ({why}); "
                        + (f"run again without it: {', '.join(again)}; " if again else "")
                        + f"each alone: {', '.join(alone)}"
                    )
                    continue
                done += max(1, len(p.documents))
                name = p.name or label
                if status == "SUCCESS":
                    self._add_totals(p.run_id)
                    self.print(f"[{done}/{n_docs}] {name}: ok in {p.finished - p.submitted:.1f}s")
                else:
                    failed.extend(p.documents or [name])
                    self.print(f"[{done}/{n_docs}] {name}: FAILED: {failure_message(self.instance, p.run_id)}")
            now = time.perf_counter()
            if active and (changed and now - last_report > 2 or now - last_report > 15):
                last_report = now
                steps_done = sum(p.steps_done for p in runs)
                steps_left = sum(p.steps for p in runs) - steps_done
                eta = (
                    f"ETA {_duration((now - began) * steps_left / steps_done)}"
                    if steps_done
                    else "ETA after the first step"
                )
                stages = ", ".join(f"{p.name or label} {p.stage or 'queued'}" for p in active[:4])
                more = f" and {len(active) - 4} more" if len(active) > 4 else ""
                self.print(
                    f"  {done}/{n_docs} done ({total - n_docs} up to date), {_duration(now - began)} elapsed, {eta}; "
                    f"running: {stages}{more}"
                )
            if not launcher.daemon_running() and any(p.stage in ("requested", "queued") for p in active):
                self.print(launcher.ensure_daemon())
        return failed

    def _add_totals(self, run_id: str) -> None:
        for asset, meta in materialization_metadata(self.instance, run_id):
            agg = self.totals.setdefault(asset, {})
            for name in SUMMARY_FIELDS:
                value = meta.get(name)
                if isinstance(value, int | float):
                    agg[name] = agg.get(name, 0) + value
