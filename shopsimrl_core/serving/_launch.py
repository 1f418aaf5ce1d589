"""Serving a checkpoint for one run: attach to the pooled server of its served identity, or launch it.

:func:`launched_server` is a context manager around one run. It computes the served identity (server
kind, command line without the port, weights content, environment, device shape; for an adapter over a
server that hot-loads adapters, the *base* and the rank limit only), and attaches to the running server
of that identity in the pool (``_pool``) or launches it: orphans of dead launchers stopped, devices taken
from the GPU pool (idle pooled servers stopped to make room), the server started by a keeper process
(``_keeper``) on a free port with its log in the run directory, ready once ``/v1/models`` lists the
served name and one probe completion answers. An adapter is then loaded at runtime under the
checkpoint's served name. On leaving (success, failure, SIGTERM, Dagster's run termination) the adapter
is unloaded, and the server stopped at once when ``serve.idle_timeout`` is 0 and no other run uses it;
otherwise its keeper stops it after that many idle seconds.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shopsimrl_core._hashing import write_json_atomic
from shopsimrl_core.runs.config._config import EvalConfig
from shopsimrl_core.runs.execution._evaluation_options import RunTerminated
from shopsimrl_core.serving._devices import acquire_devices
from shopsimrl_core.serving._identity import Served, ServerStartError, load_adapter, served_for, unload_adapter
from shopsimrl_core.serving._pool import Pool, keeper_alive
from shopsimrl_core.serving._processes import group_alive, reap_orphans
from shopsimrl_core.serving._templates import fill_command

__all__ = ["LaunchedServer", "ServerStartError", "launched_server", "server_state_dir", "SERVER_LOG_DIR"]

SERVER_LOG_DIR = "server-logs"
"""Folder of the run directory holding one log per launched server."""

_LOG_TAIL_LINES = 25
_PORT_RETRIES = 3  # a free port found by binding port 0 can be taken before the server binds it


@dataclass(frozen=True)
class LaunchedServer:
    """A running launched server."""

    base_url: str
    """OpenAI base URL, ``http://<host>:<port>/v1``."""
    pgid: int
    devices: list[str]
    log_path: Path
    started_s: float
    """Seconds from launch to ready (probe answered); 0 for a server found running in the pool."""
    reused: bool = False
    """Whether the server was already running (started by another run of the pool)."""
    model: str = ""
    """The served name this run's requests use (the checkpoint's; its adapter's for a hot-loaded one)."""


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


