"""The lease journal's file handling: one descriptor per run, a torn tail ended once, compaction.

The journal keeps its descriptor open across lines (two per episode); these check that doing so
never writes a line where the next start cannot read it. Killed processes and full disks against
the real server are in tests/reliability/test_faults.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from shopsimrl_core.runs._leases import JOURNAL_NAME, LeaseJournal


def _lines(run_dir: Path) -> list[str]:
    return (run_dir / JOURNAL_NAME).read_text(encoding="utf-8").split("\n")


def test_a_torn_tail_left_by_a_killed_writer_is_ended_before_the_next_line(tmp_path: Path) -> None:
    whole = b'{"op": "acquired", "lease_id": "old", "env_idx": 1, "base_url": "http://e"}\n'
    (tmp_path / JOURNAL_NAME).write_bytes(whole + b'{"op": "acq')
    journal = LeaseJournal(tmp_path, "inv-2")
    journal.acquired(2, "new", "http://e")
    journal.acquired(3, "newer", "http://e")
    journal.close()
    lines = _lines(tmp_path)
    assert lines[1] == '{"op": "acq' and lines[-1] == ""  # the torn line is kept, ended, and never joined
    assert [json.loads(line)["lease_id"] for line in lines[2:-1]] == ["new", "newer"]
    assert [e["lease_id"] for e in LeaseJournal(tmp_path, "inv-3").outstanding()] == ["old", "new", "newer"]


def test_lines_after_compaction_go_to_the_new_file(tmp_path: Path) -> None:
    journal = LeaseJournal(tmp_path, "inv-1")
    journal.acquired(1, "a", "http://e")
    journal.acquired(2, "b", "http://e")
    journal.released(1, "a", "http://e")
    journal.compact()  # replaces the file by an atomic rename: the open descriptor would be stale
    journal.acquired(3, "c", "http://e")
    journal.released(2, "b", "http://e")
    assert [e["lease_id"] for e in LeaseJournal(tmp_path, "x").outstanding()] == ["c"]
    journal.released(3, "c", "http://e")
    journal.compact()  # nothing outstanding: the file goes away
    assert not (tmp_path / JOURNAL_NAME).exists()
    journal.acquired(4, "d", "http://e")  # and comes back with the next lease
    journal.close()
    journal.close()  # idempotent
    entries = [json.loads(line) for line in _lines(tmp_path)[:-1]]
    assert entries == [
        {"at": entries[0]["at"], "base_url": "http://e", "env_idx": 4, "invocation_id": "inv-1",
         "lease_id": "d", "op": "acquired"}
    ]
