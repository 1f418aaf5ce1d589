"""Run a trainer in a process group of its own, and stop the whole group when asked to stop.

``python -m shopsimrl_pipes.group --stop-timeout 20 --status FILE -- COMMAND...``

``PipesSubprocessClient`` forwards a run's termination as SIGINT to the one process it started, and
a trainer's workers (data loaders, inference servers, torch ranks) would outlive it. So the round
starts this supervisor instead: it starts COMMAND in a new session (its own process group), and on
SIGINT or SIGTERM sends SIGTERM to that group, then SIGKILL after the stop timeout. When the trainer
itself ends, whatever is left of its group is stopped the same way. The supervisor dies with its
parent (``PR_SET_PDEATHSIG``), and the trainer with the supervisor, so a killed Dagster step (or a killed
supervisor) does not leave a trainer running.

It exits with the trainer's code (128 + N when signal N ended it) and writes FILE (JSON: pid,
command, returncode, signal name) so the asset can name what ended the trainer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["main"]


def _die_with_parent() -> None:
    # Linux only: the kernel sends SIGTERM to this process when its parent dies (kept across exec).
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _trainer_preexec() -> None:
    # in the trainer's process before exec: a group of its own, and SIGTERM when the supervisor dies
    os.setsid()
    _die_with_parent()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, timeout: float) -> None:
    """SIGTERM to process group *pgid*, SIGKILL after *timeout* seconds if any member is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    """Run the trainer of ``argv`` (module docstring); return its exit code."""
    parser = argparse.ArgumentParser(prog="python -m shopsimrl_pipes.group")
    parser.add_argument("--stop-timeout", type=float, default=20.0)
    parser.add_argument("--status", type=Path, default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the trainer's command after --")
    _die_with_parent()
    stopping: list[int] = []
    process = subprocess.Popen(command, preexec_fn=_trainer_preexec)  # noqa: PLW1509 (no threads yet)

    def stop(signum: int, _frame: object) -> None:
        stopping.append(signum)
        print(f"shopsimrl_pipes.group: {signal.Signals(signum).name} received; stopping the trainer's process "
              f"group {process.pid} (SIGKILL after {args.stop_timeout:g} s)", file=sys.stderr, flush=True)
        stop_group(process.pid, args.stop_timeout)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    returncode = process.wait()
    stop_group(process.pid, args.stop_timeout)  # workers the trainer left behind
    name = signal.Signals(-returncode).name if returncode < 0 else None
    if args.status is not None:
        args.status.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.status.with_name(f".{args.status.name}.tmp")
        tmp.write_text(json.dumps({"pid": process.pid, "command": command, "returncode": returncode,
                                   "signal": name, "stopped_by": [signal.Signals(s).name for s in stopping]}),
                       encoding="utf-8")
        os.replace(tmp, args.status)
    if name is not None:
        print(f"shopsimrl_pipes.group: the trainer {command[0]!r} (pid {process.pid}) was ended by {name}",
              file=sys.stderr, flush=True)
        return 128 + (-returncode)
    return returncode


if __name__ == "__main__":
    sys.exit(main())
