"""Real servers for the scale tests: the local cluster of ``scripts/local-cluster.sh``, a second sandbox.

The PostgreSQL + Redis + daemon + webserver + Celery workers deployment is started **only** through
``scripts/local-cluster.sh up`` (the script docs/scaling.md is written from), once per session, with
pipeline settings of the tests' own (runs root and registry in the cluster folder, the session
sandbox, the Celery executor with short heartbeats). ``down`` stops it at the end of the session.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from shopsim_sandbox.testing import SandboxServer

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "local-cluster.sh"
PG_BINS = sorted(Path("/usr/lib/postgresql").glob("*/bin")) if Path("/usr/lib/postgresql").is_dir() else []
REDIS = shutil.which("redis-server")
REPOSITORY = {"repositoryLocationName": "shopsimrl", "repositoryName": "__repository__"}
TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}
#: step heartbeat and lost-worker bound of the cluster's settings (short, for the fault tests)
HEARTBEAT_S, LOST_AFTER_S = 1.0, 8.0


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_settings(folder: Path, sandbox: Any, executor: str, **execution: Any) -> Path:
    """Pipeline settings of the scale tests in *folder*: runs and registry there, *sandbox*'s servers."""
    base = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
    base.update(runs_root=str(folder / "runs"), checkpoint_registry=str(folder / "registry"),
                split_file=str(sandbox.split_file))
    base["environment"]["base_url"] = sandbox.env_url
    base["inference"].update(base_url=sandbox.policy_url, name=sandbox.served_model, max_in_flight=4)
    base["suites"]["val"]["sample_size"] = 4
    # The fault tests' suite: long enough to kill something in the middle of its rollout.
    base["suites"]["faults"] = {**base["suites"]["val"], "sample_size": 12, "purpose": "scale fault tests"}
    base["comparison"]["bootstrap_samples"] = 200
    base["automation"].update(sensor_running=False, schedule_running=False)
    base["execution"] = {"executor": executor, **execution}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    return path


def _env_from_file(path: Path) -> dict[str, str]:
    """The variables ``cluster.env`` exports, evaluated by bash (the password comes from a file)."""
    out = subprocess.run(["bash", "-c", f"set -a; source '{path}'; env -0"], capture_output=True, check=True,
                         env={"PATH": os.environ.get("PATH", "")})
    pairs = (item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)
    wanted = ("DAGSTER_", "SHOPSIMRL_")
    return {k: v for k, v in pairs if k.startswith(wanted)}


