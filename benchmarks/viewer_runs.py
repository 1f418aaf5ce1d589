"""Viewer run-list benchmark (issue 24): the run list's latency at 100, 2,000 and 10,000 runs, cold and warm.

    .venv/bin/python -m benchmarks.viewer_runs [--sizes 100,2000,10000] [--repeats 5] [--reference-src DIR]

Writes one run folder with the project's writers (the manifest of the plan of
configs/examples/sandbox-val.yaml, its 20 jobs' trace records appended by ``RunStore``, ``summary.json``
by ``summarize_run``) and copies it N times under ``<work>/runs-N/val/``. For each N, ``shopsimrl view``
runs in its own process (``--port 0``; it prints the port it took) and is timed over real loopback HTTP:

- ``cold``: the first ``GET /`` once the viewer answers (scan of the run folders, the page's 100 rows
  read, the template compiled); ``warm``: the median of ``--repeats`` more;
- ``last page``: ``GET /?page=<last>`` (rows not read before), then again warm;
- ``new run``: ``GET /`` right after one more run folder was copied in (the listing is rescanned);
- ``episode during cold list``: a fresh viewer, ``GET /`` sent, then an episode page: its latency,
  and whether it answered before the list did.

Server CPU per request comes from /proc. The files were just written, so "cold" means a cold viewer
over a warm page cache; the folders are left 2 s to settle first (a listing of folders changed
within 2 s is scanned again on the next request, see viewer/_paths.py). ``--reference-src DIR``
measures, beside it, the viewer of an earlier checkout (``git archive <commit> shopsimrl_core |
tar -x -C DIR``), run from that folder (so it comes first on sys.path) on a port picked here (it
cannot pick one itself); ``paginated_run_list`` in the JSON says which viewer answered. Prints a
table and writes benchmarks/results/viewer_runs.json (``--quick``: 20 and 50 runs, written to a
temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
CONFIG = REPO / "configs" / "examples" / "sandbox-val.yaml"
EPISODE = "val/run-00001"


def _log(message: str) -> None:
    print(f"[viewer_runs] {message}", flush=True)


def _record(job: Any, number: int) -> dict[str, Any]:
    """A small completed v4 record of *job* (what the run list and the index read; no steps)."""
    reward = (number % 5) / 4
    success = 1 if reward >= 1.0 else 0
    detail = {"termination_reason": "purchase", "r_type": 1.0, "r_att": reward, "r_success": success}
    return {
        "schema_version": "shopsimrl-episode-v4",
        "episode_id": job.episode_id,
        "status": "completed",
        "job": job.to_dict(),
        "provenance": {"model": {"checkpoint_id": "bench-ckpt", "model": "bench-model"}},
        "started_at": "2026-12-01T08:00:00+00:00",
        "ended_at": "2026-12-01T08:00:01+00:00",
        "duration_ms": 1000.0,
        "reset": None,
        "selected_skills": [],
        "conversation": [],
        "steps": [],
        "final": {
            "done": True,
            "over": True,
            "reward": reward,
            "termination_reason": "purchase",
            "reward_detail": detail,
            "purchase": {},
            "goal": {"category": "bench"},
        },
        "error": None,
        "attempt": {"number": 1, "invocation_id": "bench"},
    }


def prototype(folder: Path) -> Path:
    """One run folder written by the core's writers (manifest, traces + run index, summary.json)."""
    import yaml

    from shopsimrl_core import summarize_run
    from shopsimrl_core.runs import RunStore, build_plan, config_from_mapping

    data = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    data["experiment"]["output_dir"] = str(folder / "out")
    plan = build_plan(config_from_mapping(data, base_dir=CONFIG.parent, source=CONFIG))
    run = folder / "proto"
    store = RunStore(run)
    store.acquire_lock("bench-viewer-runs")
    try:
        store.write_manifest(plan.semantic, plan.fingerprint, {**plan.execution, "invocation_id": "bench"})
        for number, job in enumerate(plan.jobs):
            store.append(_record(job, number))
        store.close_traces()
    finally:
        store.release_lock()
    summarize_run(run)
    for leftover in ("run.lock", "invocations.jsonl"):
        (run / leftover).unlink(missing_ok=True)
    return run


