"""Group commit of run-file fsyncs: off the caller's thread, coalesced, waited for at exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from shopsimrl_core.runs.storage import _durability
from shopsimrl_core.runs.storage._store import RunStore


@pytest.fixture
def fsync_spy(monkeypatch: pytest.MonkeyPatch):
    # Rounds left by earlier tests (their commit windows may still be open) finish first, so only this
    # test's rounds reach the spy: on a loaded machine a late round once showed up as a second call.
    assert _durability.wait_durable(60) is True
    calls: list[str] = []
    gate = threading.Event()
    gate.set()
    entered = threading.Event()
    real = os.fsync

    def spy(fd: int) -> None:
        calls.append(threading.current_thread().name)
        entered.set()
        gate.wait(30)
        real(fd)

    monkeypatch.setattr(_durability.os, "fsync", spy)
    return calls, gate, entered


def test_append_returns_with_line_on_disk_and_fsync_on_worker(tmp_path: Path, fsync_spy) -> None:
    calls, _, _ = fsync_spy
    store = RunStore(tmp_path / "run")
    store.append({"episode_id": "e1", "x": 1})
    store.close_traces()  # the worker keeps its own descriptor
    assert (tmp_path / "run" / "traces.jsonl").read_bytes() == b'{"episode_id":"e1","x":1}\n'
    assert _durability.wait_durable(10) is True
    assert calls == ["shopsimrl-fsync"]


def test_concurrent_requests_are_coalesced(tmp_path: Path, fsync_spy) -> None:
    calls, gate, entered = fsync_spy
    gate.clear()
    store = RunStore(tmp_path / "run")
    store.append({"episode_id": "e0"})
    assert entered.wait(10)  # the worker is inside the first round's fsync
    for i in range(1, 6):
        store.append({"episode_id": f"e{i}"})
    assert _durability.wait_durable(0.05) is False  # still blocked: nothing claims durability early
    gate.set()
    assert _durability.wait_durable(10) is True
    assert len(calls) == 2  # the first round, then one round for the five lines written meanwhile
    assert len((tmp_path / "run" / "traces.jsonl").read_bytes().splitlines()) == 6


def test_lines_of_one_window_share_an_fsync_and_a_waiter_cuts_the_window_short(
    tmp_path: Path, fsync_spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls, _, _ = fsync_spy
    monkeypatch.setattr(_durability, "COMMIT_WINDOW_SECONDS", 60.0)
    store = RunStore(tmp_path / "run")
    for i in range(6):
        store.append({"episode_id": f"e{i}"})
    time.sleep(0.2)
    assert calls == []  # the round waits out its window for more lines
    # somebody waiting for durability does not wait for the window (60 s here)
    assert _durability.wait_durable(10) is True
    assert calls == ["shopsimrl-fsync"]  # six lines, one fsync
    assert len((tmp_path / "run" / "traces.jsonl").read_bytes().splitlines()) == 6


def test_normal_exit_waits_for_the_last_fsync(tmp_path: Path) -> None:
    marker = tmp_path / "synced"
    script = textwrap.dedent(
        f"""
        import os, time
        from shopsimrl_core.runs.storage import _durability
        from shopsimrl_core.runs.storage._store import RunStore
        real = os.fsync
        def slow(fd):
            time.sleep(0.3)
            real(fd)
            open({str(marker)!r}, "w").close()
        _durability.os.fsync = slow
        RunStore({str(tmp_path / "run")!r}).append({{"episode_id": "e1"}})
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(__file__).resolve().parents[2])
    assert marker.exists()
