"""Subprocess deadlines that follow progress, not wall time (issue 24).

A fixed ``timeout=120`` fails a healthy benchmark or demo on a loaded machine (load 20 on 2 cores makes
everything several times slower) and still waits the full time for one that hangs. Here a subprocess fails
only when it has printed nothing — no line on stdout or stderr — for ``stall_seconds``: every line resets
the deadline, so a slow run that keeps making progress finishes, and a stuck one is stopped after one
stall. Output is unbuffered (``PYTHONUNBUFFERED=1``) so Python children report progress as it happens.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

__all__ = ["Stalled", "Watched", "run_watched"]


class Stalled(AssertionError):
    """The subprocess printed nothing for ``stall_seconds``; it was killed (with its process group)."""


class Watched:
    """A started subprocess whose stdout and stderr lines are collected as they come (each resets the stall clock)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        stall_seconds: float,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.stall_seconds = stall_seconds
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.last_output = time.monotonic()
        full_env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
        # its own process group, so a stalled child is stopped with everything it started
        self.process = subprocess.Popen(
            self.argv, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )
        assert self.process.stdout is not None and self.process.stderr is not None
        self._pumps = [
            threading.Thread(target=self._pump, args=(self.process.stdout, self.stdout), daemon=True),
            threading.Thread(target=self._pump, args=(self.process.stderr, self.stderr), daemon=True),
        ]
        for pump in self._pumps:
            pump.start()

    def _pump(self, stream: IO[str], sink: list[str]) -> None:
        for line in stream:
            sink.append(line)
            self.last_output = time.monotonic()

    def wait(self) -> subprocess.CompletedProcess[str]:
        """Wait for the exit; raise :class:`Stalled` after ``stall_seconds`` without a line."""
        while self.process.poll() is None:
            silent = time.monotonic() - self.last_output
            if silent > self.stall_seconds:
                self._stop()
                tail = "".join((self.stdout + self.stderr)[-20:])
                raise Stalled(
                    f"{' '.join(self.argv[:4])}: no output for {silent:.0f} s (stall limit {self.stall_seconds:g} s);"
                    f" killed. Last lines:\n{tail}"
                )
            time.sleep(0.2)
        for pump in self._pumps:
            pump.join(10)
        return subprocess.CompletedProcess(self.argv, self.process.returncode, "".join(self.stdout),
                                           "".join(self.stderr))

    def _stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the group this Popen created, nothing else
        except ProcessLookupError:
            pass
        self.process.wait(30)


def run_watched(
    argv: Sequence[str],
    *,
    stall_seconds: float,
    cwd: str | os.PathLike[str] | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True)`` with a deadline that follows progress."""
    return Watched(argv, stall_seconds=stall_seconds, cwd=cwd, env=env).wait()
