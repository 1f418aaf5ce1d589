"""Faults of a Celery deployment (issue 26): a lost Celery worker, a lost run worker.

Both run on the session's ``scripts/local-cluster.sh`` cluster (two Celery workers, step heartbeat
``HEARTBEAT_S``, lost-worker bound ``LOST_AFTER_S``) against one endpoint: a recording proxy in
front of the sandbox policy that serves each checkpoint under its own model name, so its request
log says which run sent each request and when.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest

from shopsimrl_dagster.deploy.celery_steps import heartbeat_key, read_json_value
from shopsimrl_dagster.instance import RUN_WORKER_PID_TAG, run_worker_pid
from shopsimrl_dagster.registry import Checkpoint, register_checkpoint
from shopsimrl_dagster.settings import load_pipeline_settings

from .conftest import HEARTBEAT_S, LOST_AFTER_S, Cluster
from .recording_proxy import RecordingProxy

pytestmark = pytest.mark.slow

SUITE, JOB, EPISODES = "faults", "evaluate_faults", 12


@pytest.fixture
def proxy(sandbox: Any, request: pytest.FixtureRequest) -> Iterator[RecordingProxy]:
    aliases, delay_s = request.param
    server = RecordingProxy(sandbox.policy_url, sandbox.served_model, aliases, delay_s=delay_s).start()
    try:
        yield server
    finally:
        server.stop()


def _setup(cluster: Cluster, proxy: RecordingProxy, first_step: int) -> Path:
    """Register one checkpoint per proxy alias on the proxy's URL; the plans; the runs root.

    Training steps from *first_step* up, above every other test's checkpoints in the session's
    registry, so no other evaluation takes one of these as its "previous" comparison baseline.
    """
    settings = load_pipeline_settings(cluster.settings_path)
    for offset, alias in enumerate(proxy.aliases):
        register_checkpoint(settings.checkpoint_registry,
                            Checkpoint(alias, first_step + 100 * offset, served_model=alias, endpoint=proxy.url))
        cluster.add_partition(alias)
    cluster.prepare_plans()
    return settings.runs_root


def _events(cluster: Cluster, run_id: str) -> list[dg.EventLogEntry]:
    with cluster.instance_env(), dg.DagsterInstance.from_config(cluster.env["DAGSTER_HOME"]) as instance:
        return list(instance.all_logs(run_id))


def _rollout_step(cluster: Cluster, run_id: str) -> tuple[str, str] | None:
    """(step key, worker name) of the run's rollout step once a Celery worker started it."""
    for entry in _events(cluster, run_id):
        worker = _celery_worker(entry)
        if worker and entry.step_key and entry.step_key.endswith("rollout_traces"):
            return entry.step_key, str(worker).split("@")[0]
    return None


def _celery_worker(entry: dg.EventLogEntry) -> str | None:
    """The "Celery worker" of an engine event ("w1@host"), else None."""
    event = entry.dagster_event
    if event is None or event.event_type != dg.DagsterEventType.ENGINE_EVENT or event.engine_event_data is None:
        return None
    value = getattr(event.engine_event_data.metadata.get("Celery worker"), "value", None)
    return str(value) if value else None


def _message(entry: dg.EventLogEntry) -> str:
    return (entry.dagster_event.message if entry.dagster_event is not None else None) or entry.user_message or ""


def _completed(run_dir: Path) -> list[str]:
    path = run_dir / "traces.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [line["episode_id"] for line in lines if line.get("status") == "completed"]


def _wait_for(what: str, check: Any, cluster: Cluster, stall_s: float = 120) -> Any:
    """Poll *check* until it returns something truthy; fail after *stall_s* without it."""
    deadline = time.monotonic() + stall_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: nothing after {stall_s} s\n{cluster.logs()}"
        time.sleep(0.2)


def _free_slots(sandbox: Any) -> tuple[int, int]:
    health = httpx.get(f"{sandbox.env_url}/healthz", timeout=10, trust_env=False).json()
    return int(health["free_slots"]), int(health["environment_slots"])


