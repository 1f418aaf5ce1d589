"""client_shape's results as reports: the headline spans, the CPU split, the console table, the docs table.

Pure functions of a results document (``benchmarks/results/client_shape.json``), apart from
:mod:`benchmarks.client_shape` so that tests read them without starting anything.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks._measure import _round
from benchmarks._stub_env import DEFAULT_OBS_KB

#: the rows whose ratios README.md's "Performance in one line" quotes (tests/benchmarks/test_readme_numbers.py)
HEADLINE_ROWS = ("start_1ep", "c64_0ms_1024", "c64_200ms", "c256_200ms")


def _span(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": _round(statistics.median(values), 3) or 0.0, "max": max(values)}


def headline(rows: dict[str, Any]) -> dict[str, Any]:
    """What README.md quotes: per headline row, the per-round ratios' span and the machine load beside them.

    ``cpu_per_step`` and ``steps_per_s`` are ours ÷ the reference's, one value per round; for
    ``start_1ep`` (one episode: mostly start-up) the whole-process CPU seconds of each client instead.
    """
    out: dict[str, Any] = {}
    for label in HEADLINE_ROWS:
        row = (rows.get(label) or {}).get("default") or {}
        vs = row.get("vs_reference")
        if not vs:
            continue
        entry: dict[str, Any] = {
            "cpu_per_step_ratio": _span(vs["cpu_per_step_ratio_by_round"]),
            "steps_per_s_ratio": _span(vs["steps_per_s_ratio_by_round"]),
            "load_1min": {"min": vs["load_1min_range"][0], "max": vs["load_1min_range"][1]},
            "rounds": len(vs["cpu_per_step_ratio_by_round"]),
        }
        ours = [r["cpu_s"] for r in row.get("runs") or [row]]
        ref = [r["cpu_s"] for r in rows[label]["reference"].get("runs") or [rows[label]["reference"]]]
        entry["cpu_s"] = {"shopsimrl": _span(ours), "reference": _span(ref)}
        if row.get("steady_fraction_of_ideal") is not None:
            fractions = [
                r["steady_steps_per_s"] / row["ideal_steps_per_s"]
                for r in row.get("runs") or [row]
                if r.get("steady_steps_per_s")
            ]
            entry["steady_fraction_of_ideal"] = _span([_round(f, 3) or 0.0 for f in fractions])
        out[label] = entry
    return out


def fixed_and_marginal(rows: dict[str, Any]) -> dict[str, Any]:
    """The client's CPU split into a part per process and a part per step.

    The fixed part is start-up, preflight and summary; both come from the line through the two
    zero-latency 64-in-flight rows (400 and 1,024 episodes). Per `shopsimrl run` variant; empty
    when either row is missing.
    """
    out: dict[str, Any] = {}
    short, long = rows.get("c64_0ms") or {}, rows.get("c64_0ms_1024") or {}
    for name in set(short) & set(long) - {"reference"}:
        a, b = short[name], long[name]
        if not (a.get("steps") and b.get("steps") and b["steps"] != a["steps"]):
            continue
        per_step = (b["cpu_s"] - a["cpu_s"]) / (b["steps"] - a["steps"])
        out[name] = {
            "fixed_cpu_s": _round(a["cpu_s"] - per_step * a["steps"]),
            "marginal_cpu_ms_per_step": _round(per_step * 1000.0),
        }
    return out


def _describe(spec: dict[str, Any]) -> str:
    obs = spec.get("obs_kb") or list(DEFAULT_OBS_KB)
    pages = "1–8 KB pages" if list(obs) == list(DEFAULT_OBS_KB) else f"{obs[0]} KB pages"
    episodes = f"{spec['episodes']:,} episode" + ("s" if spec["episodes"] != 1 else "")
    return f"{spec['concurrency']} in flight, {spec['model_latency_ms']:g} ms, {episodes}, {pages}"


def markdown_table(doc: dict[str, Any]) -> str:
    """The docs table of a run (docs/benchmarks.md quotes it verbatim; tests/benchmarks compares the two).

    Per setting: the load over its runs, the medians of CPU per step of both clients, and the ratios
    of each round's pair — median (min–max) — for CPU per step and steps/s; the steady share of ideal
    where the model has latency.
    """
    from benchmarks._headline import span

    lines = [
        "| setting | load (1 min) | `shopsimrl run` CPU ms/step | reference CPU ms/step | × reference CPU per step "
        "| × reference steps/s | steady % of ideal (ours / reference) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, rows in doc["rows"].items():
        ours, ref = rows.get("default"), rows.get("reference")
        if not ours or not ref or not ours.get("vs_reference"):
            continue
        vs = ours["vs_reference"]
        cpu, rate = vs["cpu_per_step_ratio_by_round"], vs["steps_per_s_ratio_by_round"]
        loads = vs["load_1min_range"]
        steady = "—"
        if ours.get("steady_fraction_of_ideal") and ref.get("steady_fraction_of_ideal"):
            steady = f"{ours['steady_fraction_of_ideal'] * 100:.1f} / {ref['steady_fraction_of_ideal'] * 100:.1f}"
        lines.append(
            f"| `{label}`: {_describe(doc['settings']['rows'][label])} | {span(loads[0], loads[1], 1)} "
            f"| {ours['cpu_ms_per_step']:.3f} | {ref['cpu_ms_per_step']:.3f} "
            f"| {statistics.median(cpu):.3f} ({span(min(cpu), max(cpu), 3)}) "
            f"| {statistics.median(rate):.2f} ({span(min(rate), max(rate), 2)}) | {steady} |"
        )
    return "\n".join(lines)


def _loads(row: dict[str, Any]) -> list[float]:
    value = row.get("load_1min")
    return value if isinstance(value, list) else [] if value is None else [value]


def format_table(doc: dict[str, Any]) -> str:
    """The table printed after a run (one line per setting × client)."""
    head = (
        f"{'setting':<11} {'client':<26} {'steps':>6} {'wall s':>7} {'steps/s':>8} {'steady':>8} {'ideal%':>7} "
        f"{'steady%':>7} {'cpu ms/st':>9} {'stub ms/st':>10} {'x ref st/s':>10} {'x ref cpu':>9} "
        f"{'x ref cpu by round':<20} load"
    )
    lines = [head, "-" * len(head)]

    def f(v: Any, spec: str, width: int) -> str:
        return format(v, spec).rjust(width) if isinstance(v, (int, float)) else "-".rjust(width)

    for label, rows in doc["rows"].items():
        for name, row in rows.items():
            client = "thread reference" if name == "reference" else f"shopsimrl run ({name})"
            frac, steady = row.get("fraction_of_ideal"), row.get("steady_fraction_of_ideal")
            ratio = row.get("vs_reference") or {}
            lines.append(
                f"{label:<11} {client:<26} {row['steps']:>6} {f(row.get('wall_s'), '.2f', 7)} "
                f"{f(row.get('steps_per_s'), '.1f', 8)} "
                f"{f(row.get('steady_steps_per_s'), '.1f', 8)} {f(frac * 100 if frac else None, '.1f', 7)} "
                f"{f(steady * 100 if steady else None, '.1f', 7)} {f(row.get('cpu_ms_per_step'), '.3f', 9)} "
                f"{f(row.get('server_cpu_ms_per_step'), '.3f', 10)} {f(ratio.get('steps_per_s_ratio'), '.2f', 10)} "
                f"{f(ratio.get('cpu_per_step_ratio'), '.3f', 9)} "
                f"{' '.join(f'{x:.3f}' for x in ratio.get('cpu_per_step_ratio_by_round') or []):<20} "
                f"{' '.join(f'{x:.1f}' for x in _loads(row))}"
                + (f"  FAILED {row['failed']}" if row.get("failed") else "")
            )
    for name, split in (doc.get("fixed_and_marginal") or {}).items():
        lines.append(
            f"shopsimrl run ({name}): fixed {split['fixed_cpu_s']:.2f} s CPU per process (start-up, preflight, "
            f"summary) + {split['marginal_cpu_ms_per_step']:.3f} ms per step (line through c64_0ms and c64_0ms_1024)"
        )
    lines.append(
        "whole process (start-up and summary included); cpu ms/st: the client process's user+system CPU (OS rusage) "
        "per step; steady: steps/s while every worker was busy (from the traces); ideal% = steps/s ÷ "
        "(in flight / model latency); x ref: ratio to the requests + thread-pool reference in the same run "
        "(of the medians; by round: each round's pair); load: 1-minute load average at each run's start"
    )
    return "\n".join(lines)


def merge_rows(earlier: dict[str, Any], fresh: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """*earlier* with the rows of *fresh* in place of its own; derived sections recomputed from the merged rows."""
    merged = dict(earlier)
    merged["rows"] = {**earlier["rows"], **fresh["rows"]}
    merged["rows"] = {label: merged["rows"][label] for label in order if label in merged["rows"]}
    remeasured = dict(earlier.get("remeasured") or {})
    for label in fresh["rows"]:
        remeasured[label] = {
            "created_at": fresh["created_at"],
            "repeats": fresh["settings"]["repeats"],
            "bytecode": fresh["settings"].get("bytecode"),
            "machine": fresh["machine"],
            "duration_s": fresh.get("duration_s"),
        }
    merged["remeasured"] = remeasured
    merged["fixed_and_marginal"] = fixed_and_marginal(merged["rows"])
    merged["headline"] = headline(merged["rows"])
    return merged
