"""Which document partitions need a run, launching those runs on the instance, and following
them on the console (documents done of total, the stage each running document is at, an ETA,
one line per failed document, a summary: :mod:`.console`, from the runs' events:
:mod:`.run_events`); and setting a damaged index aside to build it again
(``ctxwin run --rebuild-index VARIANT``)."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ctxwin_dagster.core.json_types import JSONValue
from ctxwin_dagster.runner.batches import Planned, after_failure, batch_limits, launch_order, make_batches
from ctxwin_dagster.runner.console import (
    failed_batch_line,
    progress_line,
    reason_lines,
    summary_lines,
    ui_command,
)
from ctxwin_dagster.runner.endpoints import Endpoint, model_endpoints, preflight, resource_config
from ctxwin_dagster.runner.home_setup import workspace_file
from ctxwin_dagster.runner.launch import TERMINAL, Launcher, stop_runs
from ctxwin_dagster.runner.run_events import add_totals, failed_documents, failure_message, run_log_news

if TYPE_CHECKING:
    from types import FrameType

    import dagster as dg

    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
    from ctxwin_dagster.defs.resources import ProjectSettings
    from ctxwin_dagster.defs.staleness import StalenessChecker

#: The home's folder of what was set aside rather than deleted (``ctxwin prune`` uses it too).
TRASH = "ctxwin_trash"


class _Stopped(Exception):
    """SIGTERM reached the command."""


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stopped()


def _file_size(path: Path | None) -> int:
    """Bytes of a document's file (0 when it is gone or unreadable: its run reports that)."""
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


