"""The subprocess deadline of the slow tests follows progress (issue 24): a child that keeps printing runs
past the stall limit as long as it needs; a silent one is stopped after one stall, with its process group."""

from __future__ import annotations

import sys
import time

import pytest
from testkit.deadlines import Stalled, run_watched

TALKER = "import time\nfor i in range(12):\n    print(i)\n    time.sleep(0.25)\n"
SILENT = (
    "import subprocess, sys, time\nprint('start')\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\ntime.sleep(60)\n"
)


def test_a_child_that_keeps_printing_outlives_the_stall_limit() -> None:
    started = time.monotonic()
    done = run_watched([sys.executable, "-c", TALKER], stall_seconds=1.5)
    assert done.returncode == 0 and done.stdout.split() == [str(i) for i in range(12)]
    assert time.monotonic() - started > 1.5  # longer than one stall in all: the clock followed the lines


def test_a_silent_child_is_stopped_after_one_stall() -> None:
    started = time.monotonic()
    with pytest.raises(Stalled, match="no output for"):
        run_watched([sys.executable, "-c", SILENT], stall_seconds=1.5)
    assert time.monotonic() - started < 20
