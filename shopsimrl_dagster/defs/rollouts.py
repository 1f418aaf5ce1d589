"""``<suite>/rollout_traces[ckpt]``: one checkpoint's episodes on one suite, run by the core's evaluator.

The body writes the run's config (``eval_config.py``), calls ``core.run_evaluation`` (resumable: a
retried or re-materialized partition never redoes a finished episode) and reports the core's counts,
the trace audit and the five blocking rollout checks (``checks.py``). It does not check the servers
itself: the core's preflight does, once per run, and the asset shows its report
(``RunResult.preflight``: the environment's ``/healthz``, the served models, the probe).
"""

import time
from pathlib import Path
from typing import Any

import dagster as dg

import shopsimrl_core as core
from shopsimrl_core.documents import SuiteJobPlan

from ..eval_config import write_eval_config
from ..run_tags import ALLOW_TEST_RERUN_TAG, ALLOW_TEST_SPLIT_TAG, is_true
from .checks import rollout_check_results, rollout_check_specs
from .failures import as_failure, interrupt_is_final
from .partitions import checkpoints
from .plans import JOB_PLAN
from .resources import CheckpointRegistry, EvaluationSuites, InferenceEndpoint, RunStorage, ShopSimulatorEnvironment
from .run_files import read_document, read_json_object, viewer_run_url

__all__ = ["ROLLOUT_RETRY_POLICY", "build_rollout_traces"]

ROLLOUT_RETRY_POLICY = dg.RetryPolicy(max_retries=2, delay=5)
"""A crashed or interrupted rollout step is retried; resume makes that safe (finished episodes are kept)."""


def _rollout_metadata(
    *,
    suite_name: str,
    checkpoint: Any,
    result: core.RunResult,
    audit: core.TraceAudit,
    manifest: dict[str, Any] | None,
    completed_before: int,
    wall_s: float,
    model_base_url: str,
    served_model: str,
    preflight: core.PreflightReport | None,
    environment_url: str,
    config_path: Path,
    run_dir: Path,
    viewer_url: str,
) -> dict[str, Any]:
    counts = result.counts
    tokens = result.summary.cost.tokens
    return {
        # The verdict first, in words (issue 33); the numbers it is made of follow, raw.
        "verdict": f"{counts.completed}/{counts.requested} episodes completed (coverage {counts.coverage:.2f}), "
        f"{counts.failed} failed; {completed_before} reused from earlier runs, {int(result.attempts)} attempts in "
        f"{wall_s:.1f} s",
        "suite": suite_name,
        "checkpoint_step": checkpoint.step,
        "served_model": served_model,
        "endpoint": model_base_url,
        "served_weights": dg.MetadataValue.json(served)
        if (served := (manifest or {}).get("plan", {}).get("model", {}).get("served"))
        else dg.MetadataValue.null(),
        "environment": environment_url,
        "coverage": float(counts.coverage),
        "episodes_requested": counts.requested,
        "episodes_completed": counts.completed,
        "episodes_failed": counts.failed,
        "episodes_completed_before_this_run": completed_before,
        "attempts_this_run": int(result.attempts),
        "failures_by_stage": dg.MetadataValue.json(audit.failures_by_stage),
        "trace_lines": audit.lines,
        "total_tokens": tokens.get("total_tokens", 0),
        "tokens": dg.MetadataValue.json(tokens),
        "wall_time_s": round(wall_s, 3),
        "plan_fingerprint": str((manifest or {}).get("plan_fingerprint")),
        "test_access": dg.MetadataValue.json(access)
        if isinstance(access := (manifest or {}).get("test_access"), dict)
        else dg.MetadataValue.null(),
        "episodes": dg.MetadataValue.url(viewer_url),
        "traces": dg.MetadataValue.path(str(result.traces_path)),
        "run_dir": dg.MetadataValue.path(str(run_dir)),
        "eval_config": dg.MetadataValue.path(str(config_path)),
        # What the core's preflight saw before the first episode (one GET of each server per run).
        "environment_health": dg.MetadataValue.json(
            {
                k: preflight.environment.get(k)
                for k in ("environment_version", "observation_version", "environment_slots", "tasks")
            }
        )
        if preflight
        else dg.MetadataValue.null(),
        "endpoint_models": dg.MetadataValue.json(preflight.served_models) if preflight else dg.MetadataValue.null(),
        "endpoint_probe": dg.MetadataValue.json(preflight.probe)
        if preflight and preflight.probe
        else dg.MetadataValue.null(),
    }


