"""The evaluator: plan → guard → run directory → episodes in waves → summary (runtime spec §5.1, §6, §22).

Episodes run on one asyncio event loop, at most ``experiment.concurrency`` in flight (a fixed pool
of workers), against ONE pooled model client and ONE pooled environment client for the whole run.
Every finished attempt is appended to ``traces.jsonl`` synchronously on the loop, so a cancelled
run (Ctrl-C) never leaves a half-written line: in-flight episodes release their leases, the
clients close, a summary of what exists is written and the lock is released.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from shopsimrl_core.runs._config import EvalConfig
from shopsimrl_core.runs._dotenv import apply_dotenv
from shopsimrl_core._errors import ConfigError, TestSplitGuardError
from shopsimrl_core.runs._jobs import EpisodeJob
from shopsimrl_core.runs._plan import EvalPlan, build_plan
from shopsimrl_core.runs._progress import ProgressEvent, ProgressTracker
from shopsimrl_core.runs._store import RunStore, TestAccessLedger
from shopsimrl_core.episode._trace import evaluator_boundary_record, is_complete, utc_now
from shopsimrl_core.analysis._summary import summarize_run

__all__ = ["RunResult", "run_evaluation", "arun_evaluation", "EpisodeFunction", "check_test_access", "boundary_record"]

EpisodeFunction = Callable[..., Awaitable[dict[str, Any]]]
"""``async (job, *, model, env, prompt, skills, settings) -> trace record`` (``run_episode``'s shape)."""


@dataclass
class RunResult:
    """What a finished (or interrupted) evaluation left behind."""

    run_dir: Path
    summary: dict[str, Any]
    counts: dict[str, Any]
    summary_path: Path
    traces_path: Path
    manifest_path: Path
    invocation_id: str
    resumed: bool
    attempts: int
    interrupted: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """§5.1: 1 when some planned episode is not complete, else 0."""
        return 1 if self.counts.get("failed", 0) > 0 or self.counts.get("completed", 0) < self.counts.get("requested", 0) else 0


def _new_invocation_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]


def boundary_record(job: EpisodeJob, exc: BaseException) -> dict[str, Any]:
    """The synthetic failed record stored when the episode function itself raises (§6.7, §12.3)."""
    return evaluator_boundary_record(job.to_dict(), job.episode_id, exc)


def _ledger_key(plan: EvalPlan) -> str:
    return plan.config.model.checkpoint_id or plan.config.model_id


def check_test_access(plan: EvalPlan, *, allow_test_split: bool, allow_test_rerun: bool = False) -> None:
    """Refuse a guarded split without the per-invocation opt-in (§22.6). Reads only; writes nothing.

    Raises:
        TestSplitGuardError: code ``test-split-not-opted-in`` (no ``--allow-test-split``) or
            ``test-split-rerun`` (this checkpoint and skills already ran on the test split
            elsewhere; needs ``--allow-test-rerun``).
    """
    if not plan.guarded:
        return
    label = plan.config.source_label
    if not allow_test_split:
        raise TestSplitGuardError(
            f"{label}: tasks.split: {plan.split.name!r} is a guarded test split (role {plan.split.role!r}); "
            "final test numbers must not drive selection — pass --allow-test-split on the command line (it cannot be set in YAML)",
            code="test-split-not-opted-in",
        )
    ledger = TestAccessLedger(plan.config.test_access_ledger_path)
    prior = ledger.prior_runs(
        checkpoint=_ledger_key(plan), skills=plan.skills.identity, run_dir=str(plan.run_dir), plan_fingerprint=plan.fingerprint
    )
    if prior and not allow_test_rerun:
        last = prior[-1]
        raise TestSplitGuardError(
            f"{label}: checkpoint {_ledger_key(plan)!r} with these skills already ran on the test split "
            f"({len(prior)} earlier run(s), last {last.get('at')} in {last.get('run_dir')}); pass --allow-test-rerun to run it again",
            code="test-split-rerun",
        )


def _check_api_key(config: EvalConfig) -> None:
    name = config.model.api_key_env
    if name is not None and not os.environ.get(name):
        raise ConfigError(
            f"{config.source_label}: model.api_key_env: environment variable {name} is not set; "
            "export it, put it in the experiment.dotenv file, or set model.api_key_env: null for endpoints without auth",
            code="api-key-missing",
        )


