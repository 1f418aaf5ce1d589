"""What a writer checks and repairs in its run folder before it writes: links and torn tails.

Both guard the promise of docs/runs.md that a run folder holds whole lines of its own files only:
a symbolic link inside it is refused (the writer never writes through one), and the start of a line a
killed writer did not finish is cut away before the next line is appended.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from shopsimrl_core._errors import ConfigError

__all__ = ["cut_torn_tail", "refuse_symlinks"]


def cut_torn_tail(fd: int) -> int:
    """Repair the end of the file *fd* so it ends with a whole line; return the number of bytes cut.

    A SIGKILL during the ``write`` of a line can leave its first part: Linux stops a write between two
    pages when a fatal signal is pending (measured: 18 of 20 kills of a process appending 35 KB lines
    left one, 2 of 20 at 3 KB; docs/runs.md#durability). Such a part belongs to an attempt that was
    never stored — every reader skips it, the run index never covers it and the episode runs again —
    so the next writer cuts it away before it appends: once a run has started again, the file holds
    whole lines only. (runtime-semantics §6.5 ends the part with a newline instead, which keeps a
    broken line in the file for good.) A tail that is a whole JSON value short of only its newline is
    kept and ended, as runtime-semantics §6.5 does.
    """
    size = os.lseek(fd, 0, os.SEEK_END)
    end = size
    keep = 0
    while end > 0:
        start = max(0, end - 65536)
        chunk = os.pread(fd, end - start, start)
        at = chunk.rfind(b"\n")
        if at >= 0:
            keep = start + at + 1
            break
        end = start
    if keep == size:
        return 0
    if _whole_value(os.pread(fd, size - keep, keep)):
        os.pwrite(fd, b"\n", size)  # (O_APPEND descriptors append it anyway)
        os.fsync(fd)
        return 0
    os.ftruncate(fd, keep)
    os.fsync(fd)
    return size - keep


def _whole_value(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
        return False
    return True


def refuse_symlinks(run_dir: Path) -> None:
    """Refuse a run folder that holds a symbolic link (the folder itself may be one).

    The writer never follows a link out of its folder: a ``traces.jsonl`` linked to another file would
    append trace lines to that file, a linked ``manifest.json`` or ``run.lock`` would be rewritten.

    Raises:
        ConfigError: code ``run-dir-symlink``, naming the link and where it points.
    """
    try:
        entries = sorted(os.scandir(run_dir), key=lambda entry: entry.name)
    except OSError:
        return  # not there yet, or unreadable: the writes that follow say so
    for entry in entries:
        if entry.is_symlink():
            try:
                target = os.readlink(entry.path)
            except OSError:
                target = "?"
            raise ConfigError(
                f"{entry.path}: is a symbolic link (to {target}); a run folder holds its own files only and the "
                "writer never follows a link out of it — replace the link by the file it names, or use another "
                "experiment.name",
                code="run-dir-symlink",
            )
