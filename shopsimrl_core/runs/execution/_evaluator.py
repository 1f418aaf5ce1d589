"""The evaluator: plan → guard → preflight → run directory → episodes in waves → summary.

Runtime-semantics §5.1, §6, §22.

Episodes run on one asyncio event loop, at most ``experiment.concurrency`` in flight (a fixed pool
of workers), against ONE pooled model client and ONE pooled environment client for the whole run.
Every finished attempt is appended to ``traces.jsonl`` synchronously on the loop, so a cancelled
run (Ctrl-C, SIGTERM) never leaves a half-written line: in-flight episodes release their leases,
the clients close within a short grace, a summary of what exists is written and the lock is released.

Around the episodes (docs/runs.md#leases, #outages): every lease is journaled in ``leases.jsonl``
and released with retries (``runs/leases/``); leases an earlier invocation left are released at the
start; an unreachable environment or model pauses dispatching within an outage budget
(``runs/leases/_outage.py``); an episode's next attempt waits a jittered backoff.

Around this module: options and result types in :mod:`._evaluation_options`, client construction
in :mod:`._run_clients`, signal handling in :mod:`._signals`, the test-split guard in ``runs/storage/_ledger.py``.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.analysis._summary import summarize_run
from shopsimrl_core.episode._trace import evaluator_boundary_record, is_complete, utc_now
from shopsimrl_core.runs.config._config import EvalConfig
from shopsimrl_core.runs.config._dotenv import apply_dotenv
from shopsimrl_core.runs.execution._books import _Books, _finished
from shopsimrl_core.runs.execution._evaluation_options import EvaluationOptions, RunResult
from shopsimrl_core.runs.execution._loop import run_coroutine
from shopsimrl_core.runs.execution._progress import ProgressTracker
from shopsimrl_core.runs.execution._run_clients import (
    _check_api_key,
    _close_env,
    _gate_probes,
    _make_clients,
    _make_settings,
)
from shopsimrl_core.runs.execution._signals import _with_signals
from shopsimrl_core.runs.planning._jobs import EpisodeJob
from shopsimrl_core.runs.planning._plan import EvalPlan, build_plan
from shopsimrl_core.runs.storage._durability import wait_durable
from shopsimrl_core.runs.storage._ledger import TestAccessLedger, _ledger_key, check_test_access
from shopsimrl_core.runs.storage._small_index import open_small_index
from shopsimrl_core.runs.storage._store import RunStore

__all__ = ["run_evaluation", "arun_evaluation", "boundary_record"]


# How long a cancelled run waits for the environment client to finish resets still in flight
# before it drops their connections (the sandbox then forgets them; see docs/runs.md#signals).
_CLOSE_GRACE_S = 1.5
# Bound on waiting for the last group-commit fsync at the end (a hung disk must not break the 5 s
# exit of a signal; the lines are in the page cache anyway, only a power cut could lose them).
_DURABLE_WAIT_S = 2.0


def _new_invocation_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]


def boundary_record(job: EpisodeJob, exc: BaseException) -> dict[str, Any]:
    """The synthetic failed record stored when the episode function itself raises (§6.7, §12.3)."""
    return evaluator_boundary_record(job.to_dict(), job.episode_id, exc)


async def arun_evaluation(config: EvalConfig, options: EvaluationOptions | None = None, **kwargs: Any) -> RunResult:
    """Run (or resume) the evaluation described by *config* and write its summary.

    *options* holds the per-invocation settings (:class:`EvaluationOptions`); its fields may also be
    passed as keyword arguments (they win over *options*).

    Promises:
      - refusals happen before any model or environment call; a refusal (test split, preflight,
        bad config) writes nothing;
      - the run directory is locked for the whole invocation (a second runner fails at once);
      - every attempt is one line in ``traces.jsonl`` with ``attempt: {number, invocation_id}``, written
        whole when the attempt ends and fsynced (group commit) before this returns or raises;
      - an episode is attempted at most ``max_attempts`` times in this invocation (attempts lost to
        a confirmed outage do not count) and, if set, until ``experiment.max_total_attempts`` lines
        exist for it;
      - every lease is journaled in ``leases.jsonl`` before use and released (with retries) before
        this returns; leases an earlier invocation left are released at the start;
      - on cancellation in-flight episodes release their leases and nothing is half-written.

    Raises:
        TestSplitGuardError: guarded split without ``allow_test_split`` (or a rerun without
            ``allow_test_rerun``).
        ConfigError: bad split/prompt/skills, missing API key variable, ``resume`` false on a
            non-empty directory.
        PreflightError: the environment or the model is unusable (nothing was written).
        FingerprintMismatch: the directory belongs to another semantic plan.
        RunLockedError: another process holds the run directory.
        OutageError: the environment or model stayed unreachable longer than the outage budget
            (the summary of what exists is written first).
    """
    opts = EvaluationOptions.from_kwargs(options, kwargs)
    plan = build_plan(config)
    if opts.skill_provider is not None or opts.plan_blocks:
        # Gates (runtime-semantics §16) inject per-episode assignments and add their block to the plan.
        from shopsimrl_core.runs.planning._plan_hash import plan_fingerprint

        if opts.skill_provider is not None:
            plan.skills = opts.skill_provider
        plan.semantic = {**plan.semantic, "skills": dict(plan.skills.identity), **(opts.plan_blocks or {})}
        plan.fingerprint = plan_fingerprint(plan.semantic, plan.jobs)
    check_test_access(plan, allow_test_split=opts.allow_test_split, allow_test_rerun=opts.allow_test_rerun)
    resume_flag = config.experiment.resume if opts.resume is None else opts.resume
    attempts_cap = opts.max_attempts if opts.max_attempts is not None else config.experiment.attempts_per_invocation
    if attempts_cap < 1:
        raise ConfigError(
            f"max_attempts must be >= 1 (got {attempts_cap}); pass a positive number", code="config-invalid"
        )
    if config.dotenv_path is not None:
        apply_dotenv(config.dotenv_path)
    _check_api_key(config)

    invocation_id = _new_invocation_id()
    store = RunStore(plan.run_dir)
    before = _Untouched.observe(plan.run_dir, store.lock_path)
    store.acquire_lock(invocation_id)
    try:
        return await _run_locked(plan, store, opts, invocation_id, before, resume_flag, attempts_cap)
    finally:
        # Trace and lease-journal lines are fsynced by group commit on a worker thread; the last
        # round ends before the lock is released (normal end, error, SIGINT/SIGTERM alike). Waiting
        # here blocks the loop, on purpose: nothing else runs any more, and a second cancel cannot cut it.
        wait_durable(_DURABLE_WAIT_S)
        store.release_lock()


@dataclass
class _Untouched:
    """What existed before the lock was taken, so that a refusal can leave the disk exactly as it was."""

    missing_dirs: list[Path]
    """Folders (run directory and its missing parents, deepest first) that the lock creates."""
    lock_bytes: bytes | None
    """The lock file's content, or None when there was none."""

    @classmethod
    def observe(cls, run_dir: Path, lock_path: Path) -> _Untouched:
        missing: list[Path] = []
        folder = run_dir
        while not folder.exists() and folder != folder.parent:
            missing.append(folder)
            folder = folder.parent
        try:
            lock_bytes: bytes | None = lock_path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            lock_bytes = None
        except OSError:
            lock_bytes = b""
        return cls(missing, lock_bytes)

    def restore(self, store: RunStore) -> None:
        """Undo what taking the lock wrote (call after releasing it)."""
        try:
            if self.lock_bytes is None:
                store.lock_path.unlink(missing_ok=True)
            else:
                store.lock_path.write_bytes(self.lock_bytes)
            for folder in self.missing_dirs:
                folder.rmdir()
        except OSError:
            pass


