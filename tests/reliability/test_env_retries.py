"""Environment faults cost no episodes (issue 24): calls that are safe to repeat are repeated, and a
server that closes idle keep-alive connections never restarts an episode.

Real processes: a sandbox subprocess with its 5xx fault knobs, `shopsimrl run` subprocesses, and the
chaos kit's TCP proxy closing connections idle for 1 s (a server with a 1 s keep-alive timeout).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chaoskit import DropProxy, Sandbox, check_traces, outstanding_leases, start_run, write_config


@pytest.mark.slow
def test_503_at_20_percent_costs_no_episode(tmp_path: Path) -> None:
    """Every environment call is answered 503 one time in five: reset, release and healthz are repeated,
    and so are interact and terminate (a 503 means the request was not handled): every episode completes
    at its first attempt.

    With the default 4 tries a call fails for good with probability 0.2**4 = 0.16 %; a run of 30 episodes
    makes a few hundred calls, so about one run in four lost one attempt to that (measured: 1 of 4), which
    the episode retry then absorbs. 8 tries (0.2**8 = 2.6e-6 per call) make "no attempt lost" the rule."""
    with Sandbox(tmp_path / "sb", slots=8, extra=["--env-fault-503-rate", "0.2"]) as sandbox:
        config = write_config(tmp_path / "w" / "f.yaml", sandbox, episodes=30, concurrency=8, split="train",
                              environment={"call_retry_attempts": 8})
        run = start_run(config)
        assert run.wait(timeout=600) == 0, run.err()
        run_dir = tmp_path / "w" / "runs" / "chaos"
        check = check_traces(run_dir / "traces.jsonl")
        assert check.completed == 30 and check.lines == 30 and check.ok
        assert outstanding_leases(run_dir) == 0 and sandbox.wait_free() == sandbox.slots


@pytest.mark.slow
def test_a_server_closing_idle_connections_after_1s_restarts_no_episode(tmp_path: Path) -> None:
    """The model takes ~1 s a turn, so the environment connections sit idle for as long as the server
    keeps them: a request often meets a connection the server is closing. It is resent on a fresh one
    (it was never read), so all 8 episodes complete at their first attempt."""
    with Sandbox(tmp_path / "sb", slots=8, extra=["--policy-latency-ms", "995"]) as sandbox:
        proxy = DropProxy(sandbox.env_port, idle_close_s=1.0)
        try:
            config = write_config(tmp_path / "w" / "i.yaml", sandbox, episodes=8, concurrency=8, env_url=proxy.url)
            run = start_run(config)
            code = run.wait(timeout=600)
        finally:
            proxy.close()
        assert code == 0, run.err()
        assert proxy.dropped.get("closed_idle", 0) > 0, proxy.dropped  # the proxy really closed idle connections
        check = check_traces(tmp_path / "w" / "runs" / "chaos" / "traces.jsonl")
        assert check.completed == 8 and check.lines == 8, "an attempt was restarted"
        assert sandbox.wait_free() == sandbox.slots
