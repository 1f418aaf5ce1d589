"""The Trace2Skill YAML (runtime-semantics §18.1): blocks, defaults, one line per problem.

```yaml
experiment: {traces: runs/train/ckpt/traces.jsonl, output_dir: runs/train/ckpt/trace2skill}
environment: {base_url: http://127.0.0.1:5700}
analyst_model: {name: shopsim-analyst, base_url: http://127.0.0.1:5900/v1, api_key_env: null}
```

Relative paths resolve against the YAML's folder. The API key is only ever read from the
environment variable named by ``api_key_env``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.adapters._auth import EndpointAuth
from shopsimrl_core.runs.config._config import _UniqueKeyLoader, read_text_input
from shopsimrl_core.runs.config._config_sections import _Section
from shopsimrl_core.skills.trace2skill._pipeline import Trace2SkillConfig
from shopsimrl_core.skills.trace2skill._structured import AnalystModel

__all__ = ["load_trace2skill_config", "trace2skill_config_from_mapping"]


class _Experiment(_Section):
    traces: str = Field(min_length=1)
    output_dir: str = Field(min_length=1)
    expected_trajectories: int | None = Field(default=None, ge=1)
    seed: int = 20260831
    concurrency: int = Field(default=4, ge=1)
    resume: bool = True


class _Environment(_Section):
    base_url: str = "http://127.0.0.1:5700"
    timeout: float = Field(default=30.0, gt=0)
    persona: bool = True


class _Analysis(_Section):
    max_failure_steps: int = Field(default=12, ge=1)
    max_cards_per_trajectory: int = Field(default=2, ge=0)


class _Compilation(_Section):
    batch_size: int = Field(default=40, ge=1)
    validation_dimension_cap: int = Field(default=16, ge=1, le=16)
    active_skill_budget: int = Field(default=10, ge=1)


class _Model(_Section):
    name: str = Field(min_length=1)
    base_url: str = Field(min_length=1)
    identity: str | None = Field(default=None, min_length=1)  # stands for base_url in cache keys
    api_key_env: str | None = Field(default="OPENAI_API_KEY", min_length=1)
    temperature: float = Field(default=0.0, ge=0, le=2)
    max_tokens: int = Field(default=4096, ge=1)

    def auth(self) -> EndpointAuth:
        """How requests to the analyst endpoint authenticate (as ``ModelConfig.auth``)."""
        return EndpointAuth(self.api_key_env)
    timeout: float = Field(default=300.0, gt=0)
    max_retries: int = Field(default=3, ge=1)
    retry_backoff_seconds: float = Field(default=1.0, ge=0)
    tool_choice: str = Field(default="required", min_length=1)


class _File(_Section):
    experiment: _Experiment
    environment: _Environment = Field(default_factory=lambda: _Environment())
    analysis: _Analysis = Field(default_factory=lambda: _Analysis())
    compilation: _Compilation = Field(default_factory=lambda: _Compilation())
    analyst_model: _Model
    compiler_model: _Model | None = None


def _problems(label: str, exc: ValidationError) -> ConfigError:
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"])
        if error["type"] == "extra_forbidden":
            section: Any = _File
            for part in error["loc"][:-1]:
                section = section.model_fields[str(part)].annotation
                section = next((a for a in getattr(section, "__args__", ()) if a is not type(None)), section)
            valid = ", ".join(getattr(section, "model_fields", {}))
            lines.append(f"{label}: {where}: unknown key; valid keys: {valid}")
        elif error["type"] == "missing":
            lines.append(f"{label}: {where}: required key is missing; add it")
        else:
            lines.append(f"{label}: {where}: {error['msg']} (got {error.get('input')!r}); fix the value in the YAML")
    return ConfigError("\n".join(lines), code="config-invalid", problems=lines)


def _model(block: _Model) -> AnalystModel:
    return AnalystModel(base_url=block.base_url, model=block.name, auth=block.auth(),
                        timeout=block.timeout, max_tokens=block.max_tokens, temperature=block.temperature,
                        tool_choice=block.tool_choice, max_retries=block.max_retries,
                        retry_backoff_seconds=block.retry_backoff_seconds, identity_name=block.identity)


def trace2skill_config_from_mapping(data: Any, *, base_dir: Path, label: str = "<trace2skill>") -> Trace2SkillConfig:
    """Validate a parsed Trace2Skill mapping and build the config (paths resolved against *base_dir*).

    Raises:
        ConfigError (``config-invalid``): unknown keys, wrong types or ranges — one line per problem.
    """
    try:
        parsed = _File.model_validate(data)
    except ValidationError as exc:
        raise _problems(label, exc) from None
    exp, comp = parsed.experiment, parsed.compilation
    if comp.active_skill_budget > comp.validation_dimension_cap:
        raise ConfigError(f"{label}: compilation.active_skill_budget ({comp.active_skill_budget}) must be <= "
                          f"compilation.validation_dimension_cap ({comp.validation_dimension_cap})",
                          code="config-invalid")
    analyst = _model(parsed.analyst_model)
    return Trace2SkillConfig(
        traces=(base_dir / exp.traces).resolve(), output_dir=(base_dir / exp.output_dir).resolve(), analyst=analyst,
        compiler=_model(parsed.compiler_model) if parsed.compiler_model else None,
        environment_url=parsed.environment.base_url, environment_timeout=parsed.environment.timeout,
        persona=parsed.environment.persona, expected_trajectories=exp.expected_trajectories, seed=exp.seed,
        concurrency=exp.concurrency, resume=exp.resume, max_failure_steps=parsed.analysis.max_failure_steps,
        max_cards_per_trajectory=parsed.analysis.max_cards_per_trajectory, batch_size=comp.batch_size,
        validation_dimension_cap=comp.validation_dimension_cap, active_skill_budget=comp.active_skill_budget)


def load_trace2skill_config(path: str | Path) -> Trace2SkillConfig:
    """Load a Trace2Skill YAML; nothing is read from the network and nothing is written.

    Raises:
        ConfigError: unreadable or invalid YAML, unknown keys, wrong types or ranges (file and field named).
    """
    source = Path(path).expanduser().resolve()
    text = read_text_input(source, "Trace2Skill config", "check the path")
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}: not valid YAML{where}; fix the syntax", code="config-invalid") from None
    return trace2skill_config_from_mapping(data, base_dir=source.parent, label=str(source))
