"""Launching a checkpoint's inference server for one run, and stopping it whatever happens.

:func:`launched_server` is a context manager around one run: it stops orphaned servers of dead runs,
takes devices from the GPU pool, starts the server of ``serve.server`` (or ``serve.command``) on a free
port in its own process group with its log in the run directory, waits until ``/v1/models`` lists the
served name and one probe completion answers, and yields the base URL. On leaving (success, failure,
SIGTERM, Dagster's run termination) it stops the whole group and gives the devices back.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ShopSimRLError
from shopsimrl_core.runs.config._config import EvalConfig
from shopsimrl_core.runs.execution._evaluation_options import RunTerminated
from shopsimrl_core.serving._devices import acquire_devices
from shopsimrl_core.serving._processes import ServerRecord, reap_orphans, start_group, stop_group
from shopsimrl_core.serving._templates import fill_command

__all__ = ["LaunchedServer", "ServerStartError", "launched_server", "server_state_dir", "SERVER_LOG_DIR"]

SERVER_LOG_DIR = "server-logs"
"""Folder of the run directory holding one log per launched server."""

_LOG_TAIL_LINES = 25
_PORT_RETRIES = 3  # a free port found by binding port 0 can be taken before the server binds it


class ServerStartError(ShopSimRLError):
    """The launched server exited or was not ready within ``serve.start_timeout`` (the log's tail is in the message)."""

    code = "server-start-failed"


@dataclass(frozen=True)
class LaunchedServer:
    """A running launched server."""

    base_url: str
    """OpenAI base URL, ``http://<host>:<port>/v1``."""
    pgid: int
    devices: list[str]
    log_path: Path
    started_s: float
    """Seconds from launch to ready (probe answered)."""


def server_state_dir(config: EvalConfig) -> Path:
    """The folder of GPU locks and server records for *config* (``serve.state_dir`` or ``<output_dir>/.servers``)."""
    assert config.serve is not None
    if config.serve.state_dir is not None:
        return Path(config.serve.state_dir)
    return Path(config.experiment.output_dir) / ".servers"


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    tail = [line[:300] for line in lines[-_LOG_TAIL_LINES:]]
    return " | ".join(tail) if tail else "(empty log)"


def _ready(base_url: str, served_model: str, headers: dict[str, str], probe: bool) -> str | None:
    """None when the server lists *served_model* and (with *probe*) answers a completion; else why not yet."""
    import httpx

    try:
        with httpx.Client(timeout=10.0, trust_env=False) as client:
            response = client.get(f"{base_url}/models", headers=headers)
            if response.status_code != 200:
                return f"GET /v1/models answered HTTP {response.status_code}"
            served = [str(item.get("id")) for item in response.json().get("data") or [] if isinstance(item, dict)]
            if served_model not in served:
                return f"/v1/models lists {served} without {served_model!r}"
            if not probe:
                return None
            body = {"model": served_model, "messages": [{"role": "user", "content": "OK?"}], "max_tokens": 1}
            answer = client.post(f"{base_url}/chat/completions", json=body, headers=headers, timeout=120.0)
            if answer.status_code != 200 or not isinstance(answer.json().get("choices"), list):
                return f"the probe completion answered HTTP {answer.status_code}: {answer.text[:200]!r}"
            return None
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return f"{type(exc).__name__}: {exc}"


@contextmanager
def _terminate_raises() -> Iterator[None]:
    # While the server starts the run's own signal handling is not in place yet: a SIGTERM must still
    # unwind through the finally that stops the server. Only where nothing else handles SIGTERM (a
    # Dagster run worker has its own handler, which already raises in the main thread).
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        raise RunTerminated()

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is on_term:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def launched_server(config: EvalConfig, say: Callable[[str], None]) -> Iterator[LaunchedServer]:
    """Serve the checkpoint of *config* (its ``serve`` section) for the duration of the ``with`` block.

    *say* receives one line per event worth a log line: orphans stopped, waiting for devices, start
    (command, port, devices), ready (seconds), stop (seconds).

    Promises: the server's whole process group is stopped and its devices released when the block is
    left in any way; an orphaned server of a dead run in the same state folder is stopped first; the
    server's output is kept in ``<run_dir>/server-logs/``.

    Raises:
        ServerStartError: ``server-start-failed`` — the server exited or was not ready within
            ``serve.start_timeout`` (the message carries the tail of its log and the log's path).
        ShopSimRLError: ``gpu-pool-busy`` (no free devices in time) or ``config-invalid`` (template).
    """
    serve = config.serve
    assert serve is not None, "launched_server needs a config with a serve section"
    state_dir = server_state_dir(config)
    state_dir.mkdir(parents=True, exist_ok=True)
    log_dir = config.run_dir / SERVER_LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    with _terminate_raises():
        reap_orphans(state_dir, timeout=serve.stop_timeout, say=say)
        lease = acquire_devices(
            serve.gpus, serve.gpus_per_server, state_dir=state_dir, timeout=serve.gpu_wait_timeout, say=say
        )
        process = None
        record_path: Path | None = None
        try:
            env = {**os.environ, **serve.env}
            if serve.gpus:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(lease.devices)
            for attempt in range(1, _PORT_RETRIES + 1):
                port = _free_port(serve.host)
                argv = fill_command(
                    serve.server,
                    {
                        "weights": serve.weights,
                        "adapter": serve.adapter or "",
                        "host": serve.host,
                        "port": str(port),
                        "served_model": config.model.name,
                        "python": serve.python or sys.executable,
                        "gpus_per_server": str(max(1, serve.gpus_per_server)),
                    },
                    command=serve.command,
                    extra_args=serve.extra_args,
                    adapter=serve.adapter is not None,
                )
                stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
                log_path = log_dir / f"{stamp}-{config.model_id}.log"
                started = time.monotonic()
                with log_path.open("ab") as log:
                    try:
                        process, record_path = start_group(
                            argv, env=env, log=log, state_dir=state_dir, devices=lease.devices
                        )
                    except OSError as exc:
                        raise ServerStartError(
                            f"serve: cannot start {argv[0]!r} ({exc.strerror}); install the {serve.server} server "
                            "or fix serve.command / serve.python"
                        ) from None
                host = f"[{serve.host}]" if ":" in serve.host else serve.host
                base_url = f"http://{host}:{port}/v1"
                say(
                    f"started inference server pgid {process.pid} for {config.model.name} on {base_url} "
                    f"(devices {','.join(lease.devices) or 'none'}; log {log_path}): {' '.join(argv)}"
                )
                why = _wait_ready(process, base_url, config, started)
                if why is None:
                    ready_s = time.monotonic() - started
                    say(f"inference server pgid {process.pid} ready in {ready_s:.1f} s")
                    yield LaunchedServer(base_url, process.pid, list(lease.devices), log_path, ready_s)
                    return
                took = stop_group(process.pid, None, timeout=serve.stop_timeout, process=process)
                say(f"stopped inference server pgid {process.pid} in {took:.1f} s (not ready: {why})")
                process = None
                if record_path is not None:
                    record_path.unlink(missing_ok=True)
                tail = _log_tail(log_path)
                in_use = "address already in use" in tail.lower() or "errno 98" in tail.lower()
                if in_use and attempt < _PORT_RETRIES:
                    say(f"inference server could not bind port {port} (taken meanwhile); retrying on another port")
                    continue
                raise ServerStartError(
                    f"serve: the {serve.server} server for {config.model.name} did not become ready ({why}); "
                    f"log {log_path}, last lines: {tail}"
                )
        finally:
            if process is not None:
                record = ServerRecord.read(record_path) if record_path is not None else None
                took = stop_group(
                    process.pid,
                    record.leader_ticks if record is not None else None,
                    timeout=serve.stop_timeout,
                    process=process,
                )
                if record_path is not None:
                    record_path.unlink(missing_ok=True)
                say(f"stopped inference server pgid {process.pid} in {took:.1f} s")
            lease.release()


def _wait_ready(process: Any, base_url: str, config: EvalConfig, started: float) -> str | None:
    """None once the server is ready; else why it never got there (exited, or timed out)."""
    serve = config.serve
    assert serve is not None
    headers = config.model.auth().headers(required=False)
    deadline = started + serve.start_timeout
    why = "not started"
    while True:
        code = process.poll()
        if code is not None:
            return f"the server exited with code {code} before it was ready"
        why_now = _ready(base_url, config.model.name, headers, serve.probe)
        if why_now is None:
            return None
        why = why_now
        if time.monotonic() >= deadline:
            return f"not ready within serve.start_timeout {serve.start_timeout:.0f} s; last check: {why}"
        time.sleep(0.25)
