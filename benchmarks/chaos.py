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
  leases         (issue 24, acceptance 1) --kills SIGKILLs of a run with 16 episodes in flight against a
                 sandbox with 8 slots and no lease expiry (the real server's contract), 240 episodes;
                 after each kill the slots the server holds beside what the lease journal explains
                 (acquired leases, resets sent but never answered). Then the final resume, twice over
                 two identical kill series: with `environment.exclusive: true` (release_all at the start)
                 and with the journal alone (release the journaled leases, reconcile with /healthz).
                 Reported: free slots after the resume, its exit, whether any reset waited for a slot
                 (the console's "waiting for a free environment slot" and the longest `timing.reset_ms`
                 of its attempts), torn and duplicated lines.

`--only leases,kills,...` runs a subset (names: kills, outage, signals, sandbox_stop, leases); the
JSON then holds only those.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
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


LEASE_SLOTS = 8
LEASE_IN_FLIGHT = 16
LEASE_TASKS, LEASE_REPEATS = 80, 3  # 240 episodes, as in the probe
WAIT_NOTICE = "waiting for a free environment slot"


def _lease_starvation(work: Path, kills: int, *, final: str) -> dict[str, Any]:
    """Issue 24's scenario: *kills* SIGKILLs at 16 in flight on 8 slots without lease expiry, then a resume
    (*final*: ``exclusive`` sets environment.exclusive, ``journal`` relies on the journal alone)."""
    import random

    from shopsimrl_core.runs.leases._leases import LeaseJournal

    rng = random.Random(20261224)
    latency = ["--env-latency-ms", "30", "--policy-latency-ms", "30"]
    rounds: list[dict[str, Any]] = []
    with Sandbox(work / f"sb-leases-{final}", slots=LEASE_SLOTS, extra=latency) as sandbox:
        folder = work / f"leases-{final}"
        common: dict[str, Any] = dict(
            episodes=LEASE_TASKS, concurrency=LEASE_IN_FLIGHT, split="train", tasks={"repeats": LEASE_REPEATS}
        )
        config = write_config(folder / "leases.yaml", sandbox, **common)
        run_dir = folder / "runs" / "chaos"
        traces = run_dir / "traces.jsonl"
        for n in range(kills):
            run = start_run(config, tag=f"k{n}")
            before = trace_lines(traces)
            wait_lines(traces, before + 1, run, timeout=120)
            if run.process.poll() is not None:
                break  # the run finished before it could be killed
            time.sleep(rng.uniform(0.0, 0.5))  # a random moment: resets, steps and releases in flight
            run.process.kill()
            run.wait()
            time.sleep(0.3)  # let the server see the connections go
            journal = LeaseJournal(run_dir, "check")
            held = sandbox.slots - sandbox.free_slots()
            journaled, unanswered = len(journal.outstanding()), len(journal.unanswered())
            journal.close()
            rounds.append(
                {
                    "held": held,
                    "journaled": journaled,
                    "unanswered": unanswered,
                    "unexplained": max(0, held - journaled - unanswered),
                    "lines_written": trace_lines(traces) - before,
                    "reconcile_notice": "slots free, this run can use" in run.err(),
                }
            )
        held_before = sandbox.slots - sandbox.free_slots()
        if final == "exclusive":
            config = write_config(folder / "leases.yaml", sandbox, environment={"exclusive": True}, **common)
        started = time.monotonic()
        resume = start_run(config, tag="final")
        code = resume.wait(timeout=1800)
        wall = time.monotonic() - started
        free = sandbox.wait_free(10)
        err = resume.err()
        check = check_traces(traces)
        resets, slot_timeouts = _final_resets(run_dir)
    notices = [line for line in err.splitlines() if "release_all" in line or "slots free" in line]
    usable = LEASE_SLOTS
    for line in notices:
        found = re.search(r"has (\d+) of \d+ slots free", line)
        if found:
            usable = int(found.group(1))
    return {
        "final_resume": final,
        "slots": LEASE_SLOTS,
        "in_flight": LEASE_IN_FLIGHT,
        "episodes": LEASE_TASKS * LEASE_REPEATS,
        "lease_expiry": "off",
        "kills": len(rounds),
        "rounds": rounds,
        "held_after_kills": [r["held"] for r in rounds],
        "max_unexplained": max((r["unexplained"] for r in rounds), default=0),
        "held_before_resume": held_before,
        "resume_usable_slots_at_start": usable,
        "resume_reset_wait_exceeded": slot_timeouts,
        "resume_exit": code,
        "resume_wall_s": round(wall, 2),
        "free_after_resume": free,
        "waited_for_a_slot": WAIT_NOTICE in err,
        "resume_reset_ms_max": round(max(resets), 1) if resets else None,
        "resume_reset_ms_median": round(statistics.median(resets), 1) if resets else None,
        "resume_resets_over_2s": sum(1 for ms in resets if ms > 2000),
        "resume_notices": notices,
        "completed": check.completed,
        "torn": check.torn,
        "duplicated": check.duplicated,
        "leases_jsonl_left": (run_dir / "leases.jsonl").exists(),
    }


def _final_resets(run_dir: Path) -> tuple[list[float], int]:
    """``timing.reset_ms`` of every attempt of the last invocation (the time its reset took, the wait for a
    slot included) and how many of its attempts failed with no free slot within reset_wait_seconds."""
    invocations = (run_dir / "invocations.jsonl").read_text(encoding="utf-8").splitlines()
    last = json.loads(invocations[-1])["invocation_id"]
    out = []
    timeouts = 0
    for line in (run_dir / "traces.jsonl").read_bytes().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (record.get("attempt") or {}).get("invocation_id") == last:
            ms = (record.get("timing") or {}).get("reset_ms")
            if isinstance(ms, (int, float)):
                out.append(float(ms))
            timeouts += "no free slot within" in str((record.get("error") or {}).get("message"))
    return out, timeouts


def _clean_reference(work: Path) -> dict[str, Any]:
    """The same 240 episodes at 16 in flight on a fresh 8-slot sandbox, never killed: what a resume's slot
    waits look like when nothing leaked (with more episodes in flight than slots, resets queue for the
    run's own slots)."""
    latency = ["--env-latency-ms", "30", "--policy-latency-ms", "30"]
    with Sandbox(work / "sb-leases-clean", slots=LEASE_SLOTS, extra=latency) as sandbox:
        config = write_config(
            work / "leases-clean" / "leases.yaml",
            sandbox,
            episodes=LEASE_TASKS,
            concurrency=LEASE_IN_FLIGHT,
            split="train",
            tasks={"repeats": LEASE_REPEATS},
        )
        started = time.monotonic()
        run = start_run(config, tag="clean")
        code = run.wait(timeout=1800)
        wall = time.monotonic() - started
        resets, slot_timeouts = _final_resets(work / "leases-clean" / "runs" / "chaos")
        free = sandbox.wait_free(10)
    return {
        "exit": code,
        "wall_s": round(wall, 2),
        "reset_ms_max": round(max(resets), 1) if resets else None,
        "reset_ms_median": round(statistics.median(resets), 1) if resets else None,
        "reset_wait_exceeded": slot_timeouts,
        "free_after": free,
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


SCENARIOS = ("kills", "outage", "signals", "sandbox_stop", "leases")

# Measured before issue 24 (issue text): 10 SIGKILLs at 16 in flight, 8 slots, no lease expiry.
REFERENCE_24 = (
    "slots held by no journal after each of 10 kills: 0,3,4,6,7,8,8,8,8,8; the final resume sat at 33/240 "
    "for 22 min 57 s (32 attempts 'no free slot within 600 s') until the sandbox was restarted"
)


def _rows(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The table: one row per figure, what it is now beside what it was before."""
    rows: list[tuple[str, str, str]] = []
    if "kills" in doc:
        kills, kills_random = doc["kills"], doc["kills_random_moment"]
        rows.append(
            (
                "kills",
                f"{kills['kills']} SIGKILLs (4 slots): {kills['leaked']} leaked, "
                f"{kills['resumed_without_progress']} restarts without progress, "
                f"{kills['completed']}/{kills['episodes']} completed, torn {kills['torn']}, dup {kills['duplicated']}",
                REFERENCE["kills"],
            )
        )
        rows.append(
            (
                "kills (random)",
                f"{kills_random['kills']} SIGKILLs at random moments: {kills_random['leaked']} leaked, "
                f"{kills_random['resumed_without_progress']} restarts without progress, "
                f"{kills_random['completed']}/{kills_random['episodes']} completed, torn {kills_random['torn']}",
                "",
            )
        )
    if "outage" in doc:
        outage = doc["outage"]
        rows.append(
            (
                "outage",
                f"{outage['outage_s']:g} s outage: {outage['completed']}/{outage['episodes']} completed, "
                f"exit {outage['exit']}, {outage['wall_s']} s wall, {outage['leaked']} leaked",
                REFERENCE["outage"],
            )
        )
    if "sigterm" in doc:
        for name, key in (("SIGTERM exit", "sigterm"), ("SIGINT exit", "sigint")):
            sig = doc[key]
            rows.append(
                (
                    name,
                    f"median {sig['median_s']} s, max {sig['max_s']} s over {sig['trials']} (codes "
                    f"{sorted(set(sig['exit_codes']))}), {sig['leaked']} leaked",
                    REFERENCE[key],
                )
            )
    if "sandbox_stop" in doc:
        rows.append(
            ("sandbox stop", f"{doc['sandbox_stop']['seconds']} s with a reset waiting", REFERENCE["sandbox_stop"])
        )
    for key in ("leases_exclusive", "leases_journal"):
        if key not in doc:
            continue
        lease = doc[key]
        rows.append(
            (
                f"leases ({lease['final_resume']})",
                f"{lease['kills']} SIGKILLs at {lease['in_flight']} in flight, {lease['slots']} slots: held after "
                f"kills {','.join(map(str, lease['held_after_kills']))} (unexplained by the journal: max "
                f"{lease['max_unexplained']}); resume: {lease['resume_usable_slots_at_start']}/{lease['slots']} "
                f"slots usable at its start, exit {lease['resume_exit']}, {lease['completed']}/{lease['episodes']} "
                f"completed in {lease['resume_wall_s']} s, {lease['resume_reset_wait_exceeded']} resets out of "
                f"time, longest reset {lease['resume_reset_ms_max']} ms, {lease['free_after_resume']}/"
                f"{lease['slots']} slots free after; torn {lease['torn']}, dup {lease['duplicated']}",
                REFERENCE_24 if key == "leases_exclusive" else "",
            )
        )
    if "leases_clean_reference" in doc:
        clean = doc["leases_clean_reference"]
        rows.append(
            (
                "leases (clean)",
                f"reference: the same 240 episodes on a fresh sandbox, never killed: exit {clean['exit']}, "
                f"{clean['wall_s']} s, longest reset {clean['reset_ms_max']} ms (queueing for the run's own "
                f"slots), {clean['free_after']}/{LEASE_SLOTS} slots free after",
                "",
            )
        )
    return rows


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
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"comma list of {', '.join(SCENARIOS)}")
    args = parser.parse_args(argv)
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        parser.error(f"--only: unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    if args.quick:
        args.kills, args.outage_s, args.signal_trials = 2, 3.0, 1
    out = Path(args.out) if args.out else (Path(tempfile.gettempdir()) / "chaos-quick.json" if args.quick else RESULTS)
    started = time.monotonic()
    doc: dict[str, Any] = {
        "schema": "shopsimrl-bench-chaos-v1",
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "quick": args.quick,
        "scenarios": only,
    }
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        work = Path(tmp)
        if "kills" in only:
            doc["kills"] = _kills(work, args.kills, random_delay=False)
            doc["kills_random_moment"] = _kills(work, args.kills, random_delay=True)
        if "outage" in only:
            doc["outage"] = _outage(work, args.outage_s)
        if "signals" in only:
            doc["sigterm"] = _signals(work, signal.SIGTERM, args.signal_trials)
            doc["sigint"] = _signals(work, signal.SIGINT, args.signal_trials)
        if "sandbox_stop" in only:
            doc["sandbox_stop"] = _sandbox_stop(work)
        if "leases" in only:
            doc["leases_exclusive"] = _lease_starvation(work, args.kills, final="exclusive")
            doc["leases_journal"] = _lease_starvation(work, args.kills, final="journal")
            doc["leases_clean_reference"] = _clean_reference(work)
    doc["wall_s"] = round(time.monotonic() - started, 1)
    doc["reference_before_issue_10"] = REFERENCE
    doc["reference_before_issue_24"] = REFERENCE_24
    rows = _rows(doc)
    width = max(len(r[1]) for r in rows)
    print(f"{'figure':<18} {'now':<{width}}  before (issue 10 or 24)")
    for name, now, before in rows:
        print(f"{name:<18} {now:<{width}}  {before}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
