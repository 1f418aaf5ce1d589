"""Real processes for fault tests and the chaos benchmark: a restartable sandbox, a connection-dropping
TCP proxy, `shopsimrl run` subprocesses and the run-directory invariants. Holds no tests.

Everything binds loopback ports chosen by the OS, and every file lives under the caller's directory.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[2]
RUN = [sys.executable, "-m", "shopsimrl_core.cli._main"]


def free_port() -> int:
    """A loopback port the OS just handed out (then released for the child to bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    """Poll *predicate* until it returns something truthy (returned) or *timeout* passes (returns the last value).

    A wait for a state, never an assertion on speed: callers assert on the state afterwards.
    """
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    return value


class Sandbox:
    """A `shopsim-sandbox serve` subprocess on fixed loopback ports, so it can be killed and restarted
    at the same URL (the run's config keeps pointing at it)."""

    def __init__(
        self, workdir: Path, *, slots: int = 4, catalog_size: int = 300, seed: int = 0, extra: list[str] | None = None
    ) -> None:
        from shopsim_sandbox.cli import write_catalog

        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.slots = slots
        self.extra = list(extra or [])
        self.catalog_file, self.split_file = write_catalog(self.workdir / "catalog", catalog_size, seed)
        self.seed = seed
        self.env_port = free_port()
        self.policy_port = free_port()
        self.env_url = f"http://127.0.0.1:{self.env_port}"
        self.policy_url = f"http://127.0.0.1:{self.policy_port}/v1"
        self.served_model = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, extra: list[str] | None = None) -> Sandbox:
        ready = self.workdir / f"ready-{self.starts}.json"
        argv = [
            sys.executable,
            "-m",
            "shopsim_sandbox.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.env_port),
            "--policy-port",
            str(self.policy_port),
            "--slots",
            str(self.slots),
            "--seed",
            str(self.seed),
            "--catalog",
            str(self.catalog_file),
            "--ready-file",
            str(ready),
            *self.extra,
            *(extra or []),
        ]
        log = open(self.workdir / f"server-{self.starts}.log", "wb")
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if k not in ("SHOPSIM_PORT", "SHOPSIM_ENV_SLOTS")}
        self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        if not wait_until(lambda: ready.exists() or self.process.poll() is not None, 120):
            raise RuntimeError("sandbox did not start")
        if self.process.poll() is not None:
            raise RuntimeError(f"sandbox exited: {self.log_text()[-2000:]}")
        with httpx.Client(timeout=10, trust_env=False) as client:
            self.served_model = client.get(self.policy_url + "/models").json()["data"][0]["id"]
        return self

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.workdir.glob("server-*.log")))

    def kill(self) -> None:
        """SIGKILL the server (all its state, leases included, is gone)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> float:
        """Send *sig* and wait; return the seconds until the process was gone (SIGKILL after *timeout*)."""
        if self.process is None or self.process.poll() is not None:
            return 0.0
        started = time.monotonic()
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        return time.monotonic() - started

    def health(self) -> dict[str, Any]:
        with httpx.Client(timeout=10, trust_env=False) as client:
            return client.get(self.env_url + "/healthz").json()

    def free_slots(self) -> int:
        return int(self.health()["free_slots"])

    def wait_free(self, timeout: float = 20) -> int:
        """Wait until every slot is free (a released lease may still be in flight); return free slots."""
        wait_until(lambda: self.free_slots() == self.slots, timeout)
        return self.free_slots()

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class DropProxy:
    """A loopback TCP proxy in front of *target_port* that drops connections on purpose.

    For every chunk the client sends, each marker (bytes of the request, e.g. ``b'"release_one"'``)
    found in it draws against its rate; a hit closes both sides **before** the chunk is forwarded, so
    the server never sees that request (a dropped connection, as on a flaky network). ``blackout``
    refuses every new connection and drops every chunk while set.

    With *idle_close_s* it also behaves like a server with a short keep-alive timeout: a connection
    on which no byte moved for that long, with no request waiting for its answer, is closed (a
    request arriving in that instant is never forwarded; the client sees the connection reset).
    ``closed_idle`` counts those closes.
    """

    def __init__(
        self,
        target_port: int,
        markers: dict[bytes, float] | None = None,
        seed: int = 0,
        idle_close_s: float | None = None,
    ) -> None:
        self.target_port = target_port
        self.markers = dict(markers or {})
        self.idle_close_s = idle_close_s
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.dropped: dict[str, int] = {}
        self.blackout = False
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(256)
        self.port = int(self.listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._closed = False
        self._conns: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _count(self, what: str) -> None:
        with self.lock:
            self.dropped[what] = self.dropped.get(what, 0) + 1

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.blackout:
                self._count("refused")
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._conns.add(sock)
            state = {"last": time.monotonic(), "waiting": False}
            threading.Thread(target=self._pump, args=(client, upstream, True, state), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False, state), daemon=True).start()

    def _drop(self, chunk: bytes) -> str | None:
        if self.blackout:
            return "blackout"
        for marker, rate in self.markers.items():
            if marker in chunk:
                with self.lock:
                    hit = self.rng.random() < rate
                if hit:
                    return marker.decode("ascii", "replace").strip('"')
        return None

    def _pump(self, src: socket.socket, dst: socket.socket, inspect: bool, state: dict[str, Any]) -> None:
        idle = self.idle_close_s if inspect else None
        if idle is not None:
            src.settimeout(0.02)
        try:
            while True:
                try:
                    chunk = src.recv(65536)
                except TimeoutError:
                    assert idle is not None
                    if not state["waiting"] and time.monotonic() - state["last"] >= idle:
                        self._count("closed_idle")
                        break
                    continue
                if not chunk:
                    break
                state["last"] = time.monotonic()
                state["waiting"] = inspect
                if inspect:
                    reason = self._drop(chunk)
                    if reason is not None:
                        self._count(reason)
                        break
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
                self._conns.discard(sock)

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        for sock in list(self._conns):
            try:
                sock.close()
            except OSError:
                pass


def write_config(
    path: Path,
    sandbox: Sandbox,
    *,
    name: str = "chaos",
    episodes: int = 8,
    concurrency: int = 4,
    env_url: str | None = None,
    experiment: dict[str, Any] | None = None,
    environment: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    split: str = "val",
    tasks: dict[str, Any] | None = None,
) -> Path:
    """An evaluation YAML over the sandbox's split *split* (*episodes* sampled tasks; val has 18, train 84);
    *tasks* adds keys to the ``tasks`` section (``repeats``)."""
    data = {
        "experiment": {
            "name": name,
            "output_dir": "runs",
            "seed": 20260830,
            "concurrency": concurrency,
            "max_episode_retries": 2,
            **(experiment or {}),
        },
        "tasks": {"split_file": str(sandbox.split_file), "split": split, "sample_size": episodes, **(tasks or {})},
        "environment": {"base_url": env_url or sandbox.env_url, "timeout": 10, **(environment or {})},
        "model": {
            "name": sandbox.served_model,
            "base_url": sandbox.policy_url,
            "api_key_env": None,
            "max_retries": 3,
            "retry_backoff_seconds": 0.05,
            "timeout": 30,
            **(model or {}),
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@dataclass
class RunProcess:
    """One `shopsimrl run` subprocess with its output files."""

    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path
    started: float = field(default_factory=time.monotonic)

    def wait(self, timeout: float = 300) -> int:
        return self.process.wait(timeout=timeout)

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    def stop_with(self, sig: int, timeout: float = 60) -> tuple[int, float]:
        """Send *sig*; return ``(exit code, seconds until exit)``."""
        started = time.monotonic()
        self.process.send_signal(sig)
        code = self.process.wait(timeout=timeout)
        return code, time.monotonic() - started

    def err(self) -> str:
        return self.stderr.read_text(errors="replace")

    def out(self) -> str:
        return self.stdout.read_text(errors="replace")


def start_run(config: Path, *args: str, tag: str = "run", preexec_fn: Callable[[], None] | None = None) -> RunProcess:
    """Start ``shopsimrl run --progress none CONFIG`` in the config's folder."""
    folder = config.parent
    out, err = folder / f"{tag}.out", folder / f"{tag}.err"
    with open(out, "wb") as o, open(err, "wb") as e:
        process = subprocess.Popen(
            [*RUN, "run", "--progress", "none", *args, str(config)],
            stdout=o,
            stderr=e,
            cwd=folder,
            preexec_fn=preexec_fn,
        )
    return RunProcess(process, out, err)


