"""The keeper of one pooled server: starts it, owns it, and stops it when nobody has used it for a while.

``python -m shopsimrl_core.serving._keeper SPEC`` runs detached from the run that launched it (a session
of its own), so a server outlives the run and the next run that needs the same served identity attaches
to it instead of loading the weights again (``_pool``). The keeper

- starts the server (``start_group``) with the devices' lock descriptors it inherited, then closes its
  own copies: the devices are locked exactly as long as the server runs;
- writes the pool entry (``<state_dir>/pool/<key>.json``: URL, pgid, keeper pid) and the server record
  (owner: the keeper, so ``reap_orphans`` stops the server if the keeper is SIGKILLed);
- polls the entry's use lock: runs using the server hold it shared, so an exclusive try that succeeds
  means nobody uses it; after ``idle_timeout`` seconds of that (at least one second, so a run that is
  stopping the server itself wins) it stops the server's group and exits;
- on SIGTERM (a run stopping the server, or making room on the GPU pool) stops the server and exits.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from shopsimrl_core._hashing import write_json_atomic
from shopsimrl_core.serving._processes import process_start_ticks, start_group, stop_group

_POLL_S = 0.2
_MIN_IDLE_S = 1.0


def _try_exclusive(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def run_keeper(spec: dict[str, Any]) -> int:
    """Start the server of *spec*, watch its use lock, stop it when idle, terminated or exited; exit code."""
    stopping = {"asked": False}

    def on_term(signum: int, frame: Any) -> None:
        stopping["asked"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    state_dir = Path(spec["state_dir"])
    entry_path = Path(spec["entry"])
    use_fd = os.open(spec["use_lock"], os.O_RDWR | os.O_CREAT, 0o644)
    device_fds = [int(fd) for fd in spec["device_fds"]]
    with open(spec["log"], "ab") as log:
        try:
            process, record_path = start_group(
                spec["argv"], env=dict(os.environ), log=log, state_dir=state_dir, devices=spec["devices"],
                pass_fds=device_fds,
            )  # fmt: skip
        except OSError as exc:
            write_json_atomic(entry_path, {**spec["public"], "state": "failed", "error": exc.strerror or str(exc)})
            return 1
    for fd in device_fds:
        os.close(fd)  # the server holds the devices now: they come free when it ends
    ticks = process_start_ticks(process.pid)
    entry = {
        **spec["public"],
        "state": "starting",
        "pgid": process.pid,
        "leader_ticks": ticks,
        "keeper_pid": os.getpid(),
        "keeper_ticks": process_start_ticks(os.getpid()),
    }
    write_json_atomic(entry_path, entry)
    idle_timeout = max(float(spec["idle_timeout"]), _MIN_IDLE_S)
    idle_since: float | None = None
    holding = False
    try:
        while not stopping["asked"] and process.poll() is None:
            if _try_exclusive(use_fd):
                now = time.monotonic()
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= idle_timeout:
                    holding = True  # keep it: nobody attaches while the server stops
                    break
                fcntl.flock(use_fd, fcntl.LOCK_UN)
            else:
                idle_since = None
            time.sleep(_POLL_S)
    finally:
        exit_code = process.poll()
        stop_group(process.pid, ticks, timeout=float(spec["stop_timeout"]), process=process)
        record_path.unlink(missing_ok=True)
        try:
            current = json.loads(entry_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            current = None
        if isinstance(current, dict) and current.get("keeper_pid") == os.getpid():
            if exit_code is not None and not stopping["asked"]:
                # The server ended on its own: leave why for the run waiting on it (it removes the entry).
                write_json_atomic(entry_path, {**current, "state": "exited", "exit_code": exit_code})
            else:
                entry_path.unlink(missing_ok=True)
        if holding:
            fcntl.flock(use_fd, fcntl.LOCK_UN)
        os.close(use_fd)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: the spec file's path is the only argument (the file is removed once read).

    The server's environment is the keeper's own (the launcher passes it so; secrets never touch the spec).
    """
    args = sys.argv[1:] if argv is None else argv
    spec_path = Path(args[0])
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    spec_path.unlink(missing_ok=True)
    return run_keeper(spec)


if __name__ == "__main__":
    raise SystemExit(main())
