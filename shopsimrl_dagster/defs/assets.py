"""The evaluation lineage, one set of assets per suite:

    frozen_split → job_plan → <suite>/rollout_traces[ckpt] → <suite>/eval_summary[ckpt]
                                → <suite>/checkpoint_comparison[ckpt], <suite>/progress

Suite × checkpoint is the identity of every evaluation asset: the suite is part of the asset key
(``val/rollout_traces``, ``train/rollout_traces`` …) and the checkpoint is the partition. No run tag
picks the suite, so a job, sensor, schedule or backfill evaluates exactly the suite its assets name,
and the partition bar of ``train/eval_summary`` is green only where a train run happened
(docs/pipeline.md explains why this beats a multi-partition).

Each body reads its inputs, calls the core library and reports paths, hashes and the core's own
numbers (never recomputed here). Files on disk (``<runs_root>/<suite>/<checkpoint_id>/``) are the
system of record. An asset with nothing to do (no baseline to compare with, no summary to chart)
yields nothing: no materialization and no check result, rather than a fake "skipped" one.
"""

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

import shopsimrl_core as core

from ..eval_config import write_eval_config
from ..registry import previous_checkpoint
from ..report import (
    category_table,
    comparison_point,
    comparison_verdict,
    design_text,
    interval_note,
    mapping_table,
    progress_points,
    progress_table,
    rounded,
    write_category_chart,
    write_progress_chart,
)
from ..run_tags import ALLOW_TEST_RERUN_TAG, ALLOW_TEST_SPLIT_TAG, is_true
from ..settings import EvaluationSuite, PipelineSettings
from .checks import rollout_check_results, rollout_check_specs
from .optional import optional_asset
from .partitions import checkpoints
from .resources import CheckpointRegistry, EvaluationSuites, InferenceEndpoint, RunStorage, ShopSimulatorEnvironment
from .selection import REGRESSION_CHECK, build_best_checkpoint_asset, regression_check_result

__all__ = [
    "JOB_PLAN_SCHEMA",
    "ROLLOUT_RETRY_POLICY",
    "EVALUATION_ASSET_NAMES",
    "frozen_split",
    "job_plan",
    "suite_asset_key",
    "build_suite_assets",
    "as_failure",
    "viewer_run_url",
]

JOB_PLAN_SCHEMA = "shopsimrl-suite-job-plan-v1"
EVALUATION_ASSET_NAMES = ("rollout_traces", "eval_summary", "checkpoint_comparison")
"""The partitioned evaluation assets of one suite (what ``evaluate_<suite>`` materializes)."""
ROLLOUT_RETRY_POLICY = dg.RetryPolicy(max_retries=2, delay=5)
"""A crashed or interrupted rollout step is retried; resume makes that safe (finished episodes are kept)."""
_PLANS_GROUP = "plans"


@contextmanager
def as_failure() -> Iterator[None]:
    """Turn a ``ShopSimRLError`` raised in the body into a ``dg.Failure`` showing ``[code] message``.

    Core errors already say what is wrong and how to fix it; the run shows that line, not a
    traceback. Such errors are about configuration or data, so the step is not retried.
    """
    try:
        yield
    except core.ShopSimRLError as exc:
        raise dg.Failure(description=f"[{exc.code}] {exc.one_line()}", allow_retries=False) from exc


def suite_asset_key(suite: str, name: str) -> dg.AssetKey:
    """The key of evaluation asset *name* for *suite* (``<suite>/<name>``)."""
    return dg.AssetKey([suite, name])


