"""A team deployment on one machine: PostgreSQL instance, webserver, daemon, two Celery workers, runs.

The deployment is the session's ``scripts/local-cluster.sh`` cluster (tests/scale/conftest.py).
Every part is a separate process sharing the PostgreSQL-backed instance: ``dagster-webserver``
takes the launches (GraphQL, as the UI's launchpad sends them), ``dagster-daemon`` dequeues them
and starts the run workers, whose Celery executor hands each step to one of two
``celery -A shopsimrl_dagster.deploy.celery_worker`` workers over a real Redis broker. The two
checkpoints are served by two sandbox policy servers (two endpoints, so the per-endpoint run queue
lets them run side by side). The run directories must equal, byte for byte after masking timing
fields and the runs root, those of the same two evaluations run with the local (in-process) executor.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.registry import Checkpoint, register_checkpoint
from shopsimrl_dagster.settings import load_pipeline_settings

from .conftest import Cluster, write_settings

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


def _register(settings_path: Path, endpoints: list[str]) -> None:
    registry = load_pipeline_settings(settings_path).checkpoint_registry
    for (checkpoint_id, step), endpoint in zip(CHECKPOINTS, endpoints):
        register_checkpoint(registry, Checkpoint(checkpoint_id, step, endpoint=endpoint))


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


def _local_reference(work: Path, sandbox: Any, endpoints: list[str]) -> Path:
    """The same evaluations with the local (in-process) executor on a throwaway instance; returns the runs root."""
    work.mkdir(parents=True, exist_ok=True)
    settings_path = write_settings(work, sandbox, "in_process")
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


def test_celery_on_postgres_matches_the_local_executor(cluster: Cluster, tmp_path: Path, sandbox: Any,
                                                       second_sandbox: Any) -> None:
    _register(cluster.settings_path, [sandbox.policy_url, second_sandbox.policy_url])
    for checkpoint_id, _ in CHECKPOINTS:
        cluster.add_partition(checkpoint_id)
    team = cluster

    # The plans once, in this process but on the shared instance (a run worker of its own would only cost time).
    with team.instance_env():
        with dg.DagsterInstance.from_config(team.env["DAGSTER_HOME"]) as instance:
            plans = build_definitions(load_pipeline_settings(team.settings_path)).resolve_job_def("prepare_plans")
            assert plans.execute_in_process(instance=instance).success
    # Both partitions at once, each with the tags the launchpad adds (its endpoint's among them).
    run_ids = [team.launch("evaluate_val", team.partition_tags("evaluate_val", checkpoint_id))
               for checkpoint_id, _ in CHECKPOINTS]
    statuses = team.wait(run_ids)
    assert set(statuses.values()) == {"SUCCESS"}, f"{statuses}\n{team.logs()}"

    # The runs, their events and the Celery hand-offs are in PostgreSQL, read here by another process.
    with team.instance_env():
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
