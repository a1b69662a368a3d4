"""Runs that carry many documents: each step of a run works through every document of the run.

A run is a process that imports Dagster, LanceDB and the model clients and opens the instance:
seconds of CPU before any work (``benchmarks/bench_runs.py workers --cpu``). Paid once per
document, that start is most of the cost of a corpus of small documents; paid once per batch of
documents, it is shared. Dagster's own means for this are a run over a *range* of partitions (the
run tags ``dagster/asset_partition_range_start`` and ``…_end``) and, for backfills from the UI
and the declarative automation, a :class:`~dagster.BackfillPolicy` that puts up to
:data:`MAX_DOCUMENTS_PER_RUN` partitions in each run. This module makes the per-document assets
serve such runs:

* :func:`document_asset` declares a per-document asset (partitioned by document, its body
  wrapped in :func:`per_document`).
* :func:`per_document` wraps an asset body written for one document (it reads
  ``context.partition_key`` and one document's inputs). In a run of one partition the body runs
  as it is. In a run of several, it runs once per document, with that document's inputs and a
  context whose ``partition_key`` is that document; each document's metadata is recorded on that
  document's materialization (``add_asset_metadata(partition_key=…)``), and the asset checks
  are summed over the documents (which documents failed a check, and their figures).
* A document whose body raises does not stop the others: every document of the step is worked
  through, then the step fails with :class:`~dagster.Failure` naming each failed document and its
  error, with ``{doc_id: message}`` in its metadata (:data:`FAILED_DOCUMENTS`). Dagster cannot
  record a step as done for some partitions and failed for others, so ``ctxwin run`` launches
  the batch's other documents again without the failed ones (their work is in the content-keyed
  caches) and each failed document in a run of its own, so that the failure is its partition's
  alone.
* A run that ``ctxwin run`` did not launch (the UI, a backfill, the automation) is tagged at its
  first step with the reason ``ctxwin run`` would have given it
  (:func:`ctxwin_dagster.defs.automation.tag_run_reason`).
* :class:`DocumentsIOManager` is Dagster's pickling filesystem IO manager (same files, same
  folder: ``<DAGSTER_HOME>/storage/<asset>/<doc_id>``) that also stores an output of several
  partitions, one file per document.

Example::

    >>> failure = failed_documents_error({"x": ValueError("x.txt is empty; add text")}, total=3)
    >>> failure.description
    '1 of 3 documents failed: x: ValueError: x.txt is empty; add text'
    >>> failure.metadata[FAILED_DOCUMENTS].value
    {'x': 'ValueError: x.txt is empty; add text'}
"""

from __future__ import annotations

import functools
import inspect
import json
import pickle
import traceback
from collections.abc import Callable, Mapping, Sequence, Set

import dagster as dg
from upath import UPath

from ctxwin_dagster.defs.automation import tag_run_reason
from ctxwin_dagster.defs.partitions import documents_partitions

__all__ = [
    "FAILED_DOCUMENTS",
    "MAX_DOCUMENTS_PER_RUN",
    "DocumentsIOManager",
    "document_asset",
    "documents_backfill_policy",
    "failed_documents_error",
    "per_document",
]

#: The most documents one run carries (a backfill from the UI, the automation, ``ctxwin run``).
MAX_DOCUMENTS_PER_RUN = 50
#: The metadata entry of a batch step's failure: ``{doc_id: "ErrorType: message"}``.
FAILED_DOCUMENTS = "failed_documents"

#: Backfills and the declarative automation put up to MAX_DOCUMENTS_PER_RUN documents in a run.
documents_backfill_policy = dg.BackfillPolicy.multi_run(max_partitions_per_run=MAX_DOCUMENTS_PER_RUN)


class _OneDocument:
    """The asset's context as one document of a batch sees it: its ``partition_key`` is that
    document; everything else is the step's own context."""

    def __init__(self, context: dg.AssetExecutionContext, key: str) -> None:
        self._context = context
        self._key = key

    @property
    def partition_key(self) -> str:
        return self._key

    @property
    def partition_keys(self) -> list[str]:
        return [self._key]

    def __getattr__(self, name: str) -> object:
        return getattr(self._context, name)


