"""The main demo: the whole lineage for a demo checkpoint, headless, against the built-in sandbox.

    python -m shopsimrl_dagster.demo          # what `make demo` runs

1. prepares the project's Dagster instance (``.dagster_home/``, with ``configs/pipeline/dagster.yaml``);
2. starts ``shopsim-sandbox serve`` (environment and analyst) on free ports, checks it serves the
   split file's catalog, and writes ``<instance>/pipeline.local.yaml`` pointing the settings in use at
   it (``shopsimrl_dagster.local_sandbox``); it is stopped at the end;
3. registers the demo checkpoints of ``configs/demo/demo.yaml`` (steps 100, 200, 300, each naming a
   policy checkpoint file as its weights) in the checkpoint registry and as partitions; every
   evaluation launches that checkpoint's policy server through ``inference.mode: launch``;
4. runs the location's own jobs into that instance: ``prepare_plans``, then per checkpoint
   ``evaluate_<suite>`` for each demo suite and ``build_skills``, then ``progress_charts``;
5. prints per-suite headline numbers and how to open the UI (``make ui``), which then shows all of it.

Re-running it resumes: finished episodes are never redone.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shopsimrl_core import ConfigError, ShopSimRLError

from .instance import PROJECT_DAGSTER_HOME, prepare_dagster_home
from .local_sandbox import LocalSandbox, SandboxError
from .registry import Checkpoint, read_entry, read_registry, register_checkpoint
from .run_tags import TRIGGER_TAG
from .settings import PIPELINE_CONFIG_ENV, REPO_ROOT, PipelineSettings, pipeline_config_path

__all__ = ["DemoConfig", "load_demo_config", "run_demo", "main"]

DEFAULT_DEMO_CONFIG = REPO_ROOT / "configs" / "demo" / "demo.yaml"


class DemoError(Exception):
    """The demo cannot proceed; the message says why and what to do."""


@dataclass(frozen=True)
class DemoConfig:
    """``configs/demo/demo.yaml``: demo checkpoints, suites and sandbox start-up settings."""

    checkpoints: list[Path]
    suites: list[str]
    slots: int = 16
    startup_timeout_s: float = 120.0


def load_demo_config(path: str | Path = DEFAULT_DEMO_CONFIG) -> DemoConfig:
    """Read the demo settings; checkpoint paths resolve against the file's folder.

    Raises:
        ConfigError: missing file, unknown key, or a bad value (one line naming file and key).
    """
    source = Path(path).resolve()
    try:
        raw = yaml.safe_load(source.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"{source}: demo settings file not found", code="demo-config-missing") from None
    allowed = {"checkpoints", "suites", "sandbox"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(
            f"{source}: {unknown[0]}: unknown key; valid keys: {', '.join(sorted(allowed))}", code="demo-config-invalid"
        )
    sandbox = raw.get("sandbox") or {}
    bad = sorted(set(sandbox) - {"slots", "startup_timeout_s"})
    if bad:
        raise ConfigError(
            f"{source}: sandbox.{bad[0]}: unknown key; valid keys: slots, startup_timeout_s", code="demo-config-invalid"
        )
    checkpoints = raw.get("checkpoints") or []
    suites = raw.get("suites") or []
    if not checkpoints or not all(isinstance(c, str) for c in checkpoints):
        raise ConfigError(
            f"{source}: checkpoints: must list at least one registry JSON file", code="demo-config-invalid"
        )
    if not suites or not all(isinstance(s, str) for s in suites):
        raise ConfigError(f"{source}: suites: must list at least one suite name", code="demo-config-invalid")
    return DemoConfig(
        checkpoints=[(source.parent / c).resolve() for c in checkpoints],
        suites=list(suites),
        slots=int(sandbox.get("slots", 16)),
        startup_timeout_s=float(sandbox.get("startup_timeout_s", 120.0)),
    )


def _register(settings: PipelineSettings, demo: DemoConfig) -> list[Checkpoint]:
    entries = []
    for path in demo.checkpoints:
        try:
            entry = read_entry(path)
        except ConfigError as exc:
            raise ConfigError(
                f"{exc.one_line()} (a demo checkpoint of configs/demo/demo.yaml)", code="demo-config-invalid"
            ) from None
        register_checkpoint(settings.checkpoint_registry, entry)
        entries.append(entry)
    registered = {c.checkpoint_id: c for c in read_registry(settings.checkpoint_registry)}
    return [registered[e.checkpoint_id] for e in entries]


def _failure_messages(result: Any) -> list[str]:
    messages = []
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            error = getattr(event.event_specific_data, "error", None)
            messages.append(f"{event.step_key}: {error.message.strip() if error else 'failed'}")
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            messages.append(f"check {evaluation.check_name} failed: {evaluation.description}")
    return messages


def _metadata_values(event: Any) -> dict[str, Any]:
    return {key: getattr(value, "value", value) for key, value in event.materialization.metadata.items()}


def run_demo(settings: PipelineSettings, demo: DemoConfig, dagster_home: Path) -> list[dict[str, Any]]:
    """Run the location's own jobs for every demo checkpoint into the instance at *dagster_home*.

    ``prepare_plans``; then per checkpoint ``evaluate_<suite>`` for each demo suite and
    ``build_skills``; then ``progress_charts``. Returns one headline dict per (checkpoint, suite)
    with the metadata of that suite's assets, plus the skills assets' metadata on the last suite's row.

    Raises:
        DemoError: a run failed (the message carries the failing step's or check's message).
    """
    import dagster as dg

    from .definitions import defs as location_defs
    from .defs.jobs import evaluation_job_name
    from .defs.partitions import CHECKPOINTS

    os.environ["DAGSTER_HOME"] = str(dagster_home)
    for name in demo.suites:
        settings.suite(name)
    entries = _register(settings, demo)
    instance = dg.DagsterInstance.get()
    try:
        definitions = location_defs()
        instance.add_dynamic_partitions(CHECKPOINTS, [e.checkpoint_id for e in entries])
        headlines: list[dict[str, Any]] = []

        def execute(job_name: str, **kwargs: Any) -> Any:
            job = definitions.resolve_job_def(job_name)
            # INFO keeps the rollout's progress lines and drops Dagster's per-event debug chatter.
            quiet = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
            result = job.execute_in_process(
                run_config=quiet, instance=instance, raise_on_error=False, tags={TRIGGER_TAG: "demo"}, **kwargs
            )
            problems = _failure_messages(result)
            if not result.success or problems:
                raise DemoError(f"{job_name} failed: " + " | ".join(problems or ["see the run in the UI"]))
            return result

        execute("prepare_plans")
        for entry in entries:
            for suite in demo.suites:
                started = time.monotonic()
                result = execute(evaluation_job_name(suite), partition_key=entry.checkpoint_id)
                row: dict[str, Any] = {
                    "checkpoint": entry.checkpoint_id,
                    "step": entry.step,
                    "suite": suite,
                    "wall_s": time.monotonic() - started,
                }
                for event in result.get_asset_materialization_events():
                    row[event.asset_key.path[-1]] = _metadata_values(event)
                headlines.append(row)
            skills = execute("build_skills", partition_key=entry.checkpoint_id)
            done = {
                event.asset_key.to_user_string(): _metadata_values(event)
                for event in skills.get_asset_materialization_events()
            }
            headlines[-1]["skills"] = done
            # The analyst path (Trace2Skill) over the same train run, with the sandbox's deterministic analyst.
            analyst = execute("analyst_skills", partition_key=entry.checkpoint_id)
            headlines[-1]["analyst"] = {
                event.asset_key.to_user_string(): _metadata_values(event)
                for event in analyst.get_asset_materialization_events()
            }
        execute("progress_charts")
        return headlines
    finally:
        instance.dispose()


def _fmt(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _print_headlines(headlines: list[dict[str, Any]], settings: PipelineSettings, home: Path) -> None:
    from shopsimrl_core.serving import SERVER_LOG_DIR

    from .report import delta_text  # imports dagster: only once the runs are done

    print()
    for row in headlines:
        summary = row.get("eval_summary", {})
        rollout = row.get("rollout_traces", {})
        comparison = row.get("checkpoint_comparison")
        print(f"checkpoint {row['checkpoint']} (step {row['step']}), suite {row['suite']}  [{row['wall_s']:.1f} s]")
        print(
            f"  episodes     {rollout.get('episodes_completed')}/{rollout.get('episodes_requested')} completed "
            f"(coverage {_fmt(rollout.get('coverage'), 2)}, {rollout.get('episodes_completed_before_this_run')} "
            "reused from earlier runs)"
        )
        print(f"  reward       {summary.get('reward_display')}")
        print(f"  success      {summary.get('success_display')}")
        print(
            f"  steps/ep     {_fmt(summary.get('steps_mean'), 2)}    protocol-error rate "
            f"{_fmt(summary.get('protocol_error_rate'))}"
        )
        if comparison and comparison.get("baseline"):  # the first checkpoint's says "no baseline"
            # The core's paired differences with their intervals and minimum detectable differences.
            deltas = [
                f"Δ {label} "
                + delta_text(
                    comparison.get(f"delta_{metric}"),
                    comparison.get(f"delta_{metric}_ci_low"),
                    comparison.get(f"delta_{metric}_ci_high"),
                    comparison.get(f"mde_{metric}"),
                    comparison.get(f"within_noise_{metric}"),
                )
                for metric, label in (("reward", "reward"), ("r_success", "success"))
            ]
            print(f"  comparison   vs {comparison.get('baseline')}: {', '.join(deltas)}")
        else:
            print("  comparison   none (no earlier checkpoint with this suite)")
        run_dir = rollout.get("run_dir")
        # A launched policy server (inference.mode launch) leaves its log there: say so where it is.
        logs = run_dir is not None and (Path(str(run_dir)) / SERVER_LOG_DIR).is_dir()
        note = f"     ({SERVER_LOG_DIR}/ holds the launched policy server's log)" if logs else ""
        print(f"  run dir      {run_dir}{note}")
        print(f"  episodes at  {rollout.get('episodes')}   (trace viewer: shopsimrl view {settings.runs_root})")
        skills = row.get("skills")
        if skills is not None:
            built = ", ".join(sorted(skills)) or "nothing (inputs missing; see the build_skills run log)"
            print(f"  skills       materialized: {built}")
            snapshot = skills.get("skillbank_snapshot")
            if snapshot:
                print(f"  skillbank    {snapshot.get('skills')} skills, {snapshot.get('path')}")
        analyst = row.get("analyst")
        if analyst is not None:
            draft = next(iter(analyst.values()), None)
            if draft:
                print(
                    f"  trace2skill  {draft.get('chunks')} chunks from {draft.get('evidence_cards')} evidence cards "
                    f"in {draft.get('clusters')} clusters ({draft.get('model_calls_this_run')} analyst calls this run)"
                )
            else:
                print("  trace2skill  not materialized (no train run; see the analyst_skills run log)")
    print()
    print(f"All materializations are stored in the Dagster instance {home}.")
    print("See them in the UI:  make ui     (or scripts/dagster-dev.sh; it prints the UI's URL: port 3000 when free)")
    print("  Catalog → suite_val / suite_train groups: <suite>/rollout_traces → eval_summary → checkpoint_comparison,")
    print(
        "  <suite>/progress (reward and success by training step); skills group: labels → candidates → gate → snapshot."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; exit 0 on success, 1 when a run or check failed, 2 on bad settings."""
    parser = argparse.ArgumentParser(prog="python -m shopsimrl_dagster.demo", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--demo-config", default=str(DEFAULT_DEMO_CONFIG), help="demo settings (default configs/demo/demo.yaml)"
    )
    parser.add_argument(
        "--dagster-home", default=None, help="instance folder (default .dagster_home/ or $SHOPSIMRL_DAGSTER_HOME)"
    )
    args = parser.parse_args(argv)
    try:
        demo = load_demo_config(args.demo_config)
        home = prepare_dagster_home(args.dagster_home)
        source = pipeline_config_path()
        print(f"demo: settings {source}")
        with LocalSandbox(
            home, source=source, slots=demo.slots, startup_timeout_s=demo.startup_timeout_s,
            # Another instance folder than the project's is a world of its own: runs and registry inside it.
            own_runs_root=home != PROJECT_DAGSTER_HOME.resolve(),
        ) as sandbox:
            assert sandbox.settings is not None
            settings = sandbox.settings
            print(f"demo: dagster instance {home}; runs under {settings.runs_root}")
            print(
                f"demo: sandbox started on free ports: environment {sandbox.env_url}, analyst {sandbox.analyst_url} "
                f"(settings for this sandbox: {sandbox.settings_path})"
            )
            # The location's definitions (and every run of them) read the settings that point at this sandbox.
            os.environ[PIPELINE_CONFIG_ENV] = str(sandbox.settings_path)
            headlines = run_demo(settings, demo, home)
        print("demo: sandbox stopped (`make ui` starts one of its own for new rollouts from the UI)")
    except (ShopSimRLError, DemoError, SandboxError) as exc:
        text = exc.one_line() if isinstance(exc, ShopSimRLError) else str(exc)
        print(f"demo: error: {text}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    _print_headlines(headlines, settings, home)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
