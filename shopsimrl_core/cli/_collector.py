"""The cyclic garbage collector of the ``shopsimrl`` process, which runs one command and exits.

A run sets its own collector for the duration of the run (``runs/execution/_loop.py``,
``run_collector``); this module covers the rest of the process. It imports nothing but ``gc``, so
``shopsimrl --help`` pays nothing for it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["PROCESS_YOUNG_THRESHOLD", "one_shot_process_collector"]

#: young objects are collected every this many net allocations outside a run (Python's default: 700)
PROCESS_YOUNG_THRESHOLD = 100_000


@contextmanager
def one_shot_process_collector() -> Iterator[None]:
    """Tune the collector for a process that runs one command and exits (the ``shopsimrl`` program).

    Two costs of a short process are the collector's, not the work's (a one-episode ``shopsimrl run``,
    219 ms of CPU; ``benchmarks.client_shape --only start_1ep``): the interpreter's last pass at exit,
    which walks every module, class, schema and config object the command imported only to free
    memory the OS is about to take back (~27 ms), and young passes during the imports, which create
    hundreds of thousands of long-lived objects and almost no garbage (~4 ms). So young objects are
    collected every :data:`PROCESS_YOUNG_THRESHOLD` allocations, and on the way out everything alive is
    frozen out of the exit pass (``gc.freeze``). Nothing is skipped that holds data: module teardown
    still closes what reference counting reaches, ``atexit`` handlers run, and the runtime closes its
    files itself; only garbage caught in reference cycles is left to the OS. For a process, never a
    library call: a long-lived caller (a test session, a Dagster worker) keeps its collector.
    """
    gc.set_threshold(PROCESS_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    try:
        yield
    finally:
        gc.freeze()