def _make_settings(plan: EvalPlan) -> Any:
    from shopsimrl_core.episode._runtime import EpisodeSettings

    return EpisodeSettings(
        max_steps=plan.config.runtime.max_steps,
        persona=plan.persona,
        model_identity=plan.model_identity,
        environment_identity=plan.environment_identity,
        prompt_identity=dict(plan.prompt.identity),
        skills_identity=dict(plan.skills.identity),
        runtime=plan.runtime_identity,
    )


async def arun_evaluation(
    config: EvalConfig,
    *,
    allow_test_split: bool = False,
    allow_test_rerun: bool = False,
    overwrite: bool = False,
    resume: bool | None = None,
    max_attempts: int | None = None,
    progress: Callable[[ProgressEvent], Any] | None = None,
    model_transport: httpx.AsyncBaseTransport | None = None,
    env_transport: httpx.AsyncBaseTransport | None = None,
    opt_in_source: str = "cli",
    episode_fn: EpisodeFunction | None = None,
    on_start: Callable[[EvalPlan, RunStore, bool], Any] | None = None,
    skill_provider: Any | None = None,
    plan_blocks: dict[str, Any] | None = None,
    only_failed: bool = False,
    preflight: bool | None = None,
    probe_seed: bool = False,
) -> RunResult:
    """Run (or resume) the evaluation described by *config* and write its summary.

    Promises:
      - refusals happen before any model or environment call; a test-split refusal writes nothing;
      - the run directory is locked for the whole invocation (a second runner fails at once);
      - every attempt is one fsynced line in ``traces.jsonl`` with ``attempt: {number, invocation_id}``;
      - an episode is attempted at most *max_attempts* times in this invocation (default
        ``experiment.max_episode_retries + 1``) and, if set, until ``experiment.max_total_attempts``
        lines exist for it;
      - on cancellation in-flight episodes release their leases and nothing is half-written.

    *resume* (None = the YAML's ``experiment.resume``) and *max_attempts* are per-invocation
    execution settings. *only_failed* (``run --only-failed``, §22.3) attempts only episodes whose
    latest stored record failed, leaving never-attempted ones alone. *preflight* (default: on
    unless *episode_fn* is given) checks ``GET /healthz`` of the environment after the directory
    checks and before anything is written, so an unreachable server is a refusal, not hundreds of
    failed attempts. *probe_seed* (``run --probe-seed``, §22.10) sends one seeded request twice
    before anything is written and records ``seed_honoured`` in ``manifest.execution`` (new runs)
    and in the invocation line. *episode_fn* replaces ``run_episode`` (tests); *model_transport* and
    *env_transport* are the httpx seams.

    Raises:
        TestSplitGuardError: guarded split without *allow_test_split* (or a rerun without
            *allow_test_rerun*).
        ConfigError: bad split/prompt/skills, missing API key variable, ``resume`` false on a
            non-empty directory.
        FingerprintMismatch: the directory belongs to another semantic plan.
        RunLockedError: another process holds the run directory.
    """
    plan = build_plan(config)
    if skill_provider is not None or plan_blocks:
        # Gates (SKILLS, spec §16) inject per-episode assignments and add their block to the plan.
        from shopsimrl_core._hashing import fingerprint as _fingerprint

        if skill_provider is not None:
            plan.skills = skill_provider
        plan.semantic = {**plan.semantic, "skills": dict(plan.skills.identity), **(plan_blocks or {})}
        plan.fingerprint = _fingerprint(plan.semantic)
    check_test_access(plan, allow_test_split=allow_test_split, allow_test_rerun=allow_test_rerun)
    resume_flag = config.experiment.resume if resume is None else resume
    attempts_cap = max_attempts if max_attempts is not None else config.experiment.attempts_per_invocation
    if attempts_cap < 1:
        raise ConfigError(f"max_attempts must be >= 1 (got {attempts_cap}); pass a positive number", code="config-invalid")
    total_cap = config.experiment.max_total_attempts
    if config.dotenv_path is not None:
        apply_dotenv(config.dotenv_path)
    _check_api_key(config)

    invocation_id = _new_invocation_id()
    store = RunStore(plan.run_dir)
    run_dir_existed = plan.run_dir.exists()
    store.acquire_lock(invocation_id)
    try:
        archived: Path | None = None
        try:
            mode = "new" if overwrite else store.check_resumable(plan.semantic, plan.fingerprint, resume=resume_flag)
            if only_failed and mode == "new":
                # retry-failed reruns a stored run's failures; it never starts a run (§22.3).
                raise ConfigError(
                    f"{plan.run_dir}: nothing to retry: the run directory holds no run of this plan; use `shopsimrl run` first",
                    code="nothing-to-retry",
                )
            if (episode_fn is None) if preflight is None else preflight:
                await _preflight_environment(plan, env_transport)
            if episode_fn is None:
                from shopsimrl_core.runs._seed_probe import check_seed_width

                await check_seed_width(plan, transport=model_transport)
            if probe_seed:
                from shopsimrl_core.runs._seed_probe import probe_seed as _probe_seed

                probe = await _probe_seed(plan, transport=model_transport)
                plan.execution = {**plan.execution, "seed_honoured": probe["seed_honoured"], "seed_probe": probe}
            if overwrite:
                archived = store.archive_existing()
        except BaseException:
            if not run_dir_existed:
                store.release_lock()
                _remove_empty_run_dir(plan.run_dir)
            raise
        resumed = mode == "resume"
        test_access = None
        if plan.guarded:
            test_access = {
                "opted_in": True,
                "source": opt_in_source,
                "invocation_id": invocation_id,
                "at": utc_now(),
                "rerun_acknowledged": allow_test_rerun,
            }
        if not resumed:
            store.write_manifest(
                plan.semantic,
                plan.fingerprint,
                {**plan.execution, "invocation_id": invocation_id},
                extra={"test_access": test_access} if test_access else None,
            )
        store.append_invocation(
            {
                "invocation_id": invocation_id,
                "started_at": utc_now(),
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "mode": "resume" if resumed else "new",
                "plan_fingerprint": plan.fingerprint,
                "execution": plan.execution,
                "max_attempts": attempts_cap,
                "archived_previous": None if archived is None else str(archived),
                "lock_takeover": store.lock_takeover,
                "test_access": test_access,
            }
        )
        if plan.guarded:
            TestAccessLedger(config.test_access_ledger_path).append(
                {
                    "at": utc_now(),
                    "plan_fingerprint": plan.fingerprint,
                    "split": plan.split_identity,
                    "checkpoint": _ledger_key(plan),
                    "checkpoint_id": config.model.checkpoint_id,
                    "model_id": config.model_id,
                    "skills": plan.skills.identity,
                    "run_dir": str(plan.run_dir),
                    "invocation_id": invocation_id,
                    "opt_in_source": opt_in_source,
                    "resumed": resumed,
                }
            )
        if on_start is not None:
            on_start(plan, store, resumed)

        index = store.index()
        tracker = ProgressTracker(len(plan.jobs), [progress] if progress is not None else None)
        planned_ids = {job.episode_id for job in plan.jobs}
        tracker.preload(
            sum(1 for eid in planned_ids if index.is_complete(eid)),
            [index.entries[eid].reward for eid in planned_ids if index.is_complete(eid) and index.entries[eid].reward is not None],  # type: ignore[misc]
        )
        interrupted = False
        try:
            await _execute(
                plan,
                store,
                index,
                tracker,
                attempts_cap=attempts_cap,
                total_cap=total_cap,
                invocation_id=invocation_id,
                episode_fn=episode_fn,
                model_transport=model_transport,
                env_transport=env_transport,
                only_failed=only_failed,
            )
        except (asyncio.CancelledError, KeyboardInterrupt):
            interrupted = True
            # Leave a summary of what exists; the traces are complete lines only.
            summarize_run(plan.run_dir, store=store)
            tracker.finish()
            raise
        summary = summarize_run(plan.run_dir, store=store)
        tracker.finish()
        return RunResult(
            run_dir=plan.run_dir,
            summary=summary,
            counts=summary["counts"],
            summary_path=store.summary_path,
            traces_path=store.traces_path,
            manifest_path=store.manifest_path,
            invocation_id=invocation_id,
            resumed=resumed,
            attempts=tracker.attempts,
            interrupted=interrupted,
            warnings=list(tracker.listener_errors),
        )
    finally:
        store.release_lock()