async def _run_locked(
    plan: EvalPlan,
    store: RunStore,
    opts: EvaluationOptions,
    invocation_id: str,
    before: _Untouched,
    resume_flag: bool,
    attempts_cap: int,
) -> RunResult:
    config = plan.config
    archived: Path | None = None
    report: Any = None
    try:
        try:
            mode = (
                "new" if opts.overwrite else store.check_resumable(plan.semantic, plan.fingerprint, resume=resume_flag)
            )
        except UnicodeDecodeError:
            raise ConfigError(
                f"{store.manifest_path}: not UTF-8 text; the run directory was damaged — "
                "restore it or use another experiment.name",
                code="input-not-utf8",
            ) from None
        if opts.only_failed and mode == "new":
            # retry-failed reruns a stored run's failures; it never starts a run (§22.3).
            raise ConfigError(
                f"{plan.run_dir}: nothing to retry: the run directory holds no run of this plan; "
                "use `shopsimrl run` first",
                code="nothing-to-retry",
            )
        if (opts.episode_fn is None) if opts.preflight is None else opts.preflight:
            from shopsimrl_core.runs.endpoints._preflight import apreflight

            report = await apreflight(
                config,
                persona=plan.persona,
                env_transport=opts.env_transport,
                model_transport=opts.model_transport,
                check_model=opts.episode_fn is None,
            )
        if opts.episode_fn is None:
            from shopsimrl_core.runs.endpoints._seed_probe import check_seed_width

            await check_seed_width(plan, transport=opts.model_transport)
        if opts.probe_seed:
            from shopsimrl_core.runs.endpoints._seed_probe import probe_seed as _probe_seed

            probe = await _probe_seed(plan, transport=opts.model_transport)
            plan.execution = {**plan.execution, "seed_honoured": probe["seed_honoured"], "seed_probe": probe}
        if opts.overwrite:
            archived = store.archive_existing()
    except BaseException:
        # A refusal leaves the disk as it was: no lock holder written, no folder created.
        store.release_lock()
        before.restore(store)
        raise
    resumed = mode == "resume"
    test_access = None
    if plan.guarded:
        test_access = {
            "opted_in": True,
            "source": opts.opt_in_source,
            "invocation_id": invocation_id,
            "at": utc_now(),
            "rerun_acknowledged": opts.allow_test_rerun,
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
                "opt_in_source": opts.opt_in_source,
                "resumed": resumed,
            }
        )
    if opts.on_start is not None:
        opts.on_start(plan, store, resumed)

    # A small run's index is read from its log without polars (its import would be most of a short run's CPU).
    small = open_small_index(store.run_dir)
    index = store.index() if small is None else None
    tracker = ProgressTracker(len(plan.jobs), [opts.progress] if opts.progress is not None else None)
    # A finished run (every planned episode complete, nothing else) is told by the index's columns against the
    # manifest's sorted ids; otherwise one pass over the planned ids (formatted once by the plan) and the
    # index's cached columns. Neither builds an entry object or formats an id per episode (issue 33).
    planned: tuple[list[int], list[bool], list[float | None]] | None
    if index is None:
        planned = small.planned(plan.episode_ids) if small is not None else None
    elif resumed and _finished(store, index):
        planned = None
        rewards = index.run_index.entry_column("reward")
        tracker.preload(len(plan.jobs), [reward for reward in rewards if reward is not None])
    else:
        planned = index.planned(plan.episode_ids)
    if planned is not None:
        tracker.preload(sum(planned[1]), [reward for reward in planned[2] if reward is not None])
    from shopsimrl_core.runs.leases._outage import OutageError

    try:
        await _execute(
            plan, store, planned, tracker, opts, attempts_cap=attempts_cap, invocation_id=invocation_id, report=report
        )
    except (asyncio.CancelledError, KeyboardInterrupt, OutageError):
        # Leave a summary of what exists; the traces are complete lines only.
        summarize_run(plan.run_dir, store=store)
        tracker.finish()
        raise
    # Nothing appended: the index opened above is current, and a summary computed from it is reused as is.
    reuse = index if index is not None and tracker.attempts == 0 else None
    summary = summarize_run(plan.run_dir, store=store, index=reuse)
    tracker.finish()
    return RunResult(
        run_dir=plan.run_dir,
        summary=summary,
        counts=summary.counts,
        summary_path=store.summary_path,
        traces_path=store.traces_path,
        manifest_path=store.manifest_path,
        invocation_id=invocation_id,
        resumed=resumed,
        attempts=tracker.attempts,
        interrupted=False,
        warnings=list(tracker.listener_errors),
        preflight=report,
    )


