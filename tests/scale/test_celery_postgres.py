"""A team deployment on one machine: PostgreSQL instance, webserver, daemon, two Celery workers, runs.

Every part is a separate process sharing the PostgreSQL-backed instance: ``dagster-webserver``
takes the launches (GraphQL, as the UI's launchpad sends them), ``dagster-daemon`` dequeues them
and starts the run workers, whose Celery executor hands each step to one of two
``celery -A shopsimrl_dagster.deploy.celery_worker`` workers over a real Redis broker. The two
checkpoints are served by two sandbox policy servers (two endpoints, so the per-endpoint run queue
lets them run side by side). The run directories must equal, byte for byte after masking timing
fields and the runs root, those of the same two evaluations run with the local (in-process) executor.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest
import yaml

from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.deploy.instance import prepare_postgres_home
from shopsimrl_dagster.registry import Checkpoint, register_checkpoint
from shopsimrl_dagster.settings import load_pipeline_settings

from .conftest import free_port

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
REPOSITORY = {"repositoryLocationName": "shopsimrl", "repositoryName": "__repository__"}
CHECKPOINTS = (("scale-step-000100", 100), ("scale-step-000200", 200))
_TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}
# Fields that say when or how long, not what: masked before comparing run directories.
_TIMING_SUFFIXES = ("_at", "_ms", "_s", "_seconds")
_TIMING_WORDS = ("time", "started", "finished", "duration", "elapsed", "latency", "wall", "cpu")
# Identity of the process that wrote a record (invocation ids embed the start time, leases are random
# uuids, chat completions carry their creation second, the slot index is whichever slot was free),
# and the byte offsets and line numbers that widths and finishing order shift.
_PROVENANCE_KEYS = {"invocation_id", "pid", "host", "lease_id", "env_idx", "at", "created", "offset", "length",
                    "line"}
# The sandbox's session key ("idx": "slot-<env_idx>-<task>") carries the slot index too.
_SLOT_IN_SESSION_KEY = re.compile(r"^slot-\d+-")


def _write_settings(folder: Path, sandbox: Any, executor: str) -> Path:
    base = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
    base.update(runs_root=str(folder / "runs"), checkpoint_registry=str(folder / "registry"),
                split_file=str(sandbox.split_file))
    base["environment"]["base_url"] = sandbox.env_url
    base["inference"].update(base_url=sandbox.policy_url, name=sandbox.served_model, max_in_flight=4)
    base["suites"]["val"]["sample_size"] = 4
    base["comparison"]["bootstrap_samples"] = 200
    base["automation"].update(sensor_running=False, schedule_running=False)
    base["execution"] = {"executor": executor}
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    return path


def _register(settings_path: Path, endpoints: list[str]) -> None:
    registry = load_pipeline_settings(settings_path).checkpoint_registry
    for (checkpoint_id, step), endpoint in zip(CHECKPOINTS, endpoints):
        register_checkpoint(registry, Checkpoint(checkpoint_id, step, endpoint=endpoint))


class Team:
    """The running deployment: its env, webserver URL and a few GraphQL calls."""

    def __init__(self, work: Path, env: dict[str, str], url: str, settings_path: Path) -> None:
        self.work, self.env, self.url, self.settings_path = work, env, url, settings_path
        self.processes: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = (self.work / f"{name}.log").open("wb")
        process = subprocess.Popen(argv, cwd=REPO_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        log.close()
        self.processes.append((name, process))
        return process

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{(self.work / f'{name}.log').read_text(errors='replace')[-1500:]}"
                         for name, _ in self.processes)

    def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = httpx.post(f"{self.url}/graphql", json={"query": query, "variables": variables or {}},
                              timeout=60, trust_env=False)
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, body["errors"]
        return body["data"]

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

    def wait(self, run_ids: list[str], timeout_s: float = 240) -> dict[str, str]:
        deadline = time.monotonic() + timeout_s
        while True:
            statuses = {}
            for run_id in run_ids:
                data = self.gql("query R($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }",
                                {"id": run_id})
                statuses[run_id] = data["runOrError"]["status"]
            if all(s in _TERMINAL for s in statuses.values()):
                return statuses
            for name, process in self.processes:
                assert process.poll() is None, f"{name} exited:\n{self.logs()}"
            assert time.monotonic() < deadline, f"runs not finished within {timeout_s} s: {statuses}\n{self.logs()}"
            time.sleep(1)


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, postgres: Any, redis_url: str, sandbox: Any,
         second_sandbox: Any) -> Iterator[Team]:
    work = tmp_path_factory.mktemp("team")
    settings_path = _write_settings(work, sandbox, "celery")
    _register(settings_path, [sandbox.policy_url, second_sandbox.policy_url])
    home = prepare_postgres_home(work / "dagster_home")
    env = {**os.environ, **postgres.env, "DAGSTER_HOME": str(home), "SHOPSIMRL_PIPELINE_CONFIG": str(settings_path),
           "SHOPSIMRL_CELERY_BROKER": f"{redis_url}/0", "SHOPSIMRL_CELERY_BACKEND": f"{redis_url}/1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    port = free_port()
    deployment = Team(work, env, f"http://127.0.0.1:{port}", settings_path)
    try:
        for worker in ("w1", "w2"):
            deployment.start(f"celery-{worker}", [
                str(BIN / "celery"), "-A", "shopsimrl_dagster.deploy.celery_worker", "worker", "--pool", "solo",
                "--prefetch-multiplier", "1", "-n", f"{worker}@%h", "--without-gossip", "--without-mingle",
                "--loglevel", "INFO"])
        deployment.start("daemon", [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"])
        deployment.start("webserver", [str(BIN / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1",
                                       "-p", str(port)])
        deadline = time.monotonic() + 180
        while True:
            try:
                entries = deployment.gql(
                    "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }")
                if any(e["loadStatus"] == "LOADED" for e in entries["workspaceOrError"]["locationEntries"]):
                    break
            except httpx.HTTPError:
                pass
            for name, process in deployment.processes:
                assert process.poll() is None, f"{name} exited:\n{deployment.logs()}"
            assert time.monotonic() < deadline, f"webserver did not load the location:\n{deployment.logs()}"
            time.sleep(0.5)
        yield deployment
    finally:
        for _name, process in reversed(deployment.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _name, process in deployment.processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:  # a warm Celery/webserver shutdown has nothing left to save
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=20)


def _masked(value: Any, roots: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {k: ("<masked>" if k in _PROVENANCE_KEYS or k.lower().endswith(_TIMING_SUFFIXES)
                             or any(w in k.lower() for w in _TIMING_WORDS)
                    else _SLOT_IN_SESSION_KEY.sub("slot-<masked>-", v) if k == "idx" and isinstance(v, str)
                    else _masked(v, roots))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, roots) for v in value]
    if isinstance(value, str):
        for root in roots:
            value = value.replace(root, "<root>")
        return value
    return value


def _run_dir_content(run_dir: Path, root: Path) -> dict[str, Any]:
    """Every JSON/JSONL file of *run_dir*, parsed and masked, by relative path (charts and logs left out)."""
    roots = (str(root.parent), str(root))
    content: dict[str, Any] = {}
    for path in sorted(run_dir.rglob("*")):
        rel = str(path.relative_to(run_dir))
        if path.suffix == ".json":
            content[rel] = _masked(json.loads(path.read_text(encoding="utf-8")), roots)
        elif path.suffix == ".jsonl":
            lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            # Episodes finish in whatever order the event loop sees them: compare the lines as a multiset.
            content[rel] = sorted((_masked(line, roots) for line in lines), key=lambda v: json.dumps(v, sort_keys=True))
    return content


@contextlib.contextmanager
def _instance_env(team: Team) -> Iterator[None]:
    """The PostgreSQL connection variables in this process's environment, for opening the shared instance."""
    env = {k: v for k, v in team.env.items() if k.startswith("DAGSTER_PG_")}
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