def trace_lines(traces: Path) -> int:
    try:
        return traces.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def wait_lines(traces: Path, count: int, run: RunProcess, timeout: float = 120) -> int:
    """Wait until *traces* has *count* lines (or the run ended); return the line count."""
    wait_until(lambda: trace_lines(traces) >= count or run.process.poll() is not None, timeout)
    return trace_lines(traces)


@dataclass
class TraceCheck:
    """The run-directory invariants after a scenario."""

    lines: int
    torn: int
    completed: int
    duplicated: int
    episodes: int

    @property
    def ok(self) -> bool:
        return self.torn == 0 and self.duplicated == 0


def check_traces(traces: Path) -> TraceCheck:
    """Count lines, torn lines (a line that does not parse, or a missing final newline), completed
    episodes and episodes completed more than once."""
    raw = traces.read_bytes() if traces.exists() else b""
    torn = 0 if not raw or raw.endswith(b"\n") else 1
    completed: dict[str, int] = {}
    seen: set[str] = set()
    for line in raw.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            torn += 1
            continue
        seen.add(record["episode_id"])
        if (
            record.get("status") == "completed"
            and isinstance(record.get("final"), dict)
            and record["final"].get("done") is True
        ):
            completed[record["episode_id"]] = completed.get(record["episode_id"], 0) + 1
    return TraceCheck(
        lines=raw.count(b"\n"),
        torn=torn,
        completed=len(completed),
        duplicated=sum(1 for n in completed.values() if n > 1),
        episodes=len(seen),
    )


def outstanding_leases(run_dir: Path) -> int:
    """Leases the run's journal still lists as held."""
    from shopsimrl_core.runs.leases._leases import LeaseJournal

    return len(LeaseJournal(run_dir, "check").outstanding())
