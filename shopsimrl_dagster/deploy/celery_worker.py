"""The Celery app a shopsimrl Celery worker runs: Dagster's step task, broker and backend from the environment.

Start a worker (in the environment the run workers have: ``DAGSTER_HOME``, ``SHOPSIMRL_PIPELINE_CONFIG``,
the PostgreSQL and Celery variables, and the same shared runs root):

    celery -A shopsimrl_dagster.deploy.celery_worker worker --pool solo --prefetch-multiplier 1 -n w1@%h

``dagster-celery worker start -y file.yaml`` does the same but writes the broker URL into a Python
module under ``DAGSTER_HOME``; this app reads ``SHOPSIMRL_CELERY_BROKER`` / ``SHOPSIMRL_CELERY_BACKEND``
(the defaults of ``execution.celery_broker_env`` / ``celery_backend_env``; override the names with
``SHOPSIMRL_CELERY_BROKER_ENV`` / ``SHOPSIMRL_CELERY_BACKEND_ENV``) so no URL — and no password in
one — lands in a file. The queue, routing and task names are dagster-celery's own, so the run
worker's Celery executor and these workers meet on the same ``dagster`` queue.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_task

from .executors import CELERY_BACKEND_ENV, CELERY_BROKER_ENV

__all__ = ["app", "execute_plan", "broker_and_backend"]


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


_broker, _backend = broker_and_backend()
app = make_app(CeleryExecutor.for_cli(broker=_broker, backend=_backend).app_args())
"""The worker's Celery app (``-A shopsimrl_dagster.deploy.celery_worker``)."""
execute_plan = create_task(app)
"""Dagster's step task: executes one step of a run, reading the run and writing its events through the instance."""
