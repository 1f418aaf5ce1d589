"""The evaluation lineage: frozen_split → job_plan → rollout_traces[ckpt] → eval_summary[ckpt]
→ checkpoint_comparison[ckpt].

Each body reads its inputs, calls the core library and returns a ``MaterializeResult`` with paths,
hashes and headline numbers. Files on disk (``<runs_root>/<suite>/<checkpoint_id>/``) are the system
of record; downstream assets read them, not values passed through Dagster.
"""


import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

import shopsimrl_core as core

from ..eval_config import RolloutTarget, write_eval_config
from ..registry import previous_checkpoint
from ..report import category_markdown, category_rows, mapping_markdown, write_summary_chart
from ..run_tags import ALLOW_TEST_RERUN_TAG, ALLOW_TEST_SPLIT_TAG, SUITE_TAG, is_true
from ..settings import PipelineSettings
from .checks import ROLLOUT_CHECK_SPECS, rollout_check_results
from .partitions import checkpoints
from .resources import CheckpointRegistry, EvaluationSuites, InferenceEndpoint, RunStorage, ShopSimulatorEnvironment

__all__ = [
    "ROLLOUT_POOL",
    "JOB_PLAN_SCHEMA",
    "frozen_split",
    "job_plan",
    "rollout_traces",
    "eval_summary",
    "checkpoint_comparison",
    "job_plan_path",
    "as_failure",
]

ROLLOUT_POOL = "gpu_endpoint"
"""Dagster pool shared by every rollout against the GPU endpoint; its limit is in dagster.yaml."""
JOB_PLAN_SCHEMA = "shopsimrl-suite-job-plan-v1"
_GROUP = "evaluation"


@contextmanager
def as_failure() -> Iterator[None]:
    """Turn a ``ShopSimRLError`` raised in the body into a ``dg.Failure`` showing ``[code] message``.

    Core errors already say what is wrong and how to fix it; the run shows that line, not a traceback.
    """
    try:
        yield
    except core.ShopSimRLError as exc:
        raise dg.Failure(description=f"[{exc.code}] {exc.one_line()}") from exc


def job_plan_path(runs_root: Path, suite: str) -> Path:
    """Where ``job_plan`` writes the jobs of *suite*."""
    return runs_root / "_plans" / f"{suite}.json"


def _suite_of(context: dg.AssetExecutionContext, settings: PipelineSettings) -> str:
    name = context.run.tags.get(SUITE_TAG) or settings.default_suite
    with as_failure():
        settings.suite(name)
    return name


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


@dg.asset(group_name=_GROUP, kinds={"json"})
def frozen_split(evaluation_suites: EvaluationSuites) -> dg.MaterializeResult:
    """The frozen split file: validated (ids unique, declared hashes verified) and fingerprinted."""
    settings = evaluation_suites.settings()
    with as_failure():
        split_file = core.load_split_file(settings.split_file)
    rows = ["| split | role | guarded | persona | tasks | task_ids_sha256 |", "|---|---|---|---|---:|---|"]
    metadata: dict[str, Any] = {}
    for name, split in sorted(split_file.splits.items()):
        rows.append(f"| {name} | {split.role or '–'} | {split.guarded} | {split.persona} | {split.task_count} | `{split.task_ids_sha256}` |")
        metadata[f"{name}_tasks"] = split.task_count
    file_sha = core.sha256_file(split_file.path)
    metadata.update(
        {
            "path": dg.MetadataValue.path(str(split_file.path)),
            "file_sha256": file_sha,
            "split_version": str(split_file.version),
            "splits": dg.MetadataValue.md("\n".join(rows)),
        }
    )
    return dg.MaterializeResult(metadata=metadata, data_version=dg.DataVersion(file_sha[:16]))


