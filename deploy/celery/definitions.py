"""ctxwin's definitions with every step run as a Celery task (dagster-celery's executor).

The same assets, jobs, resources, sensors and schedules as ``ctxwin_dagster.definitions``; only
the executor differs. Load it with ``deploy/celery/workspace.yaml``.
"""

from dagster_celery import celery_executor

from ctxwin_dagster.definitions import build_definitions

defs = build_definitions(executor=celery_executor)
