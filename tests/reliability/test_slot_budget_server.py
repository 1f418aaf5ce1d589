"""No reset ever waits inside the server (issue 33, item 5b), measured on the sandbox server from outside.

Issue 33's setup: 2 slots, 4 episodes in flight, a 300 ms model, so resets wait for the client-side budget
long enough to probe `/healthz` while the run's own releases are on their way. The sandbox counts every
reset that found no free slot (`GET /sandbox/slots` → `queued_resets`). One run is SIGKILLed mid-way and
resumed: afterwards every slot is free and no reset ever queued. Before the fix a probe during the run's
own release grew the budget to 3 on a 2-slot server (deterministically shown by
tests/core/test_leases.py::test_a_probe_during_the_runs_own_release_grows_nothing).
"""

from __future__ import annotations

import httpx
import pytest
from chaoskit import Sandbox, check_traces, start_run, trace_lines, wait_lines, write_config


def _slots(sandbox: Sandbox) -> dict[str, int]:
    with httpx.Client(timeout=10, trust_env=False) as client:
        return dict(client.get(sandbox.env_url + "/sandbox/slots").json())


@pytest.mark.slow
def test_resets_never_queue_in_the_server_and_a_killed_run_leaves_nothing_held(tmp_path) -> None:
    extra = ["--policy-latency-ms", "300"]
    with Sandbox(tmp_path / "sb", slots=2, extra=extra) as sandbox:
        config = write_config(tmp_path / "w" / "q.yaml", sandbox, name="q", episodes=12, concurrency=4)
        traces = tmp_path / "w" / "runs" / "q" / "traces.jsonl"
        run = start_run(config, tag="first")
        wait_lines(traces, 3, run, timeout=180)
        run.process.kill()
        run.wait()
        resumed = start_run(config, tag="resumed")
        assert resumed.wait(timeout=300) == 0, resumed.err()
        assert "restart the environment server" not in resumed.err(), resumed.err()
        assert check_traces(traces).completed == 12 and trace_lines(traces) >= 12
        assert sandbox.wait_free(10) == 2
        counters = _slots(sandbox)
        assert counters["queued_resets"] == 0, counters
