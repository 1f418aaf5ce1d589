"""Leaked slots never starve the next run (issue 24): repeated SIGKILLs at 16 episodes in flight on a
server with 8 slots and no lease expiry (the real server's contract).

After every kill the slots the server still holds are compared with the lease journal: a held slot that
no `acquired` line names can only come from a reset the killed run sent but never saw answered, and the
journal lists each of those (`op: reset` without a settling line). Resets never queue inside the server
(the client-side slot budget), so a kill leaves no waiting reset that the server would later grant to
nobody. The final resume runs with `environment_exclusive` (the run owns the server): it frees every
slot with `release_all` first and finishes without waiting for a slot.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chaoskit import REPO, Sandbox, check_traces, start_run, trace_lines, wait_lines, write_config

from shopsimrl_core.runs.leases._leases import LeaseJournal

EXCLUSIVE_RUN = (
    "import sys\n"
    "from shopsimrl_core import EvaluationOptions, load_config, run_evaluation\n"
    "result = run_evaluation(load_config(sys.argv[1]), EvaluationOptions(environment_exclusive=True,"
    " progress=lambda event: print(event.message, file=sys.stderr) if event.kind == 'notice' else None))\n"
    "sys.exit(result.exit_code)\n"
)


@pytest.mark.slow
def test_sigkills_leave_no_unexplained_slot_and_an_exclusive_resume_frees_all(tmp_path: Path) -> None:
    rng = random.Random(24)
    rounds = []
    with Sandbox(tmp_path / "sb", slots=8, extra=["--env-latency-ms", "30", "--policy-latency-ms", "30"]) as sandbox:
        config = write_config(tmp_path / "w" / "k.yaml", sandbox, episodes=84, concurrency=16, split="train")
        run_dir = tmp_path / "w" / "runs" / "chaos"
        traces = run_dir / "traces.jsonl"
        for n in range(8):
            run = start_run(config, tag=f"k{n}")
            before = trace_lines(traces)
            wait_lines(traces, before + 2, run, timeout=120)
            if run.process.poll() is not None:
                break  # everything is done already
            time.sleep(rng.uniform(0.0, 0.3))
            run.process.kill()
            run.wait()
            time.sleep(0.3)  # let the server see the connections go
            journal = LeaseJournal(run_dir, "check")
            held = sandbox.slots - sandbox.free_slots()
            journaled, unanswered = len(journal.outstanding()), len(journal.unanswered())
            rounds.append((held, journaled, unanswered))
            # every held slot is named by the journal, or explained by a reset it lists as unanswered
            assert held <= journaled + unanswered, rounds
        final = subprocess.run(
            [sys.executable, "-c", EXCLUSIVE_RUN, str(config)], cwd=config.parent, capture_output=True, text=True,
            timeout=600, env=_env(),
        )
        print("rounds (held, journaled, unanswered):", rounds, file=sys.stderr)
        print(final.stderr, file=sys.stderr)
        assert final.returncode == 0, final.stderr
        assert "waiting for a free environment slot" not in final.stderr, final.stderr
        assert sandbox.wait_free(10) == sandbox.slots
        check = check_traces(traces)
        assert check.ok and check.completed == 84
        assert not (run_dir / "leases.jsonl").exists(), (run_dir / "leases.jsonl").read_text()


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env
