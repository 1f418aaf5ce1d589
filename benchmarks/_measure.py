"""Measurement helpers shared by the benchmarks (light imports: the thread reference runs them in its own process)."""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path
from typing import Any

SPLIT = "train"


def machine_facts(packages: tuple[str, ...] = ()) -> dict[str, Any]:
    """What a results file records of the machine: Python, CPUs, platform, load at start, *packages*' versions."""
    import platform
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "packages": versions,
    }


def proc_cpu_seconds(pid: int | None) -> float | None:
    """User+system CPU seconds of process *pid* so far (Linux /proc), or None if unavailable."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # fields[11], fields[12] are utime, stime (stat fields 14 and 15) in clock ticks
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def timing_split(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-step ``timing`` of the traces: mean and p50/p90 of model_ms, env_ms and harness_ms."""
    out: dict[str, Any] = {}
    steps = [s["timing"] for r in records for s in r.get("steps") or [] if isinstance(s.get("timing"), dict)]
    for key in ("model_ms", "env_ms", "harness_ms"):
        values = [float(t[key]) for t in steps if isinstance(t.get(key), (int, float))]
        out[key] = {
            "mean": _round(statistics.fmean(values)) if values else None,
            "p50": _round(_quantile(values, 0.5)),
            "p90": _round(_quantile(values, 0.9)),
        }
    resets = [float(r["timing"]["reset_ms"]) for r in records if isinstance(r.get("timing"), dict)]
    cleanups = [float(r["timing"]["cleanup_ms"]) for r in records if isinstance(r.get("timing"), dict)]
    out["episode_reset_ms_p50"] = _round(_quantile(resets, 0.5))
    out["episode_cleanup_ms_p50"] = _round(_quantile(cleanups, 0.5))
    return out


def steady_rate(
    intervals: list[tuple[float, float, int]], t0: float, *, workers: int | None = None
) -> float | None:
    """Steps/s while every worker was busy: from *t0* to the last episode start (the queue is
    empty after it, so the tail where workers idle is left out). Steps of an episode are spread
    evenly over its interval (exact enough when steps take similar time).

    *workers*: the window starts no earlier than the start of the *workers*-th episode, the moment
    every worker holds one (a client that spreads its first starts is not counted while it ramps up).
    """
    if not intervals:
        return None
    if workers:
        starts = sorted(start for start, _, _ in intervals)
        t0 = max(t0, starts[min(workers, len(starts)) - 1])
    end = max(start for start, _, _ in intervals)
    if end - t0 <= 0:
        return None
    steps = 0.0
    for start, stop, count in intervals:
        overlap = min(stop, end) - max(start, t0)
        if overlap > 0 and stop > start:
            steps += count * overlap / (stop - start)
    return steps / (end - t0)


def child_env(bytecode: str) -> dict[str, str]:
    """The environment of a measured process: *bytecode* "cached" reads compiled bytecode, as from an install.

    ``pip install`` compiles a package's bytecode and an editable install writes ``__pycache__`` on first use,
    so a user's process reads it; with PYTHONDONTWRITEBYTECODE=1 inherited (as on the build machine) every
    start compiles the project's sources again. "cached" drops that variable; "inherit" keeps the
    environment as given.
    """
    env = dict(os.environ)
    if bytecode == "cached":
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def compile_sources(root: Path) -> None:
    """Write the bytecode of the measured code (project and benchmarks) as an install would."""
    import subprocess
    import sys

    folders = [str(root / name) for name in ("shopsimrl_core", "shopsim_sandbox", "benchmarks")]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *folders], check=True, env=child_env("cached"),
                   stdout=subprocess.DEVNULL)
