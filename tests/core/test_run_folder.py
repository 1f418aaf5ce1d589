"""A run folder holds whole lines of its own files only (issue 24): the writer cuts the start of a line a
killed writer did not finish, never writes through a symbolic link, and names a garbage ``run.lock``."""

from __future__ import annotations

import fcntl
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit.core_runkit import record

from shopsimrl_core import RunStore, summarize_run
from shopsimrl_core._errors import ConfigError, RunLockedError
from shopsimrl_core.runs.storage._run_folder import cut_torn_tail

REPO = Path(__file__).resolve().parents[2]


def _lines(path: Path) -> list[dict]:
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    return [json.loads(line) for line in raw.splitlines()]


def test_the_next_writer_cuts_a_torn_tail_instead_of_keeping_it(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.append(record(1))
    store.close_traces()
    whole = store.traces_path.read_bytes()
    with open(store.traces_path, "ab") as handle:
        handle.write(b'{"schema_version": "shopsimrl-episode-v4", "episode_id": "task-000002__sam')  # a killed write
    assert summarize_run(tmp_path, write=False).counts.trace_files == 1  # readers skip it meanwhile
    store = RunStore(tmp_path)
    store.append(record(2))
    records = _lines(store.traces_path)
    assert [r["episode_id"] for r in records] == ["task-000001__sample-000", "task-000002__sample-000"]
    assert store.traces_path.read_bytes().startswith(whole)
    assert summarize_run(tmp_path, write=False).counts.completed == 2


def test_cut_torn_tail_finds_the_last_newline_far_back(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a\n" + b"x" * 200_000)
    fd = os.open(path, os.O_RDWR)
    try:
        assert cut_torn_tail(fd) == 200_000
        assert cut_torn_tail(fd) == 0
    finally:
        os.close(fd)
    assert path.read_bytes() == b"a\n"
    path.write_bytes(b"no newline at all")
    fd = os.open(path, os.O_RDWR)
    try:
        cut_torn_tail(fd)
    finally:
        os.close(fd)
    assert path.read_bytes() == b""


_WRITER = """
import sys
sys.path.insert(0, sys.argv[2])
from shopsimrl_core import RunStore
store = RunStore(sys.argv[1])
store.acquire_lock("w")
n = 0
print("ready", flush=True)
while True:
    n += 1
    store.append({"schema_version": "shopsimrl-episode-v4", "episode_id": f"e{n}", "status": "failed",
                  "pad": "x" * 262_144})
"""


@pytest.mark.slow
def test_sigkill_mid_write_leaves_no_torn_line_once_the_run_starts_again(tmp_path: Path) -> None:
    """SIGKILLs of a process appending 256 KB lines (most kills land inside a write): after each kill the
    next writer's first append leaves a file of whole lines only."""
    import shutil

    rng = random.Random(24)
    torn_after_kill = 0
    for kill in range(6):
        run_dir = tmp_path / f"run{kill}"
        child = subprocess.Popen([sys.executable, "-c", _WRITER, str(run_dir), str(REPO)], stdout=subprocess.PIPE)
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.2, 0.4))
        child.kill()
        child.wait()
        torn_after_kill += not (run_dir / "traces.jsonl").read_bytes().endswith(b"\n")
        store = RunStore(run_dir)
        store.acquire_lock("resume")
        store.append(record(kill))
        store.release_lock()
        assert _lines(run_dir / "traces.jsonl")[-1]["episode_id"] == record(kill)["episode_id"]  # all parse
        shutil.rmtree(run_dir)
    assert torn_after_kill >= 1  # the kills did land inside writes, so the cut was exercised


def test_a_symlinked_traces_file_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "traces.jsonl").symlink_to(victim)
    store = RunStore(run_dir)
    with pytest.raises(ConfigError) as caught:
        store.acquire_lock("x")
    assert caught.value.code == "run-dir-symlink"
    assert str(run_dir / "traces.jsonl") in str(caught.value) and str(victim) in str(caught.value)
    assert "\n" not in str(caught.value)
    assert victim.read_text() == "precious\n" and not (run_dir / "run.lock").exists()
    # an append that never took the lock does not follow the link either
    with pytest.raises(OSError):
        store.append(record(1))
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("name", ["run.lock", "summary.json", "leases.jsonl", "notes"])
def test_any_symlink_inside_the_run_folder_is_refused(tmp_path: Path, name: str) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("x")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / name).symlink_to(target)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        RunStore(run_dir).acquire_lock("x")
    assert target.read_text() == "x"


def test_the_run_folder_itself_may_be_a_link(tmp_path: Path) -> None:
    real = tmp_path / "disk" / "run"
    real.mkdir(parents=True)
    (tmp_path / "run").symlink_to(real, target_is_directory=True)
    store = RunStore(tmp_path / "run")
    with store.lock("x"):
        store.append(record(1))
    assert len(_lines(real / "traces.jsonl")) == 1


def test_a_garbage_lock_nobody_holds_is_taken_over(tmp_path: Path) -> None:
    (tmp_path / "run.lock").write_bytes(b"\xff\xfe garbage \x00\x01")
    store = RunStore(tmp_path)
    store.acquire_lock("x")
    try:
        assert store.lock_takeover is not None and "garbage" in store.lock_takeover["unreadable"]
    finally:
        store.release_lock()


def test_a_garbage_lock_another_process_holds_is_named(tmp_path: Path) -> None:
    (tmp_path / "run.lock").write_bytes(b"\xff\xfe garbage")
    fd = os.open(tmp_path / "run.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with pytest.raises(RunLockedError) as caught:
            RunStore(tmp_path).acquire_lock("x")
    finally:
        os.close(fd)
    message = str(caught.value)
    assert caught.value.code == "run-locked" and "\n" not in message
    assert f"{tmp_path / 'run.lock'} names no holder" in message and "garbage" in message


def test_a_tail_short_of_only_its_newline_is_kept(tmp_path: Path) -> None:
    """A kill between the last byte of a record and its newline: the record is whole, so it is ended (§6.5)
    and counts, rather than cut."""
    store = RunStore(tmp_path)
    store.append(record(1))
    store.close_traces()
    raw = store.traces_path.read_bytes()
    store.traces_path.write_bytes(raw + raw.rstrip(b"\n").replace(b"task-000001", b"task-000002"))
    store = RunStore(tmp_path)
    store.append(record(3))
    assert [r["episode_id"][:11] for r in _lines(store.traces_path)] == ["task-000001", "task-000002", "task-000003"]
