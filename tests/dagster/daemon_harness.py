"""``dagster dev`` on the project's workspace for tests, with a run launcher that can fail its first launches.

The launcher is the project's (``LocalProcessRunLauncher``) except that its first ``failures`` launches
raise, like a code server that did not answer; the test instance's ``dagster.yaml`` names it
(``module: daemon_harness``, this folder on the daemon's PYTHONPATH). The count lives in a file of the
instance folder, so every process launching runs shares it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import yaml

from shopsimrl_dagster.instance import LocalProcessRunLauncher, prepare_dagster_home

REPO_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


class FlakyLaunchRunLauncher(LocalProcessRunLauncher):
    """``LocalProcessRunLauncher`` whose first ``failures`` launches fail like an unanswered code server."""

    def __init__(self, inst_data: Any = None, failures: int = 1) -> None:
        super().__init__(inst_data=inst_data)
        self.failures = failures

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        from dagster import Field

        return {"failures": Field(int, default_value=1)}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> FlakyLaunchRunLauncher:
        return cls(inst_data=inst_data, failures=int(config_value.get("failures", 1)))

    def launch_run(self, context: Any) -> None:
        counter = Path(self._instance.root_directory) / "flaky-launches"
        done = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(done + 1))
        if done < self.failures:
            raise RuntimeError(f"injected launch failure {done + 1} of {self.failures} (daemon_harness.py)")
        super().launch_run(context)


def _gql(url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    response = httpx.post(f"{url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60,
                          trust_env=False)
    response.raise_for_status()
    body = response.json()
    assert "errors" not in body, body["errors"]
    return body["data"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DagsterDev:
    """``dagster dev`` on the project workspace; its instance's launcher fails its first *failures* launches."""

    def __init__(self, tmp_path: Path, sandbox: Any, settings_writer: Any, *, failures: int = 0,
                 sensor: bool = False) -> None:
        from shopsimrl_dagster.settings import load_pipeline_settings

        path = settings_writer(tmp_path, env_url=sandbox.env_url, policy_url=sandbox.policy_url,
                               served_model=sandbox.served_model, split_file=sandbox.split_file, val_sample=4)
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        document["automation"].update(sensor_running=sensor, schedule_running=False, sensor_interval_s=5)
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        self.settings = load_pipeline_settings(path)
        # The project's instance, with a run launcher that fails its first launches (daemon_harness.py).
        self.home = prepare_dagster_home(tmp_path / "home")
        config = yaml.safe_load((self.home / "dagster.yaml").read_text(encoding="utf-8"))
        config["run_launcher"] = {"module": "daemon_harness", "class": "FlakyLaunchRunLauncher",
                                  "config": {"failures": failures}}
        (self.home / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        self.log_path, port = tmp_path / "dagster-dev.log", _free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "DAGSTER_HOME": str(self.home), "SHOPSIMRL_PIPELINE_CONFIG": str(path),
               "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        # prepare_plans first (an evaluation checks its plan against job_plan), which also creates the
        # instance's storage before dagster dev opens it (two processes creating SQLite tables at once clash).
        from shopsimrl_dagster.definitions import build_definitions

        with dg.DagsterInstance.from_config(str(self.home)) as instance:
            job = build_definitions(self.settings).resolve_job_def("prepare_plans")
            assert job.execute_in_process(instance=instance).success
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1",
                 "-p", str(port)], cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        query = "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus } } } }"

        def loaded() -> tuple[bool, Any]:
            entries = self.gql(query)["workspaceOrError"]["locationEntries"]
            return bool(entries) and all(e["loadStatus"] == "LOADED" for e in entries), entries

        self.wait("the code location to load", loaded)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        return _gql(self.url, query, variables)

    def wait(self, what: str, check: Any, stall_s: float = 240) -> Any:
        """Poll *check* (returns (done, progress)) until done; fail after *stall_s* without progress."""
        last, deadline = None, time.monotonic() + stall_s
        while True:
            assert self.process.poll() is None, self.log_tail()
            try:
                done, progress = check()
            except httpx.HTTPError:
                done, progress = False, last
            if done:
                return progress
            if progress != last:
                last, deadline = progress, time.monotonic() + stall_s
            assert time.monotonic() < deadline, f"{what}: no progress for {stall_s} s: {last}\n{self.log_tail()}"
            time.sleep(1)

    def runs(self, tag: str, value: str) -> dict[str, dg.DagsterRun]:
        with dg.DagsterInstance.from_config(str(self.home)) as instance:
            return {run.run_id: run for run in instance.get_runs(filters=dg.RunsFilter(tags={tag: value}))}

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