def build_rollout_traces(name: str, *, rollout_key: dg.AssetKey, group: str, described: str) -> dg.AssetsDefinition:
    """``<name>/rollout_traces``, partitioned by checkpoint, with its blocking rollout checks."""

    @dg.asset(
        key=rollout_key,
        group_name=group,
        deps=[JOB_PLAN],
        partitions_def=checkpoints,
        check_specs=rollout_check_specs(rollout_key, checkpoints),
        retry_policy=ROLLOUT_RETRY_POLICY,
        kinds={"python"},
        description=f"Episode traces of one checkpoint on {described} (``runs/{name}/<checkpoint>/traces.jsonl``). "
        "Resumable: a retried or re-materialized partition continues the run directory and never redoes a "
        "finished episode. The core's preflight checks the environment and the endpoint before any episode, so a "
        "dead endpoint fails fast with its URL; what it saw is shown as metadata.",
    )
    def rollout_traces(
        context: dg.AssetExecutionContext,
        inference_endpoint: InferenceEndpoint,
        shopsim_environment: ShopSimulatorEnvironment,
        run_storage: RunStorage,
        checkpoint_registry: CheckpointRegistry,
        evaluation_suites: EvaluationSuites,
    ) -> dg.MaterializeResult:
        settings = evaluation_suites.settings()
        with as_failure():
            current = settings.suite(name)
            split = core.load_split_file(settings.split_file).get(current.split)
        allow_test = is_true(context.run.tags.get(ALLOW_TEST_SPLIT_TAG))
        if split.guarded and not allow_test:
            # Refused before anything is written: no config file, no run directory, no ledger line.
            raise dg.Failure(
                description=f"[test-split-not-opted-in] suite {name!r} runs on the guarded split {current.split!r}; "
                f"launch it with the tag {ALLOW_TEST_SPLIT_TAG}=true to opt in (recorded in the run manifest and "
                f"the test-access ledger {run_storage.ledger_path()})",
                allow_retries=False,
            )
        checkpoint = checkpoint_registry.get(context.partition_key)
        config_path = write_eval_config(
            run_storage=run_storage,
            suite_name=name,
            suite=current,
            checkpoint=checkpoint,
            inference=inference_endpoint,
            environment=shopsim_environment,
            split_file=settings.split_file,
            prompt=settings.prompt,
        )
        run_dir = run_storage.run_dir(name, checkpoint.checkpoint_id)
        context.log.info(f"rollout {checkpoint.checkpoint_id} on suite {name}: config {config_path}, run dir {run_dir}")
        started = time.monotonic()
        # The evaluator's "start" event counts the episodes already complete (resume), from its own run index.
        before: dict[str, int] = {}

        def log_progress(event: Any) -> None:
            if event.kind == "start":
                before.setdefault("done", int(event.done))
            if event.kind == "notice":  # waits for slots, outages, released leases: always worth a line
                # A launched server's start and stop (status "serving") are the run's ordinary course.
                (context.log.info if event.status == "serving" else context.log.warning)(event.message)
                return
            # One line per tenth of the run keeps the run log readable for thousands of episodes.
            tenth = max(1, event.total // 10)
            if event.kind in ("start", "finish") or (event.kind == "attempt" and event.attempts % tenth == 0):
                context.log.info(
                    f"{event.kind}: {event.done}/{event.total} complete, {event.failed} failed, "
                    f"{event.attempts} attempts this run, reward_mean "
                    f"{'n/a' if event.reward_mean is None else format(event.reward_mean, '.4f')}"
                )

        with as_failure(), interrupt_is_final(f"the rollout of {checkpoint.checkpoint_id} on suite {name}"):
            config = core.load_config(config_path)
            result = core.run_evaluation(
                config,
                progress=log_progress,
                allow_test_split=allow_test,
                allow_test_rerun=is_true(context.run.tags.get(ALLOW_TEST_RERUN_TAG)),
                opt_in_source=f"dagster run {context.run.run_id} ({ALLOW_TEST_SPLIT_TAG}=true)",
            )
        audit = core.audit_traces(result.traces_path)
        manifest = read_json_object(run_dir / "manifest.json")
        with as_failure():  # a plan file that is not a job plan: one line naming the file and the field
            job_plan = read_document(run_storage.plan_path(name), SuiteJobPlan)
        check_results = rollout_check_results(
            asset_key=rollout_key,
            coverage=result.counts.coverage,
            audit=audit,
            manifest=manifest,
            job_plan=None if job_plan is None else job_plan.to_json(),
            guarded=split.guarded,
            ledger_path=config.test_access_ledger_path,
            run_dir=run_dir,
        )
        metadata = _rollout_metadata(
            suite_name=name,
            checkpoint=checkpoint,
            result=result,
            audit=audit,
            manifest=manifest,
            # No start event when nothing was left to run: everything complete was complete before.
            completed_before=before.get("done", result.counts.completed if result.attempts == 0 else 0),
            wall_s=time.monotonic() - started,
            model_base_url=inference_endpoint.base_url_for(checkpoint),
            served_model=inference_endpoint.model_for(checkpoint),
            preflight=result.preflight,
            environment_url=shopsim_environment.base_url,
            config_path=config_path,
            run_dir=run_dir,
            viewer_url=viewer_run_url(settings, run_storage, name, checkpoint.checkpoint_id),
        )
        return dg.MaterializeResult(metadata=metadata, check_results=check_results)

    return rollout_traces
