"""How ``core_throughput`` results are shown: the printed table and the PNG, beside the earlier harness's numbers.

Presentation only (``benchmarks.core_throughput`` measures and writes the JSON); split from it so
that each module stays within the project's 520-line size rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["LEGACY", "LABELS", "format_table", "plot"]

LEGACY = {
    "zero_latency_steps_per_s": [230, 290],
    "client_cpu_ms_per_step": [3, 5],
    "latency_bound_fraction_of_ideal": [0.57, 0.64],
    "source": "docs architecture §3 (earlier harness, thread pool + new HTTP session per episode)",
}

LABELS = {
    "zero_latency": "runtime, default (aiohttp engine)",
    "httpx_pool": "runtime, httpx pool (http_transport: httpx)",
    "sharded_httpx": "runtime, httpx sharded 8x16",
    "stream_transport": "runtime, asyncio-streams transport",
    "thread_reference": "thread reference (legacy shape)",
}


def format_table(doc: dict[str, Any]) -> str:
    """The human-readable table printed after a run."""
    head = (
        f"{'scenario':<46} {'conc':>4} {'steps':>6} {'steps/s':>8} {'steady':>8} {'cli ms/st':>9} "
        f"{'srv ms/st':>9} {'model p50':>9} {'env p50':>8} {'harn p50':>8} {'ideal%':>7} {'steady%':>7}"
    )
    lines = [head, "-" * len(head)]

    def f(v: Any, spec: str, width: int) -> str:
        return format(v, spec) if isinstance(v, (int, float)) else "-".rjust(width)

    def line(name: str, conc: Any, row: dict[str, Any]) -> None:
        t = row.get("timing_p50_ms") or {}
        frac, steady = row.get("fraction_of_ideal"), row.get("steady_fraction_of_ideal")
        lines.append(
            f"{name:<46} {conc:>4} {row.get('steps', 0):>6} {f(row.get('steps_per_s'), '8.1f', 8)} "
            f"{f(row.get('steady_steps_per_s'), '8.1f', 8)} {f(row.get('client_cpu_ms_per_step'), '9.2f', 9)} "
            f"{f(row.get('server_cpu_ms_per_step'), '9.2f', 9)} {f(t.get('model_ms'), '9.2f', 9)} "
            f"{f(t.get('env_ms'), '8.2f', 8)} {f(t.get('harness_ms'), '8.2f', 8)} "
            f"{f(frac * 100 if frac else None, '6.1f', 6)}% {f(steady * 100 if steady else None, '6.1f', 6)}%".replace(
                "-%", "- "
            )
        )

    if any(doc[name] for name in ("zero_latency", "httpx_pool", "sharded_httpx", "stream_transport")):
        lines.append("zero-latency stubs:")
    for section in ("zero_latency", "httpx_pool", "sharded_httpx", "stream_transport", "thread_reference"):
        for key, row in doc[section].items():
            if not key.startswith("latency"):
                line("  " + LABELS[section], key[1:], row)
    if doc["latency_bound"] or any(k.startswith("latency") for k in doc["thread_reference"]):
        lines.append(f"model latency {doc['settings']['latency_ms']:.0f} ms:")
    for variant, row in doc["latency_bound"].items():
        label = {
            "stub": "stub model",
            "sandbox_policy": "sandbox baseline policy",
            "stub_httpx_pool": "stub model, httpx pool",
            "sandbox_policy_httpx_pool": "sandbox baseline policy, httpx pool",
        }.get(variant)
        if label is None:
            label = "stub model, " + LABELS[variant.removeprefix("stub_")].removeprefix("runtime, ")
        line(f"  runtime: {label}", row["concurrency"], row)
    for key, row in doc["thread_reference"].items():
        if key.startswith("latency"):
            line("  " + LABELS["thread_reference"], row["concurrency"], row)
    lines.append(
        "medians over repeats. steps/s: whole batch; steady: while every worker was busy; cli/srv ms/st: "
        "client/server CPU ms per step; model/env/harn p50: steps[].timing medians (ms); "
        "ideal% = steps/s ÷ (concurrency / model latency)"
    )
    return "\n".join(lines)


def plot(doc: dict[str, Any], path: Path) -> Path | None:
    """Steps/s and client CPU per step vs concurrency for each client variant; None without data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {
        "zero_latency": "o-",
        "httpx_pool": "v-",
        "sharded_httpx": "D-.",
        "stream_transport": "s--",
        "thread_reference": "^:",
    }
    series = [
        (LABELS[name], {k: v for k, v in doc[name].items() if not k.startswith("latency")}, style)
        for name, style in styles.items()
    ]
    if not any(rows for _, rows, _ in series):
        return None
    fig, (ax, ax_cpu) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, rows, style in series:
        if not rows:
            continue
        xs = sorted(int(k[1:]) for k in rows)
        ax.plot(xs, [rows[f"c{x}"]["steps_per_s"] for x in xs], style, label=label)
        ax_cpu.plot(xs, [rows[f"c{x}"]["client_cpu_ms_per_step"] for x in xs], style, label=label)
    lo, hi = LEGACY["zero_latency_steps_per_s"]
    ax.axhspan(lo, hi, color="grey", alpha=0.2, label="earlier harness, measured elsewhere")
    for a in (ax, ax_cpu):
        a.set_xscale("log", base=2)
        a.set_xticks([1, 8, 64], ["1", "8", "64"])
        a.set_xlabel("episodes in flight (concurrency)")
        a.grid(True, alpha=0.3)
    ax.set_ylabel("steps / s (zero-latency stubs)")
    ax_cpu.set_ylabel("client CPU ms / step")
    ax.legend(fontsize=7)
    fig.suptitle(
        f"shopsimrl core throughput over loopback HTTP ({doc['created_at'][:10]}, "
        f"{doc['machine']['cpus']} CPUs shared with other jobs; medians of {doc['settings']['repeats']})",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
