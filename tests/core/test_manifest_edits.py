"""A manifest edited by hand is refused on resume (issue 24): the plan of a run directory is written once,
so a plan that no longer hashes to its ``plan_fingerprint`` — ``max_steps`` raised from 30 to 99, or a zeroed
fingerprint — makes ``run`` exit 2 with one line naming the file and the edit, instead of resuming."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from shopsimrl_core import FingerprintMismatch, RunStore, load_config
from shopsimrl_core.runs.planning._plan import build_plan

SPLITS = {"splits": {"val": {"role": "val", "persona": True, "task_ids": [1, 2, 3]}}}


def _plan(tmp_path: Path) -> Any:
    (tmp_path / "splits.json").write_text(json.dumps(SPLITS), encoding="utf-8")
    config = {
        "experiment": {"name": "r", "output_dir": "runs"},
        "tasks": {"split_file": "splits.json", "split": "val"},
        "environment": {"base_url": "http://127.0.0.1:9", "persona": None},
        "model": {"name": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": None},
    }
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return build_plan(load_config(tmp_path / "eval.yaml"))


def _edit(store: RunStore, change: Any) -> None:
    manifest = json.loads(store.manifest_path.read_text(encoding="utf-8"))
    change(manifest)
    store.manifest_path.write_text(json.dumps(manifest), encoding="utf-8")


def test_an_untouched_manifest_resumes(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    store = RunStore(plan.run_dir)
    store.write_manifest(plan.semantic, plan.fingerprint, {})
    assert store.check_resumable(plan.semantic, plan.fingerprint, resume=True) == "resume"


def test_a_raised_max_steps_is_refused_and_named(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    store = RunStore(plan.run_dir)
    store.write_manifest(plan.semantic, plan.fingerprint, {})
    assert plan.semantic["runtime"]["max_steps"] == 30
    _edit(store, lambda m: m["plan"]["runtime"].update(max_steps=99))
    with pytest.raises(FingerprintMismatch) as caught:
        store.check_resumable(plan.semantic, plan.fingerprint, resume=True)
    message = str(caught.value)
    assert caught.value.code == "fingerprint-mismatch" and "\n" not in message
    assert message.startswith(f"{store.manifest_path}: edited by hand")
    assert "edited: runtime.max_steps (30 -> 99)" in message


def test_a_zeroed_fingerprint_is_refused(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    store = RunStore(plan.run_dir)
    store.write_manifest(plan.semantic, plan.fingerprint, {})
    _edit(store, lambda m: m.update(plan_fingerprint="0" * 64))
    with pytest.raises(FingerprintMismatch, match="its plan_fingerprint was changed"):
        store.check_resumable(plan.semantic, plan.fingerprint, resume=True)


def test_both_edited_together_is_still_refused(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    store = RunStore(plan.run_dir)
    store.write_manifest(plan.semantic, plan.fingerprint, {})

    def both(manifest: dict[str, Any]) -> None:
        manifest["plan"]["runtime"]["max_steps"] = 99
        manifest["plan_fingerprint"] = "0" * 64

    _edit(store, both)
    with pytest.raises(FingerprintMismatch, match="does not hash to its plan_fingerprint"):
        store.check_resumable(plan.semantic, plan.fingerprint, resume=True)