def _copies(proto: Path, root: Path, start: int, stop: int) -> None:
    for i in range(start, stop):
        shutil.copytree(proto, root / "val" / f"run-{i:05d}")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Viewer:
    """``shopsimrl view ROOT`` in its own process: the current tree on ``--port 0``, or a reference tree."""

    def __init__(self, root: Path, reference: Path | None) -> None:
        import httpx

        env = dict(os.environ)
        argv = [sys.executable, "-m", "shopsimrl_core.cli._main", "view", str(root), "--port"]
        if reference is not None:
            with socket.socket() as sock:  # the earlier viewer cannot take port 0 and say which it got
                sock.bind(("127.0.0.1", 0))
                argv.append(str(sock.getsockname()[1]))
        else:
            argv.append("0")
        # cwd: ``python -m`` puts it first on sys.path, before PYTHONPATH and this checkout's own tree
        cwd = reference if reference is not None else REPO
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
        if not found or found.group(1).endswith(":0"):
            self.stop()
            raise SystemExit(f"viewer did not start: {line!r} {self.proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        self.base = found.group(1)
        self.client = httpx.Client(timeout=600, trust_env=False)
        self.paginated: bool | None = None  # set by the first run list: which viewer answered
        while True:
            try:
                self.client.get(self.base + "/ready-probe")  # an unknown path: answered without a run read
                break
            except httpx.TransportError:
                if self.proc.poll() is not None:
                    raise SystemExit(self.proc.stderr.read()[-2000:]) from None  # type: ignore[union-attr]
                time.sleep(0.02)

    def get(self, path: str) -> dict[str, Any]:
        cpu0, t0 = _cpu_s(self.proc.pid), time.perf_counter()
        response = self.client.get(self.base + path)
        wall, cpu = time.perf_counter() - t0, _cpu_s(self.proc.pid) - cpu0
        if response.status_code != 200:
            raise SystemExit(f"{path}: HTTP {response.status_code}: {response.text[:300]}")
        if path.startswith("/") and self.paginated is None:
            self.paginated = 'id="runs-total"' in response.text
        return {"s": round(wall, 4), "server_cpu_s": round(cpu, 3), "bytes": len(response.content)}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


def _episode_during_cold_list(root: Path, reference: Path | None) -> dict[str, Any]:
    """A fresh viewer: ``GET /`` in flight, then an episode page; which answered first, and when."""
    viewer = Viewer(root, reference)
    try:
        eid = viewer.client.get(f"{viewer.base}/run/{EPISODE}").text  # the run page, so the index is open
        episode = re.findall(r'class="episode" href="([^"]+)"', eid)[0]
        done: dict[str, float] = {}
        t0 = time.perf_counter()

        def listing() -> None:
            viewer.client.get(viewer.base + "/")
            done["list_s"] = time.perf_counter() - t0

        thread = threading.Thread(target=listing)
        thread.start()
        time.sleep(0.01)  # the list request is in the server before the episode request
        t1 = time.perf_counter()
        viewer.client.get(viewer.base + episode)
        episode_s = time.perf_counter() - t1
        before = "list_s" not in done
        thread.join()
        return {"episode_s": round(episode_s, 4), "list_s": round(done["list_s"], 4), "episode_first": before}
    finally:
        viewer.stop()


def measure(root: Path, n: int, proto: Path, repeats: int, reference: Path | None) -> dict[str, Any]:
    """Every figure of one size, for one viewer (the current tree, or *reference*)."""
    viewer = Viewer(root, reference)
    try:
        cold = viewer.get("/")
        paginated = viewer.paginated
        warm = [viewer.get("/") for _ in range(repeats)]
        last_path = f"/?per=100&page={max(1, -(-n // 100))}"
        last_cold = viewer.get(last_path)
        last_warm = [viewer.get(last_path) for _ in range(repeats)]
        _copies(proto, root, n, n + 1)  # one more run: the listing must be rescanned
        new_run = viewer.get("/")
        shutil.rmtree(root / "val" / f"run-{n:05d}")
    finally:
        viewer.stop()
    return {
        "load_1min": round(os.getloadavg()[0], 2),
        "paginated_run_list": paginated,
        "cold": cold,
        "warm_median_s": round(statistics.median(w["s"] for w in warm), 4),
        "warm_server_cpu_s": [w["server_cpu_s"] for w in warm],
        "page_bytes": warm[-1]["bytes"],
        "last_page_cold": last_cold,
        "last_page_warm_median_s": round(statistics.median(w["s"] for w in last_warm), 4),
        "new_run": new_run,
        "episode_during_cold_list": _episode_during_cold_list(root, reference),
    }


def _row(label: str, n: int, r: dict[str, Any]) -> str:
    e = r["episode_during_cold_list"]
    warm_cpu = statistics.median(r["warm_server_cpu_s"])
    return (
        f"| {label} | {n:,} | {r['cold']['s']:.3f} ({r['cold']['server_cpu_s']:.2f}) | {r['warm_median_s']:.3f} "
        f"({warm_cpu:.2f}) | {r['last_page_cold']['s']:.3f} / {r['last_page_warm_median_s']:.3f} "
        f"| {r['new_run']['s']:.3f} | {e['episode_s']:.3f} ({'before' if e['episode_first'] else 'after'} the list, "
        f"{e['list_s']:.3f}) | {r['page_bytes'] // 1024} KB |"
    )


def main(argv: list[str] | None = None) -> int:
    """Generate the run folders, time the run list per size (and per viewer), print the table, write JSON."""
    from benchmarks._measure import machine_facts

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,2000,10000", help="comma list of run counts")
    parser.add_argument("--repeats", type=int, default=5, help="warm requests per page (median reported)")
    parser.add_argument("--reference-src", default=None, help="a shopsimrl_core tree of an earlier commit")
    parser.add_argument("--work", default=None, help="folder for the generated runs (default: a temporary one)")
    parser.add_argument("--out", default=str(RESULTS / "viewer_runs.json"))
    parser.add_argument("--quick", action="store_true", help="20 and 50 runs; JSON to a temporary folder")
    args = parser.parse_args(argv)
    sizes = [20, 50] if args.quick else [int(x) for x in args.sizes.split(",") if x.strip()]
    work = Path(args.work or tempfile.mkdtemp(prefix="viewer-runs-"))
    out = Path(tempfile.mkdtemp(prefix="viewer-runs-out-")) / "viewer_runs.json" if args.quick else Path(args.out)
    reference = Path(args.reference_src).resolve() if args.reference_src else None
    doc: dict[str, Any] = {
        "schema": "shopsimrl-bench-viewer-runs-v1",
        "machine": machine_facts(("starlette", "uvicorn", "anyio", "jinja2")),
        "per_page": 100,
        "repeats": args.repeats,
        "sizes": {},
    }
    lines = [
        "| viewer | runs | cold `/` s (server CPU s) | warm `/` s (CPU) | last page cold / warm s | after a new run s "
        "| episode page during a cold list s | page |",
        "|---|---|---|---|---|---|---|---|",
    ]
    try:
        proto = prototype(work)
        for n in sizes:
            root = work / f"runs-{n}"
            _log(f"{n} runs: copying the prototype run folder")
            _copies(proto, root, 0, n)
            time.sleep(2.1)  # folders older than the listing's racy window (2 s), as runs on disk usually are
            doc["sizes"][str(n)] = {"current": measure(root, n, proto, args.repeats, None)}
            lines.append(_row("current", n, doc["sizes"][str(n)]["current"]))
            _log(lines[-1])
            if reference is not None:
                doc["sizes"][str(n)]["reference"] = measure(root, n, proto, args.repeats, reference)
                lines.append(_row(f"reference ({reference.name})", n, doc["sizes"][str(n)]["reference"]))
                _log(lines[-1])
            shutil.rmtree(root)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    doc["table"] = lines
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