@dataclass(eq=False)
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

    instance: dg.DagsterInstance
    defs: dg.Definitions
    _: KW_ONLY
    home: Path
    settings: ProjectSettings
    run_config: Mapping[str, JSONValue]
    workers: int
    workspace: Path | None = None
    batch_size: int | None = None
    index: ChunkIndex = field(init=False)
    checker: StalenessChecker = field(init=False)
    totals: dict[str, dict[str, float]] = field(init=False, default_factory=dict)
    _has_questions: dict[str, bool] = field(init=False, default_factory=dict)
    out: TextIO = field(init=False, default_factory=lambda: sys.stdout)
    launched: list[Planned] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        from ctxwin_dagster.backends.index.health import run_command_for
        from ctxwin_dagster.defs.staleness import StalenessChecker

        if self.workers < 1:
            raise SystemExit(f"ctxwin: --workers must be at least 1; got {self.workers}")
        if self.batch_size is not None and self.batch_size < 1:
            raise SystemExit(f"ctxwin: --batch-size must be at least 1; got {self.batch_size}")
        self.index = (self.defs.resources or {})["lancedb"].index()
        self.index.run_command = run_command_for(self.home)  # what the fix of a damaged table names
        self.checker = StalenessChecker(self.instance, self.defs.resolve_asset_graph())

    # ------------------------------------------------------------------ planning
    def plan(self, job_name: str, keys: list[str], *, force: bool) -> tuple[list[Planned], list[str]]:
        """(runs to launch, partitions up to date). A damaged index stops the command here,
        naming the table and the fix, before anything runs."""
        from ctxwin_dagster.backends.index.health import DamagedIndexError
        from ctxwin_dagster.defs.run_reasons import REASON_TAG
        from ctxwin_dagster.defs.staleness import stale_documents

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
        from ctxwin_dagster.defs.run_reasons import REASON_TAG, short_reason

        key = dg.AssetKey("experiment_comparison")
        st = self.checker.check([key], None)
        reason = next(iter(st.reasons.values()), "")  # its own: code, settings, an input rematerialized since
        label = short_reason(key.to_user_string(), reason) if reason else ""
        if not reason and force:
            reason = label = "--force"
        if not reason and ran_any:
            reason, label = "documents ran now (their answers and scores are new)", "documents ran now"
        if not reason:
            doc_ids = latest_metadata(self.instance, key).get("doc_ids")
            recorded = {str(d) for d in doc_ids} if isinstance(doc_ids, list) else set()
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
        moved: dict[str, list[str | None]] = {}
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
        for line in reason_lines(planned):
            self.print(line)
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
        ui = ui_command(self.home)
        for line in summary_lines(time.perf_counter() - started, len(ok), len(fresh), failed, ui, self.totals):
            self.print(line)
        return 1 if failed else 0

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

        models = served_models(resource_config(self.defs, self.run_config, "embeddings"))
        chat = [model.strip() for _, model, _, _ in self.endpoints() if is_local_model(model)]
        return Launcher(
            self.instance, workspace, log=self.home / "ctxwin-daemon.log", embedding_models=models, chat_models=chat
        ).__enter__()

    def endpoints(self) -> list[Endpoint]:
        """(role, model, base_url, api_key) of every model endpoint the runs would call."""
        return model_endpoints(self.defs, self.run_config)

    def preflight(self) -> None:
        """Check each configured endpoint once; stop with that one error before any run."""
        preflight(self.endpoints(), self.print)

    def print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _follow(
        self, launcher: Launcher, job_name: str, planned: list[Planned], total: int, *, label: str = ""
    ) -> list[str]:
        """Keep ``workers`` runs in flight until every planned run ended; returns the failed
        documents (or ``label`` for the unpartitioned run). A batch that fails is followed by
        its other documents again and each failed document alone (:func:`after_failure`)."""
        graph = self.defs.resolve_asset_graph()
        job_size = len(set(self.defs.resolve_job_def(job_name).asset_layer.executable_asset_keys))
        for p in planned:
            p.steps = len(p.selection) if p.selection is not None else job_size
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
                self._submit(launcher, job_name, p, checks)
                p.steps = len(p.selection) if p.selection is not None else job_size
                active.append(p)
            if not note:
                note = launcher.ensure_daemon()
                self.print(note)
            # a short command ends soon after its runs; a long one asks the instance less often
            time.sleep(0.5 if time.perf_counter() - began < 10 else 1.0)
            changed = False
            statuses = launcher.statuses([p.request for p in active])
            for p in list(active):
                status = statuses[p.request]
                p.run_id = launcher.run_ids.get(p.request, "")  # found by statuses() above
                if status not in TERMINAL:
                    changed |= self._note_stage(p, status, label)
                    continue
                active.remove(p)
                p.status, p.finished, p.steps_done = status, time.perf_counter(), p.steps
                if status != "SUCCESS" and len(p.documents) > 1 and status != "CANCELED":
                    following = self._after_failed_batch(p)
                    pending[:0] = following
                    runs += following
                    continue
                done += max(1, len(p.documents))
                failed += self._ended(p, status, f"[{done}/{n_docs}]", p.name or label)
            now = time.perf_counter()
            if active and (changed and now - last_report > 2 or now - last_report > 15):
                last_report = now
                self.print(progress_line(done, n_docs, total, now - began, runs, active, label))
            if not launcher.daemon_running() and any(p.stage in ("requested", "queued") for p in active):
                self.print(launcher.ensure_daemon())
        return failed

    def _submit(self, launcher: Launcher, job_name: str, p: Planned, checks: list[dg.AssetCheckKey] | None) -> None:
        """Ask for the run of ``p`` (its assets and their ``checks``, or the whole job)."""
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

    def _note_stage(self, p: Planned, status: str, label: str) -> bool:
        """Note the stage of a run that has not ended, printing the warnings its log gained (e.g.
        the retries of a model server that does not answer); whether its stage changed."""
        stage = status.lower()
        if status == "STARTED":
            news = run_log_news(self.instance, p.run_id, p.log_cursor)
            p.log_cursor, p.steps_done = news.cursor, p.steps_done + news.finished
            p.step = news.started or p.step
            stage = p.step
            for line in news.warnings:
                self.print(f"  {p.name or label}: {line}")
        changed = stage != p.stage
        p.stage = stage
        return changed

    def _after_failed_batch(self, p: Planned) -> list[Planned]:
        """The runs that follow the failed batch ``p`` (:func:`after_failure`), said on the console."""
        named = failed_documents(self.instance, p.run_id)
        following = after_failure(p, named, self._order(), len(p.documents))
        why = "; ".join(f"{d}: {m}" for d, m in named.items()) or failure_message(self.instance, p.run_id)
        self.print(failed_batch_line(p, named, why, following))
        return following

    def _ended(self, p: Planned, status: str, place: str, name: str) -> list[str]:
        """Say how the run ``p`` ended (``place``: documents done of total) and add up its
        figures; returns its documents (or ``name``) when it failed."""
        if status == "SUCCESS":
            add_totals(self.totals, self.instance, p.run_id)
            self.print(f"{place} {name}: ok in {p.finished - p.submitted:.1f}s")
            return []
        self.print(f"{place} {name}: FAILED: {failure_message(self.instance, p.run_id)}")
        return p.documents or [name]