class Cluster:
    """The running deployment of ``scripts/local-cluster.sh``: its env, webserver URL, processes, GraphQL."""

    def __init__(self, folder: Path, settings_path: Path, workers: int) -> None:
        self.dir, self.settings_path, self.workers = folder, settings_path, workers
        self.env: dict[str, str] = {}
        self.url = ""

    def script(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        return subprocess.run([str(SCRIPT), *args, "--dir", str(self.dir)], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=REPO_ROOT)

    def up(self) -> None:
        """``up`` (again): starts whatever is not running, e.g. a worker a test killed."""
        result = self.script("up", "--workers", str(self.workers), "--settings", str(self.settings_path))
        assert result.returncode == 0, f"local-cluster up failed:\n{result.stdout}\n{result.stderr}\n{self.logs()}"
        assert f"source {self.dir}/cluster.env" in result.stdout, result.stdout
        self.env = {**os.environ, **_env_from_file(self.dir / "cluster.env")}
        self.url = self.env["SHOPSIMRL_WEBSERVER_URL"]

    def prepare_plans(self) -> None:
        """``prepare_plans`` once per session, in this process but on the shared instance."""
        if getattr(self, "_plans_ready", False):
            return
        import dagster as dg

        from shopsimrl_dagster.definitions import build_definitions
        from shopsimrl_dagster.settings import load_pipeline_settings

        with self.instance_env(), dg.DagsterInstance.from_config(self.env["DAGSTER_HOME"]) as instance:
            plans = build_definitions(load_pipeline_settings(self.settings_path)).resolve_job_def("prepare_plans")
            assert plans.execute_in_process(instance=instance).success
        self._plans_ready = True

    def down(self) -> None:
        self.script("down", timeout=120)

    def pid(self, name: str) -> int:
        return int((self.dir / "pids" / f"{name}.pid").read_text().strip())

    def kill(self, name: str) -> None:
        """SIGKILL the process *name* (e.g. ``celery-w1``) alone, like a node that vanished."""
        os.kill(self.pid(name), signal.SIGKILL)

    def alive(self) -> dict[str, bool]:
        result = self.script("status", timeout=60)
        return {line.split()[0]: line.split()[1] == "running" for line in result.stdout.splitlines() if line.strip()}

    def logs(self, tail: int = 1500) -> str:
        folder = self.dir / "logs"
        if not folder.is_dir():
            return ""
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-tail:]}"
                         for path in sorted(folder.glob("*.log")))

    @contextlib.contextmanager
    def instance_env(self) -> Iterator[None]:
        """The cluster's instance variables in this process's environment, for opening the shared instance."""
        env = {k: v for k, v in self.env.items() if k.startswith(("DAGSTER_PG_", "DAGSTER_HOME"))}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = httpx.post(f"{self.url}/graphql", json={"query": query, "variables": variables or {}},
                              timeout=60, trust_env=False)
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, body["errors"]
        return body["data"]

    def add_partition(self, key: str) -> None:
        data = self.gql("""mutation Add($repo: RepositorySelector!, $key: String!) { added: addDynamicPartition(
            repositorySelector: $repo, partitionsDefName: "checkpoints", partitionKey: $key) { __typename } }""",
                        {"repo": REPOSITORY, "key": key})
        assert data["added"]["__typename"] in {"AddDynamicPartitionSuccess", "DuplicateDynamicPartitionError"}, data

    def partition_tags(self, job: str, partition: str) -> dict[str, str]:
        """The tags the launchpad adds for *partition* of *job* (the per-endpoint tag among them)."""
        data = self.gql(
            """query Tags($repo: RepositorySelector!, $set: String!, $p: String!) {
                 partitionSetOrError(repositorySelector: $repo, partitionSetName: $set) { ... on PartitionSet {
                   partition(partitionName: $p) { tagsOrError { ... on PartitionTags { results { key value } } } }
                 } } }""",
            {"repo": REPOSITORY, "set": f"{job}_partition_set", "p": partition},
        )
        return {t["key"]: t["value"] for t in data["partitionSetOrError"]["partition"]["tagsOrError"]["results"]}

    def launch(self, job: str, tags: dict[str, str]) -> str:
        data = self.gql(
            """mutation Launch($params: ExecutionParams!) { launchRun(executionParams: $params) {
                 __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""",
            {"params": {"selector": {**REPOSITORY, "pipelineName": job}, "mode": "default",
                        "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]}}},
        )
        assert data["launchRun"]["__typename"] == "LaunchRunSuccess", data
        return data["launchRun"]["run"]["runId"]

    def status(self, run_id: str) -> str:
        data = self.gql("query R($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }", {"id": run_id})
        return data["runOrError"]["status"]

    def wait(self, run_ids: list[str], timeout_s: float = 240) -> dict[str, str]:
        """Wait until every run is finished; the deadline moves while any run changes state."""
        deadline = time.monotonic() + timeout_s
        last: dict[str, str] = {}
        while True:
            statuses = {run_id: self.status(run_id) for run_id in run_ids}
            if all(s in TERMINAL for s in statuses.values()):
                return statuses
            if statuses != last:
                last, deadline = statuses, time.monotonic() + timeout_s
            assert time.monotonic() < deadline, f"runs stuck for {timeout_s} s: {statuses}\n{self.logs()}"
            time.sleep(1)


@pytest.fixture(scope="session")
def cluster(sandbox: Any) -> Iterator[Cluster]:
    """The session's local cluster (two Celery workers), started and stopped by ``scripts/local-cluster.sh``."""
    if not PG_BINS:
        pytest.skip("Debian postgresql is not installed (scripts/setup.sh --ui installs it)")
    if REDIS is None:
        pytest.skip("Debian redis-server is not installed (scripts/setup.sh --ui installs it)")
    # Outside pytest's private tmp folders: when the tests run as root, the postgres user owns the cluster.
    folder = Path(tempfile.mkdtemp(prefix="shopsim-cluster-"))
    settings_path = write_settings(folder / "settings", sandbox, "celery", step_heartbeat_seconds=HEARTBEAT_S,
                                   step_lost_after_seconds=LOST_AFTER_S)
    deployment = Cluster(folder, settings_path, workers=2)
    try:
        deployment.up()
        yield deployment
    finally:
        deployment.down()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def second_sandbox() -> Iterator[SandboxServer]:
    """A second sandbox (same catalog and seed as the session ``sandbox``): a second policy server and environment."""
    server = SandboxServer(slots=16)
    server.start()
    try:
        yield server
    finally:
        server.stop()
