"""The Celery app a shopsimrl Celery worker runs: guarded step tasks, broker and backend from the environment.

Start a worker (in the environment the run workers have: ``DAGSTER_HOME``, ``SHOPSIMRL_PIPELINE_CONFIG``,
the PostgreSQL and Celery variables, and the same shared runs root):

    celery -A shopsimrl_dagster.deploy.celery_worker worker --pool solo --prefetch-multiplier 1 -n w1@%h

``--pool solo`` (or prefork): a step runs in the worker's main thread, where its guard can stop it
(``deploy.celery_steps``); the threads pool is refused. ``dagster-celery worker start -y file.yaml``
would write the broker URL into a Python module under ``DAGSTER_HOME``; this app reads
``SHOPSIMRL_CELERY_BROKER`` / ``SHOPSIMRL_CELERY_BACKEND`` (the defaults of
``execution.celery_broker_env`` / ``celery_backend_env``; override the names with
``SHOPSIMRL_CELERY_BROKER_ENV`` / ``SHOPSIMRL_CELERY_BACKEND_ENV``) so no URL — and no password in
one — lands in a file. The Celery settings (late acknowledgement, visibility timeout …) are those of
the pipeline settings' ``execution`` section (``SHOPSIMRL_PIPELINE_CONFIG``), the same the run
workers' executor uses. The queue and routing are dagster-celery's own, so run workers and these
workers meet on the ``dagster`` queue; Dagster's own ``execute_plan`` task stays registered too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_task

from .celery_steps import register_step_task
from .executors import CELERY_BACKEND_ENV, CELERY_BROKER_ENV, ExecutionSettings, celery_config_source

__all__ = ["app", "execute_plan", "execute_step", "broker_and_backend", "worker_execution_settings"]


def broker_and_backend(environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """The broker and result-backend URLs from the environment.

    Raises:
        SystemExit: a variable is unset or empty (one line naming it and the fix).
    """
    broker_env = environ.get("SHOPSIMRL_CELERY_BROKER_ENV") or CELERY_BROKER_ENV
    backend_env = environ.get("SHOPSIMRL_CELERY_BACKEND_ENV") or CELERY_BACKEND_ENV
    values = []
    for name in (broker_env, backend_env):
        value = environ.get(name, "").strip()
        if not value:
            raise SystemExit(
                f"celery worker: environment variable {name} is not set; export the URL the "
                f"pipeline's execution settings name (e.g. redis://127.0.0.1:6379/0), see docs/scaling.md"
            )
        values.append(value)
    return values[0], values[1]


def worker_execution_settings() -> ExecutionSettings:
    """The ``execution`` section of the pipeline settings in use (defaults when the file cannot be read).

    Raises:
        SystemExit: the settings file exists but is invalid (its one-line message).
    """
    from shopsimrl_core import ShopSimRLError

    from ..settings import load_pipeline_settings, pipeline_config_path

    path = pipeline_config_path()
    if not path.is_file():
        return ExecutionSettings()
    try:
        return load_pipeline_settings(path).execution
    except ShopSimRLError as exc:
        raise SystemExit(f"celery worker: {exc.one_line()}") from None


_broker, _backend = broker_and_backend()
app = make_app(CeleryExecutor.for_cli(broker=_broker, backend=_backend,
                                      config_source=celery_config_source(worker_execution_settings())).app_args())
"""The worker's Celery app (``-A shopsimrl_dagster.deploy.celery_worker``)."""
execute_plan = create_task(app)
"""Dagster's own step task (unguarded; kept for runs submitted by plain ``celery_executor``)."""
execute_step = register_step_task(app)
"""The guarded step task every evaluation step is sent as (``deploy.celery_steps``)."""
