"""Server processes: each in its own process group, recorded on disk so a dead owner's server is found.

A launched server runs in a new session (its own process group), so stopping it stops everything it
started (vLLM's and SGLang's worker processes included) and a signal meant for the run does not hit it
by accident. While it runs, ``<state_dir>/server-<pgid>.json`` records the group, the owner (the
process that launched it) and both processes' start times (``/proc/<pid>/stat`` field 22), so a pid
reused by an unrelated process is never mistaken for either. An owner killed with SIGKILL cannot stop
its server; the next launch in the same state folder finds the record, sees the owner gone and stops
the orphaned group before it takes any device (:func:`reap_orphans`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from shopsimrl_core._hashing import write_json_atomic
from shopsimrl_core._versions import SERVER_RECORD_SCHEMA

__all__ = ["ServerRecord", "process_start_ticks", "start_group", "stop_group", "reap_orphans", "group_alive"]


def process_start_ticks(pid: int) -> int | None:
    """When *pid* started (clock ticks since boot), or None when no such live process exists (zombies count as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    except OSError:
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _same_process(pid: int, ticks: int | None) -> bool:
    return ticks is not None and process_start_ticks(pid) == ticks


def group_alive(pgid: int) -> bool:
    """Whether any process of group *pgid* is still running (not a zombie)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text(encoding="ascii", errors="replace").rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


@dataclass(frozen=True)
class ServerRecord:
    """The on-disk record of one running server (``server-<pgid>.json``, ``shopsimrl-server-record-v1``)."""

    schema_version: str
    """``SERVER_RECORD_SCHEMA``; a record of another version is not this code's to act on (left alone)."""
    pgid: int
    """Process group (= the leader's pid): what is stopped."""
    leader_ticks: int | None
    """The leader's start time, so a reused pid is not taken for it."""
    owner_pid: int
    """The process that launched the server and must stop it."""
    owner_ticks: int | None
    """The owner's start time."""
    command: list[str]
    log: str
    devices: list[str]
    started_at: str

    @classmethod
    def read(cls, path: Path) -> ServerRecord | None:
        """The record in *path*, or None when it is unreadable or of another version.

        Half-written records are never left (atomic writes); a record of another format version (a newer
        shopsimrl sharing the folder) is not stopped by this one.
        """
        try:
            record = cls(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None
        return record if record.schema_version == SERVER_RECORD_SCHEMA else None

    def owner_alive(self) -> bool:
        """Whether the launching process still runs."""
        return _same_process(self.owner_pid, self.owner_ticks)


def start_group(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log: IO[bytes],
    state_dir: Path,
    devices: Sequence[str],
    pass_fds: Sequence[int] = (),
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start *argv* as the leader of a new session with output to *log*, and record it in *state_dir*.

    *pass_fds* (the devices' lock descriptors) are inherited by the server, so its devices stay locked
    as long as it runs, whoever launched it. Returns the process and its record's path (remove it with
    the group: :func:`stop_group`).

    Raises:
        OSError: the executable is missing or not executable.
    """
    process = subprocess.Popen(
        list(argv),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    record = ServerRecord(
        schema_version=SERVER_RECORD_SCHEMA,
        pgid=process.pid,
        leader_ticks=process_start_ticks(process.pid),
        owner_pid=os.getpid(),
        owner_ticks=process_start_ticks(os.getpid()),
        command=list(argv),
        log=log.name if isinstance(log.name, str) else "",
        devices=list(devices),
        started_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
    )
    path = state_dir / f"server-{process.pid}.json"
    write_json_atomic(path, asdict(record))
    return process, path


def _signal_group(pgid: int, leader_ticks: int | None, sig: int) -> None:
    # The group id is the leader's pid. If a process with that pid runs but is not our leader, the id
    # was reused by a new group: signalling it would hit a stranger.
    ticks = process_start_ticks(pgid)
    if ticks is not None and leader_ticks is not None and ticks != leader_ticks:
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(
    pgid: int, leader_ticks: int | None, *, timeout: float, process: subprocess.Popen[bytes] | None = None
) -> float:
    """Stop process group *pgid*: SIGTERM, then SIGKILL after *timeout* seconds; returns the seconds it took.

    Promise: on return no process of the group runs (a leader that is our child is reaped too).
    """
    started = time.monotonic()
    _signal_group(pgid, leader_ticks, signal.SIGTERM)
    deadline = started + timeout
    while time.monotonic() < deadline:
        if process is not None:
            process.poll()
        if not group_alive(pgid):
            break
        time.sleep(0.05)
    else:
        _signal_group(pgid, leader_ticks, signal.SIGKILL)
        while group_alive(pgid) and time.monotonic() < deadline + 10:
            if process is not None:
                process.poll()
            time.sleep(0.05)
    if process is not None:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    return time.monotonic() - started


def reap_orphans(state_dir: Path, *, timeout: float, say: Callable[[str], None]) -> list[ServerRecord]:
    """Stop every server recorded in *state_dir* whose owner is gone; return their records.

    Records of servers that already ended are removed. Servers whose owner still runs are left alone
    (they belong to a run in progress).
    """
    stopped = []
    for path in sorted(state_dir.glob("server-*.json")):
        record = ServerRecord.read(path)
        if record is None:
            continue
        if record.owner_alive():
            continue
        if group_alive(record.pgid):
            took = stop_group(record.pgid, record.leader_ticks, timeout=timeout)
            say(
                f"stopped orphaned inference server pgid {record.pgid} (its owner pid {record.owner_pid} is gone; "
                f"devices {','.join(record.devices) or 'none'}) in {took:.1f} s"
            )
            stopped.append(record)
        path.unlink(missing_ok=True)
    return stopped