@dg.asset(group_name=_GROUP, deps=[frozen_split], kinds={"json"})
def job_plan(evaluation_suites: EvaluationSuites, run_storage: RunStorage) -> dg.MaterializeResult:
    """The deterministic job list of every evaluation suite (task-major, seeded), one file per suite."""
    settings = evaluation_suites.settings()
    with as_failure():
        split_file = core.load_split_file(settings.split_file)
    table = ["| suite | split | guarded | tasks | repeats | episodes | jobs_fingerprint |", "|---|---|---|---:|---:|---:|---|"]
    metadata: dict[str, Any] = {}
    for name, suite in sorted(settings.suites.items()):
        with as_failure():
            split = split_file.get(suite.split)
        if suite.sample_size is not None and suite.sample_size > split.task_count:
            raise dg.Failure(
                description=f"{settings.source}: suites.{name}.sample_size {suite.sample_size} exceeds the "
                f"{split.task_count} tasks of split {suite.split!r}; lower it or set null"
            )
        jobs = [job.to_dict() for job in core.plan_jobs(
            split.task_ids, split=suite.split, experiment_seed=suite.seed, sample_size=suite.sample_size, repeats=suite.repeats
        )]
        jobs_fingerprint = core.fingerprint(jobs)
        document = {
            "schema_version": JOB_PLAN_SCHEMA,
            "suite": name,
            "split": split.identity(),
            "guarded": split.guarded,
            "seed": suite.seed,
            "sample_size": suite.sample_size,
            "repeats": suite.repeats,
            "episodes": len(jobs),
            "jobs_fingerprint": jobs_fingerprint,
            "jobs": jobs,
        }
        core.write_json_atomic(job_plan_path(run_storage.root_path, name), document)
        tasks = len({job["task_id"] for job in jobs})
        table.append(f"| {name} | {suite.split} | {split.guarded} | {tasks} | {suite.repeats} | {len(jobs)} | `{jobs_fingerprint[:16]}` |")
        metadata[f"{name}_episodes"] = len(jobs)
        metadata[f"{name}_jobs_fingerprint"] = jobs_fingerprint
        if name == settings.default_suite:
            metadata["first_jobs"] = dg.MetadataValue.json(jobs[:5])
    metadata["suites"] = dg.MetadataValue.md("\n".join(table))
    metadata["plans_dir"] = dg.MetadataValue.path(str(job_plan_path(run_storage.root_path, settings.default_suite).parent))
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    group_name=_GROUP,
    deps=[job_plan],
    partitions_def=checkpoints,
    pool=ROLLOUT_POOL,
    check_specs=ROLLOUT_CHECK_SPECS,
    kinds={"python"},
)
def rollout_traces(
    context: dg.AssetExecutionContext,
    inference_endpoint: InferenceEndpoint,
    shopsim_environment: ShopSimulatorEnvironment,
    run_storage: RunStorage,
    checkpoint_registry: CheckpointRegistry,
    evaluation_suites: EvaluationSuites,
) -> dg.MaterializeResult:
    """Episode traces of one checkpoint on one suite (``runs/<suite>/<checkpoint>/traces.jsonl``).

    Resumable: a retried or re-materialized partition continues the run directory and never redoes
    a finished episode. Health checks run first, so a dead endpoint fails fast with its URL.
    """
    settings = evaluation_suites.settings()
    suite_name = _suite_of(context, settings)
    suite = settings.suite(suite_name)
    checkpoint = checkpoint_registry.get(context.partition_key)
    with as_failure():
        split = core.load_split_file(settings.split_file).get(suite.split)
    allow_test = is_true(context.run.tags.get(ALLOW_TEST_SPLIT_TAG))
    if split.guarded and not allow_test:
        raise dg.Failure(
            description=f"[test-split-not-opted-in] suite {suite_name!r} runs on the guarded split {suite.split!r}; "
            f"launch this run with the tag {ALLOW_TEST_SPLIT_TAG}=true to opt in (recorded in the test-access ledger)"
        )
    env_health = shopsim_environment.health_check()
    endpoint_health = inference_endpoint.health_check(checkpoint)
    target = RolloutTarget(
        suite_name=suite_name,
        checkpoint_id=checkpoint.checkpoint_id,
        served_model=inference_endpoint.model_for(checkpoint),
        model_base_url=inference_endpoint.base_url_for(checkpoint),
        api_key_env=inference_endpoint.api_key_env,
        max_in_flight=inference_endpoint.max_in_flight,
        model_timeout_s=inference_endpoint.timeout_s,
        model_max_retries=inference_endpoint.max_retries,
        env_base_url=shopsim_environment.base_url,
        env_timeout_s=shopsim_environment.timeout_s,
        persona=shopsim_environment.persona,
        runs_root=run_storage.root_path,
        split_file=settings.split_file,
    )
    config_path = write_eval_config(target, suite)
    run_dir = run_storage.run_dir(suite_name, checkpoint.checkpoint_id)
    completed_before = sum(1 for entry in core.RunStore(run_dir).index().entries.values() if entry.complete)
    context.log.info(f"rollout {checkpoint.checkpoint_id} on suite {suite_name}: config {config_path}, run dir {run_dir}")
    started = time.monotonic()

    def log_progress(event: Any) -> None:
        # One line per tenth of the run keeps the run log readable for thousands of episodes.
        tenth = max(1, event.total // 10)
        if event.kind in ("start", "finish") or (event.kind == "attempt" and event.attempts % tenth == 0):
            context.log.info(
                f"{event.kind}: {event.done}/{event.total} complete, {event.failed} failed, "
                f"{event.attempts} attempts this run, reward_mean {event.reward_mean}"
            )

    with as_failure():
        config = core.load_config(config_path)
        result = core.run_evaluation(
            config,
            progress=log_progress,
            allow_test_split=allow_test,
            allow_test_rerun=is_true(context.run.tags.get(ALLOW_TEST_RERUN_TAG)),
            opt_in_source=f"dagster run {context.run.run_id} ({ALLOW_TEST_SPLIT_TAG}=true)",
        )
    wall_s = time.monotonic() - started
    summary = result.summary
    counts = summary.get("counts", {})
    audit = core.audit_traces(result.traces_path)
    manifest = _read_json(run_dir / "manifest.json")
    check_results = rollout_check_results(
        coverage=counts.get("coverage"),
        audit=audit,
        manifest=manifest,
        job_plan=_read_json(job_plan_path(run_storage.root_path, suite_name)),
        guarded=split.guarded,
        ledger_path=config.test_access_ledger_path,
        run_dir=run_dir,
    )
    tokens = summary.get("cost", {}).get("tokens", {})
    metadata: dict[str, Any] = {
        "suite": suite_name,
        "checkpoint_step": checkpoint.step,
        "served_model": target.served_model,
        "endpoint": target.model_base_url,
        "environment": shopsim_environment.base_url,
        "coverage": float(counts.get("coverage") or 0.0),
        "episodes_requested": int(counts.get("requested") or 0),
        "episodes_completed": int(counts.get("completed") or 0),
        "episodes_failed": int(counts.get("failed") or 0),
        "episodes_completed_before_this_run": completed_before,
        "failures_by_stage": dg.MetadataValue.json(audit.failures_by_stage),
        "trace_lines": audit.lines,
        "total_tokens": int(tokens.get("total_tokens") or 0),
        "tokens": dg.MetadataValue.json(tokens),
        "wall_time_s": round(wall_s, 3),
        "plan_fingerprint": str((manifest or {}).get("plan_fingerprint")),
        "traces": dg.MetadataValue.path(str(result.traces_path)),
        "run_dir": dg.MetadataValue.path(str(run_dir)),
        "eval_config": dg.MetadataValue.path(str(config_path)),
        "environment_health": dg.MetadataValue.json(
            {k: env_health.get(k) for k in ("environment_version", "observation_version", "environment_slots", "tasks")}
        ),
        "endpoint_models": dg.MetadataValue.json(endpoint_health["models"]),
    }
    return dg.MaterializeResult(metadata=metadata, check_results=check_results)


@dg.asset(group_name=_GROUP, deps=[rollout_traces], partitions_def=checkpoints, kinds={"polars"})
def eval_summary(
    context: dg.AssetExecutionContext, run_storage: RunStorage, evaluation_suites: EvaluationSuites
) -> dg.MaterializeResult:
    """The run's ``summary.json`` (``shopsimrl-eval-summary-v2``) with its headline numbers and a chart."""
    settings = evaluation_suites.settings()
    suite_name = _suite_of(context, settings)
    run_dir = run_storage.run_dir(suite_name, context.partition_key)
    with as_failure():
        summary = core.summarize_run(run_dir)
    audit = core.audit_traces(run_dir / "traces.jsonl")
    counts, primary, behavior = summary["counts"], summary["primary"], summary["behavior"]
    completed = int(counts.get("completed") or 0)
    successes = [o.success for o in audit.latest.values() if o.completed and o.success is not None]
    interval = core.wilson_interval(int(sum(successes)), len(successes)) if successes else None
    rows = category_rows(audit.latest.values())
    rewards = [o.reward for o in audit.latest.values() if o.completed and o.reward is not None]
    chart_path = run_dir / "summary_chart.png"
    chart = write_summary_chart(chart_path, rows, rewards, f"{context.partition_key} · {suite_name}")
    components = summary.get("reward_components") or {}
    reward = primary.get("reward_mean")
    success = primary.get("success_rate")
    metadata: dict[str, Any] = {
        "suite": suite_name,
        "reward": float(reward) if reward is not None else dg.MetadataValue.null(),
        "reward_sem": float(primary["reward_sem"]) if primary.get("reward_sem") is not None else dg.MetadataValue.null(),
        "success_rate": float(success) if success is not None else dg.MetadataValue.null(),
        "success_ci_low": float(interval[0]) if interval else dg.MetadataValue.null(),
        "success_ci_high": float(interval[1]) if interval else dg.MetadataValue.null(),
        "success_interval": f"{success:.3f} [{interval[0]:.3f}, {interval[1]:.3f}] (Wilson 95%, n={len(successes)})"
        if interval and success is not None else "n/a",
        "reward_components": dg.MetadataValue.md(mapping_markdown(components, "component", "mean")),
        "steps_mean": float(behavior["steps_mean"]) if behavior.get("steps_mean") is not None else dg.MetadataValue.null(),
        "protocol_error_rate": float(behavior.get("protocol_error_rate") or 0.0),
        "invalid_action_rate": float(behavior.get("invalid_action_rate") or 0.0),
        "termination_reasons": dg.MetadataValue.md(mapping_markdown(behavior.get("termination_reasons") or {}, "reason", "episodes")),
        "per_category": dg.MetadataValue.md(category_markdown(rows)),
        "chart": dg.MetadataValue.md(f"![success by category and reward distribution](data:image/png;base64,{chart})"),
        "chart_path": dg.MetadataValue.path(str(chart_path)),
        "coverage": float(counts.get("coverage") or 0.0),
        "episodes_completed": completed,
        "summary_path": dg.MetadataValue.path(str(run_dir / "summary.json")),
    }
    for name, value in sorted(components.items()):
        if isinstance(value, (int, float)):
            metadata[f"component_{name}"] = float(value)
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(group_name=_GROUP, deps=[eval_summary], partitions_def=checkpoints, kinds={"json"})
def checkpoint_comparison(
    context: dg.AssetExecutionContext,
    run_storage: RunStorage,
    checkpoint_registry: CheckpointRegistry,
    evaluation_suites: EvaluationSuites,
) -> dg.MaterializeResult:
    """Paired per-task bootstrap of this checkpoint against its baseline (settings ``comparison.baseline``:
    the previous checkpoint by training step, or a fixed checkpoint id); deltas with intervals and flips."""
    settings = evaluation_suites.settings()
    suite_name = _suite_of(context, settings)
    current = context.partition_key
    options = settings.comparison
    if options.baseline == "previous":
        previous = previous_checkpoint(checkpoint_registry.checkpoints(), current)
        baseline = previous.checkpoint_id if previous else None
    else:
        baseline = options.baseline if options.baseline != current else None
    baseline_dir = run_storage.run_dir(suite_name, baseline) if baseline else None
    if baseline_dir is None or not (baseline_dir / "summary.json").exists():
        reason = "no earlier checkpoint" if baseline is None else f"baseline {baseline} has no {suite_name} summary yet"
        return dg.MaterializeResult(metadata={"suite": suite_name, "baseline": str(baseline), "status": f"skipped: {reason}"})
    run_dir = run_storage.run_dir(suite_name, current)
    with as_failure():
        comparison = core.compare_runs(
            baseline_dir,
            run_dir,
            bootstrap_samples=options.bootstrap_samples,
            bootstrap_seed=options.bootstrap_seed,
            confidence_level=options.confidence_level,
        )
    out = core.write_json_atomic(run_dir / f"comparison_vs_{baseline}.json", comparison)
    metrics = comparison["paired"]["metrics"]
    table = ["| metric | baseline | this | delta | interval |", "|---|---:|---:|---:|---|"]
    metadata: dict[str, Any] = {"suite": suite_name, "baseline": baseline, "status": "compared",
                                "pairs": int(comparison["paired"]["pairs"])}
    for name, values in sorted(metrics.items()):
        ci = values.get("confidence_interval")
        ci_text = f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "–"
        table.append(f"| {name} | {values['a_mean']:.4f} | {values['b_mean']:.4f} | {values['mean_difference']:+.4f} | {ci_text} |")
        if name in ("reward", "r_success", "protocol_error_rate", "steps"):
            metadata[f"delta_{name}"] = float(values["mean_difference"])
            if ci:
                metadata[f"delta_{name}_ci_low"] = float(ci[0])
                metadata[f"delta_{name}_ci_high"] = float(ci[1])
    flips = comparison["paired"].get("flips") or {}
    metadata.update(
        {
            "deltas": dg.MetadataValue.md("\n".join(table)),
            "flips_gained": int(flips.get("gained", 0)),
            "flips_lost": int(flips.get("lost", 0)),
            "flips": dg.MetadataValue.json(flips),
            "comparison_path": dg.MetadataValue.path(str(out)),
        }
    )
    return dg.MaterializeResult(metadata=metadata)
