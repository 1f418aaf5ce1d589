"""The training config: which evaluation config a trainer plays, with what backend, groups and curriculum.

A training YAML names the evaluation YAML whose runtime it trains with (environment, prompt, persona, split,
``runtime.max_steps``) — the same file an evaluation of the round's checkpoints reads — and adds what only
training has::

    evaluation: ../examples/sandbox-train.yaml   # relative to this file
    out_dir: runs/training/round-001             # traces.jsonl, samples.jsonl, triage/, leases.jsonl
    group_size: 8                                # GRPO samples per prompt
    diagnostic_retry: true                       # one retry with every active skill for all-failed groups
    adapter: slime                               # slime | trl | verifiers | null (recorded in each training block)
    sampling: {temperature: 1.0, top_p: 1.0, top_k: null, max_tokens: 512}
    backend:
      kind: vllm-chat                            # vllm-chat | sglang-generate | transformers
      base_url: null                             # default: the evaluation's model.base_url (vllm-chat: …/v1)
      model: null                                # default: the evaluation's model.name
      tokenizer: null                            # a tokenizer folder (sglang-generate, transformers)
      gguf_file: null                            # a GGUF file inside it, loaded through transformers
    curriculum: null                             # the round's curriculum.json
    skillbank: null                              # the SkillBank the curriculum was built from (preflight compares)
    task_data: null                              # export_slime_tasks output (preflight checks coverage)

Every key is documented in docs/config.md#training; a bad value is one line naming the file and the key.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.training._tokens import SamplingSpec

__all__ = ["TrainingConfig", "BackendConfig", "SamplingConfig", "load_training_config"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SamplingConfig(_Strict):
    """``sampling``: what the policy samples with (exact tokens refuse truncation)."""

    temperature: float = Field(default=1.0, gt=0, le=5)
    """Softmax temperature (> 0)."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Must stay 1 with exact tokens (refused otherwise, in one line)."""
    top_k: int | None = None
    """Must stay off (null, 0 or -1) with exact tokens."""
    max_tokens: int = Field(default=512, ge=1)
    """Sampled tokens per model turn."""

    def spec(self) -> SamplingSpec:
        """The sampling as the token backends take it."""
        return SamplingSpec(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                            max_tokens=self.max_tokens)


class BackendConfig(_Strict):
    """``backend``: where exact tokens come from."""

    kind: Literal["vllm-chat", "sglang-generate", "transformers"] = "vllm-chat"
    """``vllm-chat`` (OpenAI chat + return_token_ids), ``sglang-generate`` (native /generate), ``transformers``."""
    base_url: str | None = None
    """Server URL; default the evaluation's ``model.base_url`` (vllm-chat: the ``…/v1`` URL; SGLang: its root)."""
    model: str | None = None
    """Served model name; default the evaluation's ``model.name``."""
    tokenizer: str | None = None
    """Tokenizer folder (required for sglang-generate and transformers), relative to this file."""
    gguf_file: str | None = None
    """A GGUF file name inside ``tokenizer`` to load through transformers' GGUF support."""


class TrainingConfig(_Strict):
    """A training YAML (module docstring)."""

    evaluation: str
    """The evaluation YAML whose runtime training plays (relative to this file)."""
    out_dir: str
    """Where traces, token samples, triage and the lease journal go (relative to this file)."""
    group_size: int = Field(default=8, ge=1, le=1024)
    """GRPO samples per prompt."""
    diagnostic_retry: bool = True
    """One retry with every active skill for groups whose samples were all scored and failed."""
    adapter: Literal["slime", "trl", "verifiers"] | None = None
    """The trainer adapter (recorded in each training block)."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    backend: BackendConfig = Field(default_factory=BackendConfig)
    curriculum: str | None = None
    """The round's frozen curriculum (``shopsimrl-skill-curriculum-v1``)."""
    skillbank: str | None = None
    """The SkillBank the curriculum was built from (the preflight compares them)."""
    task_data: str | None = None
    """The trainer's task lines (``export_slime_tasks``); the preflight checks every train id is there once."""

    source: str = Field(default="<memory>", exclude=True)
    base_dir: str = Field(default=".", exclude=True)

    def path(self, value: str | None) -> Path | None:
        """A path key resolved against the YAML's folder (None stays None)."""
        if value is None:
            return None
        path = Path(value).expanduser()
        return path if path.is_absolute() else (Path(self.base_dir) / path).resolve()


def _render(source: str, error: Any) -> str:
    loc = tuple(str(p) for p in error.get("loc", ()))
    dotted = ".".join(loc) or "(top level)"
    if error.get("type") == "extra_forbidden":
        model: type[BaseModel] = TrainingConfig
        if loc[:1] == ("sampling",):
            model = SamplingConfig
        elif loc[:1] == ("backend",):
            model = BackendConfig
        valid = [k for k in model.model_fields if k not in ("source", "base_dir")]
        close = difflib.get_close_matches(loc[-1], valid, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"{source}: {dotted}: unknown key; {hint}valid keys: {', '.join(valid)}"
    if error.get("type") == "missing":
        return f"{source}: {dotted}: required key is missing; add it (docs/config.md#training)"
    shown = repr(error.get("input"))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{source}: {dotted}: {error.get('msg', 'invalid')} (got {shown}); fix the value (docs/config.md#training)"


def load_training_config(path: str | Path) -> TrainingConfig:
    """Read a training YAML; paths stay as written (resolve them with :meth:`TrainingConfig.path`).

    Raises:
        ConfigError (``config-invalid``): unreadable or not YAML, not a mapping, an unknown key (valid keys
            listed), a wrong type or value — one line per problem; the evaluation YAML must exist.
    """
    from shopsimrl_core.runs.config._config import read_text_input

    source = Path(path).expanduser().resolve()
    text = read_text_input(source, "training config", "check the path")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}: not valid YAML{where}; fix the syntax", code="config-invalid") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a training config is a mapping with at least evaluation and out_dir "
                          "(docs/config.md#training)", code="config-invalid")
    try:
        config = TrainingConfig.model_validate({**data, "source": str(source), "base_dir": str(source.parent)})
    except ValidationError as exc:
        lines = [_render(str(source), e) for e in exc.errors(include_url=False)]
        raise ConfigError("\n".join(lines), code="config-invalid", problems=lines) from None
    evaluation = config.path(config.evaluation)
    if evaluation is None or not evaluation.is_file():
        raise ConfigError(f"{source}: evaluation: {config.evaluation!r} is not a file; name the evaluation YAML "
                          "the training plays (relative to this file)", code="config-invalid")
    return config
