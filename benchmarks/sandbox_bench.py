"""Sandbox benchmark: `interact` step latency at 1 and 64 concurrent sessions over real HTTP, split into
server service time and queueing, and search latency on a 20,000-product catalog.

    .venv/bin/python -m benchmarks.sandbox_bench [--steps 3000] [--repeats 3] [--catalog-size 20000] [--quick]

Prints a table and writes benchmarks/results/sandbox.json. Targets (issue 3, this machine): step
p50 ≤ 2 ms, search p50 ≤ 10 ms.

How it measures
* The server runs in its own process (`SandboxServer`, i.e. `shopsim-sandbox serve`) with the opt-in
  `--server-timing` flag, so every response carries `server-timing: app;dur=<ms>`: the **service
  time**, from the moment uvicorn hands the request to the app until the app starts its response.
* The load generator is this process: closed-loop sessions (each sends its next request when the
  previous answer is in) over a minimal keep-alive HTTP/1.1 client written on asyncio streams (no
  HTTP library, nothing from shopsimrl_core). **Client latency** = request written → answer read.
  Client latency − service time = time waiting for the event loop (queueing) + HTTP parsing + loopback.
* With N closed-loop sessions, Little's law fixes the mean client latency at N / throughput, so at 64
  sessions the client latency measures the queue, and only the service time compares with the target.
* CPU seconds of the server process (from /proc) and of this process are recorded per request, to show
  the load generator is cheaper than the server it drives.
* Step runs use the default 1,000-product catalog and the 20,000-product one. Each runs against two
  servers started side by side, the shipped default (uvloop) and `--loop asyncio`, so their ratio
  comes from one run; the order rotates per repeat because the 2 shared cores are busy with other
  jobs. Medians over repeats are reported; every repeat is kept in the JSON, with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path

from shopsim_sandbox.catalog import load_catalog
from shopsim_sandbox.search import SearchIndex
from shopsim_sandbox.synthetic import DEFAULT_CATALOG_SIZE
from shopsim_sandbox.testing import SandboxServer

RESULTS = Path(__file__).resolve().parent / "results" / "sandbox.json"
TARGETS_MS = {"step_p50": 2.0, "search_p50": 10.0}
_TICKS = os.sysconf("SC_CLK_TCK")


class _Connection:
    """One keep-alive HTTP/1.1 connection that posts JSON and reads the JSON answer."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, body: dict) -> tuple[int, dict, float, float | None]:
        """Send one request; return (status, result, client seconds, server-timing ms or None)."""
        payload = json.dumps(body).encode()
        request = (f"POST /api/shop_agent HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload
        start = time.perf_counter()
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length, service = 0, None
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            name = name.lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"server-timing":
                service = float(value.split(b"dur=", 1)[1].split(b";", 1)[0])
        data = await self.reader.readexactly(length)
        elapsed = time.perf_counter() - start
        return int(head.split(b" ", 2)[1]), json.loads(data)["result"], elapsed, service

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class _Tally:
    """Latencies of one session: interact client seconds and service ms, and a count of all requests."""

    def __init__(self) -> None:
        self.client: list[float] = []
        self.service: list[float] = []
        self.requests = 0

    async def post(self, conn: _Connection, body: dict, *, step: bool = False) -> tuple[int, dict]:
        status, result, elapsed, service = await conn.post(body)
        self.requests += 1
        if step:
            self.client.append(elapsed)
            if service is not None:
                self.service.append(service)
        return status, result


async def _session(conn: _Connection, task_ids: list[int], queries: dict[int, str], steps: int,
                   tally: _Tally) -> None:
    """Play episodes (search, open, select, back, …) until `steps` interact latencies were recorded."""
    position = 0
    out = tally.client
    while len(out) < steps:
        task_id = task_ids[position % len(task_ids)]
        position += 1
        status, reset = await tally.post(conn, {"action": "reset", "idx": task_id})
        assert status == 200, reset
        lease = {"env_idx": reset["env_idx"], "lease_id": reset["lease_id"]}
        state = reset["observation_state"]
        done = False
        for _ in range(28):
            if state["page_type"] == "search_home":
                action = f"search[{queries[task_id]}]"
            elif state["page_type"] == "search_results":
                asins = [a for a in state["actions"] if a[0].isdigit()]
                action = f"click[{asins[len(out) % len(asins)]}]" if asins else "click[back to search]"
            else:
                options = [a for a in state["actions"] if "=" in a]
                action = f"click[{options[0]}]" if options and state.get("missing_option_axes") else "click[< prev]"
            status, answer = await tally.post(conn, {"action": "interact", **lease, "response": action}, step=True)
            assert status == 200, answer
            state = answer["observation_state"]
            if answer["done"] or len(out) >= steps:
                done = answer["done"]
                break
        if not done:
            await tally.post(conn, {"action": "terminate", **lease, "termination_reason": "action_limit"})
        await tally.post(conn, {"action": "release_one", **lease})


def _summary(latencies_ms: list[float]) -> dict:
    ms = sorted(latencies_ms)
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return {"n": len(ms), "p50_ms": round(q[49], 3), "p90_ms": round(q[89], 3), "p99_ms": round(q[98], 3),
            "max_ms": round(ms[-1], 3), "mean_ms": round(statistics.fmean(ms), 3)}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _step_run(url: str, server_pid: int, sessions: int, steps: int, task_ids: list[int],
                    queries: dict[int, str]) -> dict:
    host, port = url.removeprefix("http://").split(":")
    conns = [_Connection(host, int(port)) for _ in range(sessions)]
    await asyncio.gather(*(c.open() for c in conns))
    per_session = max(1, steps // sessions)
    tallies = [_Tally() for _ in range(sessions)]
    server_cpu, client_cpu = _cpu_seconds(server_pid), _own_cpu_seconds()
    start = time.perf_counter()
    await asyncio.gather(*(_session(c, task_ids[i::sessions] or task_ids, queries, per_session, tallies[i])
                           for i, c in enumerate(conns)))
    wall = time.perf_counter() - start
    server_cpu, client_cpu = _cpu_seconds(server_pid) - server_cpu, _own_cpu_seconds() - client_cpu
    await asyncio.gather(*(c.close() for c in conns))
    client = [x * 1000.0 for t in tallies for x in t.client]
    service = [x for t in tallies for x in t.service]
    requests = sum(t.requests for t in tallies)
    return {
        "client": _summary(client),
        "service": _summary(service) if service else None,
        "steps_per_s": round(len(client) / wall, 1),
        "requests_per_s": round(requests / wall, 1),
        # Little's law for the closed loop: mean latency over all requests = sessions / request rate.
        "littles_law_mean_ms": round(sessions / (requests / wall) * 1000.0, 3),
        "server_cpu_us_per_request": round(server_cpu / requests * 1e6, 1),
        "client_cpu_us_per_request": round(client_cpu / requests * 1e6, 1),
        "server_cpu_utilisation": round(server_cpu / wall, 2),
        "client_cpu_utilisation": round(client_cpu / wall, 2),
    }


def _median_run(runs: list[dict]) -> dict:
    """Per metric, the median over repeats (so one disturbed repeat does not decide the number)."""

    def med(values: list) -> float:
        return round(statistics.median(values), 3)

    out: dict = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = {k: med([r[key][k] for r in runs]) for k in value}
        elif value is None:
            out[key] = None
        else:
            out[key] = med([r[key] for r in runs])
    return out


async def _search_over_http(url: str, queries: list[str], task_id: int) -> tuple[dict, dict]:
    host, port = url.removeprefix("http://").split(":")
    conn = _Connection(host, int(port))
    await conn.open()
    client, service = [], []
    _, reset, _, _ = await conn.post({"action": "reset", "idx": task_id})
    lease = {"env_idx": reset["env_idx"], "lease_id": reset["lease_id"]}
    count = 0
    for query in queries:
        if count >= 28:
            await conn.post({"action": "release_one", **lease})
            _, reset, _, _ = await conn.post({"action": "reset", "idx": task_id})
            lease = {"env_idx": reset["env_idx"], "lease_id": reset["lease_id"]}
            count = 0
        _, _, elapsed, served = await conn.post({"action": "interact", **lease, "response": f"search[{query}]"})
        client.append(elapsed * 1000.0)
        if served is not None:
            service.append(served)
        await conn.post({"action": "interact", **lease, "response": "click[back to search]"})
        count += 2
    await conn.post({"action": "release_one", **lease})
    await conn.close()
    return _summary(client), _summary(service)


CONFIGS = {
    # name: SandboxServer keyword arguments (all with --server-timing)
    "default": {},                        # uvloop (when installed), GC-frozen catalog
    "asyncio_loop": {"loop": "asyncio"},  # the stdlib loop, which `asyncio.run` gave before
}


def _step_benchmark(args: argparse.Namespace, catalog_size: int) -> dict:
    """Every config × (1, 64) sessions, `args.repeats` times, configs in rotating order."""
    names = list(CONFIGS)
    with contextlib.ExitStack() as stack:
        servers = {name: stack.enter_context(SandboxServer(catalog_size=catalog_size, slots=64, policy=False,
                                                           server_timing=True, **kwargs))
                   for name, kwargs in CONFIGS.items()}
        catalog = load_catalog(servers["default"].catalog_file)
        task_ids = sorted(catalog.tasks)
        queries = {t: catalog.tasks[t].goal["instruction_text"] for t in task_ids}
        for server in servers.values():
            for sessions in (1, 64):  # warm-up
                asyncio.run(_step_run(server.env_url, server.pid, sessions, 200, task_ids, queries))
        runs: dict[str, dict[int, list[dict]]] = {name: {1: [], 64: []} for name in names}
        for repeat in range(args.repeats):
            for name in names[repeat % len(names):] + names[:repeat % len(names)]:
                server = servers[name]
                for sessions in (1, 64):
                    runs[name][sessions].append(asyncio.run(
                        _step_run(server.env_url, server.pid, sessions, args.steps, task_ids, queries)))
    out: dict = {"catalog_size": len(catalog.products), "repeats": args.repeats, "steps_per_run": args.steps}
    for name in names:
        out[name] = {f"{s}_sessions": {"median": _median_run(runs[name][s]), "runs": runs[name][s]} for s in (1, 64)}
    return out


def _search_benchmark(args: argparse.Namespace) -> dict:
    with SandboxServer(catalog_size=args.catalog_size, slots=4, policy=False, server_timing=True) as server:
        catalog = load_catalog(server.catalog_file)
        tasks = list(catalog.tasks.values())
        n = 30 if args.quick else 300
        queries = [t.goal["instruction_text"] for t in tasks[:n]] + \
                  [t.goal["instruction_simple"] for t in tasks[:n]] + [t.goal["name"] for t in tasks[:n]]
        start = time.perf_counter()
        index = SearchIndex(catalog.records, set(catalog.products))
        build_s = time.perf_counter() - start
        hits, latencies = [], []
        for query in queries:
            t0 = time.perf_counter()
            _, found = index.search(query)
            latencies.append((time.perf_counter() - t0) * 1000.0)
            hits.append(len(found))
        client, service = asyncio.run(_search_over_http(server.env_url, queries, tasks[0].task_id))
        return {"catalog_size": len(catalog.products), "index_build_s": round(build_s, 3),
                "engine": _summary(latencies), "http_search_step": client, "http_search_step_service": service,
                "mean_hits": round(statistics.fmean(hits), 1)}


def _print_table(results: dict) -> None:
    print(f"{'measurement (medians over repeats)':<52} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'steps/s':>8}")
    for steps in results["steps"]:
        size = steps["catalog_size"]
        for name in CONFIGS:
            for s in (1, 64):
                m = steps[name][f"{s}_sessions"]["median"]
                label = f"step {size:>5} products, {s:>2} sess, {name}"
                for kind in ("service", "client"):
                    row = m[kind]
                    print(f"{label + ', ' + kind:<52} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} "
                          f"{row['max_ms']:>8.2f} {m['steps_per_s'] if kind == 'client' else '':>8}")
            m = steps[name]["64_sessions"]["median"]
            print(f"    {name}, 64 sessions: Little's law mean {m['littles_law_mean_ms']:.2f} ms; CPU per request "
                  f"server {m['server_cpu_us_per_request']:.0f} µs ({m['server_cpu_utilisation']:.2f} cores), "
                  f"client {m['client_cpu_us_per_request']:.0f} µs ({m['client_cpu_utilisation']:.2f} cores)")
    search = results["search"]
    size = search["catalog_size"]
    for label, row in ((f"search engine, {size} products", search["engine"]),
                       (f"search[...] step, {size} products, 1 sess, service", search["http_search_step_service"]),
                       (f"search[...] step, {size} products, 1 sess, client", search["http_search_step"])):
        print(f"{label:<52} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} {row['max_ms']:>8.2f}")
    print(f"index build {search['index_build_s']} s; mean hits/query {search['mean_hits']}")
    print("targets: step p50 <= 2 ms -> default service p50 "
          + ", ".join(f"{st['default'][f'{s}_sessions']['median']['service']['p50_ms']:.3f} ms"
                      f" ({st['catalog_size']} products, {s} sess)" for st in results["steps"] for s in (1, 64))
          + f"; search p50 <= 10 ms -> {search['http_search_step']['p50_ms']:.3f} ms client-observed")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table and write benchmarks/results/sandbox.json (or --out)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3000, help="interact steps per run (default 3000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per config and concurrency (default 3)")
    parser.add_argument("--catalog-size", type=int, default=20_000,
                        help="large catalog: search benchmark and the second step benchmark (default 20000)")
    parser.add_argument("--out", type=Path, default=None, help=f"output JSON (default {RESULTS})")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: tiny sizes, numbers meaningless, written to a temporary directory")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats, args.catalog_size = 200, 1, 2000
        out = args.out or Path(tempfile.mkdtemp(prefix="sandbox-bench-")) / "sandbox.json"
    else:
        out = args.out or RESULTS
    results: dict = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                 "platform": platform.platform(), "load_avg_at_start": os.getloadavg()},
                     "targets_ms": TARGETS_MS, "quick": args.quick}
    results["steps"] = [_step_benchmark(args, size) for size in (DEFAULT_CATALOG_SIZE, args.catalog_size)]
    results["search"] = _search_benchmark(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(tmp, out)
    _print_table(results)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