async def _preflight_environment(plan: EvalPlan, transport: httpx.AsyncBaseTransport | None) -> None:
    from shopsimrl_core.adapters._environment import ShopSimulatorClient
    from shopsimrl_core._errors import ShopSimulatorError

    config = plan.config
    async with ShopSimulatorClient(
        base_url=config.environment.base_url, timeout=config.environment.timeout, persona=plan.persona, transport=transport,
        http_transport=config.environment.http_transport,
    ) as env:
        try:
            await env.health()
        except ShopSimulatorError as exc:
            raise ShopSimulatorError(
                f"{config.source_label}: environment.base_url: {exc.one_line()}; start the environment or fix the URL "
                "(nothing was written)",
                code="environment-unreachable",
            ) from None


def _remove_empty_run_dir(run_dir: Path) -> None:
    # A refusal on a directory we just created must leave nothing behind.
    try:
        (run_dir / "run.lock").unlink(missing_ok=True)
        run_dir.rmdir()
    except OSError:
        pass


async def _execute(
    plan: EvalPlan,
    store: RunStore,
    index: Any,
    tracker: ProgressTracker,
    *,
    attempts_cap: int,
    total_cap: int | None,
    invocation_id: str,
    episode_fn: EpisodeFunction | None,
    model_transport: httpx.AsyncBaseTransport | None,
    env_transport: httpx.AsyncBaseTransport | None,
    only_failed: bool = False,
) -> None:
    from shopsimrl_core.adapters._environment import ShopSimulatorClient
    from shopsimrl_core.adapters._model import ChatModelClient

    config = plan.config
    if episode_fn is None:
        from shopsimrl_core.episode._runtime import run_episode

        episode_fn = run_episode
    settings = _make_settings(plan)

    lifetime = {job.episode_id: index.attempts(job.episode_id) for job in plan.jobs}
    complete = {job.episode_id: index.is_complete(job.episode_id) for job in plan.jobs}
    this_invocation = {job.episode_id: 0 for job in plan.jobs}
    eligible = {job.episode_id for job in plan.jobs if not only_failed or lifetime[job.episode_id] > 0}

    def may_attempt(job: EpisodeJob) -> bool:
        eid = job.episode_id
        if eid not in eligible or complete[eid] or this_invocation[eid] >= attempts_cap:
            return False
        return total_cap is None or lifetime[eid] < total_cap

    model = ChatModelClient.from_config(config.model, transport=model_transport)
    env = ShopSimulatorClient(
        base_url=config.environment.base_url,
        timeout=config.environment.timeout,
        persona=plan.persona,
        max_connections=config.environment.max_connections,
        transport=env_transport,
        http_transport=config.environment.http_transport,
    )

    async def attempt(job: EpisodeJob) -> None:
        try:
            record = await episode_fn(job, model=model, env=env, prompt=plan.prompt, skills=plan.skills, settings=settings)
            if not isinstance(record, dict) or record.get("episode_id") != job.episode_id:
                raise RuntimeError(f"episode function returned no trace record for {job.episode_id}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the runtime itself broke: store the boundary record (§6.7)
            record = boundary_record(job, exc)
        eid = job.episode_id
        lifetime[eid] += 1
        this_invocation[eid] += 1
        record["attempt"] = {"number": lifetime[eid], "invocation_id": invocation_id}
        try:
            store.append(record)
        except (TypeError, ValueError) as exc:  # not serialisable (e.g. NaN): keep the failure visible
            record = boundary_record(job, exc)
            record["attempt"] = {"number": lifetime[eid], "invocation_id": invocation_id}
            store.append(record)
        done = is_complete(record)
        complete[eid] = done
        reward = record["final"].get("reward") if done else None
        reward = float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None
        tracker.attempt(eid, complete=done, reward=reward, exhausted=not done and not may_attempt(job))

    async with model, env:
        tracker.start()
        while True:
            pending = [job for job in plan.jobs if may_attempt(job)]
            if not pending:
                break
            tracker.start_wave(len(pending))
            queue = iter(pending)

            async def worker() -> None:
                for job in queue:
                    await attempt(job)

            workers = [asyncio.create_task(worker()) for _ in range(min(config.experiment.concurrency, len(pending)))]
            try:
                await asyncio.gather(*workers)
            except BaseException:
                for task in workers:
                    # Cancel once only: a second cancel would interrupt an episode's shielded lease
                    # release, and the client pool closes right after this block.
                    if not task.done() and not task.cancelling():
                        task.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
                raise


def run_evaluation(config: EvalConfig, **kwargs: Any) -> RunResult:
    """Synchronous facade of :func:`arun_evaluation` (same keyword arguments and promises).

    Ctrl-C cancels the run cleanly and re-raises ``KeyboardInterrupt``.
    """
    return asyncio.run(arun_evaluation(config, **kwargs))
