"""RunStore: append/heal/index, the run-directory lock across real processes, resume rules, ledgers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from testkit.core_runkit import record

from shopsimrl_core import ConfigError, RunLockedError, RunStore, TestAccessLedger

HOLDER = textwrap.dedent("""
    import sys
    from shopsimrl_core import RunStore
    store = RunStore(sys.argv[1])
    store.acquire_lock("holder-invocation")
    print("locked", flush=True)
    if sys.argv[2] == "die":
        import os
        os._exit(0)  # dies holding the lock: the file keeps a dead pid
    sys.stdin.readline()
    store.release_lock()
""")


def _holder(run_dir: Path, mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run_dir), mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_append_cuts_a_torn_tail_and_last_line_wins(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.append(record(19, status="failed"))
    store.append(record(20))
    store.close_traces()
    with open(store.traces_path, "ab") as handle:  # a writer died mid-line
        handle.write(b'{"schema_version": "shopsimrl-episode-v4", "episode_id": "task-000019__sa')
    resumed = RunStore(tmp_path)
    resumed.append(record(19, reward=0.5))
    lines = store.traces_path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 4  # failed, completed, new, "": the torn part was cut (issue 24)
    index = resumed.index()
    assert index.lines == 3 and index.skipped_lines == 0
    assert index.attempts("task-000019__sample-000") == 2 and index.is_complete("task-000019__sample-000")
    assert index.entries["task-000019__sample-000"].reward == 0.5
    latest = list(resumed.latest_records(index))
    assert [r["episode_id"] for r in latest] == ["task-000019__sample-000", "task-000020__sample-000"]
    assert latest[0]["final"]["reward"] == 0.5


def test_completion_predicate_and_duplicates(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    not_done = record(1)
    not_done["final"]["done"] = 1  # JSON 1 is not true
    store.append(not_done)
    store.append(record(2))
    store.append(record(2))
    index = store.index()
    assert not index.is_complete("task-000001__sample-000") and index.duplicate_completed == 1


def test_unserialisable_record_writes_nothing(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    bad = record(3, reward=float("nan"))
    with pytest.raises(ValueError):
        store.append(bad)
    assert not store.traces_path.exists() or store.traces_path.read_bytes() == b""


def test_second_process_is_refused_at_once(tmp_path: Path) -> None:
    proc = _holder(tmp_path, "hold")
    try:
        with pytest.raises(RunLockedError, match=rf"locked by pid {proc.pid} .*holder-invocation") as info:
            RunStore(tmp_path).acquire_lock("second")
        assert info.value.code == "run-locked"
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=30)
    store = RunStore(tmp_path)
    store.acquire_lock("third")  # released: free again
    assert json.loads(store.lock_path.read_text())["invocation_id"] == "third"
    assert store.lock_takeover is None
    store.release_lock()


def test_stale_lock_of_dead_process_is_taken_over(tmp_path: Path) -> None:
    proc = _holder(tmp_path, "die")
    proc.wait(timeout=30)
    assert json.loads((tmp_path / "run.lock").read_text())["pid"] == proc.pid
    store = RunStore(tmp_path)
    store.acquire_lock("taker")
    assert store.lock_takeover is not None and store.lock_takeover["pid"] == proc.pid
    assert json.loads(store.lock_path.read_text())["pid"] == os.getpid()
    store.release_lock()


def test_same_process_second_store_is_refused(tmp_path: Path) -> None:
    first = RunStore(tmp_path)
    with first.lock("one"):
        with pytest.raises(RunLockedError):
            RunStore(tmp_path).acquire_lock("two")


def test_resume_false_refuses_existing_content(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    assert store.check_resumable({}, "f", resume=False) == "new"
    store.append(record(1))
    with pytest.raises(ConfigError, match="resume is false") as info:
        store.check_resumable({}, "f", resume=False)
    assert info.value.code == "resume-disabled"


def test_resume_refuses_exported_records(tmp_path: Path) -> None:
    from shopsimrl_core import TraceFormatError, redact_record

    store = RunStore(tmp_path / "run")
    store.append(record(1))
    store.append(redact_record(record(2), "public"))  # an export copied over the run's traces
    store.write_manifest({"x": 1}, "f", {})
    with pytest.raises(TraceFormatError) as info:
        store.check_resumable({"x": 1}, "f", resume=True)
    assert info.value.code == "export-not-resumable"
    assert "traces.jsonl:2:" in str(info.value) and "'public'" in str(info.value) and "\n" not in str(info.value)


def test_archive_existing_moves_never_deletes(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.append(record(1))
    store.write_manifest({"x": 1}, "f", {})
    with store.lock("inv"):
        archive = store.archive_existing()
        assert archive is not None
        assert sorted(p.name for p in archive.iterdir()) == ["manifest.json", "traces.index.jsonl", "traces.jsonl"]
        assert not store.has_content() and store.lock_path.exists()


def test_invocations_and_ledger(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.append_invocation({"invocation_id": "a"})
    store.append_invocation({"invocation_id": "b"})
    assert [e["invocation_id"] for e in store.read_invocations()] == ["a", "b"]
    assert store.read_invocations()[0]["schema_version"] == "shopsimrl-invocation-v1"
    ledger = TestAccessLedger(tmp_path / "ledger.jsonl")
    ledger.append({"checkpoint": "c1", "skills": {"provider": "none"}, "run_dir": "/r1", "plan_fingerprint": "f1"})
    assert ledger.prior_runs(checkpoint="c1", skills={"provider": "none"}, run_dir="/r1", plan_fingerprint="f1") == []
    assert (
        len(ledger.prior_runs(checkpoint="c1", skills={"provider": "none"}, run_dir="/r2", plan_fingerprint="f1")) == 1
    )
    assert ledger.prior_runs(checkpoint="c2", skills={"provider": "none"}, run_dir="/r2", plan_fingerprint="f1") == []
