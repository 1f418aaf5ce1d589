"""Run every benchmark in this folder, one after another (`make bench`).

    .venv/bin/python -m benchmarks.run_all [--only core_throughput,sandbox_bench] [--quick]

A benchmark is any module ``benchmarks/<name>.py`` (not starting with ``_``, not this file) that
defines ``main(argv) -> int``; each prints its own table and writes its JSON into
benchmarks/results/. Each runs in its own subprocess so one crash or leaked server does not
affect the next. ``--quick`` is passed to the benchmarks that accept it (tiny sizes: a smoke run
whose numbers mean nothing, written outside benchmarks/results/); benchmarks without ``--quick``
are skipped then. The exit code is non-zero when any benchmark failed.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def discover() -> list[str]:
    """Names of the benchmark modules in this folder (sorted; core_throughput first)."""
    names = []
    for path in sorted(HERE.glob("*.py")):
        if path.name.startswith("_") or path.stem == "run_all":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
            names.append(path.stem)
    return sorted(names, key=lambda name: (name != "core_throughput", name))


def _accepts(name: str, flag: str) -> bool:
    return flag in (HERE / f"{name}.py").read_text(encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks and print a one-line status for each at the end."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=None, help="comma list of benchmark names (default: all)")
    parser.add_argument("--quick", action="store_true", help="pass --quick to benchmarks that support it")
    args = parser.parse_args(argv)
    names = discover()
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            print(f"run_all: --only: unknown benchmark(s) {unknown}; available: {', '.join(names)}", file=sys.stderr)
            return 2
        names = [n for n in names if n in wanted]
    status: list[tuple[str, int | None, float]] = []
    for name in names:
        cmd = [sys.executable, "-m", f"benchmarks.{name}"]
        if args.quick:
            if not _accepts(name, '"--quick"'):
                print(f"=== {name}: skipped (no --quick mode)", flush=True)
                status.append((name, None, 0.0))
                continue
            cmd.append("--quick")
        print(f"=== {name}: {' '.join(cmd[1:])}", flush=True)
        started = time.perf_counter()
        code = subprocess.call(cmd, cwd=ROOT)
        status.append((name, code, time.perf_counter() - started))
        print(flush=True)
    print("=== summary")
    for name, code, seconds in status:
        state = "skipped" if code is None else "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"{name:<24} {state:<16} {seconds:7.1f} s")
    print(f"results in {HERE / 'results'}")
    return 0 if all(code in (0, None) for _, code, _ in status) else 1


if __name__ == "__main__":
    raise SystemExit(main())