@pytest.mark.parametrize("proxy", [(["lost-worker-a", "lost-worker-b"], 0.15)], indirect=True)
def test_a_sigkilled_celery_worker_s_step_is_rerun_on_the_other_worker(cluster: Cluster, proxy: RecordingProxy,
                                                                        sandbox: Any) -> None:
    runs_root = _setup(cluster, proxy, first_step=10_100)
    first, second = proxy.aliases
    run_a = cluster.launch(JOB, cluster.partition_tags(JOB, first))
    run_b = cluster.launch(JOB, cluster.partition_tags(JOB, second))  # same endpoint: queued behind run_a
    run_dir = runs_root / SUITE / first

    step_key, worker = _wait_for("rollout step on a worker", lambda: _rollout_step(cluster, run_a), cluster)
    done_before = _wait_for("two finished episodes", lambda: len(_completed(run_dir)) >= 2 and _completed(run_dir),
                            cluster)
    assert cluster.status(run_b) == "QUEUED"
    cluster.kill(f"celery-{worker}")
    killed_at = time.time()
    try:
        statuses = cluster.wait([run_a, run_b])
    finally:
        cluster.up()  # the killed worker comes back for the next tests
    assert statuses == {run_a: "SUCCESS", run_b: "SUCCESS"}, f"{statuses}\n{cluster.logs()}"

    # The step was submitted again within the documented bound and finished on the other worker.
    events = _events(cluster, run_a)
    resubmitted = [e for e in events if "submitting it again" in _message(e)]
    assert len(resubmitted) == 1, [_message(e) for e in events if e.step_key == step_key]
    waited = resubmitted[0].timestamp - killed_at
    assert LOST_AFTER_S - HEARTBEAT_S <= waited <= LOST_AFTER_S + HEARTBEAT_S + 6, waited
    executed = [e for e in events if e.step_key == step_key and _celery_worker(e)]
    other = next(w for w in ("w1", "w2") if w != worker)
    assert [str(_celery_worker(e)).split("@")[0] for e in executed] == [worker, other]
    rerun_started = executed[1].timestamp - killed_at
    print(f"\nlost worker {worker}: step resubmitted {waited:.1f} s after SIGKILL, running on {other} "
          f"{rerun_started:.1f} s after it (bound {LOST_AFTER_S} + {HEARTBEAT_S} s)")

    # No episode lost or redone: each one finished exactly once, those finished before the kill kept.
    completed = _completed(run_dir)
    assert len(completed) == EPISODES and len(set(completed)) == EPISODES, completed
    assert set(done_before) <= set(completed)
    # No lease leaked: the resumed run released the dead worker's leases; the journal is gone.
    assert not (run_dir / "leases.jsonl").exists()
    free, total = _free_slots(sandbox)
    assert free == total, (free, total)
    # The endpoint's queue moved on: run_b started after run_a's last request and completed.
    a_last = max(r.at for r in proxy.completions(first))
    b_first = min(r.at for r in proxy.completions(second))
    assert b_first > a_last


# Slow completions: the rollout must outlast the monitor noticing the loss (a poll) and the step stopping.
@pytest.mark.parametrize("proxy", [(["orphan-a", "orphan-b"], 1.0)], indirect=True)
def test_a_step_whose_run_worker_died_stops_before_its_run_is_failed(cluster: Cluster, proxy: RecordingProxy) -> None:
    runs_root = _setup(cluster, proxy, first_step=20_100)
    first, second = proxy.aliases
    # No run retry for the killed run: its requests must be its orphan step's alone.
    run_a = cluster.launch(JOB, {**cluster.partition_tags(JOB, first), "dagster/max_retries": "0"})
    run_b = cluster.launch(JOB, cluster.partition_tags(JOB, second))
    run_dir = runs_root / SUITE / first
    step_key, _worker = _wait_for("rollout step on a worker", lambda: _rollout_step(cluster, run_a), cluster)
    _wait_for("a finished episode", lambda: _completed(run_dir), cluster)
    with cluster.instance_env(), dg.DagsterInstance.from_config(cluster.env["DAGSTER_HOME"]) as instance:
        pid = run_worker_pid(instance, run_a)
        run = instance.get_run_by_id(run_a)
    assert pid is not None and run is not None
    # The launcher started the run worker itself, so no code server fails the run behind the health check's back.
    assert run.tags.get(RUN_WORKER_PID_TAG) == str(pid), run.tags
    os.kill(pid, signal.SIGKILL)
    killed_at = time.time()
    statuses = cluster.wait([run_a, run_b])
    assert statuses == {run_a: "FAILURE", run_b: "SUCCESS"}, f"{statuses}\n{cluster.logs()}"
    assert len(_completed(run_dir)) < EPISODES, "the rollout finished before the run worker's loss was noticed"

    events = _events(cluster, run_a)
    failed_at = next(e.timestamp for e in events
                     if e.dagster_event is not None and e.dagster_event.event_type == dg.DagsterEventType.RUN_FAILURE)
    # The orphaned step called the endpoint after the kill (it outlived its run worker) but not once after
    # its run was marked failed: the run is failed only once the step has stopped (the proxy's request log) …
    a_requests = proxy.completions(first)
    assert any(r.at > killed_at for r in a_requests), "the orphan made no request after the kill: nothing was tested"
    late = [round(r.at - failed_at, 3) for r in a_requests if r.at >= failed_at]
    assert late == [], f"requests of the failed run's step, seconds after its failure: {late}"
    # … wrote nothing into the failed run, and no success or materialization of the step at all …
    assert all(e.timestamp <= failed_at for e in events), [_message(e) for e in events if e.timestamp > failed_at]
    assert not [e for e in events if e.dagster_event is not None and e.step_key == step_key
                and e.dagster_event.event_type in (dg.DagsterEventType.STEP_SUCCESS,
                                                   dg.DagsterEventType.ASSET_MATERIALIZATION)]
    # … and the next run on that endpoint never overlapped it: its first request came after the failure.
    b_requests = proxy.completions(second)
    assert b_requests and min(r.at for r in b_requests) > failed_at > max(r.at for r in a_requests)
    with cluster.instance_env(), dg.DagsterInstance.from_config(cluster.env["DAGSTER_HOME"]) as instance:
        beat = read_json_value(instance, heartbeat_key(run_a, step_key))
    assert beat is not None and beat["stopped"], beat
    print(f"\nrun worker killed: run failed {failed_at - killed_at:.2f} s after, last orphan request "
          f"{max(r.at for r in a_requests) - failed_at:+.2f} s from the failure, next run's first request "
          f"{min(r.at for r in b_requests) - failed_at:+.2f} s from it")
