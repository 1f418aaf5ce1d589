"""Which executor the evaluation jobs run their steps with (the ``execution:`` pipeline settings section).

    execution:
      executor: in_process          # default: every step in the run worker's process
    # or, for evaluations spread over Celery workers (docs/scaling.md):
    execution:
      executor: celery
      celery_broker_env: SHOPSIMRL_CELERY_BROKER    # names of env vars, never the URLs themselves
      celery_backend_env: SHOPSIMRL_CELERY_BACKEND
      step_heartbeat_seconds: 2                     # a running step's heartbeat and run-status check
      step_lost_after_seconds: 30                   # no heartbeat this long: the worker is lost, re-run the step
    # or, on Kubernetes, every step of an evaluation in its own pod (dagster-k8s, deploy/helm/):
    execution:
      executor: k8s_job
      k8s: {job_namespace: shopsimrl, step_k8s_config: {...}}   # dagster-k8s's k8s_job_executor config

The broker and result-backend URLs may carry passwords, so the settings name the environment
variables that hold them; Dagster reads them (``StringSource`` ``{"env": …}``) in the run worker
when the run starts, and the workers read the same variables (``deploy.celery_worker``). Neither
URL is written to the run config, the instance folder or a log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    import dagster as dg

__all__ = [
    "CELERY_BROKER_ENV",
    "CELERY_BACKEND_ENV",
    "ExecutionSettings",
    "celery_config_source",
    "evaluation_executor",
]

CELERY_BROKER_ENV = "SHOPSIMRL_CELERY_BROKER"
CELERY_BACKEND_ENV = "SHOPSIMRL_CELERY_BACKEND"


class ExecutionSettings(BaseModel):
    """How the steps of an evaluation run execute."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    executor: Literal["in_process", "celery", "k8s_job"] = "in_process"
    """``in_process``: the run worker executes the chain itself (lowest overhead on one machine);
    ``celery``: every step is a Celery task picked up by whichever worker is free;
    ``k8s_job``: every step is a Kubernetes Job (dagster-k8s ``k8s_job_executor``, with ``K8sRunLauncher``)."""
    celery_broker_env: str = Field(default=CELERY_BROKER_ENV, min_length=1)
    """Environment variable holding the Celery broker URL (e.g. ``redis://host:6379/0``)."""
    celery_backend_env: str = Field(default=CELERY_BACKEND_ENV, min_length=1)
    """Environment variable holding the Celery result-backend URL (e.g. ``redis://host:6379/1``)."""
    step_heartbeat_seconds: float = Field(default=2.0, gt=0, le=60)
    """Celery: seconds between a running step's heartbeats, which are also its run-status checks: a step
    whose run was marked failed stops within about this long (docs/scaling.md)."""
    step_lost_after_seconds: float = Field(default=30.0, gt=0)
    """Celery: a started step whose heartbeat has not moved this long lost its worker; the run worker
    submits it again (bound: this + one heartbeat + 1 s, plus the wait for a free worker)."""
    step_max_resubmits: int = Field(default=3, ge=0)
    """Celery: resubmissions of one step after lost workers before the step fails."""
    celery_visibility_timeout_seconds: int = Field(default=86_400, ge=60)
    """Celery (Redis broker): seconds before the broker redelivers an unacknowledged task. Must exceed the
    longest step: a running step older than this is delivered again (and the copy dropped by the guard)."""
    k8s: dict[str, Any] = Field(default_factory=dict)
    """``k8s_job``: the config of dagster-k8s's ``k8s_job_executor`` (``job_namespace``, ``step_k8s_config``,
    ``env_secrets``, ``max_concurrent`` …), validated by Dagster when the definitions load."""

    @model_validator(mode="after")
    def _lost_after_exceeds_heartbeats(self) -> ExecutionSettings:
        if self.step_lost_after_seconds < 3 * self.step_heartbeat_seconds:
            raise ValueError("step_lost_after_seconds must be at least 3 x step_heartbeat_seconds "
                             f"(got {self.step_lost_after_seconds} and {self.step_heartbeat_seconds})")
        return self


def celery_config_source(execution: ExecutionSettings) -> dict[str, Any]:
    """Celery settings shared by the run worker's executor and the workers (``deploy.celery_worker``).

    Late acknowledgement with a prefetch of one: a busy worker holds exactly the task it runs, never a
    second one it would take down with it; a prefork child that dies is rejected and requeued at once
    (``task_reject_on_worker_lost``). A whole worker lost (SIGKILL, node gone) is handled by the step
    heartbeats (``deploy.celery_steps``), not by the visibility timeout, which must exceed the longest step.
    """
    from dagster_celery.defaults import broker_transport_options

    return {
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_track_started": True,
        "worker_prefetch_multiplier": 1,
        "broker_transport_options": {
            **broker_transport_options,
            "visibility_timeout": execution.celery_visibility_timeout_seconds,
        },
        "result_backend_transport_options": {"visibility_timeout": execution.celery_visibility_timeout_seconds},
    }


def evaluation_executor(execution: ExecutionSettings) -> dg.ExecutorDefinition:
    """The executor definition for *execution*.

    Dagster's in-process executor; the guarded Celery executor (``deploy.celery_steps``: Dagster's
    Celery loop plus step heartbeats, resubmission after a lost worker and fencing of steps whose run
    finished) reading broker and backend from the environment variables the settings name; or
    dagster-k8s's ``k8s_job_executor`` configured with ``execution.k8s``.

    Raises:
        ConfigError: the executor's package is not installed (the fix names the extra).
    """
    import dagster as dg

    if execution.executor == "in_process":
        return dg.in_process_executor
    if execution.executor == "k8s_job":
        try:
            from dagster_k8s import k8s_job_executor  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise _missing("k8s_job", "dagster-k8s", "k8s") from None
        # Validated now, by Dagster's own config system, so a bad key fails loading the definitions
        # (`dg check defs`) rather than the first run.
        from dagster._config import process_config  # private: Dagster exports no config validation by schema

        checked = process_config(k8s_job_executor.config_schema.config_type, dict(execution.k8s))
        if not checked.success:
            from shopsimrl_core import ConfigError

            errors = "; ".join(error.message for error in checked.errors or [])
            raise ConfigError(f"execution.k8s: {errors}", code="pipeline-config-invalid")
        return k8s_job_executor.configured(dict(execution.k8s), name="k8s_job")
    try:
        import dagster_celery  # noqa: F401
    except ImportError:
        raise _missing("celery", "dagster-celery", "scale") from None
    from .celery_steps import guarded_celery_executor

    return guarded_celery_executor().configured(
        {
            "broker": {"env": execution.celery_broker_env},
            "backend": {"env": execution.celery_backend_env},
            "config_source": celery_config_source(execution),
            "heartbeat_seconds": execution.step_heartbeat_seconds,
            "lost_after_seconds": execution.step_lost_after_seconds,
            "max_resubmits": execution.step_max_resubmits,
        },
        name="celery",
    )


def _missing(executor: str, package: str, extra: str) -> Exception:
    from shopsimrl_core import ConfigError

    return ConfigError(
        f"execution.executor: {executor} needs {package}; install it with `pip install -e '.[{extra}]'`",
        code="pipeline-config-invalid",
    )
