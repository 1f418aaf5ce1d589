"""Chaos benchmark (issue 10): kills, leaked leases, a 30 s environment outage, time to exit on signals.

    .venv/bin/python -m benchmarks.chaos [--kills 20] [--outage-s 30] [--signal-trials 5] [--quick] [--out FILE]

Real processes only: a `shopsim-sandbox serve` subprocess (killed and restarted at the same URL for
the outage) and `shopsimrl run` subprocesses (SIGKILLed, SIGTERMed, SIGINTed). Prints a table — each
figure beside the reference measured before issue 10 — and writes benchmarks/results/chaos.json.

Figures:
  kills          SIGKILLs of a 4-slot, concurrency-4 run, each followed by a restart of the same run;
                 leaked = slots still leased once the last run ended (nothing else releases them);
                 resumed_without_progress = restarts that wrote no line within 60 s
  outage         the sandbox is SIGKILLed mid-run and restarted after --outage-s seconds
                 (outage budget 2 × that): completed / planned episodes, exit code, wall time
  SIGTERM/SIGINT wall time from the signal to the exit of a run whose resets wait for a slot
                 (2 slots, concurrency 6), and slots left leased after it (sandbox included)
  sandbox stop   wall time from SIGTERM to the exit of a sandbox with a reset waiting for a slot
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

from chaoskit import Sandbox, check_traces, outstanding_leases, start_run, trace_lines, wait_lines, write_config  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "chaos.json"

# Measured before issue 10 (issue text): the reference column.
REFERENCE = {
    "kills": "20 SIGKILLs of a 256-slot run leaked 50 leases; 4 slots: 1 kill leaked 4/4, "
    "resumed run wrote 0 lines in 60 s",
    "outage": "3 s outage: 36 of 60 episodes failed, exit 1 at 9.9 s",
    "sigterm": "exit 143 at once, every lease leaked, no summary",
    "sigint": "nothing for 30 s+ while resets wait; abandoned resets then take every freed slot",
    "sandbox_stop": "ignores SIGTERM while a reset is pending",
}


def _kills(work: Path, kills: int, *, random_delay: bool) -> dict[str, Any]:
    import random

    rng = random.Random(20261201)
    rounds: list[dict[str, Any]] = []
    tag = "random" if random_delay else "line"
    with Sandbox(work / f"sb-kill-{tag}", slots=4, extra=["--env-latency-ms", "80"]) as sandbox:
        episodes = min(max(12, kills * 3), 84)
        folder = work / f"kill-{tag}"
        config = write_config(folder / "kill.yaml", sandbox, episodes=episodes, concurrency=4, split="train")
        traces = folder / "runs" / "chaos" / "traces.jsonl"
        stalled = 0
        for n in range(kills):
            run = start_run(config, tag=f"k{n}")
            lines_before = trace_lines(traces)
            wait_lines(traces, lines_before + 2, run, timeout=60)
            progressed = trace_lines(traces) > lines_before
            stalled += 0 if progressed else 1
            if random_delay:
                time.sleep(rng.uniform(0.0, 0.5))  # a kill at a random moment, not right after a stored line
            run.process.kill()
            run.wait()
            rounds.append(
                {
                    "held_after_kill": sandbox.slots - sandbox.free_slots(),
                    "journaled": outstanding_leases(traces.parent),
                    "progressed": progressed,
                }
            )
        final = start_run(config, tag="final")
        code = final.wait(timeout=600)
        free = sandbox.wait_free(10)
        check = check_traces(traces)
    return {
        "kill_moment": "random, 0-0.5 s after a line" if random_delay else "right after a stored line (worst case)",
        "kills": kills,
        "slots": 4,
        "episodes": episodes,
        "final_exit": code,
        "leaked": 4 - free,
        "resumed_without_progress": stalled,
        "torn": check.torn,
        "duplicated": check.duplicated,
        "completed": check.completed,
        "max_held_after_a_kill": max(r["held_after_kill"] for r in rounds),
        "rounds": rounds,
    }


def _outage(work: Path, outage_s: float) -> dict[str, Any]:
    with Sandbox(work / "sb-outage", slots=4, extra=["--env-latency-ms", "50"]) as sandbox:
        episodes = 60
        config = write_config(
            work / "outage" / "outage.yaml",
            sandbox,
            episodes=episodes,
            concurrency=4,
            split="train",
            experiment={"outage_budget_seconds": 2 * outage_s},
        )
        traces = work / "outage" / "runs" / "chaos" / "traces.jsonl"
        started = time.monotonic()
        run = start_run(config)
        wait_lines(traces, 5, run)
        sandbox.kill()
        killed_at = time.monotonic()
        time.sleep(outage_s)
        sandbox.start()
        code = run.wait(timeout=600)
        wall = time.monotonic() - started
        check = check_traces(traces)
        free = sandbox.wait_free(10)
    return {
        "outage_s": outage_s,
        "episodes": episodes,
        "completed": check.completed,
        "exit": code,
        "wall_s": round(wall, 2),
        "killed_after_s": round(killed_at - started, 2),
        "lines": check.lines,
        "leaked": 4 - free,
        "torn": check.torn,
        "duplicated": check.duplicated,
    }


def _signals(work: Path, sig: int, trials: int) -> dict[str, Any]:
    times: list[float] = []
    codes: list[int] = []
    leaked: list[int] = []
    with Sandbox(work / f"sb-sig{sig}", slots=2, extra=["--env-latency-ms", "150"]) as sandbox:
        for n in range(trials):
            config = write_config(work / f"sig{sig}" / f"s{n}.yaml", sandbox, name=f"s{n}", episodes=10, concurrency=6)
            traces = work / f"sig{sig}" / "runs" / f"s{n}" / "traces.jsonl"
            run = start_run(config, tag=f"s{n}")
            wait_lines(traces, 1, run)
            time.sleep(0.3)  # resets are waiting for the 2 slots now
            code, seconds = run.stop_with(sig, timeout=120)
            times.append(seconds)
            codes.append(code)
            leaked.append(sandbox.slots - sandbox.wait_free(10))
    return {
        "trials": trials,
        "exit_codes": codes,
        "seconds": [round(t, 3) for t in times],
        "median_s": round(statistics.median(times), 3),
        "max_s": round(max(times), 3),
        "leaked": sum(leaked),
    }


def _sandbox_stop(work: Path) -> dict[str, Any]:
    import threading

    import httpx

    sandbox = Sandbox(work / "sb-stop", slots=1).start()
    with httpx.Client(timeout=30, trust_env=False) as client:
        client.post(sandbox.env_url + "/api/shop_agent", json={"action": "reset", "idx": _first_task(sandbox)})

    def waiting_reset() -> None:
        try:
            with httpx.Client(timeout=60, trust_env=False) as client:
                client.post(sandbox.env_url + "/api/shop_agent", json={"action": "reset", "idx": _first_task(sandbox)})
        except httpx.HTTPError:
            pass

    thread = threading.Thread(target=waiting_reset, daemon=True)
    thread.start()
    time.sleep(0.5)
    seconds = sandbox.stop(signal.SIGTERM, timeout=60)
    thread.join(timeout=5)
    return {"seconds": round(seconds, 3)}


def _first_task(sandbox: Sandbox) -> int:
    return int(json.loads(Path(sandbox.split_file).read_text())["splits"]["val"]["task_ids"][0])


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--outage-s", type=float, default=30.0)
    parser.add_argument("--signal-trials", type=int, default=5)
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes (numbers mean nothing); writes outside results/"
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.kills, args.outage_s, args.signal_trials = 2, 3.0, 1
    out = Path(args.out) if args.out else (Path(tempfile.gettempdir()) / "chaos-quick.json" if args.quick else RESULTS)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        work = Path(tmp)
        kills = _kills(work, args.kills, random_delay=False)
        kills_random = _kills(work, args.kills, random_delay=True)
        outage = _outage(work, args.outage_s)
        sigterm = _signals(work, signal.SIGTERM, args.signal_trials)
        sigint = _signals(work, signal.SIGINT, args.signal_trials)
        stop = _sandbox_stop(work)
    doc = {
        "schema": "shopsimrl-bench-chaos-v1",
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "quick": args.quick,
        "wall_s": round(time.monotonic() - started, 1),
        "kills": kills,
        "kills_random_moment": kills_random,
        "outage": outage,
        "sigterm": sigterm,
        "sigint": sigint,
        "sandbox_stop": stop,
        "reference_before_issue_10": REFERENCE,
    }
    rows = [
        (
            "kills",
            f"{kills['kills']} SIGKILLs (4 slots): {kills['leaked']} leaked, "
            f"{kills['resumed_without_progress']} restarts without progress, "
            f"{kills['completed']}/{kills['episodes']} completed, torn {kills['torn']}, dup {kills['duplicated']}",
            REFERENCE["kills"],
        ),
        (
            "kills (random)",
            f"{kills_random['kills']} SIGKILLs at random moments: {kills_random['leaked']} leaked, "
            f"{kills_random['resumed_without_progress']} restarts without progress, "
            f"{kills_random['completed']}/{kills_random['episodes']} completed",
            "",
        ),
        (
            "outage",
            f"{outage['outage_s']:g} s outage: {outage['completed']}/{outage['episodes']} completed, "
            f"exit {outage['exit']}, "
            f"{outage['wall_s']} s wall, {outage['leaked']} leaked",
            REFERENCE["outage"],
        ),
        (
            "SIGTERM exit",
            f"median {sigterm['median_s']} s, max {sigterm['max_s']} s over {sigterm['trials']} (codes "
            f"{sorted(set(sigterm['exit_codes']))}), {sigterm['leaked']} leaked",
            REFERENCE["sigterm"],
        ),
        (
            "SIGINT exit",
            f"median {sigint['median_s']} s, max {sigint['max_s']} s over {sigint['trials']} (codes "
            f"{sorted(set(sigint['exit_codes']))}), {sigint['leaked']} leaked",
            REFERENCE["sigint"],
        ),
        ("sandbox stop", f"{stop['seconds']} s with a reset waiting", REFERENCE["sandbox_stop"]),
    ]
    width = max(len(r[1]) for r in rows)
    print(f"{'figure':<14} {'now':<{width}}  before (issue 10)")
    for name, now, before in rows:
        print(f"{name:<14} {now:<{width}}  {before}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
