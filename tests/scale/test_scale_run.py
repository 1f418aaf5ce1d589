"""Whole evaluations over replicas and several environment servers (real sandboxes, real HTTP, in process).

Acceptance: two sandbox policy servers as replicas of one checkpoint both receive traffic, killing
one mid-run loses no episode; two sandbox environment servers share a run, and one of them dying
mid-run loses no episode either. The plan fingerprint does not depend on the replicas or servers.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import shopsimrl_core as core
from shopsim_sandbox.testing import SandboxServer

pytestmark = pytest.mark.slow

EPISODES = 12


@pytest.fixture
def doomed() -> Iterator[SandboxServer]:
    """A sandbox (environment and policy) that the test kills mid-run with SIGKILL."""
    server = SandboxServer(slots=16)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _config(tmp_path: Path, sandbox: Any, name: str, *, model: dict[str, Any] | None = None,
            environment: dict[str, Any] | None = None) -> Any:
    data = {
        "experiment": {"name": name, "output_dir": str(tmp_path / "runs"), "seed": 20260830, "concurrency": 6,
                       "max_attempts": 4},
        "tasks": {"split_file": str(sandbox.split_file), "split": "val", "sample_size": EPISODES},
        # A dead server's leases cannot be released: give up on them after 1 s (they stay in leases.jsonl).
        "environment": {"base_url": sandbox.env_url, "timeout": 10, "release_retry_seconds": 1, **(environment or {})},
        "model": {"name": sandbox.served_model, "base_url": sandbox.policy_url, "api_key_env": None,
                  "checkpoint_id": "scale-replicas", "max_retries": 4, "retry_backoff_seconds": 0.05, "timeout": 20,
                  **(model or {})},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return core.load_config(path)


def _kill_after(server: SandboxServer, attempts: int) -> Any:
    """A progress callback that SIGKILLs *server* once *attempts* episodes have been recorded."""
    state = {"killed": False}

    def progress(event: Any) -> None:
        if not state["killed"] and event.kind == "attempt" and event.attempts >= attempts:
            state["killed"] = True
            assert server.pid is not None
            os.kill(server.pid, signal.SIGKILL)

    progress.state = state  # type: ignore[attr-defined]
    return progress


def _traces(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "traces.jsonl").read_text(encoding="utf-8").splitlines()]


def _complete_episodes(result: Any) -> int:
    return int(result.counts.completed)


def test_policy_replicas_share_the_traffic_and_a_killed_one_loses_no_episode(
        tmp_path: Path, sandbox: Any, doomed: SandboxServer) -> None:
    replicas = [sandbox.policy_url, doomed.policy_url]
    config = _config(tmp_path, sandbox, "replicas", model={"base_urls": replicas, "replica_probe_seconds": 0.2})
    progress = _kill_after(doomed, 3)
    result = core.run_evaluation(config, progress=progress)

    assert progress.state["killed"]
    assert result.counts.requested == EPISODES
    assert _complete_episodes(result) == EPISODES, result.summary.errors
    answered = [step["model"]["metadata"]["replica"] for t in _traces(result.run_dir) for step in t["steps"]]
    assert set(answered) == {u.rstrip("/") for u in replicas}, "both replicas must have answered steps"
    # Replicas serve one checkpoint: the plan is the one of the same config without them.
    legacy = core.build_plan(_config(tmp_path, sandbox, "replicas"))
    assert json.loads((result.run_dir / "manifest.json").read_text())["plan_fingerprint"] == legacy.fingerprint


def test_without_replicas_steps_do_not_name_one(tmp_path: Path, sandbox: Any) -> None:
    result = core.run_evaluation(_config(tmp_path, sandbox, "single"))
    assert _complete_episodes(result) == EPISODES
    assert not any("replica" in step["model"]["metadata"] for t in _traces(result.run_dir) for step in t["steps"])


def _lease_servers(run_dir: Path) -> set[str]:
    # Leases a dead server granted cannot be released: they stay in the journal after the run.
    entries = [json.loads(line) for line in (run_dir / "leases.jsonl").read_text(encoding="utf-8").splitlines()]
    return {e["base_url"].rstrip("/") for e in entries if e["op"] == "acquired"}


class _LeaseServers:
    """A progress listener that reads the lease journal while the run holds leases (a clean run removes it)."""

    def __init__(self, run_dir: Path) -> None:
        self.journal = run_dir / "leases.jsonl"
        self.servers: set[str] = set()

    def __call__(self, event: Any) -> None:
        try:
            lines = self.journal.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line being written
            if entry.get("op") == "acquired":
                self.servers.add(entry["base_url"].rstrip("/"))


def test_two_environment_servers_share_a_run(tmp_path: Path, sandbox: Any, second_sandbox: Any) -> None:
    servers = [sandbox.env_url, second_sandbox.env_url]
    config = _config(tmp_path, sandbox, "two-envs", environment={"base_urls": servers})
    leases = _LeaseServers(config.run_dir)
    result = core.run_evaluation(config, progress=leases)
    assert _complete_episodes(result) == EPISODES, result.summary.errors
    assert leases.servers == {u.rstrip("/") for u in servers}
    assert not (result.run_dir / "leases.jsonl").exists()  # nothing outstanding after a clean run
    legacy = core.build_plan(_config(tmp_path, sandbox, "two-envs"))
    assert json.loads((result.run_dir / "manifest.json").read_text())["plan_fingerprint"] == legacy.fingerprint


def test_an_environment_server_dying_mid_run_loses_no_episode(tmp_path: Path, sandbox: Any,
                                                              doomed: SandboxServer) -> None:
    servers = [sandbox.env_url, doomed.env_url]
    config = _config(tmp_path, sandbox, "env-dies", environment={"base_urls": servers})
    progress = _kill_after(doomed, 3)
    result = core.run_evaluation(config, progress=progress)
    assert progress.state["killed"]
    assert _complete_episodes(result) == EPISODES, result.summary.errors
    assert doomed.env_url.rstrip("/") in _lease_servers(result.run_dir)
