"""The event loop and garbage-collector settings a synchronous run executes under.

``run_evaluation`` is what ``shopsimrl run`` and the Dagster rollout asset both call, so both get
the same client: a uvloop event loop (when uvloop is installed; the stdlib loop otherwise) and a
cyclic collector tuned for a run, each only for the duration of the call. Measured on the issue-11
shape (64 in flight, 1,024 episodes, medians of 4): calling ``run_evaluation`` the way the rollout
asset does cost 0.52–0.58 ms of CPU per step with the stdlib loop and default collector; with this
module 0.48, beside 0.46 for ``shopsimrl run`` (docs/runtime.md).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["run_coroutine", "run_collector"]

T = TypeVar("T")

#: young objects are collected every this many net allocations during a run (Python's default: 700)
YOUNG_THRESHOLD = 20_000


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


@contextmanager
def run_collector() -> Iterator[None]:
    """Tune Python's cyclic garbage collector for a run; restore the caller's settings afterwards.

    A run decodes a few containers per JSON value and frees nearly all of them by reference
    counting, yet at the default threshold (700 net allocations) the collector ran ~50 times a
    second, and its full passes, which traverse every module, schema and config object, held the
    event loop for up to 96 ms at 256 in flight (GC was ~10 % of the client's CPU). So the objects
    that exist when the run starts are frozen out of its reach (``gc.freeze``) and young objects are
    collected every :data:`YOUNG_THRESHOLD` allocations. On exit the thresholds are put back and the
    frozen objects handed back to the collector (``gc.unfreeze``), so a long-lived caller (a
    notebook, a Dagster worker running several steps) keeps collecting its own garbage. A caller
    that froze objects itself (a pre-forking server) keeps its freeze: nothing is frozen or
    unfrozen then, since ``gc.unfreeze`` cannot tell its objects from ours.
    """
    thresholds = gc.get_threshold()
    ours = gc.get_freeze_count() == 0
    if ours:
        gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 20, 20)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if ours:
            gc.unfreeze()


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run *coroutine* to completion on a new event loop, like ``asyncio.run``, and return its result.

    The loop is uvloop's when uvloop is installed (it halves the loop's own CPU per request,
    docs/benchmarks.md) and the stdlib's otherwise; only this call uses it: the process's event loop
    policy is left alone. The collector is tuned for the duration (:func:`run_collector`).
    """
    with run_collector(), asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(coroutine)