def _ready(
    base_url: str, served_model: str, headers: dict[str, str], probe: bool, time_left: float = 120.0
) -> str | None:
    """None when the server lists *served_model* and (with *probe*) answers a completion; else why not yet.

    No request waits longer than *time_left* seconds (what remains of ``serve.start_timeout``).
    """
    import httpx

    left = max(0.5, time_left)
    try:
        with httpx.Client(timeout=min(10.0, left), trust_env=False) as client:
            response = client.get(f"{base_url}/models", headers=headers)
            if response.status_code != 200:
                return f"GET /v1/models answered HTTP {response.status_code}"
            served = [str(item.get("id")) for item in response.json().get("data") or [] if isinstance(item, dict)]
            if served_model not in served:
                return f"/v1/models lists {served} without {served_model!r}"
            if not probe:
                return None
            body = {"model": served_model, "messages": [{"role": "user", "content": "OK?"}], "max_tokens": 1}
            answer = client.post(f"{base_url}/chat/completions", json=body, headers=headers, timeout=left)
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

    *say* receives one line per event worth a log line: orphans or idle servers stopped, waiting for
    devices, start (command, port, devices) or reuse of a pooled server, ready (seconds), adapter loaded
    and unloaded, stop (seconds) or left running in the pool.

    Promises: one server per served identity runs at a time in a state folder (runs that need the same
    one share it); an adapter over a hot-loading server is loaded under the checkpoint's served name and
    unloaded on leaving; with ``serve.idle_timeout`` 0 the server's whole process group is stopped when
    the block is left in any way and no other run uses it, else it is stopped after that many idle
    seconds; devices stay locked as long as the server runs; an orphaned server of a dead launcher in
    the same state folder is stopped before devices are taken; the server's output is kept in
    ``<run_dir>/server-logs/``.

    Raises:
        ServerStartError: ``server-start-failed`` — the server exited or was not ready within
            ``serve.start_timeout`` (the message carries the tail of its log and the log's path), or
            refused the adapter.
        ShopSimRLError: ``gpu-pool-busy`` (no free devices in time), ``config-invalid`` (template,
            adapter rank) or ``weights-missing`` (a local weights path that does not exist).
    """
    serve = config.serve
    assert serve is not None, "launched_server needs a config with a serve section"
    served = served_for(config)
    state_dir = server_state_dir(config)
    state_dir.mkdir(parents=True, exist_ok=True)
    log_dir = config.run_dir / SERVER_LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    pool = Pool(state_dir)
    use_fd: int | None = None
    server: LaunchedServer | None = None
    loaded = False
    with _terminate_raises():
        try:
            with pool.starting(served.key):
                use_fd = pool.use(served.key)
                server = _running(pool, served, config, say) or _start(pool, served, config, state_dir, log_dir, say)
            if served.runtime is not None:
                load_adapter(served, server.base_url, config, say)
                loaded = True
                # vLLM (and the sandbox) list a loaded adapter in /v1/models; SGLang's answer to the load is the check.
                why = None if serve.server == "sglang" else _wait_ready(
                    lambda: _gone(pool, served.key), server.base_url, config, time.monotonic(), server.model
                )  # fmt: skip
                if why is not None:
                    raise ServerStartError(f"serve.adapter: adapter {served.lora_name!r} not served ({why})")
            yield server
        finally:
            if server is not None and loaded:
                unload_adapter(served, server.base_url, config, say)
            hold = _HOLDS[-1] if _HOLDS else None
            if use_fd is not None and server is not None and hold is not None and served.key not in hold.releases:
                # Kept for the rest of the hold (the other suites of this Dagster run): a share stays taken.
                hold.keep(served.key, use_fd, lambda: _leave(pool, served, server, config, hold.say))
                say(f"holding inference server pgid {server.pgid} for the other evaluations of this run")
            else:
                if use_fd is not None:
                    os.close(use_fd)
                if server is not None and (hold is None or served.key not in hold.releases):
                    _leave(pool, served, server, config, say)


class _Hold:
    """Servers kept running by :func:`holding_servers`: a use share and the leave to run at its end, per key."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.releases: dict[str, Callable[[], None]] = {}

    def keep(self, key: str, use_fd: int, leave: Callable[[], None]) -> None:
        def release() -> None:
            os.close(use_fd)
            leave()

        self.releases[key] = release


_HOLDS: list[_Hold] = []


@contextmanager
def holding_servers(say: Callable[[str], None]) -> Iterator[None]:
    """Keep every server a launch inside the block used until the block ends, then leave each as a run would.

    For one process that evaluates several things on one served identity in a row (a Dagster run that
    materializes several suites of a checkpoint): with ``serve.idle_timeout`` 0 each evaluation would
    stop the server and the next would load it again. Promise: a server used in the block is not
    stopped before the block ends (unless it dies); on leaving, each is stopped when no other run uses
    it and its idle timeout is 0, else left to the pool; *say* gets those lines.
    """
    hold = _Hold(say)
    _HOLDS.append(hold)
    try:
        yield
    finally:
        _HOLDS.remove(hold)
        for release in hold.releases.values():
            release()


def _gone(pool: Pool, key: str) -> str | None:
    entry = pool.entry(key)
    if entry is None:
        return "the server's keeper ended (see the server log)"
    if entry.get("state") == "failed":
        return f"the server could not be started ({entry.get('error')})"
    if entry.get("state") == "exited":
        return f"the server exited with code {entry.get('exit_code')}"
    if not keeper_alive(entry):
        return "the server's keeper ended (see the server log)"
    pgid = entry.get("pgid")
    if isinstance(pgid, int) and not group_alive(pgid):
        # The keeper records the exit code as soon as it sees the exit: wait while it lives (it says which, then
        # ends; on a loaded machine that takes seconds), at most 30 s.
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            time.sleep(0.05)
            later = pool.entry(key)
            if later is not None and later.get("state") == "exited":
                return f"the server exited with code {later.get('exit_code')}"
            if later is None or not keeper_alive(later):
                break
        return "the server exited before it was ready"
    return None


def _running(pool: Pool, served: Served, config: EvalConfig, say: Callable[[str], None]) -> LaunchedServer | None:
    """The pooled server of *served*'s identity when it runs and answers, else None (a stale one is stopped)."""
    serve = config.serve
    assert serve is not None
    reap_orphans(pool.folder.parent, timeout=serve.stop_timeout, say=say)
    entry = pool.entry(served.key)
    if entry is None:
        return None
    pgid = entry.get("pgid")
    if not keeper_alive(entry) and not (isinstance(pgid, int) and group_alive(pgid)):
        pool.entry_path(served.key).unlink(missing_ok=True)  # left by a server that ended: nothing to stop
        return None
    alive = entry.get("state") == "ready" and keeper_alive(entry) and _gone(pool, served.key) is None
    headers = config.model.auth().headers(required=False)
    if alive and _ready(str(entry["base_url"]), served.base_name, headers, False, 10.0) is None:
        say(
            f"reusing inference server pgid {entry['pgid']} for {served.base_name} on {entry['base_url']} from the "
            f"server pool (devices {','.join(entry.get('devices') or []) or 'none'}; log {entry.get('log')})"
        )
        return LaunchedServer(
            str(entry["base_url"]), int(entry["pgid"]), list(entry.get("devices") or []), Path(str(entry.get("log"))),
            0.0, reused=True, model=served.request_name,
        )  # fmt: skip
    took = pool.stop(served.key, entry, timeout=serve.stop_timeout)
    say(f"stopped inference server pgid {entry.get('pgid')} in {took:.1f} s (found in the pool but not serving)")
    return None


def _start(
    pool: Pool, served: Served, config: EvalConfig, state_dir: Path, log_dir: Path, say: Callable[[str], None]
) -> LaunchedServer:
    serve = config.serve
    assert serve is not None

    def reap() -> None:
        reap_orphans(state_dir, timeout=serve.stop_timeout, say=say)

    def make_room() -> bool:
        return pool.evict_idle(served.key, timeout=serve.stop_timeout, say=say)

    reap()
    lease = acquire_devices(
        serve.gpus, serve.gpus_per_server, state_dir=state_dir, timeout=serve.gpu_wait_timeout, say=say,
        reap=reap, make_room=make_room,
    )  # fmt: skip
    try:
        env = {**os.environ, **served.env}
        if serve.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(lease.devices)
        for attempt in range(1, _PORT_RETRIES + 1):
            port = _free_port(serve.host)
            argv = fill_command(
                serve.server,
                {**served.values, "port": str(port)},
                command=serve.command,
                extra_args=serve.extra_args,
                adapter=serve.adapter is not None and served.runtime is None,
                runtime_lora=served.runtime is not None,
            )
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
            log_path = log_dir / f"{stamp}-{config.model_id}.log"
            host = f"[{serve.host}]" if ":" in serve.host else serve.host
            base_url = f"http://{host}:{port}/v1"
            public = {"key": served.key, "base_url": base_url, "served_model": served.base_name,
                      "devices": list(lease.devices), "log": str(log_path), "command": argv}  # fmt: skip
            spec = {"argv": argv, "public": public, "devices": list(lease.devices),
                    "idle_timeout": serve.idle_timeout, "stop_timeout": serve.stop_timeout}  # fmt: skip
            started = time.monotonic()
            keeper = pool.spawn_keeper(served.key, spec, env=env, pass_fds=lease.fds, log=log_path)
            entry = _wait_entry(pool, served.key, keeper, started + serve.start_timeout)
            if entry is not None and entry.get("state") == "failed":
                raise ServerStartError(
                    f"serve: cannot start {argv[0]!r} ({entry.get('error')}); install the {serve.server} server "
                    "or fix serve.command / serve.python"
                )
            pgid = int(entry["pgid"]) if entry is not None else keeper.pid
            say(
                f"started inference server pgid {pgid} for {served.base_name} on {base_url} "
                f"(devices {','.join(lease.devices) or 'none'}; log {log_path}): {' '.join(argv)}"
            )
            why = _wait_ready(lambda: _gone(pool, served.key), base_url, config, started, served.base_name)
            if why is None:
                ready_s = time.monotonic() - started
                write_json_atomic(pool.entry_path(served.key), {**(pool.entry(served.key) or {}), "state": "ready"})
                say(f"inference server pgid {pgid} ready in {ready_s:.1f} s")
                return LaunchedServer(base_url, pgid, list(lease.devices), log_path, ready_s,
                                      model=served.request_name)  # fmt: skip
            took = pool.stop(served.key, entry or {"keeper_pid": keeper.pid}, timeout=serve.stop_timeout)
            keeper.poll()
            say(f"stopped inference server pgid {pgid} in {took:.1f} s (not ready: {why})")
            tail = _log_tail(log_path)
            in_use = "address already in use" in tail.lower() or "errno 98" in tail.lower()
            if in_use and attempt < _PORT_RETRIES:
                say(f"inference server could not bind port {port} (taken meanwhile); retrying on another port")
                continue
            raise ServerStartError(
                f"serve: the {serve.server} server for {config.model.name} did not become ready ({why}); "
                f"log {log_path}, last lines: {tail}"
            )
        raise AssertionError("unreachable")
    finally:
        lease.release()  # the server inherited the locks: the devices stay held while it runs


def _wait_entry(pool: Pool, key: str, keeper: Any, deadline: float) -> dict[str, Any] | None:
    """The entry the keeper writes once it started the server (None when the keeper died first)."""
    while True:
        entry = pool.entry(key)
        if entry is not None and (entry.get("state") == "failed" or "pgid" in entry):
            return entry
        if keeper.poll() is not None or time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _leave(pool: Pool, served: Served, server: LaunchedServer, config: EvalConfig, say: Callable[[str], None]) -> None:
    """After the run: stop the server when it is idle and ``idle_timeout`` is 0, else leave it to its keeper."""
    serve = config.serve
    assert serve is not None
    if serve.idle_timeout > 0:
        say(
            f"left inference server pgid {server.pgid} running in the server pool (stopped after "
            f"{serve.idle_timeout:g} s unused)"
        )
        return
    fd = pool.last_user(served.key)
    for _ in range(10):  # the keeper takes the lock for an instant every poll: that is not another run
        if fd is not None:
            break
        time.sleep(0.02)
        fd = pool.last_user(served.key)
    if fd is None:
        say(f"left inference server pgid {server.pgid} running for the other runs using it")
        return
    try:
        entry = pool.entry(served.key)
        if entry is not None and entry.get("pgid") == server.pgid:
            took = pool.stop(served.key, entry, timeout=serve.stop_timeout)
        else:  # its keeper stopped it already (it ended, or was made room for)
            took = 0.0
        say(f"stopped inference server pgid {server.pgid} in {took:.1f} s")
    finally:
        os.close(fd)


def _wait_ready(
    gone: Callable[[], str | None], base_url: str, config: EvalConfig, started: float, served_model: str
) -> str | None:
    """None once the server is ready; else why it never got there (exited, or timed out)."""
    serve = config.serve
    assert serve is not None
    headers = config.model.auth().headers(required=False)
    deadline = started + serve.start_timeout
    why = "not started"
    while True:
        dead = gone()
        if dead is not None:
            return dead
        why_now = _ready(base_url, served_model, headers, serve.probe, deadline - time.monotonic())
        if why_now is None:
            return None
        why = why_now
        if time.monotonic() >= deadline:
            return f"not ready within serve.start_timeout {serve.start_timeout:.0f} s; last check: {why}"
        time.sleep(0.25)
