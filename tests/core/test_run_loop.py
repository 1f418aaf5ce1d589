"""The loop and collector of a synchronous run (``runs/execution/_loop.py``): scoped to the call, then restored."""

from __future__ import annotations

import asyncio
import gc
import sys

import pytest

from shopsimrl_core.runs.execution import _loop
from shopsimrl_core.runs.execution._loop import YOUNG_THRESHOLD, run_collector, run_coroutine


async def _loop_and_collector() -> tuple[str, tuple[int, int, int], int]:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__, gc.get_threshold(), gc.get_freeze_count()


def test_a_run_gets_uvloop_and_the_tuned_collector_only_while_it_runs() -> None:
    pytest.importorskip("uvloop")
    policy = asyncio.get_event_loop_policy()
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    module, thresholds, frozen = run_coroutine(_loop_and_collector())
    assert module.startswith("uvloop")
    assert thresholds == (YOUNG_THRESHOLD, 20, 20)
    assert frozen > frozen_before  # the objects alive at the start are out of the collector's reach
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen_before
    assert asyncio.get_event_loop_policy() is policy  # the process's policy was never touched


def test_without_uvloop_the_stdlib_loop_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` now raises ImportError
    module, _, _ = run_coroutine(_loop_and_collector())
    assert module.startswith("asyncio")


def test_the_collector_is_restored_when_the_run_raises() -> None:
    before, frozen_before = gc.get_threshold(), gc.get_freeze_count()

    async def boom() -> None:
        raise RuntimeError("episode runtime broke")

    with pytest.raises(RuntimeError, match="episode runtime broke"):
        run_coroutine(boom())
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen_before


def test_run_collector_nests_inside_a_caller_that_tuned_its_own() -> None:
    before = gc.get_threshold()
    gc.set_threshold(5_000, 7, 7)
    try:
        with run_collector():
            assert gc.get_threshold() == (YOUNG_THRESHOLD, 20, 20)
        assert gc.get_threshold() == (5_000, 7, 7)
    finally:
        gc.set_threshold(*before)


def test_a_callers_own_freeze_is_left_as_it_was() -> None:
    gc.freeze()  # e.g. a pre-forking server froze its start-up objects
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with run_collector():
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen  # not unfrozen: those objects are the caller's
    finally:
        gc.unfreeze()


def test_the_loop_factory_is_uvloops_when_installed() -> None:
    uvloop = pytest.importorskip("uvloop")
    assert _loop._loop_factory() is uvloop.new_event_loop
