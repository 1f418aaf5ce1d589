"""Acceptance 1: backfills of each suite over two checkpoints, through the real webserver's GraphQL
(what the UI's "Launch backfill" sends) and through `dagster job backfill`, evaluate exactly the suite
their job names; the guarded test suite is refused without the launch-time opt-in and writes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ui, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ["ui-step-000100", "ui-step-000200"]


def _prepare(dagster_dev) -> None:
    for key in CHECKPOINTS:
        dagster_dev.add_partition(key)
    run_id = dagster_dev.launch_assets(["frozen_split", "job_plan"], {})
    assert dagster_dev.wait_run(run_id) == "SUCCESS", dagster_dev.log_tail()


def _cli_backfill(dagster_dev, job: str, tags: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [
        str(Path(sys.executable).parent / "dagster"),
        "job",
        "backfill",
        "-w",
        "workspace.yaml",
        "-j",
        job,
        "--partitions",
        ",".join(CHECKPOINTS),
        "--noprompt",
    ]
    if tags:
        argv += ["--tags", json.dumps(tags)]
    return subprocess.run(argv, cwd=REPO_ROOT, env=dagster_dev.env, capture_output=True, text=True, timeout=300)


def _assert_suite_ran(dagster_dev, suite: str, runs: list[dict]) -> None:
    assert len(runs) == 2 and all(r["status"] == "SUCCESS" for r in runs), runs
    assert all(r["jobName"] == f"evaluate_{suite}" for r in runs)
    # Every run carries its checkpoint's endpoint tag (the per-endpoint queue key), none a suite tag.
    assert all(any(t["key"] == "shopsimrl/endpoint" for t in r["tags"]) for r in runs)
    assert not any(t["key"] == "shopsimrl/suite" for r in runs for t in r["tags"])
    for key in CHECKPOINTS:
        run_dir = dagster_dev.runs_root / suite / key
        splits = {json.loads(line)["job"]["split"] for line in (run_dir / "traces.jsonl").read_text().splitlines()}
        assert splits == {suite}, f"{run_dir} holds episodes of {splits}"
        meta = dagster_dev.partition_metadata([suite, "eval_summary"], key)
        assert meta is not None and meta["suite"] == suite
        assert meta["__run_id"] in {r["runId"] for r in runs}
        on_disk = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        assert meta["reward"] == on_disk["primary"]["reward_mean"]
        assert meta["episodes"] == f"{dagster_dev.viewer_url}/run/{suite}/{key}"


def test_backfills_evaluate_exactly_the_suite_they_name(dagster_dev) -> None:
    _prepare(dagster_dev)
    # Through the webserver's GraphQL, as the UI launches a backfill.
    val = dagster_dev.launch_backfill("evaluate_val", CHECKPOINTS)
    _assert_suite_ran(dagster_dev, "val", dagster_dev.wait_runs("dagster/backfill", val, 2))
    train = dagster_dev.launch_backfill("evaluate_train", CHECKPOINTS)
    _assert_suite_ran(dagster_dev, "train", dagster_dev.wait_runs("dagster/backfill", train, 2))
    # Through the CLI.
    cli = _cli_backfill(dagster_dev, "evaluate_train", {"shopsimrl/trigger": "cli-backfill"})
    assert cli.returncode == 0, cli.stdout + cli.stderr
    runs = [
        r for r in dagster_dev.wait_runs("shopsimrl/trigger", "cli-backfill", 2) if r["jobName"] == "evaluate_train"
    ]
    _assert_suite_ran(dagster_dev, "train", runs)
    # The train numbers are train's: the val partition of the same checkpoint still shows val.
    assert dagster_dev.partition_metadata(["val", "eval_summary"], CHECKPOINTS[0])["suite"] == "val"


def test_a_test_backfill_needs_the_opt_in_and_then_records_it(dagster_dev) -> None:
    _prepare(dagster_dev)
    root = dagster_dev.runs_root
    ledger = root / "test-access.jsonl"
    refused = _cli_backfill(dagster_dev, "evaluate_test", {"shopsimrl/trigger": "cli-test-refused"})
    assert refused.returncode == 0, refused.stdout + refused.stderr
    runs = dagster_dev.wait_runs("shopsimrl/trigger", "cli-test-refused", 2)
    assert all(r["status"] == "FAILURE" for r in runs), runs
    assert not (root / "test").exists() and not (root / "_configs" / "test").exists() and not ledger.exists()
    assert dagster_dev.partition_metadata(["test", "rollout_traces"], CHECKPOINTS[0]) is None
    failure = dagster_dev.gql(
        """query Logs($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events {
             __typename ... on ExecutionStepFailureEvent { error { message } } } } } }""",
        {"id": runs[0]["runId"]},
    )
    messages = [
        e["error"]["message"] for e in failure["logsForRun"]["events"] if e["__typename"] == "ExecutionStepFailureEvent"
    ]
    assert messages and "shopsimrl/allow-test-split=true" in messages[0]

    backfill = dagster_dev.launch_backfill("evaluate_test", CHECKPOINTS, {"shopsimrl/allow-test-split": "true"})
    runs = dagster_dev.wait_runs("dagster/backfill", backfill, 2)
    assert all(r["status"] == "SUCCESS" for r in runs), runs
    entries = [json.loads(line) for line in ledger.read_text(encoding="utf-8").splitlines()]
    assert sorted(e["checkpoint_id"] for e in entries) == CHECKPOINTS
    for key in CHECKPOINTS:
        manifest = json.loads((root / "test" / key / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["test_access"]["opted_in"] is True
        assert dagster_dev.partition_metadata(["test", "eval_summary"], key)["suite"] == "test"


def test_a_materialize_from_the_asset_graph_queues_per_endpoint(dagster_dev, sandbox) -> None:
    """The UI's "Materialize" runs the implicit asset job; the instance's coordinator gives its run the tag."""
    from shopsimrl_dagster.run_tags import endpoint_tag_value

    _prepare(dagster_dev)
    tags = {"dagster/partition": CHECKPOINTS[0], "shopsimrl/trigger": "graph-materialize"}
    rollout = dagster_dev.launch_assets([["val", "rollout_traces"]], tags)
    summary = dagster_dev.launch_assets([["val", "eval_summary"]], tags)
    runs = {r["runId"]: r for r in dagster_dev.wait_runs("shopsimrl/trigger", "graph-materialize", 2)}
    assert {r["status"] for r in runs.values()} == {"SUCCESS"}, runs
    assert {r["jobName"] for r in runs.values()} == {"__ASSET_JOB"}
    rollout_tags = {t["key"]: t["value"] for t in runs[rollout]["tags"]}
    assert rollout_tags["shopsimrl/endpoint"] == endpoint_tag_value(sandbox.policy_url)
    # A summary never calls the endpoint, so it never waits behind a rollout.
    assert "shopsimrl/endpoint" not in {t["key"] for t in runs[summary]["tags"]}
