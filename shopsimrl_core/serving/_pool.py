"""The server pool in ``<state_dir>/pool/``: one running server per served identity, shared by every run.

A served identity is everything that makes two launches serve the same thing: the server kind, the
filled command line (port aside), the weights' content, the environment, the devices' shape. Its key
names three files:

- ``<key>.json`` — the entry the server's keeper writes (URL, pgid, keeper pid, ``state``);
- ``<key>.use`` — the use lock: each run using the server holds it *shared* for as long as it does,
  so the kernel releases a SIGKILLed run's share; the keeper stops the server once it can take the
  lock *exclusively* for ``idle_timeout`` seconds, and nobody attaches while a stop holds it;
- ``<key>.start`` — taken exclusively while a run finds or starts the server, so two runs that need
  the same identity at once start one server, not two.

A run that needs devices while every device is held may stop an *idle* pooled server of another
identity (:func:`evict_idle`): idle servers count against the GPU pool but never block it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from shopsimrl_core._hashing import write_json_atomic
from shopsimrl_core.serving._processes import _same_process, group_alive, stop_group

__all__ = ["POOL_DIR", "Pool", "pool_key"]

POOL_DIR = "pool"
"""Folder of ``state_dir`` holding the pool's entries and locks."""


def pool_key(identity: Mapping[str, Any]) -> str:
    """The pool key of a served identity (a JSON-able mapping): 24 hex digits of its SHA-256."""
    text = json.dumps(identity, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def keeper_alive(entry: Mapping[str, Any]) -> bool:
    """Whether the keeper an entry names still runs (a reused pid is not taken for it)."""
    pid, ticks = entry.get("keeper_pid"), entry.get("keeper_ticks")
    return isinstance(pid, int) and _same_process(pid, ticks if isinstance(ticks, int) else None)


class Pool:
    """The pool of one state folder."""

    def __init__(self, state_dir: Path) -> None:
        self.folder = state_dir / POOL_DIR
        self.folder.mkdir(parents=True, exist_ok=True)

    def entry_path(self, key: str) -> Path:
        """Where the keeper of *key* writes its entry."""
        return self.folder / f"{key}.json"

    def use_path(self, key: str) -> Path:
        """The use lock of *key*."""
        return self.folder / f"{key}.use"

    def entry(self, key: str) -> dict[str, Any] | None:
        """The entry of *key*, or None."""
        return _read(self.entry_path(key))

    @contextmanager
    def starting(self, key: str) -> Iterator[None]:
        """Hold *key*'s start lock: one run at a time finds or starts its server."""
        fd = os.open(self.folder / f"{key}.start", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def use(self, key: str) -> int:
        """Take a share of *key*'s use lock (waits while a stop holds it); close the fd to give it back."""
        fd = os.open(self.use_path(key), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return fd

    def last_user(self, key: str) -> int | None:
        """An exclusive hold of *key*'s use lock when nobody uses the server (the fd), else None."""
        fd = os.open(self.use_path(key), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def spawn_keeper(
        self, key: str, spec: dict[str, Any], *, env: Mapping[str, str], pass_fds: Sequence[int], log: Path
    ) -> subprocess.Popen[bytes]:
        """Start the keeper of *key* in a session of its own with *spec*; it starts the server.

        The keeper inherits *env* (the server's environment) and the devices' lock descriptors.
        """
        spec_path = self.folder / f".{key}.spec-{os.getpid()}.json"
        write_json_atomic(
            spec_path,
            {**spec, "state_dir": str(self.folder.parent), "entry": str(self.entry_path(key)),
             "use_lock": str(self.use_path(key)), "device_fds": list(pass_fds), "log": str(log)},
        )  # fmt: skip
        self.entry_path(key).unlink(missing_ok=True)
        with log.open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "shopsimrl_core.serving._keeper", str(spec_path)],
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=tuple(pass_fds),
            )

    def stop(self, key: str, entry: Mapping[str, Any], *, timeout: float) -> float:
        """Stop the server of *entry* (through its keeper when it lives); seconds it took.

        Promise: on return no process of the server's group runs and the entry is gone.
        """
        started = time.monotonic()
        pgid = entry.get("pgid")
        ticks = entry.get("leader_ticks")
        if keeper_alive(entry):
            try:
                os.kill(int(entry["keeper_pid"]), signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = started + timeout + 15
            while keeper_alive(entry) and time.monotonic() < deadline:
                time.sleep(0.05)
        if isinstance(pgid, int) and group_alive(pgid):
            stop_group(pgid, ticks if isinstance(ticks, int) else None, timeout=timeout)
        current = self.entry(key)
        if current is not None and current.get("keeper_pid") == entry.get("keeper_pid"):
            self.entry_path(key).unlink(missing_ok=True)
        return time.monotonic() - started

    def evict_idle(self, keep: str, *, timeout: float, say: Callable[[str], None]) -> bool:
        """Stop one idle server of another identity than *keep*; whether one was stopped."""
        for path in sorted(self.folder.glob("*.json")):
            key = path.stem
            if key == keep or key.startswith("."):
                continue
            fd = self.last_user(key)
            if fd is None:
                continue
            try:
                entry = self.entry(key)
                if entry is None or not isinstance(entry.get("pgid"), int):
                    continue
                took = self.stop(key, entry, timeout=timeout)
                say(
                    f"stopped idle inference server pgid {entry['pgid']} of the pool in {took:.1f} s to free its "
                    f"devices {','.join(entry.get('devices') or []) or 'none'}"
                )
                return True
            finally:
                os.close(fd)
        return False
