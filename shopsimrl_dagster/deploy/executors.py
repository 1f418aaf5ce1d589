"""Which executor the evaluation jobs run their steps with (the ``execution:`` pipeline settings section).

    execution:
      executor: in_process          # default: every step in the run worker's process
    # or, for evaluations spread over Celery workers (docs/scaling.md):
    execution:
      executor: celery
      celery_broker_env: SHOPSIMRL_CELERY_BROKER    # names of env vars, never the URLs themselves
      celery_backend_env: SHOPSIMRL_CELERY_BACKEND

The broker and result-backend URLs may carry passwords, so the settings name the environment
variables that hold them; Dagster reads them (``StringSource`` ``{"env": …}``) in the run worker
when the run starts, and the workers read the same variables (``deploy.celery_worker``). Neither
URL is written to the run config, the instance folder or a log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    import dagster as dg

__all__ = ["CELERY_BROKER_ENV", "CELERY_BACKEND_ENV", "ExecutionSettings", "evaluation_executor"]

CELERY_BROKER_ENV = "SHOPSIMRL_CELERY_BROKER"
CELERY_BACKEND_ENV = "SHOPSIMRL_CELERY_BACKEND"


class ExecutionSettings(BaseModel):
    """How the steps of an evaluation run execute."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    executor: Literal["in_process", "celery"] = "in_process"
    """``in_process``: the run worker executes the chain itself (lowest overhead on one machine);
    ``celery``: every step is a Celery task picked up by whichever worker is free."""
    celery_broker_env: str = Field(default=CELERY_BROKER_ENV, min_length=1)
    """Environment variable holding the Celery broker URL (e.g. ``redis://host:6379/0``)."""
    celery_backend_env: str = Field(default=CELERY_BACKEND_ENV, min_length=1)
    """Environment variable holding the Celery result-backend URL (e.g. ``redis://host:6379/1``)."""


def evaluation_executor(execution: ExecutionSettings) -> dg.ExecutorDefinition:
    """The executor definition for *execution*.

    Dagster's in-process executor, or its Celery executor configured to read broker and backend from
    the environment variables the settings name.

    Raises:
        ConfigError: ``executor: celery`` but dagster-celery is not installed (the fix names the extra).
    """
    import dagster as dg

    if execution.executor == "in_process":
        return dg.in_process_executor
    try:
        from dagster_celery import celery_executor
    except ImportError:
        from shopsimrl_core import ConfigError

        raise ConfigError(
            "execution.executor: celery needs dagster-celery; install it with `pip install -e '.[scale]'`",
            code="pipeline-config-invalid",
        ) from None
    return celery_executor.configured(
        {"broker": {"env": execution.celery_broker_env}, "backend": {"env": execution.celery_backend_env}},
        name="celery",
    )