def failed_documents_error(failed: Mapping[str, BaseException], *, total: int) -> dg.Failure:
    """The failure of a batch step: each failed document with its error, on one line each."""
    messages = {key: " ".join(f"{type(exc).__name__}: {exc}".split()) for key, exc in failed.items()}
    return dg.Failure(
        description=f"{len(failed)} of {total} documents failed: "
        + "; ".join(f"{k}: {m}" for k, m in messages.items()),
        metadata={FAILED_DOCUMENTS: dg.MetadataValue.json(messages)},
    )


def _plain(value: object) -> object:
    """A metadata value as JSON can hold it."""
    raw = value.value if isinstance(value, dg.MetadataValue) else value
    try:
        json.dumps(raw)
    except (TypeError, ValueError):
        return str(raw)
    return raw


def _merged_checks(by_document: Mapping[str, Sequence[dg.AssetCheckResult]]) -> list[dg.AssetCheckResult]:
    """One result per check over the batch: passed when it passed for every document; the
    documents that failed it and their figures in its metadata."""
    by_name: dict[str, list[tuple[str, dg.AssetCheckResult]]] = {}
    for key, results in by_document.items():
        for result in results:
            by_name.setdefault(result.check_name or "", []).append((key, result))
    merged = []
    for name, items in by_name.items():
        failing = [(k, r) for k, r in items if not r.passed]
        severity = (
            dg.AssetCheckSeverity.ERROR
            if any(r.severity == dg.AssetCheckSeverity.ERROR for _, r in failing)
            else items[0][1].severity
        )
        metadata: dict[str, dg.MetadataValue | str | int] = {
            "documents": len(items),
            "failing_documents": ", ".join(k for k, _ in failing) or "none",
        }
        shown = failing or items[:1]  # the failing documents' figures, or one document's as an example
        metadata["by_document"] = dg.MetadataValue.json(
            {k: {m: _plain(v) for m, v in (r.metadata or {}).items()} for k, r in shown[:20]}
        )
        merged.append(dg.AssetCheckResult(check_name=name, passed=not failing, severity=severity, metadata=metadata))
    return merged


def per_document(fn: Callable[..., dg.MaterializeResult]) -> Callable[..., dg.MaterializeResult]:
    """An asset body for one document, made to serve a run of one or many (see the module docstring).

    ``fn(context, **inputs_and_resources)`` returns a :class:`~dagster.MaterializeResult` for one
    document. Dagster reads the signature of ``fn``, so inputs and resources are declared as
    before; the inputs' annotations are dropped from what Dagster sees (in a run of several
    documents an input is ``{doc_id: value}``, checked per document by ``fn``'s own code).
    """

    @functools.wraps(fn)
    def run(context: dg.AssetExecutionContext, **kwargs: object) -> dg.MaterializeResult:
        tag_run_reason(context)  # a run from the UI or the automation gets the reason ctxwin run gives its own
        # A run of one partition (the UI, a direct call in a test) is the body as it is; only a
        # run over a range lists its documents (listing reads the instance's partitions).
        if not context.has_partition_key_range:
            return fn(context, **kwargs)
        keys = list(context.partition_keys)
        if len(keys) <= 1:
            return fn(context, **kwargs)
        inputs = set(context.assets_def.keys_by_input_name)
        results: dict[str, dg.MaterializeResult] = {}
        failed: dict[str, BaseException] = {}
        for key in keys:
            one = {name: (_of_document(value, key) if name in inputs else value) for name, value in kwargs.items()}
            try:
                results[key] = fn(_OneDocument(context, key), **one)
            except Exception as exc:  # noqa: BLE001 - one document's error must not stop the others
                failed[key] = exc
                context.log.error(f"{key}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        if failed:
            raise failed_documents_error(failed, total=len(keys))
        for key, result in results.items():
            if result.metadata:
                context.add_asset_metadata(dict(result.metadata), partition_key=key)
        checks = {key: list(result.check_results or []) for key, result in results.items()}
        return dg.MaterializeResult(
            value={key: result.value for key, result in results.items()},
            check_results=_merged_checks(checks) if any(checks.values()) else None,
        )

    signature = inspect.signature(fn, eval_str=True)
    kept = [
        p if i == 0 or _is_resource(p.annotation) else p.replace(annotation=inspect.Parameter.empty)
        for i, p in enumerate(signature.parameters.values())
    ]
    run.__signature__ = signature.replace(parameters=kept)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in kept if p.annotation is not inspect.Parameter.empty} | {
        "return": signature.return_annotation
    }
    return run


