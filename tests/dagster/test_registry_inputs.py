"""Registry entries as a careless user writes them (issue 33, item 4): a byte-order mark reads like none,
an id too long for a file name is refused at registration with one line and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shopsimrl_core import ConfigError
from shopsimrl_dagster.registry import Checkpoint, main, read_registry, register_checkpoint


def test_an_entry_with_a_byte_order_mark_reads_like_one_without(tmp_path: Path) -> None:
    entry = {"checkpoint_id": "grpo-step-000400", "step": 400, "endpoint": "http://gpu-3:30000/v1"}
    (tmp_path / "plain.json").write_text(json.dumps(entry), encoding="utf-8")
    marked = {**entry, "checkpoint_id": "grpo-step-000500", "step": 500}
    (tmp_path / "marked.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(marked).encode())
    problems: list[str] = []
    found = read_registry(tmp_path, problems=problems)
    assert problems == []
    assert [(c.checkpoint_id, c.step, c.endpoint) for c in found] == [
        ("grpo-step-000400", 400, "http://gpu-3:30000/v1"),
        ("grpo-step-000500", 500, "http://gpu-3:30000/v1"),
    ]


def test_a_300_character_id_is_refused_at_registration(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"checkpoint_id: is 300 characters long, more than 128"):
        register_checkpoint(tmp_path / "registry", Checkpoint("a" * 300, 1))
    assert not (tmp_path / "registry").exists()
    # the longest allowed id still registers (and names a file the system can create)
    assert register_checkpoint(tmp_path / "registry", Checkpoint("b" * 128, 1)).is_file()


def test_a_hand_written_entry_with_a_long_id_is_skipped_and_named(tmp_path: Path) -> None:
    (tmp_path / "long.json").write_text(json.dumps({"checkpoint_id": "c" * 200, "step": 1}), encoding="utf-8")
    problems: list[str] = []
    assert read_registry(tmp_path, problems=problems) == []
    assert len(problems) == 1 and "long.json: checkpoint_id: is 200 characters long" in problems[0]


def test_the_command_line_says_one_line_with_the_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["add", "--id", "d" * 300, "--step", "1", "--registry", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"shopsimrl-registry: error[checkpoint-registry-invalid]: {tmp_path / 'r'}: checkpoint_id")
