"""The main demo: the whole lineage for a demo checkpoint, headless, against the built-in sandbox.

    python -m shopsimrl_dagster.demo          # what `make demo` runs

1. prepares the project's Dagster instance (``.dagster_home/``, with ``configs/pipeline/dagster.yaml``);
2. starts ``shopsim-sandbox serve`` on the ports of the pipeline settings and stops it at the end —
   or reuses servers already there only after verifying they are the sandbox serving the split
   file's catalog (a foreign server on those ports stops the demo with the fix);
3. registers the demo checkpoints of ``configs/demo/demo.yaml`` in the checkpoint registry and as
   partitions;
4. runs the location's own jobs into that instance: ``prepare_plans``, then per checkpoint
   ``evaluate_<suite>`` for each demo suite and ``build_skills``, then ``progress_charts``;
5. prints per-suite headline numbers and how to open the UI (``make ui``), which then shows all of it.

Re-running it resumes: finished episodes are never redone.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from shopsimrl_core import ConfigError, ShopSimRLError

from .defs.research import AnalystEndpoint
from .instance import prepare_dagster_home
from .registry import Checkpoint, read_registry, register_checkpoint
from .run_tags import TRIGGER_TAG
from .settings import REPO_ROOT, PipelineSettings, load_pipeline_settings

__all__ = ["DemoConfig", "load_demo_config", "LocalSandbox", "sandbox_mismatch", "run_demo", "main"]

DEFAULT_DEMO_CONFIG = REPO_ROOT / "configs" / "demo" / "demo.yaml"
# The sandbox serves its deterministic analyst where the analyst resource's default URL points.
ANALYST_DEMO_PORT = urlsplit(AnalystEndpoint.model_fields["base_url"].default).port or 5900
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


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


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def _get_json(url: str) -> tuple[int | None, Any]:
    try:
        response = httpx.get(url, timeout=2.0, trust_env=False)
    except httpx.HTTPError as exc:
        return None, type(exc).__name__
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, None


def _expected_catalog_sha256(split_file: Path) -> str | None:
    # The sandbox's split files record the SHA-256 of the catalog they were built from.
    try:
        source = json.loads(Path(split_file).read_text(encoding="utf-8")).get("source") or {}
    except (OSError, ValueError, AttributeError):
        return None
    value = source.get("cleaned_archive_sha256") if isinstance(source, dict) else None
    return value if isinstance(value, str) else None


def sandbox_mismatch(settings: PipelineSettings) -> str | None:
    """Why the servers of *settings* are not the shopsim sandbox serving the split file's catalog.

    Checks ``GET /sandbox/identity`` of the environment (a sandbox-only route: a real ShopSimulator
    answers 404) against ``source.cleaned_archive_sha256`` of ``split_file``, and that the policy's
    ``GET /models`` lists ``inference.served_model`` owned by ``shopsim-sandbox``. Returns None when
    both hold, else one phrase naming the first difference.
    """
    env_url = settings.environment.base_url.rstrip("/")
    policy_url = settings.inference.base_url.rstrip("/")
    status, identity = _get_json(f"{env_url}/sandbox/identity")
    if status != 200 or not isinstance(identity, dict) or identity.get("server") != "shopsim-sandbox":
        return f"{env_url} is not the shopsim sandbox (GET /sandbox/identity: {status or identity})"
    expected = _expected_catalog_sha256(settings.split_file)
    if identity.get("catalog_sha256") != expected:
        return (
            f"the sandbox at {env_url} serves catalog {str(identity.get('catalog_sha256'))[:12]}… "
            f"({identity.get('tasks')} tasks), but split_file {settings.split_file} was built from catalog "
            f"{str(expected)[:12]}…"
        )
    status, models = _get_json(f"{policy_url}/models")
    served = [m for m in (models.get("data") or []) if isinstance(m, dict)] if isinstance(models, dict) else []
    if not any(
        m.get("id") == settings.inference.served_model and m.get("owned_by") == "shopsim-sandbox" for m in served
    ):
        return (
            f"{policy_url} is not the sandbox policy serving {settings.inference.served_model!r} "
            f"(GET /models: {status or models})"
        )
    return None


class LocalSandbox:
    """``shopsim-sandbox serve`` on the environment and policy ports of the pipeline settings.

    If a server already answers on either port, it is used (and left alone) only when it is the
    sandbox serving the catalog of ``split_file`` (:func:`sandbox_mismatch`); anything else there —
    a real ShopSimulator, another model server, an old sandbox with another catalog — stops the demo
    with the fix. Otherwise, for loopback URLs, a sandbox is started in its own process group,
    checked the same way, and stopped on exit.
    """

    def __init__(self, settings: PipelineSettings, *, slots: int = 16, startup_timeout_s: float = 120.0) -> None:
        self.settings = settings
        self.env_url = settings.environment.base_url.rstrip("/")
        self.policy_url = settings.inference.base_url.rstrip("/")
        self.slots = slots
        self.startup_timeout_s = startup_timeout_s
        self.started = False
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> LocalSandbox:
        fix = (
            f"stop that server, or point environment.base_url / inference.base_url in {self.settings.source} "
            "at free loopback ports"
        )
        if _answers(f"{self.env_url}/healthz") or _answers(f"{self.policy_url}/models"):
            problem = sandbox_mismatch(self.settings)
            if problem is not None:
                raise DemoError(f"refusing to run the demo against a server it did not verify: {problem}; {fix}")
            return self
        env, policy = urlsplit(self.env_url), urlsplit(self.policy_url)
        if env.hostname not in _LOOPBACK or policy.hostname not in _LOOPBACK:
            raise DemoError(
                f"nothing answers at {self.env_url}/healthz or {self.policy_url}/models, and the demo starts a sandbox "
                "only on loopback URLs; start your servers or point SHOPSIMRL_PIPELINE_CONFIG at the sandbox settings"
            )
        self._workdir = tempfile.TemporaryDirectory(prefix="shopsimrl-demo-sandbox-")
        ready = Path(self._workdir.name) / "ready.json"
        log_path = Path(self._workdir.name) / "sandbox.log"
        argv = [
            sys.executable,
            "-m",
            "shopsim_sandbox.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(env.port or 80),
            "--policy-port",
            str(policy.port or 80),
            # The deterministic Trace2Skill analyst, where the analyst resource's default URL expects it.
            "--analyst-port",
            str(ANALYST_DEMO_PORT),
            "--slots",
            str(self.slots),
            "--ready-file",
            str(ready),
        ]
        with log_path.open("wb") as log:
            self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while not ready.exists():
            if self._process.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-600:].strip()
                self._stop()
                raise DemoError(
                    f"the sandbox did not start on ports {env.port}/{policy.port} "
                    f"({tail.splitlines()[-1] if tail else 'no output'}); "
                    "free the ports or change environment.base_url / inference.base_url in the pipeline settings"
                )
            time.sleep(0.05)
        # Another process may have won a port race, or split_file may belong to another catalog.
        problem = sandbox_mismatch(self.settings)
        if problem is not None:
            self._stop()
            raise DemoError(
                f"the started sandbox does not match the settings: {problem}; point split_file at "
                "configs/sandbox/persona_splits.sandbox.json (the catalog `shopsim-sandbox serve` serves by default)"
            )
        self.started = True
        return self

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __exit__(self, *exc: Any) -> None:
        self._stop()


def _register(settings: PipelineSettings, demo: DemoConfig) -> list[Checkpoint]:
    entries = []
    for path in demo.checkpoints:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError) as exc:
            raise ConfigError(
                f"{path}: cannot read demo checkpoint ({exc}); fix configs/demo/demo.yaml", code="demo-config-invalid"
            ) from None
        entry = Checkpoint(**{k: data.get(k) for k in ("checkpoint_id", "step", "served_model", "endpoint")})
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
        if comparison:
            print(
                f"  comparison   vs {comparison.get('baseline')}: delta reward "
                f"{_fmt(comparison.get('delta_reward'), 4)}"
            )
        else:
            print("  comparison   none (no earlier checkpoint with this suite)")
        print(f"  run dir      {rollout.get('run_dir')}")
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
    print("See them in the UI:  make ui     (or scripts/dagster-dev.sh; then open http://127.0.0.1:3000)")
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
        settings = load_pipeline_settings()
        demo = load_demo_config(args.demo_config)
        home = prepare_dagster_home(args.dagster_home)
        print(f"demo: settings {settings.source}")
        print(f"demo: dagster instance {home}; runs under {settings.runs_root}")
        with LocalSandbox(settings, slots=demo.slots, startup_timeout_s=demo.startup_timeout_s) as sandbox:
            how = (
                "started"
                if sandbox.started
                else "already running (verified: shopsim sandbox serving the split file's catalog)"
            )
            print(f"demo: sandbox {how}: environment {sandbox.env_url}, policy {sandbox.policy_url}")
            headlines = run_demo(settings, demo, home)
        if sandbox.started:
            print("demo: sandbox stopped (run `.venv/bin/shopsim-sandbox serve` to launch new rollouts from the UI)")
    except (ShopSimRLError, DemoError) as exc:
        text = exc.one_line() if isinstance(exc, ShopSimRLError) else str(exc)
        print(f"demo: error: {text}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    _print_headlines(headlines, settings, home)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
