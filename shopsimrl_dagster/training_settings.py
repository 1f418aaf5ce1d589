"""The ``training`` section of the pipeline settings: how a training round starts its trainer.

The trainer is an external process run through Dagster Pipes (``round_training``, docs/pipeline.md,
"Training rounds"). Its command is a template, like the serving templates: each argument may hold the
placeholders of :data:`COMMAND_PLACEHOLDERS`, filled per round. Everything else the trainer needs comes
through Pipes extras (the same values, read with ``shopsimrl_pipes``).
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = ["COMMAND_PLACEHOLDERS", "TrainingSettings", "WandbSettings", "RoundGateSettings", "fill_training_command",
           "absolute_training_paths"]

#: what a ``training.command`` argument may name (docs/pipeline.md, "Training rounds")
COMMAND_PLACEHOLDERS = ("python", "round", "round_dir", "training_config", "out_dir", "checkpoint_dir",
                        "resume_from", "curriculum", "task_data", "registry")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WandbSettings(_Strict):
    """``training.wandb``: report each round to Weights & Biases (the optional ``[wandb]`` extra)."""

    project: str = Field(min_length=1)
    """The W&B project every round's run goes to."""
    entity: str | None = Field(default=None, min_length=1)
    """Team or user; null = the key's default entity."""
    mode: Literal["online", "offline"] = "online"
    """``offline`` writes run folders under ``dir`` only (``wandb sync`` uploads them later); ``WANDB_MODE`` wins."""
    dir: Path | None = None
    """Where W&B writes its run folders; null = ``<runs_root>/wandb``."""
    api_key_env: str = Field(default="WANDB_API_KEY", min_length=1)
    """The environment variable holding the API key (online mode); never a key in this file."""
    group: str | None = Field(default=None, min_length=1)
    """The W&B run group; null = the round id, so a round's eval curves sit beside its training curves."""


class RoundGateSettings(_Strict):
    """``training.gate``: what the online gate after a round plays (the round assets' ``RoundAssetConfig``)."""

    experiment_config: Path
    """The evaluation YAML of the gate's masked val rollouts (its model: the policy the gate measures)."""
    bare_run_dir: Path
    """A skill-free run of that YAML's val split the gate pairs with."""
    max_candidates: int = Field(default=6, ge=1)
    active_skill_budget: int = Field(default=10, ge=1)
    selection_rule: Literal["published", "above_noise"] = "published"


