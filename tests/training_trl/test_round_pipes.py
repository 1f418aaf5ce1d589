"""Issue 31 acceptance 2 (`make test-training`): TRL's GRPOTrainer on CPU as the Dagster Pipes process of a round.

``round_inputs`` (preflight) → ``round_training`` (``trl_pipes_trainer.py`` through ``PipesSubprocessClient``) →
``round_triage``, materialized on a real Dagster instance: the trainer's per-step metrics and its two checkpoints
(HF folders written by the trainer) are in the materialization's metadata and the registry; the round's triage
documents come from the same rollouts. Wall time is printed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import yaml
from testkit.roundkit import add_training_section

from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.registry import read_registry
from shopsimrl_dagster.settings import load_pipeline_settings

TRAINER = Path(__file__).resolve().parent / "trl_pipes_trainer.py"
REPO = Path(__file__).resolve().parents[2]
ROUND = "round-trl"


def test_trl_trains_as_the_pipes_process_of_a_round(tmp_path: Path, sandbox: Any) -> None:
    started = time.perf_counter()
    base = yaml.safe_load((REPO / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
    base.update(runs_root=str(tmp_path / "runs"), checkpoint_registry=str(tmp_path / "registry"),
                split_file=str(sandbox.split_file))
    base["environment"]["base_url"] = sandbox.env_url
    base["inference"].update(base_url=sandbox.policy_url, name=sandbox.served_model)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    # the preflight probes the evaluation's model (the sandbox policy, exact tokens); the trainer samples its own
    # weights in process (TRLRollout + TransformersBackend)
    add_training_section(path, sandbox, train_tasks=4, group_size=4)
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    evaluation = Path(document["training"]["evaluation"])
    played = yaml.safe_load(evaluation.read_text(encoding="utf-8"))
    played.update(runtime={"max_steps": 3}, prompt={"language": "en"})  # as test_grpo_cpu.py: short episodes
    evaluation.write_text(yaml.safe_dump(played, allow_unicode=True), encoding="utf-8")
    document["training"]["command"] = ["{python}", str(TRAINER), "--steps", "2"]
    document["training"]["env"] = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    settings = load_pipeline_settings(path)
    location = build_definitions(settings)
    keys = {"round_inputs", "round_training", "round_triage"}
    assets = [a for a in location.assets if isinstance(a, dg.AssetsDefinition)
              and {k.to_user_string() for k in a.keys} & keys]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("training_rounds", [ROUND])
        result = dg.materialize(assets, partition_key=ROUND, instance=instance, resources=location.resources,
                                raise_on_error=False)
        messages = [r.user_message for r in instance.all_logs(result.run_id)]
    assert result.success, [m for m in messages if "error" in m.lower() or "fail" in m.lower()][-5:]
    meta = {e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()}
    training = meta["round_training"]
    assert training["trainer"].startswith(sys.executable) and training["global_step"] == 2
    assert training["steps_reported"] == 2 and training["checkpoints"] == [f"{ROUND}-step-000001",
                                                                           f"{ROUND}-step-000002"]
    assert all(s["tokens_per_s"] > 0 and 0 <= s["frontier_share"] <= 1 for s in training["progress"]["steps"])
    assert sum(m.startswith("trainer step ") for m in messages) == 2  # the trainer's log lines, through Pipes
    entries = read_registry(settings.checkpoint_registry)
    assert [(e.checkpoint_id, e.step) for e in entries] == [(f"{ROUND}-step-000001", 1), (f"{ROUND}-step-000002", 2)]
    for entry in entries:
        assert entry.weights and any(Path(entry.weights).glob("*.safetensors")), entry
    assert meta["round_triage"]["groups"] == 2 and sum(meta["round_triage"]["classifications"].values()) == 2
    print(f"\ntest-training: TRL round through Dagster Pipes in {time.perf_counter() - started:.0f} s; steps "
          f"{training['progress']['steps']}")
