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
        self.viewer_url = ""  # the trace viewer the settings point at (viewer.base_url)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""

    def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = httpx.post(
            f"{self.base_url}/graphql", json={"query": query, "variables": variables or {}}, timeout=30, trust_env=False
        )
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
        # Adding a key that exists is fine: the UI tests share one instance.
        assert data["addDynamicPartition"]["__typename"] in (
            "AddDynamicPartitionSuccess",
            "DuplicateDynamicPartitionError",
        ), data

    def launch_backfill(self, job: str, partitions: list[str], tags: dict[str, str] | None = None) -> str:
        """Launch a backfill of *job* over *partitions* exactly as the UI's "Launch backfill" does."""
        data = self.gql(
            """mutation Backfill($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
                 __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message }
                 ... on UnauthorizedError { message } ... on PartitionSetNotFoundError { message } } }""",
            {
                "params": {
                    "selector": {"partitionSetName": f"{job}_partition_set", "repositorySelector": REPOSITORY},
                    "partitionNames": partitions,
                    "tags": [{"key": k, "value": v} for k, v in (tags or {}).items()],
                }
            },
        )
        assert data["launchPartitionBackfill"]["__typename"] == "LaunchBackfillSuccess", data
        return data["launchPartitionBackfill"]["backfillId"]

    def runs(self, tag_key: str, tag_value: str) -> list[dict[str, Any]]:
        """Runs carrying the tag *tag_key*=*tag_value* (e.g. ``dagster/backfill``), with status and tags."""
        data = self.gql(
            """query Runs($filter: RunsFilter!) { runsOrError(filter: $filter) { ... on Runs { results {
                 runId status jobName startTime tags { key value } } } } }""",
            {"filter": {"tags": [{"key": tag_key, "value": tag_value}]}},
        )
        return data["runsOrError"]["results"]

    def wait_runs(self, tag_key: str, tag_value: str, count: int, timeout_s: float = 300) -> list[dict[str, Any]]:
        """Wait until *count* runs with the tag exist and all are finished; return them."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            runs = self.runs(tag_key, tag_value)
            if len(runs) >= count and all(r["status"] in _TERMINAL for r in runs):
                return runs
            time.sleep(1)
        raise AssertionError(
            f"runs {tag_key}={tag_value}: not {count} finished within {timeout_s} s:\n{self.log_tail()}"
        )

    def partition_metadata(self, asset: list[str], partition: str) -> dict[str, Any] | None:
        """Metadata of the latest materialization of *asset* for *partition*, or None when there is none."""
        data = self.gql(
            """query Asset($key: AssetKeyInput!, $p: [String!]) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
                 assetMaterializations(partitions: $p, limit: 1) { partition runId metadataEntries { label
                   ... on FloatMetadataEntry { floatValue } ... on IntMetadataEntry { intValue }
                   ... on TextMetadataEntry { text } ... on UrlMetadataEntry { url } } } } } }""",
            {"key": {"path": asset}, "p": [partition]},
        )
        events = data["assetNodeOrError"]["assetMaterializations"]
        if not events:
            return None
        values: dict[str, Any] = {"__run_id": events[0]["runId"]}
        for entry in events[0]["metadataEntries"]:
            values[entry["label"]] = entry.get("floatValue", entry.get("intValue", entry.get("text", entry.get("url"))))
        return values

    def launch_assets(self, keys: list[str | list[str]], tags: dict[str, str]) -> str:
        data = self.gql(
            """mutation Launch($params: ExecutionParams!) {
                 launchRun(executionParams: $params) {
                   __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
                   ... on InvalidSubsetError { message }
                   ... on RunConfigValidationInvalid { errors { message } } } }""",
            {
                "params": {
                    "selector": {
                        **REPOSITORY,
                        "pipelineName": "__ASSET_JOB",
                        "assetSelection": [{"path": [k] if isinstance(k, str) else k} for k in keys],
                    },
                    "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
                    "mode": "default",
                }
            },
        )
        assert data["launchRun"]["__typename"] == "LaunchRunSuccess", data
        return data["launchRun"]["run"]["runId"]

    def wait_run(self, run_id: str, timeout_s: float = 240) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.gql(
                "query Run($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }", {"id": run_id}
            )
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


@pytest.fixture(scope="session")
def dagster_dev(tmp_path_factory: pytest.TempPathFactory, sandbox: Any) -> Iterator[DagsterDev]:
    """`dagster dev` (webserver + daemon) serving workspace.yaml, with settings pointing at the session
    sandbox; shared by every UI test module (start-up costs ~20 s)."""
    work = tmp_path_factory.mktemp("dagster-ui")
    settings = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
    settings.update(
        runs_root=str(work / "runs"), checkpoint_registry=str(work / "registry"), split_file=str(sandbox.split_file)
    )
    settings["environment"]["base_url"] = sandbox.env_url
    settings["inference"].update(base_url=sandbox.policy_url, name=sandbox.served_model)
    # The trace viewer on a port it picks: the asset pages link to it and draw their charts from it.
    (work / "runs").mkdir()
    viewer_log = work / "viewer.log"
    with viewer_log.open("wb") as out:  # a file, not a pipe: nobody reads it while the tests run
        viewer = subprocess.Popen(
            [sys.executable, "-m", "shopsimrl_core.cli._main", "view", str(work / "runs"), "--port", "0"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    announced, started = "", time.monotonic()
    while not announced.startswith("shopsimrl view: http://"):  # printed once the socket is bound
        assert viewer.poll() is None, viewer_log.read_text(errors="replace")
        assert time.monotonic() - started < 180, "shopsimrl view did not bind (as dagster dev's 180 s below)"
        time.sleep(0.1)
        announced = next(iter(viewer_log.read_text(errors="replace").splitlines()), "")
    settings["viewer"] = {**(settings.get("viewer") or {}), "base_url": announced.split()[2].rstrip("/")}
    # Launched checkpoints (test_launch_backfill) answer each completion 50 ms late, so their servers overlap.
    settings["inference"]["launch"]["extra_args"] = ["--latency-ms", "50"]
    settings["suites"]["val"]["sample_size"] = 8
    settings["suites"]["test"]["sample_size"] = 3
    # Enough train episodes for the miner to find a frequent failure label (min_support 2).
    settings["suites"]["train"].update(sample_size=10, repeats=3)
    # The tests launch their own runs; running sensors would race them for the partitions.
    settings["automation"].update(sensor_running=False, schedule_running=False)
    settings_path = work / "pipeline.yaml"
    settings_path.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
    registry = load_pipeline_settings(settings_path).checkpoint_registry
    for checkpoint_id, step in (("ui-step-000100", 100), ("ui-step-000200", 200)):
        register_checkpoint(registry, Checkpoint(checkpoint_id, step))
    home = prepare_dagster_home(work / "dagster_home")
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "SHOPSIMRL_PIPELINE_CONFIG": str(settings_path)}
    log_path = work / "dagster-dev.log"
    dagster = Path(sys.executable).parent / "dagster"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(dagster), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = DagsterDev(f"http://127.0.0.1:{port}", log_path)
    server.home, server.settings_path, server.runs_root, server.env = home, settings_path, work / "runs", env
    server.viewer_url = settings["viewer"]["base_url"]
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
        os.killpg(viewer.pid, signal.SIGTERM)  # the viewer's own group, started above
        viewer.wait(timeout=30)
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