def _local_reference(work: Path, sandbox: Any, endpoints: list[str]) -> Path:
    """The same evaluations with the local (in-process) executor on a throwaway instance; returns the runs root."""
    work.mkdir(parents=True, exist_ok=True)
    settings_path = _write_settings(work, sandbox, "in_process")
    _register(settings_path, endpoints)
    settings = load_pipeline_settings(settings_path)
    definitions = build_definitions(settings)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", [c for c, _ in CHECKPOINTS])
        assert definitions.resolve_job_def("prepare_plans").execute_in_process(instance=instance).success
        for checkpoint_id, _ in CHECKPOINTS:
            result = definitions.resolve_job_def("evaluate_val").execute_in_process(instance=instance,
                                                                                    partition_key=checkpoint_id)
            assert result.success
    return settings.runs_root


def test_celery_on_postgres_matches_the_local_executor(team: Team, tmp_path: Path, sandbox: Any,
                                                       second_sandbox: Any, postgres: Any) -> None:
    for checkpoint_id, _ in CHECKPOINTS:
        data = team.gql("""mutation Add($repo: RepositorySelector!, $key: String!) { added: addDynamicPartition(
            repositorySelector: $repo, partitionsDefName: "checkpoints", partitionKey: $key) { __typename } }""",
                        {"repo": REPOSITORY, "key": checkpoint_id})
        assert data["added"]["__typename"] == "AddDynamicPartitionSuccess", data

    # The plans once, in this process but on the shared instance (a run worker of its own would only cost time).
    with _instance_env(team):
        with dg.DagsterInstance.from_config(team.env["DAGSTER_HOME"]) as instance:
            plans = build_definitions(load_pipeline_settings(team.settings_path)).resolve_job_def("prepare_plans")
            assert plans.execute_in_process(instance=instance).success
    # Both partitions at once, each with the tags the launchpad adds (its endpoint's among them).
    run_ids = [team.launch("evaluate_val", team.partition_tags("evaluate_val", checkpoint_id))
               for checkpoint_id, _ in CHECKPOINTS]
    statuses = team.wait(run_ids)
    assert set(statuses.values()) == {"SUCCESS"}, f"{statuses}\n{team.logs()}"

    # The runs, their events and the Celery hand-offs are in PostgreSQL, read here by another process.
    with _instance_env(team):
        with dg.DagsterInstance.from_config(team.env["DAGSTER_HOME"]) as instance:
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            workers: dict[str, set[str]] = {}
            for run_id in run_ids:
                run = instance.get_run_by_id(run_id)
                assert run is not None and run.tags.get("dagster/partition") in {c for c, _ in CHECKPOINTS}
                for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
                    event = entry.dagster_event
                    data_ = event.engine_event_data if event is not None else None
                    worker = getattr((data_.metadata if data_ else {}).get("Celery worker"), "value", None)
                    if worker:
                        workers.setdefault(str(worker).split("@")[0], set()).add(entry.step_key or "")
                for event_type in (dg.DagsterEventType.RUN_ENQUEUED, dg.DagsterEventType.RUN_STARTING):
                    # The webserver's QueuedRunCoordinator only enqueues; only the daemon's queue
                    # processor takes a queued run to STARTING (it calls the run launcher).
                    assert instance.all_logs(run_id, of_type=event_type), f"run {run_id}: no {event_type}"
    assert set(workers) <= {"w1", "w2"} and workers, f"no step ran on a Celery worker: {workers}"
    assert sum(len(steps) for steps in workers.values()) >= 2 * 2, workers  # rollout and summary of each run at least
    assert set(workers) == {"w1", "w2"}, f"both workers should have taken steps of the two concurrent runs: {workers}"

    celery_root = load_pipeline_settings(team.settings_path).runs_root
    local_root = _local_reference(tmp_path / "local", sandbox, [sandbox.policy_url, second_sandbox.policy_url])
    for checkpoint_id, _ in CHECKPOINTS:
        celery_dir, local_dir = celery_root / "val" / checkpoint_id, local_root / "val" / checkpoint_id
        celery_content = _run_dir_content(celery_dir, celery_root)
        local_content = _run_dir_content(local_dir, local_root)
        assert {"traces.jsonl", "summary.json", "manifest.json"} <= set(celery_content), sorted(celery_content)
        assert sorted(celery_content) == sorted(local_content)
        for rel in celery_content:
            assert celery_content[rel] == local_content[rel], f"{checkpoint_id}/{rel} differs between Celery and local"
