"""A SIGKILLed run's leases do not block other checkpoints (issue 33, item 5).

Checkpoint A's run is killed while its episodes hold every slot of a sandbox with no lease expiry (the
real server's contract). Checkpoint B's run, beside it in the same output folder, finds A's journal with
A's run lock free, releases those leases before it waits for a slot, says so, and completes; A's journal
no longer lists them. Before the fix B sat at 0 free slots until A itself was resumed (here: its resets
ran out of `environment.reset_wait_seconds`).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from chaoskit import Sandbox, check_traces, start_run, wait_until, write_config

from shopsimrl_core.runs.leases._leases import LeaseJournal


@pytest.mark.slow
def test_the_next_run_of_another_checkpoint_releases_a_killed_runs_leases(tmp_path: Path) -> None:
    extra = ["--env-latency-ms", "300", "--policy-latency-ms", "30"]
    with Sandbox(tmp_path / "sb", slots=4, extra=extra) as sandbox:
        work = tmp_path / "w"
        environment = {"reset_wait_seconds": 8}
        config_a = write_config(work / "a.yaml", sandbox, name="ckpt-a", episodes=18, concurrency=4,
                                environment=environment)
        config_b = write_config(work / "b.yaml", sandbox, name="ckpt-b", episodes=6, concurrency=4,
                                environment=environment, experiment={"max_episode_retries": 0})
        run_a = start_run(config_a, tag="a")
        journal_a = LeaseJournal(work / "runs" / "ckpt-a", "check")
        wait_until(lambda: run_a.process.poll() is not None or len(journal_a.outstanding()) >= 3, timeout=120)
        assert run_a.process.poll() is None, run_a.err()
        run_a.process.kill()
        run_a.wait()
        time.sleep(0.3)
        held = len(journal_a.outstanding())
        assert held >= 3 and sandbox.slots - sandbox.free_slots() >= held  # A's dead run holds them

        run_b = start_run(config_b, tag="b")
        code = run_b.wait(timeout=300)
        err = run_b.err()
        assert code == 0, err
        assert f"lease(s) on {sandbox.env_url} that a killed run left in" in err, err
        assert "ckpt-a" in err and "(its run.lock is free)" in err, err
        assert "slots free" not in err, err  # it never reported starved slots
        check = check_traces(work / "runs" / "ckpt-b" / "traces.jsonl")
        assert check.ok and check.completed == 6
        assert journal_a.outstanding() == []
        assert sandbox.wait_free(10) == sandbox.slots


@pytest.mark.slow
def test_a_live_runs_leases_are_left_alone(tmp_path: Path) -> None:
    """The same neighbour, alive: B does not touch its journal and A completes normally."""
    with Sandbox(tmp_path / "sb", slots=4, extra=["--env-latency-ms", "100"]) as sandbox:
        work = tmp_path / "w"
        config_a = write_config(work / "a.yaml", sandbox, name="ckpt-a", episodes=12, concurrency=2)
        config_b = write_config(work / "b.yaml", sandbox, name="ckpt-b", episodes=4, concurrency=2)
        run_a = start_run(config_a, tag="a")
        journal_a = LeaseJournal(work / "runs" / "ckpt-a", "check")
        wait_until(lambda: run_a.process.poll() is not None or len(journal_a.outstanding()) >= 1, timeout=120)
        run_b = start_run(config_b, tag="b")
        assert run_b.wait(timeout=300) == 0, run_b.err()
        assert run_a.wait(timeout=300) == 0, run_a.err()
        assert "a killed run left" not in run_b.err(), run_b.err()
        assert "release ignored" not in run_a.err() + run_a.out(), run_a.err()
        assert check_traces(work / "runs" / "ckpt-a" / "traces.jsonl").completed == 12


@pytest.mark.slow
def test_a_shared_runs_root_covers_the_runs_of_other_suites(tmp_path: Path) -> None:
    """The pipeline's layout: `<runs_root>/<suite>/<checkpoint>`. A killed train run's leases are released by
    a val run of another checkpoint, since both name the runs root as `environment.shared_runs_root`."""
    extra = ["--env-latency-ms", "300", "--policy-latency-ms", "30"]
    with Sandbox(tmp_path / "sb", slots=3, extra=extra) as sandbox:
        work = tmp_path / "w"
        environment = {"reset_wait_seconds": 8, "shared_runs_root": "runs"}
        config_a = write_config(work / "a.yaml", sandbox, name="ckpt-a", episodes=18, concurrency=3,
                                environment=environment, experiment={"output_dir": "runs/train"}, split="train")
        config_b = write_config(work / "b.yaml", sandbox, name="ckpt-b", episodes=4, concurrency=3,
                                environment=environment,
                                experiment={"output_dir": "runs/val", "max_episode_retries": 0})
        run_a = start_run(config_a, tag="a")
        journal_a = LeaseJournal(work / "runs" / "train" / "ckpt-a", "check")
        wait_until(lambda: run_a.process.poll() is not None or len(journal_a.outstanding()) >= 3, timeout=120)
        assert run_a.process.poll() is None, run_a.err()
        run_a.process.kill()
        run_a.wait()
        assert len(journal_a.outstanding()) >= 3
        run_b = start_run(config_b, tag="b")
        assert run_b.wait(timeout=300) == 0, run_b.err()
        assert "runs/train/ckpt-a/leases.jsonl (its run.lock is free)" in run_b.err(), run_b.err()
        assert journal_a.outstanding() == []
        assert sandbox.wait_free(10) == sandbox.slots
