"""run_index's results as reports: the curve over run sizes, its plot, the docs table, the console line.

Pure functions of the results documents (``benchmarks/results/run_index-<N>.json``), apart from
:mod:`benchmarks.run_index` so that tests read them without generating anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SCHEMA = "shopsimrl-bench-run-index-v2"


def curve(results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The rows of the curve (medians, wall and CPU) over every measured size."""
    rows = []
    for episodes in sorted(results):
        r = results[episodes]
        rows.append(
            {
                "episodes": episodes,
                "line_kb": round(r["generate"]["line_bytes_mean"] / 1024, 1),
                "traces_gb": round(r["generate"]["traces_bytes"] / 1e9, 2),
                "build": {k: r["build"][k] for k in ("wall_s", "cpu_s", "peak_rss_mb", "load_1min")},
                "resume_first": {k: r["resume_first"][k] for k in ("wall_s", "cpu_s", "peak_rss_mb", "load_1min")},
                "resume": {k: r["resume"][k] for k in ("wall_s", "cpu_s", "peak_rss_mb", "load_1min")},
                "summarize": {k: r["summarize"][k] for k in ("wall_s", "cpu_s", "peak_rss_mb", "load_1min")},
                "created_at": r.get("created_at"),
            }
        )
    return {"schema": SCHEMA + "-curve", "rows": rows}


def plot(doc: dict[str, Any], out: Path) -> None:
    """Log-log plot of CPU and wall per phase against episodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = doc["rows"]
    xs = [r["episodes"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label, style in (
        ("resume", "resume no-op (`shopsimrl run`)", "o-"),
        ("summarize", "`shopsimrl summarize`", "s-"),
        ("resume_first", "first resume after the build", "^--"),
        ("build", "index build from scratch", "d:"),
    ):
        cpu = [r[key]["cpu_s"]["median"] if isinstance(r[key]["cpu_s"], dict) else r[key]["cpu_s"] for r in rows]
        ax.plot(xs, cpu, style, label=label + " — CPU")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("episodes in the run (one trace line each)")
    ax.set_ylabel("CPU seconds, whole process (user + system)")
    ax.set_title("Resume and summary against run size (medians; 2 shared vCPUs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def markdown_curve(doc: dict[str, Any]) -> str:
    """The docs table of the curve (docs/benchmarks.md quotes it verbatim; tests/benchmarks compares the two)."""
    from benchmarks._headline import span

    def med(phase: dict[str, Any]) -> str:
        cpu = phase["cpu_s"]
        return (
            f"{phase['wall_s']['median']:.2f} / {cpu['median']:.2f} s ({span(cpu['min'], cpu['max'], 2)}), "
            f"{phase['peak_rss_mb']['median']:,.0f} MB"
        )

    lines = [
        "| episodes | traces | index build from scratch: wall / CPU, peak RSS | first resume after the build "
        "| resume no-op (`shopsimrl run`): wall / CPU (CPU min–max), peak RSS | `shopsimrl summarize`: the same "
        "| load (1 min) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in doc["rows"]:
        b, f = row["build"], row["resume_first"]
        loads = [*row["resume"]["load_1min"], *row["summarize"]["load_1min"]]
        lines.append(
            f"| {row['episodes']:,} | {row['traces_gb']:.2f} GB, {row['line_kb']:.1f} KB/line "
            f"| {b['wall_s']:.1f} / {b['cpu_s']:.1f} s, {b['peak_rss_mb']:,.0f} MB "
            f"| {f['wall_s']:.2f} / {f['cpu_s']:.2f} s, {f['peak_rss_mb']:,.0f} MB "
            f"| {med(row['resume'])} | {med(row['summarize'])} | {span(min(loads), max(loads), 1)} |"
        )
    return "\n".join(lines)


def format_row(doc: dict[str, Any]) -> str:
    """One size's table line."""
    gen, b, f, r, s = doc["generate"], doc["build"], doc["resume_first"], doc["resume"], doc["summarize"]
    return (
        f"{doc['episodes']:>9,} episodes, {gen['traces_bytes'] / 1e9:.2f} GB ({gen['line_bytes_mean'] / 1024:.1f}"
        f" KB/line): build {b['wall_s']:.1f} s wall / {b['cpu_s']:.1f} s CPU; first resume {f['wall_s']:.2f} / "
        f"{f['cpu_s']:.2f}; resume no-op {r['wall_s']['median']:.2f} / {r['cpu_s']['median']:.2f} "
        f"({r['peak_rss_mb']['median']:.0f} MB); summarize {s['wall_s']['median']:.2f} / "
        f"{s['cpu_s']['median']:.2f} ({s['peak_rss_mb']['median']:.0f} MB); load {r['load_1min']}"
    )
