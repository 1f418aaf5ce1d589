"""The ``training`` section of the pipeline settings: every key's bad value is one line naming file and key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from shopsimrl_core import ConfigError
from shopsimrl_dagster.settings import load_pipeline_settings
from shopsimrl_dagster.training_settings import fill_training_command

GOOD = {"evaluation": "train.yaml", "command": ["{python}", "trainer.py", "--config", "{training_config}"]}

BAD: list[tuple[dict[str, Any], str]] = [
    ({"command": []}, "training.command: List should have at least 1 item"),
    ({"command": ["{python}", "t.py", "{rund}"]}, "training.command[2]: unknown placeholder {rund} in '{rund}'; "
                                                  "known: {python}, {round}"),
    ({"command": ["t.py", "{round"]}, "training.command[1]: '{round' is not a valid template"),
    ({"evaluation": None}, "training.evaluation: Input is not a valid path"),
    ({"pipes_client": "ssh"}, "training.pipes_client: Input should be 'subprocess' or 'k8s'"),
    ({"pipes_client": "k8s"}, "training.k8s.image: required with pipes_client k8s"),
    ({"k8s": {"image": "i", "gpus": 2}}, "training.k8s.gpus: unknown key; valid keys: image, namespace, resources"),
    ({"stop_timeout_s": 0}, "training.stop_timeout_s: Input should be greater than 0"),
    ({"group_size": 0}, "training.group_size: Input should be greater than or equal to 1"),
    ({"adapter": "ray"}, "training.adapter: Input should be 'slime', 'trl' or 'verifiers'"),
    ({"sampling": {"top_p": 2}}, "training.sampling.top_p: Input should be less than or equal to 1"),
    ({"sampling": {"temprature": 1}}, "training.sampling.temprature: Extra inputs are not permitted"),
    ({"backend": {"kind": "tgi"}}, "training.backend.kind: Input should be 'vllm-chat', 'sglang-generate' or "),
    ({"resume": "sometimes"}, "training.resume: Input should be a valid boolean"),
    ({"gate": {"experiment_config": "g.yaml"}}, "training.gate.bare_run_dir: Field required"),
    ({"gate": {"experiment_config": "g.yaml", "bare_run_dir": "b", "selection_rule": "best"}},
     "training.gate.selection_rule: Input should be 'published' or 'above_noise'"),
    ({"wandb": {}}, "training.wandb.project: Field required"),
    ({"wandb": {"project": "p", "mode": "dryrun"}}, "training.wandb.mode: Input should be 'online' or 'offline'"),
    ({"wandb": {"project": "p", "api_key": "secret"}}, "training.wandb.api_key: unknown key"),
    ({"trainer": "x"}, "training.trainer: unknown key; remove it or fix its spelling"),
    ({"env": {"HF_HOME": 5}}, "training.env.HF_HOME: Input should be a valid string"),
    ({"cwd": 5}, "training.cwd: Input is not a valid path"),
    ({"initial_skillbank": []}, "training.initial_skillbank: Input is not a valid path"),
    ({"initial_curriculum": {}}, "training.initial_curriculum: Input is not a valid path"),
    ({"diagnostic_retry": "maybe"}, "training.diagnostic_retry: Input should be a valid boolean"),
    ({"k8s": {"image": "i", "namespace": 5}}, "training.k8s.namespace: must be a namespace name (got 5)"),
    ({"k8s": {"image": "i", "resources": "8 gpus"}}, "training.k8s.resources: must be a mapping (requests/limits)"),
    ({"gate": {"experiment_config": "g.yaml", "bare_run_dir": "b", "max_candidates": 0}},
     "training.gate.max_candidates: Input should be greater than or equal to 1"),
    ({"gate": {"experiment_config": "g.yaml", "bare_run_dir": "b", "active_skill_budget": 0}},
     "training.gate.active_skill_budget: Input should be greater than or equal to 1"),
    ({"gate": {"bare_run_dir": "b"}}, "training.gate.experiment_config: Field required"),
    ({"wandb": {"project": ""}}, "training.wandb.project: String should have at least 1 character"),
    ({"wandb": {"project": "p", "entity": ""}}, "training.wandb.entity: String should have at least 1 character"),
    ({"wandb": {"project": "p", "dir": 5}}, "training.wandb.dir: Input is not a valid path"),
    ({"wandb": {"project": "p", "api_key_env": ""}}, "training.wandb.api_key_env: String should have at least 1"),
    ({"wandb": {"project": "p", "group": ""}}, "training.wandb.group: String should have at least 1 character"),
]


def _write(tmp_path: Path, training: dict[str, Any]) -> Path:
    document = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs" / "pipeline" /
                               "pipeline.yaml").read_text(encoding="utf-8"))
    document.update(runs_root=str(tmp_path / "runs"), checkpoint_registry=str(tmp_path / "registry"),
                    training={**GOOD, **training})
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


@pytest.mark.parametrize(("bad", "line"), BAD, ids=[next(iter(b)) + str(i) for i, (b, _) in enumerate(BAD)])
def test_a_bad_training_value_is_one_line_naming_the_file_and_the_key(tmp_path: Path, bad: dict[str, Any],
                                                                      line: str) -> None:
    path = _write(tmp_path, bad)
    with pytest.raises(ConfigError) as error:
        load_pipeline_settings(path)
    text = str(error.value)
    assert len(text.splitlines()) == 1, text
    assert text.startswith(f"{path}: ") and line in text, text
    assert "secret" not in text or "api_key" in line  # a value is shown only where it is the key's own


def test_paths_resolve_against_the_settings_file_and_placeholders_fill(tmp_path: Path) -> None:
    path = _write(tmp_path, {"cwd": "work", "initial_skillbank": "bank.json",
                             "gate": {"experiment_config": "g.yaml", "bare_run_dir": "bare"},
                             "wandb": {"project": "p", "dir": "wb"}})
    training = load_pipeline_settings(path).training
    assert training is not None and training.wandb is not None and training.gate is not None
    assert training.evaluation == tmp_path / "train.yaml" and training.cwd == tmp_path / "work"
    assert training.gate.bare_run_dir == tmp_path / "bare" and training.wandb.dir == tmp_path / "wb"
    assert fill_training_command(["{python}", "--x={round}", "{{literal}}", "{resume_from}"],
                                 {"python": "py", "round": "r-1"}) == ["py", "--x=r-1", "{literal}", ""]


def test_without_a_training_section_the_location_has_no_round_assets_and_never_imports_wandb(tmp_path: Path) -> None:
    import sys

    from shopsimrl_dagster.definitions import build_definitions

    document = yaml.safe_load(_write(tmp_path, {}).read_text(encoding="utf-8"))
    document.pop("training")
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(document), encoding="utf-8")
    was_imported = "wandb" in sys.modules
    graph = build_definitions(load_pipeline_settings(plain)).resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert not keys & {"round_inputs", "round_training", "round_wandb"}
    with_training = build_definitions(load_pipeline_settings(_write(tmp_path, {})))
    keys = {k.to_user_string() for k in with_training.resolve_asset_graph().get_all_asset_keys()}
    assert {"round_inputs", "round_training", "round_triage", "round_online_analysis"} <= keys
    assert "round_wandb" not in keys  # W&B only when training.wandb names a project
    assert ("wandb" in sys.modules) == was_imported
