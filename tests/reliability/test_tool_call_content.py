"""`model.tool_call_content`: what the replayed assistant tool-call turn carries as `content`, over the
real sandbox (environment and baseline policy); the default keeps today's requests and identity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from shopsimrl_core.cli._main import main
from shopsimrl_core.runs.config._config import load_config
from shopsimrl_core.runs.planning._plan import build_plan

EXPECTED: dict[str, Any] = {"null": None, "empty": "", "omit": "<absent>"}


def _config(tmp_path: Path, sandbox: Any, mode: str | None) -> Path:
    model: dict[str, Any] = {"name": sandbox.served_model, "base_url": sandbox.policy_url, "api_key_env": None}
    if mode is not None:
        model["tool_call_content"] = mode
    path = tmp_path / f"content-{mode}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "experiment": {"name": f"content-{mode}", "output_dir": "runs", "seed": 20260830},
                "tasks": {"split_file": str(sandbox.split_file), "split": "val", "sample_size": 1},
                "environment": {"base_url": sandbox.env_url},
                "model": model,
            }
        ),
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("mode", ["null", "empty", "omit"])
def test_tool_call_turns_carry_the_configured_content(tmp_path: Path, sandbox: Any, mode: str) -> None:
    path = _config(tmp_path, sandbox, mode)
    assert main(["run", "--progress", "none", str(path)]) == 0
    record = json.loads(
        (tmp_path / "runs" / f"content-{mode}" / "traces.jsonl").read_text(encoding="utf-8").splitlines()[0]
    )
    turns = [m for m in record["conversation"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert turns, "the episode replayed no tool-call turn"
    for turn in turns:
        assert turn.get("content", "<absent>") == EXPECTED[mode]
    sampling = record["provenance"]["model"]["sampling"]
    assert ("tool_call_content" in sampling) == (mode != "null")


def test_default_leaves_the_plan_identity_unchanged(tmp_path: Path, sandbox: Any) -> None:
    unset = build_plan(load_config(_config(tmp_path, sandbox, None)))
    explicit = build_plan(load_config(_config(tmp_path, sandbox, "null")))
    empty = build_plan(load_config(_config(tmp_path, sandbox, "empty")))
    assert "tool_call_content" not in unset.semantic["model"]["sampling"]
    assert unset.semantic["model"] == explicit.semantic["model"]
    assert empty.semantic["model"]["sampling"]["tool_call_content"] == "empty"