def document_asset(
    *,
    group_name: str,
    code_version: str,
    description: str,
    kinds: Set[str] = frozenset({"python"}),
    name: str | None = None,
    ins: Mapping[str, dg.AssetIn] | None = None,
    deps: Sequence[str] | None = None,
    checks: Mapping[str, str] | None = None,
    automation_condition: dg.AutomationCondition | None = None,
) -> Callable[[Callable[..., dg.MaterializeResult]], dg.AssetsDefinition]:
    """A per-document asset: one partition per document, its body written for one document and
    run for each document of a run (:func:`per_document`); ``checks`` are its asset checks (name:
    description), the other arguments :func:`dagster.asset`'s."""

    def declare(fn: Callable[..., dg.MaterializeResult]) -> dg.AssetsDefinition:
        asset = name or fn.__name__
        specs = [dg.AssetCheckSpec(c, asset=asset, description=text) for c, text in checks.items()] if checks else None
        return dg.asset(
            name=name,
            ins=ins,
            deps=deps,
            partitions_def=documents_partitions,
            group_name=group_name,
            kinds=set(kinds),
            code_version=code_version,
            description=description,
            check_specs=specs,
            automation_condition=automation_condition,
        )(per_document(fn))

    return declare


def _of_document(value: object, key: str) -> object:
    """The value of one document of an input of several (``{doc_id: value}``)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"an input of a run of several documents is {{doc_id: value}}; got {type(value).__name__}")
    return value[key]


def _is_resource(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, dg.ConfigurableResource)


class _PickleFiles(dg.UPathIOManager):
    """Pickled outputs, one file per asset partition (Dagster's ``fs_io_manager`` layout)."""

    extension = ""  # as Dagster's own: the files of runs made before this IO manager are read as they are

    def __init__(self, base_dir: str) -> None:
        self.root = UPath(base_dir)
        super().__init__(base_path=self.root)

    def dump_to_path(self, context: dg.OutputContext, obj: object, path: UPath) -> None:
        with path.open("wb") as fh:
            pickle.dump(obj, fh, pickle.HIGHEST_PROTOCOL)

    def load_from_path(self, context: dg.InputContext, path: UPath) -> object:
        with path.open("rb") as fh:
            return pickle.load(fh)

    def handle_output(self, context: dg.OutputContext, obj: object) -> None:
        keys = list(context.asset_partition_keys) if context.has_asset_partitions else []
        if len(keys) <= 1:
            return super().handle_output(context, obj)
        if not isinstance(obj, Mapping) or set(obj) != set(keys):
            raise TypeError(
                f"{context.asset_key.to_user_string()}: a run of {len(keys)} documents must give one value per "
                "document ({doc_id: value}); wrap the asset's body in ctxwin_dagster.defs.batches.per_document"
            )
        folder = self.root / self.get_asset_relative_path(context)
        for key in keys:
            path = self.get_path_for_partition(context, folder, key)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.dump_to_path(context, obj[key], path)
        return None


class DocumentsIOManager(dg.ConfigurableIOManagerFactory):
    """Pickled asset values in the Dagster home's storage folder, one file per document, for runs
    of one document or many (see the module docstring)."""

    base_dir: str | None = None

    def create_io_manager(self, context: dg.InitResourceContext) -> _PickleFiles:
        base = self.base_dir or (context.instance.storage_directory() if context.instance else None)
        if base is None:
            raise dg.DagsterInvariantViolationError("DocumentsIOManager needs base_dir outside a Dagster instance")
        return _PickleFiles(base)