class TrainingSettings(_Strict):
    """``training``: the trainer of a round, run through Dagster Pipes."""

    evaluation: Path
    """The evaluation YAML of a train split the trainer plays (the training YAML's ``evaluation``)."""
    command: list[str] = Field(min_length=1)
    """The trainer's command template; each argument may hold ``{python}``, ``{round}``, ``{round_dir}``,
    ``{training_config}``, ``{out_dir}``, ``{checkpoint_dir}``, ``{resume_from}``, ``{curriculum}``,
    ``{task_data}`` and ``{registry}``."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables of the trainer (never secrets: those come from the environment)."""
    cwd: Path | None = None
    """The trainer's working folder; null = the settings file's folder."""
    pipes_client: Literal["subprocess", "k8s"] = "subprocess"
    """``subprocess``: ``PipesSubprocessClient`` on this machine; ``k8s``: ``PipesK8sClient`` (a pod,
    docs/scaling.md)."""
    k8s: dict[str, Any] = Field(default_factory=dict)
    """With ``pipes_client: k8s``: ``image`` (required), ``namespace``, ``resources`` (e.g. GPU requests)."""
    stop_timeout_s: float = Field(default=20.0, gt=0)
    """Seconds between SIGTERM to the trainer's process group (run terminated) and SIGKILL."""
    resume: bool = True
    """Re-materializing a round passes the round's last registered checkpoint as ``{resume_from}``."""
    group_size: int = Field(default=8, ge=1, le=1024)
    diagnostic_retry: bool = True
    adapter: Literal["slime", "trl", "verifiers"] | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)
    """The training YAML's ``sampling`` keys (docs/config.md#training)."""
    backend: dict[str, Any] = Field(default_factory=dict)
    """The training YAML's ``backend`` keys (docs/config.md#training)."""
    initial_skillbank: Path | None = None
    """The SkillBank of the first round (later rounds take the previous round's selected bank)."""
    initial_curriculum: Path | None = None
    """The frozen curriculum of the first round (``shopsimrl-skill-curriculum-v1``)."""
    gate: RoundGateSettings | None = None
    """The online gate after a round; null = the round stops after its online analysis."""
    wandb: WandbSettings | None = None
    """Report rounds to W&B; null (default) = nothing is imported or written."""

    @field_validator("command")
    @classmethod
    def _known_placeholders(cls, command: list[str]) -> list[str]:
        for index, argument in enumerate(command):
            try:
                names = [name for _, name, _, _ in string.Formatter().parse(argument) if name is not None]
            except ValueError as exc:
                raise ValueError(f"training.command[{index}]: {argument!r} is not a valid template ({exc}); "
                                 "write a literal brace as {{ or }}") from None
            for name in names:
                if name not in COMMAND_PLACEHOLDERS:
                    raise ValueError(f"training.command[{index}]: unknown placeholder {{{name}}} in {argument!r}; "
                                     f"known: {', '.join('{' + p + '}' for p in COMMAND_PLACEHOLDERS)}")
        return command

    @field_validator("sampling", "backend")
    @classmethod
    def _core_keys(cls, value: dict[str, Any], info: Any) -> dict[str, Any]:
        from shopsimrl_core.training._config import BackendConfig, SamplingConfig

        model: type[BaseModel] = SamplingConfig if info.field_name == "sampling" else BackendConfig
        try:
            model.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"training.{info.field_name}.{where}: {first['msg']} (got {first.get('input')!r}); "
                             "see docs/config.md#training") from None
        return value

    @field_validator("k8s")
    @classmethod
    def _k8s_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - {"image", "namespace", "resources", "base_pod_spec", "base_pod_meta"})
        if unknown:
            raise ValueError(f"training.k8s.{unknown[0]}: unknown key; valid keys: image, namespace, resources, "
                             "base_pod_spec, base_pod_meta")
        for key, kind, what in (("image", str, "a container image name"), ("namespace", str, "a namespace name"),
                                ("resources", dict, "a mapping (requests/limits)"),
                                ("base_pod_spec", dict, "a mapping (a pod spec)"),
                                ("base_pod_meta", dict, "a mapping (pod metadata)")):
            if key in value and not (isinstance(value[key], kind) and value[key]):
                raise ValueError(f"training.k8s.{key}: must be {what} (got {value[key]!r})")
        return value

    @model_validator(mode="after")
    def _k8s_image(self) -> TrainingSettings:
        if self.pipes_client == "k8s" and not self.k8s.get("image"):
            raise ValueError("training.k8s.image: required with pipes_client k8s (the trainer's container image)")
        return self


def fill_training_command(command: list[str], values: dict[str, str]) -> list[str]:
    """*command* with every placeholder replaced by *values* (a missing value fills as an empty string)."""
    return [re.sub(r"\{\{|\}\}|\{(\w+)\}",
                   lambda m: (values.get(m.group(1), "") if m.group(1) else m.group(0)[0]), argument)
            for argument in command]


def absolute_training_paths(training: Any, absolute: Any) -> None:
    """Make the path keys of a raw ``training`` mapping absolute with *absolute* (the settings loader's)."""
    if not isinstance(training, dict):
        return
    for key in ("evaluation", "cwd", "initial_skillbank", "initial_curriculum"):
        if isinstance(training.get(key), str):
            training[key] = absolute(training[key])
    for section, keys in (("gate", ("experiment_config", "bare_run_dir")), ("wandb", ("dir",))):
        body = training.get(section)
        if isinstance(body, dict):
            for key in keys:
                if isinstance(body.get(key), str):
                    body[key] = absolute(body[key])
