"""Checkpoints, not URLs: the pipeline's `inference` section is the core's `model` section (every key passes
through), a checkpoint given as weights is launched for its run (the same plan and numbers as `shopsimrl run`
with the same weights), and a launched server left by a SIGKILLed run worker and keeper is stopped by the next run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster_helpers import materialized, run_job, trace_lines

from shopsim_sandbox.testing import SandboxServer
from shopsimrl_core import ConfigError, load_config
from shopsimrl_core.runs import ModelConfig
from shopsimrl_core.serving import group_alive
from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.defs.resources import resources_from_settings
from shopsimrl_dagster.eval_config import write_eval_config
from shopsimrl_dagster.registry import Checkpoint
from shopsimrl_dagster.settings import load_pipeline_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
WEIGHTS = REPO_ROOT / "configs" / "demo" / "checkpoints" / "weights"
CHILD = Path(__file__).with_name("rollout_child.py")

# A valid value other than the core's default for every key of the core's `model` section. A key the
# core adds later fails the first assertion below until it is listed here (and so checked).
NON_DEFAULT: dict[str, Any] = {
    "name": "served-name",
    "base_url": "http://10.1.2.3:30000/v1",
    "api_key_env": "MY_ENDPOINT_KEY",
    "temperature": 0.6,
    "top_p": 0.9,
    "max_tokens": 300,
    "timeout": 61.0,
    "max_retries": 2,
    "retry_backoff_seconds": 0.25,
    "trust_env": False,
    "stream": True,
    "send_seed": False,
    "seed_mod_2_32": True,
    "tool_choice": "required",
    "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
    "max_connections": 7,
    "http_transport": "httpx",
    "base_urls": ["http://10.1.2.3:30000/v1", "http://10.1.2.4:30000/v1"],
    "replica_max_in_flight": 3,
    "replica_probe_seconds": 4.5,
    "tool_call_content": "empty",
}
PER_CHECKPOINT = {"id", "checkpoint_id"}


def _write(path: Path, mutate: Any) -> Path:
    settings = yaml.safe_load(path.read_text(encoding="utf-8"))
    mutate(settings)
    path.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
    return path


def test_every_core_model_key_passes_through_the_inference_section_by_name(tmp_path: Path, settings_writer) -> None:
    assert set(NON_DEFAULT) == set(ModelConfig.model_fields) - PER_CHECKPOINT
    for key, value in NON_DEFAULT.items():
        assert value != ModelConfig.model_fields[key].default, key

    def everything(settings: dict[str, Any]) -> None:
        settings["inference"] = {"mode": "external", "max_in_flight": 5, **NON_DEFAULT}
        settings["suites"]["val"]["sampling"] = {}  # the suite sets nothing: the inference section's values hold

    path = _write(settings_writer(tmp_path), everything)
    settings = load_pipeline_settings(path)
    resources = resources_from_settings(settings)
    config_path = write_eval_config(
        run_storage=resources["run_storage"],
        suite_name="val",
        suite=settings.suite("val"),
        checkpoint=Checkpoint("ckpt-7", 7),
        inference=resources["inference_endpoint"],
        environment=resources["shopsim_environment"],
        split_file=settings.split_file,
    )
    model = load_config(config_path).model
    for key, value in NON_DEFAULT.items():
        assert getattr(model, key) == value, key
    assert (model.id, model.checkpoint_id) == ("ckpt-7", "ckpt-7")

    # A suite's sampling wins for the sampling keys; the rest stays the section's.
    path = _write(path, lambda s: s["suites"]["val"].update(sampling={"temperature": 0.1, "max_tokens": 64}))
    settings = load_pipeline_settings(path)
    suite_model = load_config(
        write_eval_config(
            run_storage=resources["run_storage"],
            suite_name="val",
            suite=settings.suite("val"),
            checkpoint=Checkpoint("ckpt-7", 7),
            inference=resources_from_settings(settings)["inference_endpoint"],
            environment=resources["shopsim_environment"],
            split_file=settings.split_file,
        )
    ).model
    assert (suite_model.temperature, suite_model.max_tokens, suite_model.tool_call_content) == (0.1, 64, "empty")

    # Keys that belong to the checkpoint, and bad values, are refused in one line naming the key.
    for bad, message in (
        ({"checkpoint_id": "x"}, "inference.checkpoint_id: set per checkpoint"),
        ({"tool_call_content": "nil"}, "inference.tool_call_content: Input should be 'null', 'empty' or 'omit'"),
        ({"temprature": 0.5}, "inference.temprature: unknown key; valid keys: api_key_env,"),
    ):
        _write(path, lambda s, bad=bad: s.update(inference={"mode": "external", **bad}))
        with pytest.raises(ConfigError) as error:
            load_pipeline_settings(path)
        assert message in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_the_first_pipeline_names_still_load(tmp_path: Path, settings_writer) -> None:
    path = _write(
        settings_writer(tmp_path),
        lambda s: s.update(inference={"base_url": "http://h:1/v1", "served_model": "m", "timeout_s": 9}),
    )
    inference = load_pipeline_settings(path).inference
    assert (inference.name, inference.core().timeout, inference.mode) == ("m", 9, "external")


def _launch_settings(path: Path, **launch: Any) -> Path:
    def mutate(settings: dict[str, Any]) -> None:
        settings["inference"]["mode"] = "launch"
        settings["inference"]["launch"] = {"server": "shopsim_sandbox", "gpus": ["0", "1"], **launch}

    return _write(path, mutate)


@pytest.mark.slow
def test_a_checkpoint_given_as_weights_gives_the_same_plan_and_numbers_through_the_cli_and_dagster(
    tmp_path: Path, settings_writer, register, sandbox
) -> None:
    path = _launch_settings(
        settings_writer(tmp_path, env_url=sandbox.env_url, split_file=sandbox.split_file, val_sample=12)
    )
    settings = load_pipeline_settings(path)
    weights = str(WEIGHTS / "policy-step-000300.json")
    register(settings, "w-300", 300, weights=weights)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["w-300"])
        location = build_definitions(settings)
        run_job(location, "prepare_plans", instance)
        result = run_job(location, "evaluate_val", instance, "w-300")
        rollout = materialized(result, "val/rollout_traces")
        assert rollout["served_weights"]["server"] == "shopsim_sandbox"
        assert rollout["served_weights"]["weights"]["ref"] == weights
        messages = [e.user_message for e in instance.all_logs(result.run_id)]
        assert any(m.startswith("started inference server") for m in messages)
        assert any(m.startswith("stopped inference server") for m in messages)
    dagster_dir = settings.runs_root / "val" / "w-300"

    # The same checkpoint by hand: a config naming the weights and the launch template, run by the CLI.
    cli_config = tmp_path / "by-hand.yaml"
    cli_config.write_text(yaml.safe_dump({
        "experiment": {"name": "w-300", "output_dir": str(tmp_path / "cli-runs"), "seed": 20260830,
                       "concurrency": 4},
        "tasks": {"split_file": str(sandbox.split_file), "split": "val", "sample_size": 12},
        "environment": {"base_url": sandbox.env_url},
        "runtime": {"max_steps": 30},
        "model": {"id": "w-300", "checkpoint_id": "w-300", "name": "w-300", "api_key_env": None, "trust_env": False,
                  "temperature": 0.0, "max_tokens": 512},
        "serve": {"server": "shopsim_sandbox", "weights": weights},
    }), encoding="utf-8")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "shopsimrl_core.cli._main", "run", "--progress", "none", str(cli_config)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    cli_dir = tmp_path / "cli-runs" / "w-300"
    manifests = [json.loads((d / "manifest.json").read_text()) for d in (dagster_dir, cli_dir)]
    assert manifests[0]["plan_fingerprint"] == manifests[1]["plan_fingerprint"]
    assert manifests[0]["plan"] == manifests[1]["plan"]
    summaries = [json.loads((d / "summary.json").read_text()) for d in (dagster_dir, cli_dir)]
    assert summaries[0]["primary"] == summaries[1]["primary"]


def _run_worker_writing(
    settings_path: Path, checkpoint_id: str, traces: Path, lines: int, log: Path
) -> subprocess.Popen[bytes]:
    """A run worker (rollout_child.py) materializing *checkpoint_id*, once it has written *lines* trace lines."""
    with log.open("wb") as sink:
        child = subprocess.Popen([sys.executable, str(CHILD), str(settings_path), checkpoint_id], stdout=sink,
                                 stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 180  # a wait for progress, not an assertion on speed
    while len(trace_lines(traces)) < lines:
        assert child.poll() is None, f"the child exited early:\n{log.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, "the rollout never started writing traces"
        time.sleep(0.05)
    return child


@pytest.mark.slow
def test_a_server_orphaned_by_a_sigkilled_run_worker_is_stopped_by_the_next_run(
    tmp_path: Path, settings_writer, register
) -> None:
    episodes = 24
    with SandboxServer(slots=4, latency_ms=25, policy=False) as server:
        path = _launch_settings(
            settings_writer(
                tmp_path, env_url=server.env_url, split_file=server.split_file, val_sample=episodes, max_in_flight=3
            ),
            extra_args=["--latency-ms", "40"],
        )
        settings = load_pipeline_settings(path)
        register(settings, "w-100", 100, weights=str(WEIGHTS / "policy-step-000100.json"))
        traces = settings.runs_root / "val" / "w-100" / "traces.jsonl"
        records_dir = settings.runs_root / "_servers"
        child = _run_worker_writing(path, "w-100", traces, 5, tmp_path / "child.log")
        # The server's owner is its pool keeper (a session of its own): SIGKILL the run worker and the keeper,
        # as a node's OOM killer might; the server lives on, orphaned, holding its devices.
        [orphan] = [json.loads(p.read_text()) for p in records_dir.glob("server-*.json")]
        assert orphan["owner_pid"] != child.pid
        os.kill(child.pid, signal.SIGKILL)
        os.kill(orphan["owner_pid"], signal.SIGKILL)
        child.wait(timeout=30)
        pgid = orphan["pgid"]
        assert group_alive(pgid), "the server must outlive its SIGKILLed run worker for this test"
        before = {r["episode_id"] for r in trace_lines(traces) if r.get("status") == "completed"}
        assert 5 <= len(before) < episodes

        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("checkpoints", ["w-100"])
            location = build_definitions(settings)
            run_job(location, "prepare_plans", instance)
            result = run_job(location, "evaluate_val", instance, "w-100")
            messages = [e.user_message for e in instance.all_logs(result.run_id)]
        stopped = [m for m in messages if m.startswith(f"stopped orphaned inference server pgid {pgid}")]
        assert stopped and f"its owner pid {orphan['owner_pid']} is gone" in stopped[0]
        # The orphan was stopped before the new server started.
        assert messages.index(stopped[0]) < next(i for i, m in enumerate(messages) if m.startswith("started inference"))
        assert not group_alive(pgid)
        assert not list(records_dir.glob("server-*.json"))
        metadata = materialized(result, "val/rollout_traces")
        assert metadata["episodes_completed_before_this_run"] == len(before) and metadata["coverage"] == 1.0
        completed = Counter(r["episode_id"] for r in trace_lines(traces) if r.get("status") == "completed")
        assert len(completed) == episodes and max(completed.values()) == 1


@pytest.mark.slow
def test_sigterm_to_a_run_worker_stops_its_launched_server(tmp_path: Path, settings_writer, register) -> None:
    """What Dagster's run termination (and a node drain) sends a run worker: its server's group goes with it."""
    with SandboxServer(slots=4, latency_ms=25, policy=False) as server:
        path = _launch_settings(
            settings_writer(tmp_path, env_url=server.env_url, split_file=server.split_file, val_sample=40),
            extra_args=["--latency-ms", "100"],
        )
        settings = load_pipeline_settings(path)
        register(settings, "w-200", 200, weights=str(WEIGHTS / "policy-step-000200.json"))
        traces = settings.runs_root / "val" / "w-200" / "traces.jsonl"
        log = tmp_path / "child.log"
        child = _run_worker_writing(path, "w-200", traces, 2, log)
        [record] = [json.loads(p.read_text()) for p in (settings.runs_root / "_servers").glob("server-*.json")]
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=120)
        assert not group_alive(record["pgid"])
        assert not list((settings.runs_root / "_servers").glob("server-*.json"))
        assert f"stopped inference server pgid {record['pgid']}" in log.read_text(errors="replace")


@pytest.mark.slow
def test_a_run_that_materializes_two_suites_of_a_checkpoint_loads_it_once(
    tmp_path: Path, settings_writer, register, sandbox
) -> None:
    """Issue 32: the val and train rollouts of one launched checkpoint in one run share one server (idle_timeout 0:
    the run holds it until it ends, then stops it); a re-materialization with nothing left to do starts none."""
    path = settings_writer(tmp_path, env_url=sandbox.env_url, split_file=sandbox.split_file, val_sample=6)
    path = _launch_settings(path)
    _write(path, lambda s: s["suites"]["train"].update(sample_size=6, repeats=1))
    settings = load_pipeline_settings(path)
    register(settings, "w-100", 100, weights=str(WEIGHTS / "policy-step-000100.json"))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["w-100"])
        location = build_definitions(settings)
        run_job(location, "prepare_plans", instance)
        assets = list({id(a): a for a in location.get_repository_def().assets_defs_by_key.values()}.values())
        result = dg.materialize(
            assets,
            selection=[dg.AssetKey(["val", "rollout_traces"]), dg.AssetKey(["train", "rollout_traces"])],
            partition_key="w-100",
            instance=instance,
        )
        assert result.success
        messages = [e.user_message for e in instance.all_logs(result.run_id)]
        # Re-materialized with nothing left to do: no server at all.
        again = run_job(location, "evaluate_val", instance, "w-100")
        rerun = [e.user_message for e in instance.all_logs(again.run_id)]
    assert not any("inference server pgid" in m for m in rerun), rerun
    assert any(m.startswith("nothing left to run: all 6 planned episodes are complete") for m in rerun), rerun
    started = [m for m in messages if m.startswith("started inference server")]
    assert len(started) == 1, messages
    pgid = int(started[0].split("pgid ")[1].split(" ")[0])
    assert any(m.startswith(f"reusing inference server pgid {pgid}") for m in messages), messages
    stopped = [m for m in messages if m.startswith(f"stopped inference server pgid {pgid}")]
    assert len(stopped) == 1 and messages.index(stopped[0]) > messages.index(started[0])
    assert not group_alive(pgid)
