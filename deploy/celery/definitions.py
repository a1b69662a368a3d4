"""ctxwin's definitions with every step run as a Celery task (dagster-celery's executor).

The same assets, jobs, resources, sensors and schedules as ``ctxwin_dagster.definitions``, for
the experiment of ``$DAGSTER_HOME`` (its ``ctxwin_experiment.json``); only the executor differs.
Its broker and result backend come from the environment (``CTXWIN_CELERY_BROKER``,
``CTXWIN_CELERY_BACKEND``, e.g. ``redis://redis:6379/0`` and ``redis://redis:6379/1``), so runs
started by ``ctxwin run``, the sensors or the UI need no run config. The workers read the same
variables through ``deploy/celery/celery.yaml``.

Load it with ``deploy/celery/workspace.yaml``. A worker loads this same code to run each step it
is sent (the run names it by file path, or as the module ``deploy.celery.definitions`` with the
repository as working directory), so the repository sits at the same path on every worker.

Proved by ``tests/defs/test_celery_executor.py``: a document partition of ``all_assets_job`` through
this executor with a Redis broker, its steps shared by two ``dagster-celery worker`` processes,
with the same index rows, answers and scores as the default in-process executor.
"""

import dagster as dg
from dagster_celery import celery_executor

from ctxwin_dagster.definitions import home_definitions

#: dagster-celery's executor with its broker and backend read from the environment of the run.
executor = celery_executor.configured(
    {"broker": {"env": "CTXWIN_CELERY_BROKER"}, "backend": {"env": "CTXWIN_CELERY_BACKEND"}},
    name="ctxwin_celery_executor",
)

defs = home_definitions(executor=executor)


def all_assets_job() -> dg.JobDefinition:
    """The per-document job with the Celery executor, for ``dagster.reconstructable`` (a script
    or a test that runs it with ``dagster.execute_job``)."""
    return defs.resolve_job_def("all_assets_job")
