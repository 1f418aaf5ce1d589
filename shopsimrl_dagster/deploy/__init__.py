"""Deployment beyond one machine: a PostgreSQL-backed Dagster instance and the Celery executor.

- ``shopsimrl_dagster.deploy.executors``: the ``execution:`` section of the pipeline settings
  (``ExecutionSettings``) and the executor the evaluation jobs run with (in-process by default,
  Dagster's Celery executor when ``execution.executor: celery``).
- ``shopsimrl_dagster.deploy.instance``: ``prepare_postgres_home`` writes an instance folder whose
  ``dagster.yaml`` is the project's template plus ``configs/pipeline/dagster-postgres.yaml`` (run,
  event-log and schedule storage in PostgreSQL, connection settings read from environment variables).
- ``shopsimrl_dagster.deploy.celery_worker``: the Celery app the workers run
  (``celery -A shopsimrl_dagster.deploy.celery_worker worker``), broker and backend from environment variables.

Nothing here is imported by the code location unless ``execution.executor`` asks for it, so the
laptop default (SQLite instance, in-process executor) needs neither dagster-postgres nor dagster-celery.
docs/scaling.md explains the whole setup, including the Kubernetes path.
"""

# Submodules are imported by name (``shopsimrl_dagster.settings`` imports ``deploy.executors`` for
# the ``execution:`` section), so this package imports nothing itself: no import cycle, no cost.
