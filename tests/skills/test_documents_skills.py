"""Every document the skills layer writes parses with its model and is re-written byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

from testkit.gatekit import EffectRunner, gate_setup, online_pool

from shopsimrl_core import document_for
from shopsimrl_core._hashing import dumps_pretty, write_json_atomic
from shopsimrl_core.skills._gate_a import GateAConfig, run_gate_a
from shopsimrl_core.skills._online_gate import OnlineGateConfig, run_online_gate


def _round_trips(folder: Path) -> list[str]:
    """Names of the versioned JSON documents under *folder*, after checking each round-trips."""
    seen = []
    for path in sorted(folder.rglob("*.json")):
        text = path.read_text(encoding="utf-8")
        value = json.loads(text)
        if value.get("schema_version") == "shopsimrl-persona-splits-v1" or path.parent.name == "bare":
            continue  # the split file is the runs layer's input; the bare run is a test fixture
        assert dumps_pretty(document_for(value, str(path)).to_json()) == text, path
        seen.append(f"{path.parent.name}/{path.name}")
    return seen


def test_gate_and_online_gate_outputs_round_trip(tmp_path: Path) -> None:
    bare_cfg, bare_run, draft_path = gate_setup(tmp_path)
    runner = EffectRunner({"chunk-000000000000": 0.3, "chunk-000000000001": -0.2})
    result = run_gate_a(GateAConfig(output_dir=tmp_path / "gate", experiment_config=bare_cfg, bare_run_dir=bare_run,
                                    draft_path=draft_path, bootstrap_samples=20), runner=runner)
    assert result.status == "complete"
    write_json_atomic(tmp_path / "pool.json", online_pool())
    online = run_online_gate(OnlineGateConfig(output_dir=tmp_path / "online", experiment_config=bare_cfg,
                                              bare_run_dir=bare_run, candidate_pool_path=tmp_path / "pool.json",
                                              bootstrap_samples=20), runner=EffectRunner({"cand-001": 0.2}))
    assert online.status == "complete"
    assert _round_trips(tmp_path) == [
        "draft/initial_skill_draft.json", "draft/initial_skillbank.json", "gate/contributions.json",
        "gate/gate_a_manifest.json", "gate/mask_assignments.json", "gate/selected_skillbank.json",
        "online/contributions.json", "online/mask_assignments.json", "online/online_gate_manifest.json",
        "online/selected_skillbank.json", f"{tmp_path.name}/pool.json",
    ]
