"""Group commit for append-only run files: fsync on one worker thread, off the event loop.

:func:`append_whole` writes one line whole or not at all; :func:`request_fsync` makes it durable.

The run appends one trace line and one lease-journal line per episode. Writing each line with
``os.write`` puts it in the OS page cache at once, so a killed process (SIGKILL, crash of Python)
loses nothing that was written, and no torn line is left. Only a machine crash needs the ``fsync``,
which costs 1.5–4 ms and, done on the event loop, stalls every episode in flight. So writers call
:func:`request_fsync` right after their write and go on; one daemon thread fsyncs every file with
pending writes. A round starts :data:`COMMIT_WINDOW_SECONDS` after the first request it serves, so
the lines written meanwhile share its fsync: each fsync also costs ~0.1 ms of the process's CPU,
and one per line was ~6 % of a fast run's CPU (docs/benchmarks.md). A power cut can so lose the
lines of that window more; resume re-runs them.

:func:`wait_durable` blocks until every write requested before the call is fsynced; the evaluator
calls it before it releases the run lock (normal end, error, SIGINT/SIGTERM), and an ``atexit``
hook calls it for any other user of the stores.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time

__all__ = ["append_whole", "request_fsync", "wait_durable"]

_log = logging.getLogger(__name__)

COMMIT_WINDOW_SECONDS = 0.05
"""How long a round waits for more writes before it fsyncs (unless someone waits for durability)."""


class _GroupSync:
    """One worker thread that fsyncs the files with pending writes, round after round."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition()
        # (st_dev, st_ino) -> (dup'd fd, path for messages): keyed by file, not by path, so that
        # a file replaced under the same name (lease-journal compaction) is still synced itself.
        self._pending: dict[tuple[int, int], tuple[int, str]] = {}
        self._requested = 0  # number of requests so far
        self._done = 0  # every request up to this number is fsynced (or failed and was logged)
        self._thread: threading.Thread | None = None
        self._idle = False  # the worker waits for a first request (only then is it woken)
        self._urgent = False  # someone waits for durability: the round starts without its window

    def request(self, fd: int, path: str) -> None:
        stat = os.fstat(fd)
        key = (stat.st_dev, stat.st_ino)
        with self._cond:
            if key not in self._pending:
                try:
                    # A private descriptor: the writer may close its own before the worker gets to it.
                    self._pending[key] = (os.dup(fd), path)
                except OSError:
                    os.fsync(fd)  # no descriptor left (EMFILE): make this write durable the old way
                    return
            self._requested += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="shopsimrl-fsync", daemon=True)
                self._thread.start()
            elif self._idle:
                self._cond.notify_all()  # a worker inside its window is not woken: the request waits for it

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._idle = True
                    self._cond.wait()
                self._idle = False
                # the window: the writes of the next COMMIT_WINDOW_SECONDS share this round's fsync
                self._cond.wait_for(lambda: self._urgent, COMMIT_WINDOW_SECONDS)
                self._urgent = False
                batch, self._pending = self._pending, {}
                upto = self._requested
            for fd, path in batch.values():
                try:
                    os.fsync(fd)
                except OSError as exc:
                    # Nothing is lost for a running process (the bytes are in the page cache); say so
                    # once per failure instead of failing an episode that already finished.
                    _log.warning(
                        "fsync of %s failed (%s); its last lines survive a process kill, not a power cut", path, exc
                    )
                finally:
                    os.close(fd)
            with self._cond:
                self._done = max(self._done, upto)
                self._cond.notify_all()

    def wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._requested
            if self._done < target:
                self._urgent = True  # no window for a round somebody waits for
                self._cond.notify_all()
            while self._done < target:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                if self._thread is None or not self._thread.is_alive():
                    return False  # no worker (e.g. interpreter shutting down): nothing will finish them
                self._cond.wait(remaining)
            return True

    def reset_after_fork(self) -> None:
        # The child has no worker thread; the parent's pending descriptors are its to sync, not ours.
        for fd, _path in self._pending.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._reset()


_GROUP = _GroupSync()
os.register_at_fork(after_in_child=_GROUP.reset_after_fork)


def append_whole(fd: int, data: bytes, path: str) -> int:
    """Write *data* at the end of the file *fd*, whole or not at all; return the offset it starts at.

    ``os.write`` in a loop, not a buffered handle, so no buffered rest can be flushed later. When a
    write fails (ENOSPC, EFBIG) the file is cut back to where it was, so it never holds a torn line,
    and the ``OSError`` is raised with *path* as its file name.
    """
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        try:
            os.ftruncate(fd, start)
        except OSError:
            pass  # the original error is what the caller must see
        if exc.filename is None:
            exc.filename = path
        raise
    return start


def request_fsync(fd: int, path: str) -> None:
    """Have the bytes already written to *fd* fsynced soon, on the worker thread; returns at once.

    Call it only after the write returned (the bytes are then in the page cache and survive a
    killed process); *path* is only used in the warning when the fsync fails. Concurrent
    requests are coalesced: one fsync per file and round.
    """
    _GROUP.request(fd, path)


def wait_durable(timeout: float | None = None) -> bool:
    """Block until every write requested before this call is fsynced; True when it finished in time.

    Safe from any thread and cheap when nothing is pending. A failed fsync counts as finished (it is
    logged as a warning by the worker).
    """
    return _GROUP.wait(timeout)


atexit.register(wait_durable, 10.0)