async def _execute(
    plan: EvalPlan,
    store: RunStore,
    planned: tuple[list[int], list[bool], list[float | None]] | None,
    tracker: ProgressTracker,
    opts: EvaluationOptions,
    *,
    attempts_cap: int,
    invocation_id: str,
    report: Any = None,
) -> None:
    from shopsimrl_core.runs.leases._env_pool import per_server
    from shopsimrl_core.runs.leases._journaled_env import JournaledEnvironment
    from shopsimrl_core.runs.leases._leases import LeaseJournal
    from shopsimrl_core.runs.leases._outage import EndpointFaultNotices, OutageGate, retry_delay, suspected_service

    config = plan.config
    total_cap = config.experiment.max_total_attempts
    episode_fn = opts.episode_fn
    finite: tuple[str, ...] = ()  # an episode function of the caller's: its whole record is checked for NaN
    if episode_fn is None:
        from shopsimrl_core.episode._runtime import DECODED_PARTS, run_episode

        episode_fn, finite = run_episode, DECODED_PARTS  # the clients below are the adapters'
    resilient = (opts.episode_fn is None) if opts.resilience is None else opts.resilience
    settings = _make_settings(plan)
    lines, complete, _ = planned if planned is not None else ([], [], [])
    jobs, ids = plan.jobs, (plan.episode_ids if planned is not None else [])
    books = _Books(
        lifetime=list(lines),
        complete=list(complete),
        this_invocation=[0] * len(jobs),
        eligible=[count > 0 for count in lines] if opts.only_failed else None,
    )
    rng = random.Random()
    model, raw_env = _make_clients(plan, opts)
    journal = LeaseJournal(plan.run_dir, invocation_id)
    # One JournaledEnvironment per server (one journal): each lease is journaled with its server's URL.
    env = per_server(raw_env, lambda client: JournaledEnvironment(
        client,
        journal,
        reset_wait_seconds=config.environment.reset_wait_seconds,
        release_retry_seconds=config.environment.release_retry_seconds,
        notice=tracker.notice,
        exclusive=opts.environment_exclusive if opts.environment_exclusive is not None
        else config.environment.exclusive,
        wanted_slots=config.experiment.concurrency,
        shared_runs_root=config.environment.shared_runs_root,
    ))
    probes, probe_timeouts = _gate_probes(plan, opts, raw_env) if resilient else ({}, {})
    gate = OutageGate(
        config.experiment.outage_budget_seconds, probes, notice=tracker.notice, probe_timeouts=probe_timeouts
    )
    tell_fault = EndpointFaultNotices(tracker.notice)

    async def attempt(at: int) -> None:
        job, eid = jobs[at], ids[at]
        wait = books.not_before.get(at, 0.0) - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        await gate.wait_open()
        try:
            record = await episode_fn(
                job, model=model, env=env, prompt=plan.prompt, skills=plan.skills, settings=settings
            )
            if not isinstance(record, dict) or record.get("episode_id") != eid:
                raise RuntimeError(f"episode function returned no trace record for {eid}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the runtime itself broke: store the boundary record (§6.7)
            record = boundary_record(job, exc)
        books.lifetime[at] += 1
        books.this_invocation[at] += 1
        record["attempt"] = {"number": books.lifetime[at], "invocation_id": invocation_id}
        try:
            store.append(record, finite=finite)
        except (TypeError, ValueError) as exc:  # not serialisable (e.g. NaN): keep the failure visible
            record = boundary_record(job, exc)
            record["attempt"] = {"number": books.lifetime[at], "invocation_id": invocation_id}
            store.append(record)
        done = is_complete(record)
        books.complete[at] = done
        if not done:
            tell_fault(record)
        if not done and resilient:
            service = suspected_service(record)
            if service is not None and await gate.check(service):
                books.this_invocation[at] -= 1  # lost to an outage: not the episode's fault
            else:
                books.failures[at] = books.failures.get(at, 0) + 1
                books.not_before[at] = time.monotonic() + retry_delay(books.failures[at], rng)
        reward = record["final"].get("reward") if done else None
        reward = float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None
        tracker.attempt(
            eid,
            complete=done,
            reward=reward,
            exhausted=not done and not books.may_attempt(at, attempts_cap, total_cap),
        )

    await raw_env.__aenter__()  # open the pools now: they are closed (bounded) in the finally below
    try:
        async with model:
            released, kept = await env.recover()
            if released or kept:
                tracker.notice(
                    f"released {released} lease(s) an earlier invocation of this run left in leases.jsonl"
                    + (f"; {kept} could not be released (other environment URL or release failing)" if kept else "")
                )
            tracker.start()
            # An episode that may not be attempted in one wave may not in any later one (completion and the
            # attempt counts only grow), so each wave looks only at the previous wave's episodes.
            candidates = [at for at, done in enumerate(books.complete) if not done]
            while True:
                pending = [at for at in candidates if books.may_attempt(at, attempts_cap, total_cap)]
                if not pending:
                    break
                candidates = pending
                tracker.start_wave(len(pending))
                await _run_wave(
                    pending, attempt, config.experiment.concurrency, config.experiment.start_spacing_seconds
                )
    finally:
        gate.cancel()
        await env.drain(timeout=_CLOSE_GRACE_S)
        await _close_env(raw_env, _CLOSE_GRACE_S)
        try:
            # leases still held and resets a killed invocation left unanswered stay listed; after a
            # clean run of a clean history the journal is gone
            journal.compact(keep_unanswered=lambda entry: entry.get("invocation_id") != invocation_id)
        except OSError:
            journal.close()  # (disk full, read-only): the journal stays as written; the next start compacts it


async def _run_wave(
    pending: list[int],
    attempt: Callable[[int], Awaitable[None]],
    concurrency: int,
    start_spacing_seconds: float = 0.0,
) -> None:
    queue = iter(pending)
    count = min(concurrency, len(pending))

    async def worker(number: int) -> None:
        # Worker k starts k spacings late. Episodes that start together stay in step (they take
        # about as many model turns), so every reset, release and trace append of a wave would
        # otherwise fall on the same instants and queue behind each other on the one event loop.
        if start_spacing_seconds > 0 and number:
            await asyncio.sleep(start_spacing_seconds * number)
        for job in queue:
            await attempt(job)

    workers = [asyncio.create_task(worker(number)) for number in range(count)]
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


def run_evaluation(config: EvalConfig, options: EvaluationOptions | None = None, **kwargs: Any) -> RunResult:
    """Synchronous facade of :func:`arun_evaluation` (same arguments and promises).

    In the main thread SIGINT and SIGTERM cancel the run cleanly (leases released, summary written,
    lock freed) and re-raise ``KeyboardInterrupt`` (SIGINT) or :class:`RunTerminated` (SIGTERM, a
    ``KeyboardInterrupt`` subclass). A shutdown that takes longer than 4 s ends the process with
    130/143 at once; leases it still held are in ``leases.jsonl`` and released at the next start.

    The run has its own event loop (uvloop when installed) and a garbage collector tuned for it,
    both for this call only (:mod:`shopsimrl_core.runs.execution._loop`): ``shopsimrl run`` and the Dagster
    rollout asset get the same client. With a ``serve`` section the checkpoint's server is launched
    for the run and stopped on every way out (:mod:`shopsimrl_core.serving`).
    """
    if config.serve is None:
        return run_coroutine(_with_signals(arun_evaluation(config, options, **kwargs)))
    from shopsimrl_core.runs.execution._served_run import run_served

    return run_served(config, EvaluationOptions.from_kwargs(options, kwargs), arun_evaluation)

