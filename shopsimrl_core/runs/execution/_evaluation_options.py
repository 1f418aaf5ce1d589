"""What one evaluation invocation takes and gives back: ``EvaluationOptions`` in, ``RunResult`` out.

Promise: ``EvaluationOptions`` holds every per-invocation setting of ``arun_evaluation`` (none of
them is part of the plan) with the defaults of ``shopsimrl run CONFIG`` without flags, and
``from_kwargs`` applies the legacy keyword arguments on top, refusing unknown ones; ``RunResult``
describes what a finished or interrupted run left on disk and its exit code (runtime-semantics §5.1);
``RunTerminated`` is the ``KeyboardInterrupt`` of a clean SIGTERM shutdown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: `shopsimrl run` does not import httpx
    import httpx

    from shopsimrl_core.documents._runs import EvalSummary, SummaryCounts
    from shopsimrl_core.runs.endpoints._preflight import PreflightReport
    from shopsimrl_core.runs.execution._progress import ProgressEvent
    from shopsimrl_core.runs.planning._plan import EvalPlan
    from shopsimrl_core.runs.storage._store import RunStore

__all__ = ["EvaluationOptions", "RunResult", "RunTerminated", "EpisodeFunction"]

EpisodeFunction = Callable[..., Awaitable[dict[str, Any]]]
"""``async (job, *, model, env, prompt, skills, settings) -> trace record`` (``run_episode``'s shape)."""


class RunTerminated(KeyboardInterrupt):
    """The run was stopped by SIGTERM and shut down cleanly (the CLI exits 143)."""


@dataclass
class EvaluationOptions:
    """Per-invocation settings of :func:`arun_evaluation` (none of them is part of the plan).

    The defaults are what ``shopsimrl run CONFIG`` does without flags.
    """

    allow_test_split: bool = False
    """Opt in to a guarded test split for this invocation (``--allow-test-split``)."""
    allow_test_rerun: bool = False
    """Acknowledge a rerun of this checkpoint+skills on the test split (``--allow-test-rerun``)."""
    overwrite: bool = False
    """Archive the existing run directory's files into ``superseded/`` and start fresh."""
    resume: bool | None = None
    """None: the YAML's ``experiment.resume``."""
    max_attempts: int | None = None
    """Attempts per episode in this invocation; None: ``experiment.max_episode_retries + 1``."""
    progress: Callable[[ProgressEvent], Any] | None = None
    """Listener of progress events (kinds ``start``, ``wave``, ``attempt``, ``notice``, ``finish``)."""
    model_transport: httpx.AsyncBaseTransport | None = None
    """httpx seam of the model client (tests)."""
    env_transport: httpx.AsyncBaseTransport | None = None
    """httpx seam of the environment client (tests)."""
    opt_in_source: str = "cli"
    """Who opted in to a guarded split (recorded in the ledger)."""
    environment_exclusive: bool | None = None
    """This run owns the environment server(s): the start frees every slot with ``release_all``
    (docs/runs.md#leases). None: the config's ``environment.exclusive``."""
    episode_fn: EpisodeFunction | None = None
    """Replaces ``run_episode`` (tests)."""
    on_start: Callable[[EvalPlan, RunStore, bool], Any] | None = None
    """Called once the run directory is set up, with ``(plan, store, resumed)``."""
    skill_provider: Any | None = None
    """Per-episode skill assignments of a gate (runtime-semantics §16)."""
    plan_blocks: dict[str, Any] | None = None
    """Extra semantic plan blocks of a gate."""
    only_failed: bool = False
    """Attempt only episodes whose latest stored record failed (``run --only-failed``)."""
    preflight: bool | None = None
    """Check environment and model before anything is written; None: on unless *episode_fn* is given."""
    probe_seed: bool = False
    """Probe seed reproduction first (``run --probe-seed``)."""
    resilience: bool | None = None
    """Outage gate and backoff between an episode's attempts; None: on unless *episode_fn* is given."""

    @classmethod
    def from_kwargs(cls, options: EvaluationOptions | None, kwargs: dict[str, Any]) -> EvaluationOptions:
        """*options* (or the defaults) with the legacy keyword arguments applied on top.

        Raises:
            TypeError: an unknown keyword.
        """
        base = options if options is not None else cls()
        if not kwargs:
            return base
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"arun_evaluation() got unexpected keyword argument(s) {unknown}; valid: {sorted(known)}")
        return dataclasses.replace(base, **kwargs)


@dataclass
class RunResult:
    """What a finished (or interrupted) evaluation left behind."""

    run_dir: Path
    summary: EvalSummary
    """The run's summary document (``summary.json`` is its ``to_json()``)."""
    counts: SummaryCounts
    """``summary.counts``."""
    summary_path: Path
    traces_path: Path
    manifest_path: Path
    invocation_id: str
    resumed: bool
    attempts: int
    interrupted: bool = False
    warnings: list[str] = field(default_factory=list)
    preflight: PreflightReport | None = None
    """What this invocation's preflight saw (``/healthz``, the served models, the probe); None when it
    ran without one (a custom ``episode_fn``, ``preflight=False``). Callers show it rather than asking
    the servers again."""

    @property
    def exit_code(self) -> int:
        """§5.1: 1 when some planned episode is not complete, else 0."""
        return 1 if self.counts.failed > 0 or self.counts.completed < self.counts.requested else 0
