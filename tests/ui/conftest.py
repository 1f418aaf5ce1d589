"""A real `dagster dev` (webserver + daemon) on this project's workspace.yaml, driven over GraphQL.

The webserver runs in its own process group with a temporary DAGSTER_HOME (the project's
dagster.yaml template) and pipeline settings pointing at the session sandbox; it is stopped with
SIGTERM to the group, then SIGKILL if it hangs (dagster dev can hang on shutdown).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from shopsimrl_dagster.instance import prepare_dagster_home
from shopsimrl_dagster.registry import Checkpoint, register_checkpoint
from shopsimrl_dagster.settings import load_pipeline_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
LOCATION = "shopsimrl"
REPOSITORY = {"repositoryLocationName": LOCATION, "repositoryName": "__repository__"}
_TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DagsterDev:
    """Handle on a running `dagster dev`: its URL and a small GraphQL client."""

    def __init__(self, base_url: str, log_path: Path) -> None:
        self.base_url = base_url
        self.log_path = log_path

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""

    def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = httpx.post(f"{self.base_url}/graphql", json={"query": query, "variables": variables or {}},
                              timeout=30, trust_env=False)
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, body["errors"]
        return body["data"]

    def location_status(self) -> str | None:
        data = self.gql("{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus } } } }")
        for entry in data["workspaceOrError"].get("locationEntries", []):
            if entry["name"] == LOCATION:
                return entry["loadStatus"]
        return None

    def add_partition(self, key: str) -> None:
        data = self.gql(
            """mutation Add($repo: RepositorySelector!, $name: String!, $key: String!) {
                 addDynamicPartition(repositorySelector: $repo, partitionsDefName: $name, partitionKey: $key) {
                   __typename ... on PythonError { message } ... on UnauthorizedError { message } } }""",
            {"repo": REPOSITORY, "name": "checkpoints", "key": key},
        )
        assert data["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess", data

    def launch_assets(self, keys: list[str], tags: dict[str, str]) -> str:
        data = self.gql(
            """mutation Launch($params: ExecutionParams!) {
                 launchRun(executionParams: $params) {
                   __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
                   ... on InvalidSubsetError { message } ... on RunConfigValidationInvalid { errors { message } } } }""",
            {"params": {
                "selector": {**REPOSITORY, "pipelineName": "__ASSET_JOB", "assetSelection": [{"path": [k]} for k in keys]},
                "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
                "mode": "default",
            }},
        )
        assert data["launchRun"]["__typename"] == "LaunchRunSuccess", data
        return data["launchRun"]["run"]["runId"]

    def wait_run(self, run_id: str, timeout_s: float = 240) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.gql("query Run($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }", {"id": run_id})
            if status["runOrError"]["status"] in _TERMINAL:
                return status["runOrError"]["status"]
            time.sleep(1)
        raise AssertionError(f"run {run_id} did not finish within {timeout_s} s")

    def latest_metadata(self, asset: str) -> tuple[str | None, dict[str, Any]]:
        data = self.gql(
            """query Asset($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
                 assetMaterializations(limit: 1) { partition metadataEntries { label
                   ... on FloatMetadataEntry { floatValue } ... on IntMetadataEntry { intValue }
                   ... on TextMetadataEntry { text } } } } } }""",
            {"key": {"path": [asset]}},
        )
        events = data["assetNodeOrError"]["assetMaterializations"]
        assert events, f"{asset} has no materialization"
        values = {}
        for entry in events[0]["metadataEntries"]:
            values[entry["label"]] = entry.get("floatValue", entry.get("intValue", entry.get("text")))
        return events[0]["partition"], values


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory: pytest.TempPathFactory, sandbox: Any) -> Iterator[DagsterDev]:
    """`dagster dev` serving workspace.yaml, with settings pointing at the session sandbox."""
    work = tmp_path_factory.mktemp("dagster-ui")
    settings = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
    settings.update(runs_root=str(work / "runs"), checkpoint_registry=str(work / "registry"), split_file=str(sandbox.split_file))
    settings["environment"]["base_url"] = sandbox.env_url
    settings["inference"].update(base_url=sandbox.policy_url, served_model=sandbox.served_model)
    settings["suites"]["val"]["sample_size"] = 8
    # The test launches its own materialization; a running sensor would race it for the partition.
    settings["automation"].update(sensor_running=False, schedule_running=False)
    settings_path = work / "pipeline.yaml"
    settings_path.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
    register_checkpoint(load_pipeline_settings(settings_path).checkpoint_registry, Checkpoint("ui-step-000100", 100))
    home = prepare_dagster_home(work / "dagster_home")
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "SHOPSIMRL_PIPELINE_CONFIG": str(settings_path)}
    log_path = work / "dagster-dev.log"
    dagster = Path(sys.executable).parent / "dagster"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(dagster), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    server = DagsterDev(f"http://127.0.0.1:{port}", log_path)
    try:
        deadline = time.monotonic() + 180
        status = None
        while status != "LOADED":
            assert process.poll() is None, f"dagster dev exited early:\n{server.log_tail()}"
            assert time.monotonic() < deadline, f"code location not LOADED (last status {status}):\n{server.log_tail()}"
            try:
                status = server.location_status()
            except httpx.HTTPError:
                status = None
            time.sleep(0.5)
        yield server
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
