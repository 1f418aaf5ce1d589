"""A task id beyond a signed 64-bit integer is refused when the split loads (issue 24), not half-way into a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.runs.planning._splits import MAX_TASK_ID, load_split_file


def _split(tmp_path: Path, ids: list[int]) -> Path:
    path = tmp_path / "split.json"
    path.write_text(json.dumps({"schema_version": "shopsimrl-persona-splits-v1", "splits": {"val": {"task_ids": ids}}}))
    return path


def test_a_task_id_of_2_to_the_70_is_refused_with_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_split_file(_split(tmp_path, [1, 2**70]))
    line = caught.value.one_line()
    assert caught.value.code == "split-invalid" and "splits.val.task_ids.1" in line
    assert f"must be at most 2**63 - 1 = {MAX_TASK_ID} (got {2**70})" in line


def test_the_largest_signed_64_bit_id_is_accepted(tmp_path: Path) -> None:
    assert load_split_file(_split(tmp_path, [0, MAX_TASK_ID])).get("val").task_ids == (0, MAX_TASK_ID)