def viewer_run_url(settings: PipelineSettings, run_storage: RunStorage, suite: str, checkpoint_id: str) -> str:
    """The trace viewer's page of one run (``<viewer.base_url>/run/<suite>/<checkpoint_id>``)."""
    return f"{settings.viewer.base_url.rstrip('/')}/run/{run_storage.run_rel(suite, checkpoint_id)}"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _num(value: Any) -> Any:
    """A float for metadata, or a null entry (Dagster plots floats; None is not a float)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else dg.MetadataValue.null()


def _cached_chart(path: Path, drawn: dict[str, Any], draw: Any) -> str:
    """The chart of *drawn* (exactly the inputs *draw* plots) as base64, reused when unchanged.

    ``<path>.sha256`` names the fingerprint of *drawn*. A resumed partition whose numbers did not
    change then skips matplotlib (its import and drawing were most of ``eval_summary``'s time);
    any change of what is plotted redraws. Fingerprinting the plotted inputs rather than the whole
    summary matters: the summary's ``created_at`` changes on every rewrite.
    """
    import base64

    stamp = path.with_name(path.name + ".sha256")
    digest = core.fingerprint(drawn)
    try:
        if stamp.read_text(encoding="ascii").strip() == digest:
            return base64.b64encode(path.read_bytes()).decode("ascii")
    except OSError:
        pass
    chart = draw()
    core.write_text_atomic(stamp, digest + "\n")
    return chart


# --------------------------------------------------------------------------- unpartitioned plans


@dg.asset(group_name=_PLANS_GROUP, kinds={"json"})
def frozen_split(evaluation_suites: EvaluationSuites) -> dg.MaterializeResult:
    """The frozen split file: validated (ids unique, declared hashes verified) and fingerprinted."""
    settings = evaluation_suites.settings()
    with as_failure():
        split_file = core.load_split_file(settings.split_file)
    rows = []
    metadata: dict[str, Any] = {}
    for name, split in sorted(split_file.splits.items()):
        rows.append(
            dg.TableRecord(
                {
                    "split": name,
                    "role": split.role or "–",
                    "guarded": bool(split.guarded),
                    "persona": bool(split.persona),
                    "tasks": split.task_count,
                    "task_ids_sha256": split.task_ids_sha256,
                }
            )
        )
        metadata[f"{name}_tasks"] = split.task_count
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("split", "string"),
            dg.TableColumn("role", "string"),
            dg.TableColumn("guarded", "bool"),
            dg.TableColumn("persona", "bool"),
            dg.TableColumn("tasks", "int"),
            dg.TableColumn("task_ids_sha256", "string"),
        ]
    )
    file_sha = core.sha256_file(split_file.path)
    metadata.update(
        {
            "path": dg.MetadataValue.path(str(split_file.path)),
            "file_sha256": file_sha,
            "split_version": str(split_file.version),
            "splits": dg.MetadataValue.table(rows, schema=schema),
        }
    )
    return dg.MaterializeResult(metadata=metadata, data_version=dg.DataVersion(file_sha[:16]))


@dg.asset(group_name=_PLANS_GROUP, deps=[frozen_split], kinds={"json"})
def job_plan(evaluation_suites: EvaluationSuites, run_storage: RunStorage) -> dg.MaterializeResult:
    """The deterministic job list of every evaluation suite (task-major, seeded), one file per suite."""
    settings = evaluation_suites.settings()
    with as_failure():
        split_file = core.load_split_file(settings.split_file)
    rows = []
    metadata: dict[str, Any] = {}
    for name, suite in sorted(settings.suites.items()):
        with as_failure():
            split = split_file.get(suite.split)
        if suite.sample_size is not None and suite.sample_size > split.task_count:
            raise dg.Failure(
                description=f"{settings.source}: suites.{name}.sample_size {suite.sample_size} exceeds the "
                f"{split.task_count} tasks of split {suite.split!r}; lower it or set null",
                allow_retries=False,
            )
        jobs = [
            job.to_dict()
            for job in core.plan_jobs(
                split.task_ids,
                split=suite.split,
                experiment_seed=suite.seed,
                sample_size=suite.sample_size,
                repeats=suite.repeats,
            )
        ]
        jobs_fingerprint = core.fingerprint(jobs)
        core.write_json_atomic(
            run_storage.plan_path(name),
            {
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
            },
        )
        rows.append(
            dg.TableRecord(
                {
                    "suite": name,
                    "split": suite.split,
                    "guarded": bool(split.guarded),
                    "tasks": len({job["task_id"] for job in jobs}),
                    "repeats": suite.repeats,
                    "episodes": len(jobs),
                    "jobs_fingerprint": jobs_fingerprint[:16],
                }
            )
        )
        metadata[f"{name}_episodes"] = len(jobs)
        metadata[f"{name}_jobs_fingerprint"] = jobs_fingerprint
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("suite", "string"),
            dg.TableColumn("split", "string"),
            dg.TableColumn("guarded", "bool"),
            dg.TableColumn("tasks", "int"),
            dg.TableColumn("repeats", "int"),
            dg.TableColumn("episodes", "int"),
            dg.TableColumn("jobs_fingerprint", "string"),
        ]
    )
    metadata["suites"] = dg.MetadataValue.table(rows, schema=schema)
    metadata["plans_dir"] = dg.MetadataValue.path(str(run_storage.plan_path("x").parent))
    return dg.MaterializeResult(metadata=metadata)


# --------------------------------------------------------------------------- per-suite assets


def _rollout_metadata(
    *,
    suite_name: str,
    checkpoint: Any,
    result: Any,
    audit: core.TraceAudit,
    manifest: dict[str, Any] | None,
    completed_before: int,
    wall_s: float,
    model_base_url: str,
    served_model: str,
    env_health: dict[str, Any],
    endpoint_health: dict[str, Any],
    environment_url: str,
    config_path: Path,
    run_dir: Path,
    viewer_url: str,
) -> dict[str, Any]:
    counts = result.summary.get("counts", {})
    tokens = result.summary.get("cost", {}).get("tokens", {})
    return {
        "suite": suite_name,
        "checkpoint_step": checkpoint.step,
        "served_model": served_model,
        "endpoint": model_base_url,
        "served_weights": dg.MetadataValue.json(served) if (served := (manifest or {}).get("plan", {}).get(
            "model", {}).get("served")) else dg.MetadataValue.null(),
        "environment": environment_url,
        "coverage": float(counts.get("coverage") or 0.0),
        "episodes_requested": int(counts.get("requested") or 0),
        "episodes_completed": int(counts.get("completed") or 0),
        "episodes_failed": int(counts.get("failed") or 0),
        "episodes_completed_before_this_run": completed_before,
        "attempts_this_run": int(result.attempts),
        "failures_by_stage": dg.MetadataValue.json(audit.failures_by_stage),
        "trace_lines": audit.lines,
        "total_tokens": int(tokens.get("total_tokens") or 0),
        "tokens": dg.MetadataValue.json(tokens),
        "wall_time_s": round(wall_s, 3),
        "plan_fingerprint": str((manifest or {}).get("plan_fingerprint")),
        "test_access": dg.MetadataValue.json(access) if isinstance(access := (manifest or {}).get("test_access"), dict)
        else dg.MetadataValue.null(),
        "episodes": dg.MetadataValue.url(viewer_url),
        "traces": dg.MetadataValue.path(str(result.traces_path)),
        "run_dir": dg.MetadataValue.path(str(run_dir)),
        "eval_config": dg.MetadataValue.path(str(config_path)),
        "environment_health": dg.MetadataValue.json(
            {k: env_health.get(k) for k in ("environment_version", "observation_version", "environment_slots", "tasks")}
        ),
        "endpoint_models": dg.MetadataValue.json(endpoint_health["models"]),
    }


def _summary_metadata(
    summary: dict[str, Any], suite_name: str, run_dir: Path, chart_b64: str, chart_path: Path, viewer_url: str
) -> dict[str, Any]:
    counts, primary, behavior = summary["counts"], summary["primary"], summary["behavior"]
    success_ci = primary.get("success_ci") or {}
    reward_ci = primary.get("reward_ci") or {}
    design = primary.get("sampling_design")
    reward, success = primary.get("reward_mean"), primary.get("success_rate")
    components = summary.get("reward_components") or {}
    metadata: dict[str, Any] = {
        "suite": suite_name,
        # Rounded text for reading first, labelled by the interval's own method (task-resampled with
        # repeats), then the raw floats (the UI plots these across partitions).
        "reward_display": rounded(
            reward, reward_ci.get("low"), reward_ci.get("high"), interval_note(reward_ci, design, "reward")
        ),
        "success_display": rounded(
            success, success_ci.get("low"), success_ci.get("high"), interval_note(success_ci, design, "success")
        ),
        # Raw floats (the UI plots these across partitions) beside rounded text for reading.
        "reward": _num(reward),
        "reward_ci_low": _num(reward_ci.get("low")),
        "reward_ci_high": _num(reward_ci.get("high")),
        "reward_sem": _num(primary.get("reward_sem")),
        "success_rate": _num(success),
        "success_ci_low": _num(success_ci.get("low")),
        "success_ci_high": _num(success_ci.get("high")),
        "reward_components": dg.MetadataValue.table(*mapping_table(components, "component", "mean")),
        "steps_mean": _num(behavior.get("steps_mean")),
        "protocol_error_rate": float(behavior.get("protocol_error_rate") or 0.0),
        "invalid_action_rate": float(behavior.get("invalid_action_rate") or 0.0),
        "termination_reasons": dg.MetadataValue.table(
            *mapping_table(behavior.get("termination_reasons") or {}, "reason", "episodes")
        ),
        "per_category": dg.MetadataValue.table(*category_table(summary)),
        "chart": dg.MetadataValue.md(f"![success and reward by category](data:image/png;base64,{chart_b64})"),
        "chart_path": dg.MetadataValue.path(str(chart_path)),
        "coverage": float(counts.get("coverage") or 0.0),
        "episodes_completed": int(counts.get("completed") or 0),
        "episodes": dg.MetadataValue.url(viewer_url),
        "summary_path": dg.MetadataValue.path(str(run_dir / "summary.json")),
    }
    if design:
        # Repeats: tasks are the sampling unit (docs/statistics.md); the core's design, as published.
        effects = design.get("design_effect") or {}
        metadata.update(
            {
                "sampling_design": design_text(summary),
                "tasks": int(design["tasks"]),
                "design_effect_reward": _num(effects.get("reward")),
                "design_effect_success": _num(effects.get("success")),
                "reward_sem_task_cluster": _num(design.get("reward_sem")),
                "sampling_design_detail": dg.MetadataValue.json(design),
            }
        )
    for name, value in sorted(components.items()):
        if isinstance(value, (int, float)):
            metadata[f"component_{name}"] = float(value)
    return metadata


def build_suite_assets(name: str, suite: EvaluationSuite) -> list[dg.AssetsDefinition]:
    """The four assets of suite *name*, keyed ``<name>/<asset>``.

    rollout_traces, eval_summary and checkpoint_comparison are partitioned by checkpoint; progress
    charts every checkpoint's summary of the suite.
    """
    group = f"suite_{name}"
    rollout_key = suite_asset_key(name, "rollout_traces")
    summary_key = suite_asset_key(name, "eval_summary")
    comparison_key = suite_asset_key(name, "checkpoint_comparison")
    progress_key = suite_asset_key(name, "progress")
    described = f"suite {name!r} ({suite.split} split)"

    @dg.asset(
        key=rollout_key,
        group_name=group,
        deps=[job_plan],
        partitions_def=checkpoints,
        check_specs=rollout_check_specs(rollout_key),
        retry_policy=ROLLOUT_RETRY_POLICY,
        kinds={"python"},
        description=f"Episode traces of one checkpoint on {described} (``runs/{name}/<checkpoint>/traces.jsonl``). "
        "Resumable: a retried or re-materialized partition continues the run directory and never redoes a "
        "finished episode. Health checks run first, so a dead endpoint fails fast with its URL.",
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
        env_health = shopsim_environment.health_check()
        endpoint_health = inference_endpoint.health_check(checkpoint)
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

        with as_failure():
            config = core.load_config(config_path)
            result = core.run_evaluation(
                config,
                progress=log_progress,
                allow_test_split=allow_test,
                allow_test_rerun=is_true(context.run.tags.get(ALLOW_TEST_RERUN_TAG)),
                opt_in_source=f"dagster run {context.run.run_id} ({ALLOW_TEST_SPLIT_TAG}=true)",
            )
        audit = core.audit_traces(result.traces_path)
        manifest = _read_json(run_dir / "manifest.json")
        check_results = rollout_check_results(
            asset_key=rollout_key,
            coverage=result.summary.get("counts", {}).get("coverage"),
            audit=audit,
            manifest=manifest,
            job_plan=_read_json(run_storage.plan_path(name)),
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
            completed_before=before.get(
                "done", int(result.summary.get("counts", {}).get("completed") or 0) if result.attempts == 0 else 0
            ),
            wall_s=time.monotonic() - started,
            model_base_url=inference_endpoint.base_url_for(checkpoint),
            served_model=inference_endpoint.model_for(checkpoint),
            env_health=env_health,
            endpoint_health=endpoint_health,
            environment_url=shopsim_environment.base_url,
            config_path=config_path,
            run_dir=run_dir,
            viewer_url=viewer_run_url(settings, run_storage, name, checkpoint.checkpoint_id),
        )
        return dg.MaterializeResult(metadata=metadata, check_results=check_results)

    @dg.asset(
        key=summary_key,
        group_name=group,
        deps=[rollout_traces],
        partitions_def=checkpoints,
        kinds={"json"},
        description=f"The core's summary.json of one checkpoint on {described}: headline numbers with intervals, "
        "per-category table and chart, and a link to its episodes in the trace viewer.",
    )
    def eval_summary(
        context: dg.AssetExecutionContext, run_storage: RunStorage, evaluation_suites: EvaluationSuites
    ) -> dg.MaterializeResult:
        settings = evaluation_suites.settings()
        run_dir = run_storage.run_dir(name, context.partition_key)
        # The rollout's run_evaluation wrote this summary; reading it shows the core's numbers as they are.
        summary = _read_json(run_dir / "summary.json")
        if summary is None or "primary" not in summary:
            with as_failure():
                summary = core.summarize_run(run_dir)
        chart_path = run_dir / "summary_chart.png"
        title = f"{context.partition_key} · suite {name}"
        chart = _cached_chart(
            chart_path,
            # "chart": the drawing's version (2: interval bars and sampling units), so older PNGs are redrawn.
            {"chart": 2, "title": title, "category": (summary.get("breakdowns") or {}).get("category"),
             "clustered": bool((summary.get("primary") or {}).get("sampling_design"))},
            lambda: write_category_chart(chart_path, summary, title),
        )
        url = viewer_run_url(settings, run_storage, name, context.partition_key)
        return dg.MaterializeResult(metadata=_summary_metadata(summary, name, run_dir, chart, chart_path, url))

    @optional_asset(
        comparison_key,
        name=f"{name}_checkpoint_comparison",
        deps=[summary_key],
        group=group,
        kinds={"json"},
        description=f"Paired per-task bootstrap of one checkpoint against its baseline on {described} (settings "
        "comparison.baseline). Not materialized when there is no baseline run.",
        checks=[REGRESSION_CHECK],
    )
    def checkpoint_comparison(
        context: dg.AssetExecutionContext,
        run_storage: RunStorage,
        checkpoint_registry: CheckpointRegistry,
        evaluation_suites: EvaluationSuites,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        settings = evaluation_suites.settings()
        current = context.partition_key
        options = settings.comparison
        if options.baseline == "previous":
            previous = previous_checkpoint(checkpoint_registry.checkpoints(), current)
            baseline = previous.checkpoint_id if previous else None
        else:
            baseline = options.baseline if options.baseline != current else None
        baseline_dir = run_storage.run_dir(name, baseline) if baseline else None
        if baseline_dir is None or not (baseline_dir / "summary.json").exists():
            reason = "no earlier checkpoint" if baseline is None else f"baseline {baseline} has no {name} summary yet"
            context.log.info(f"checkpoint_comparison not materialized for {current} on {name}: {reason}")
            return
        run_dir = run_storage.run_dir(name, current)
        assert baseline is not None  # baseline_dir exists only for a baseline
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
        rows = []
        metadata: dict[str, Any] = {"suite": name, "baseline": baseline, "pairs": int(comparison["paired"]["pairs"])}
        for metric, values in sorted(metrics.items()):
            ci = values.get("confidence_interval")
            mde, sd, noise = (values.get(k) for k in ("minimum_detectable_difference", "sd_difference", "within_noise"))
            rows.append(
                dg.TableRecord(
                    {
                        "metric": metric,
                        "baseline": round(float(values["a_mean"]), 4),
                        "this": round(float(values["b_mean"]), 4),
                        "delta": round(float(values["mean_difference"]), 4),
                        "interval": f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "–",
                        "mde": None if mde is None else round(float(mde), 4),
                        "sd_difference": None if sd is None else round(float(sd), 4),
                        "verdict": comparison_verdict(values),
                    }
                )
            )
            if metric in ("reward", "r_success", "protocol_error_rate", "steps"):
                metadata[f"delta_{metric}"] = float(values["mean_difference"])
                if ci:
                    metadata[f"delta_{metric}_ci_low"] = float(ci[0])
                    metadata[f"delta_{metric}_ci_high"] = float(ci[1])
            if metric in ("reward", "r_success"):
                # The core's power fields (docs/statistics.md): how large a difference this design detects.
                metadata[f"mde_{metric}"] = _num(mde)
                metadata[f"sd_difference_{metric}"] = _num(sd)
                metadata[f"within_noise_{metric}"] = dg.MetadataValue.null() if noise is None else bool(noise)
                metadata[f"verdict_{metric}"] = comparison_verdict(values)
        flips = comparison["paired"].get("flips") or {}
        schema = dg.TableSchema(
            columns=[
                dg.TableColumn("metric", "string"),
                dg.TableColumn("baseline", "float"),
                dg.TableColumn("this", "float"),
                dg.TableColumn("delta", "float"),
                dg.TableColumn("interval", "string", description="paired task-level bootstrap interval of delta"),
                dg.TableColumn(
                    "mde", "float", description="minimum detectable difference (80% power, alpha 0.05, paired tasks)"
                ),
                dg.TableColumn("sd_difference", "float", description="SD of the task-level differences"),
                dg.TableColumn("verdict", "string", description="within noise (interval covers 0) or detected"),
            ]
        )
        power = comparison["paired"].get("power")
        metadata.update(
            {
                "power": dg.MetadataValue.json(power) if power else dg.MetadataValue.null(),
                "deltas": dg.MetadataValue.table(rows, schema=schema),
                "flips_gained": int(flips.get("gained", 0)),
                "flips_lost": int(flips.get("lost", 0)),
                "flips": dg.MetadataValue.json(flips),
                "comparison_path": dg.MetadataValue.path(str(out)),
                "compare_in_viewer": dg.MetadataValue.url(
                    f"{settings.viewer.base_url.rstrip('/')}/compare?a={run_storage.run_rel(name, baseline)}"
                    f"&b={run_storage.run_rel(name, current)}"
                ),
            }
        )
        yield dg.MaterializeResult(asset_key=comparison_key, metadata=metadata)
        registered = checkpoint_registry.checkpoints()
        yield regression_check_result(
            asset_key=comparison_key,
            suite=name,
            current=next(c for c in registered if c.checkpoint_id == current),
            checkpoints=registered,
            run_storage=run_storage,
            options=options,
            comparison_with=(baseline, comparison),
        )

    @optional_asset(
        progress_key,
        name=f"{name}_progress",
        deps=[summary_key],
        group=group,
        kinds={"json"},
        description=f"Reward and success (95% intervals) of every checkpoint on {described}, against training step, "
        "with the minimum detectable difference of each checkpoint's comparison with the one before it. "
        "Not materialized while no checkpoint has a summary.",
        partitioned=False,
    )
    def progress(
        context: dg.AssetExecutionContext,
        run_storage: RunStorage,
        checkpoint_registry: CheckpointRegistry,
        evaluation_suites: EvaluationSuites,
    ) -> Iterator[dg.MaterializeResult]:
        settings = evaluation_suites.settings()
        points = progress_points(
            (c.checkpoint_id, c.step, _read_json(run_storage.run_dir(name, c.checkpoint_id) / "summary.json"))
            for c in checkpoint_registry.checkpoints()
        )
        if not points:
            context.log.info(f"progress not materialized: no checkpoint has a {name} summary yet")
            return
        # The comparison of each point with the one before it, where checkpoint_comparison wrote one.
        for before, point in zip(points, points[1:]):
            path = run_storage.run_dir(name, point["checkpoint_id"]) / f"comparison_vs_{before['checkpoint_id']}.json"
            found = _read_json(path)
            if found is None:
                continue
            try:
                doc = core.CheckpointComparison.parse(found, str(path)).to_json()
            except core.ShopSimRLError as exc:
                context.log.warning(f"progress: {exc.one_line()}; its comparison is left out")
                continue
            point["vs_previous"] = comparison_point(before["checkpoint_id"], doc)
        out_dir = run_storage.progress_dir(name)
        chart = write_progress_chart(
            out_dir / "progress.png", points, f"suite {name} · reward and success by training step"
        )
        core.write_json_atomic(out_dir / "progress.json", {"suite": name, "points": points})
        latest = points[-1]
        yield dg.MaterializeResult(
            asset_key=progress_key,
            metadata={
                "suite": name,
                "checkpoints": len(points),
                "latest_checkpoint": latest["checkpoint_id"],
                "latest_step": latest["step"],
                "latest_reward": _num(latest["reward"]),
                "latest_success_rate": _num(latest["success_rate"]),
                # The minimum detectable difference of the latest comparison with the point before it.
                "latest_mde_reward": _num(((latest["vs_previous"] or {}).get("reward") or {}).get(
                    "minimum_detectable_difference")),
                "latest_mde_r_success": _num(((latest["vs_previous"] or {}).get("r_success") or {}).get(
                    "minimum_detectable_difference")),
                "chart": dg.MetadataValue.md(
                    f"![{name}: reward and success by training step](data:image/png;base64,{chart})"
                ),
                "points": dg.MetadataValue.table(*progress_table(points)),
                "chart_path": dg.MetadataValue.path(str(out_dir / "progress.png")),
                "runs_in_viewer": dg.MetadataValue.url(settings.viewer.base_url.rstrip("/") + "/"),
            },
        )

    best = build_best_checkpoint_asset(name, group, summary_key)
    return [rollout_traces, eval_summary, checkpoint_comparison, progress, best]
