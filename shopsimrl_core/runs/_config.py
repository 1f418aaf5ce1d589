"""Evaluation config: YAML → validated pydantic models (runtime spec §3).

The schema is the earlier harness's (sections experiment / tasks / environment / runtime / prompt /
skills / model, same key names and defaults), extended only by additive keys. Unlike the earlier
harness, unknown keys, wrong types and contradictory values are errors: ``load_config`` reports
every problem on its own line, ``<file>: <dotted.key>: <expectation> (got <input>); <fix>``.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator

from shopsimrl_core._errors import ConfigError

__all__ = [
    "EvalConfig",
    "ExperimentConfig",
    "TasksConfig",
    "EnvironmentConfig",
    "RuntimeConfig",
    "PromptConfig",
    "SkillsConfig",
    "ModelConfig",
    "load_config",
    "config_from_mapping",
    "sanitize_name",
]

_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._-]+")


def sanitize_name(raw: str) -> str:
    """Sanitise an experiment name or model id (§3.2): trim, runs of unsafe characters → ``-``,
    strip leading/trailing ``-`` and ``.``. Returns ``""`` when nothing is left (callers reject it)."""
    return _UNSAFE_RUN.sub("-", raw.strip()).strip("-.")


def _check_http_transport(value: str, base_url: str | None) -> str:
    if value == "streams" and isinstance(base_url, str) and not base_url.lower().startswith("http://"):
        raise ValueError(f"'streams' supports only http:// base URLs (base_url is {base_url!r}); use auto or httpx")
    return value


class _Section(BaseModel):
    # strict: "30" is not an int and true is not a number; ints are still accepted for floats
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=False)


class ExperimentConfig(_Section):
    """Where the run goes and how it is executed."""

    name: str | None = None
    """Run name; default the YAML file's stem. Sanitised; the run directory is ``output_dir/name``."""
    output_dir: str = "../runs"
    """Folder holding run directories; relative to the YAML file's folder."""
    dotenv: str | None = None
    """Optional ``.env`` file (relative to the YAML); never overrides variables already set."""
    seed: int = 20260828
    """Experiment seed: task sampling and episode seeds derive from it."""
    concurrency: int = Field(1, ge=1)
    """Episodes in flight at once. Execution setting: not fingerprinted."""
    resume: bool = True
    """true: continue an existing run directory of the same plan; false: refuse a non-empty one."""
    max_episode_retries: int = Field(2, ge=0)
    """Additive (§22.3): failed attempts retried per episode **per invocation** (attempts = retries + 1)."""
    max_attempts: int | None = Field(None, ge=1)
    """Additive shorthand: attempts per episode per invocation (= max_episode_retries + 1)."""
    max_total_attempts: int | None = Field(None, ge=1)
    """Additive (§22.3): optional lifetime cap of trace lines per episode in the run directory (legacy: 3)."""
    test_access_ledger: str | None = None
    """Additive (§22.6): path of the append-only test-access ledger; default ``<output_dir>/test-access.jsonl``."""

    @model_validator(mode="after")
    def _attempts_agree(self) -> "ExperimentConfig":
        if self.max_attempts is not None and "max_episode_retries" in self.model_fields_set:
            if self.max_attempts != self.max_episode_retries + 1:
                raise ValueError(
                    f"experiment.max_attempts ({self.max_attempts}) contradicts experiment.max_episode_retries "
                    f"({self.max_episode_retries}); attempts = retries + 1 — set only one of them"
                )
        return self

    @property
    def attempts_per_invocation(self) -> int:
        """Attempts per episode allowed in one invocation."""
        return self.max_attempts if self.max_attempts is not None else self.max_episode_retries + 1


class TasksConfig(_Section):
    """Which tasks to run."""

    split_file: str
    """Split JSON file (§4.1); relative to the YAML file's folder."""
    split: str = Field(min_length=1)
    """Split name inside the file."""
    sample_size: int | None = Field(None, ge=1)
    """Random sample of this many tasks (CPython ``Random(seed).sample``), or null for all."""
    repeats: int = Field(1, ge=1)
    """Samples per task (``sample_id = 0 … repeats-1``)."""


class EnvironmentConfig(_Section):
    """The ShopSimulator-compatible environment."""

    base_url: str = Field("http://127.0.0.1:5700", min_length=1)
    """Environment server URL."""
    timeout: float = Field(30.0, gt=0)
    """Seconds per environment call (reset waits for a slot without a read timeout)."""
    persona: bool | None = None
    """Persona mode; null takes the split's flag. Both set and different is an error."""
    max_connections: int = Field(64, ge=1)
    """Additive: pooled HTTP connections to the environment. Execution setting."""
    http_transport: Literal["auto", "httpx", "streams"] = "auto"
    """Additive: HTTP transport (``auto``: asyncio streams for http://, httpx otherwise). Execution setting."""

    @field_validator("http_transport")
    @classmethod
    def _transport_fits_url(cls, value: str, info: ValidationInfo) -> str:
        return _check_http_transport(value, info.data.get("base_url"))


class RuntimeConfig(_Section):
    """Episode runtime limits."""

    max_steps: int = Field(30, ge=1)
    """Model turns per episode, repair and policy-failure turns included."""


class PromptConfig(_Section):
    """System prompt source: built-in by default."""

    system_prompt: str | None = None
    """Inline system prompt."""
    system_prompt_file: str | None = None
    """System prompt file (UTF-8), relative to the YAML file's folder."""
    language: Literal["zh", "en"] = "zh"
    """Additive (§22.11): language of the built-in prompt and protocol texts; ``en`` has its own identities."""
    prompt_texts_file: str | None = None
    """Additive: JSON file of protocol texts (tool descriptions, repair text…), e.g. the legacy ones."""

    @model_validator(mode="after")
    def _one_source(self) -> "PromptConfig":
        if self.system_prompt is not None and self.system_prompt_file is not None:
            raise ValueError("set at most one of prompt.system_prompt and prompt.system_prompt_file")
        return self


class SkillsConfig(_Section):
    """Skills injected into the system prompt."""

    path: str | None = None
    """SkillBank JSON (``shopsimrl-skillbank-v1``), or null for a bare run."""
    max_skills: int | None = Field(None, ge=1)
    """Inject at most this many selected skills; null = all."""


class ModelConfig(_Section):
    """The OpenAI-compatible model endpoint and sampling settings."""

    id: str | None = None
    """Model id used in the plan and run naming; default ``name``. Sanitised."""
    name: str = Field(min_length=1)
    """Served model name, sent as ``model`` in each request."""
    base_url: str = Field(min_length=1)
    """OpenAI base URL, e.g. ``http://127.0.0.1:30000/v1``."""
    api_key_env: str | None = Field("OPENAI_API_KEY", min_length=1)
    """Environment variable holding the API key; null = no auth header. Keys never live in files."""
    checkpoint_id: str | None = Field(None, min_length=1)
    """Provenance label of the weights (never sent)."""
    temperature: float = Field(0.0, ge=0, le=2)
    """Sampling temperature."""
    top_p: float | None = Field(None, gt=0, le=1)
    """Nucleus sampling; null leaves it out of the request."""
    max_tokens: int = Field(512, ge=1)
    """Tokens per call, thinking plus the tool call."""
    timeout: float = Field(180.0, gt=0)
    """Seconds per HTTP attempt. Execution setting (not fingerprinted)."""
    max_retries: int = Field(5, ge=1)
    """Total HTTP attempts per call. Execution setting."""
    retry_backoff_seconds: float = Field(1.0, ge=0)
    """Backoff base in seconds. Execution setting."""
    trust_env: bool = True
    """Honour proxy environment variables."""
    stream: bool = False
    """Use SSE streaming. Not part of any identity."""
    send_seed: bool = True
    """Send the per-call seed."""
    seed_mod_2_32: bool = False
    """Send per-call seeds reduced mod 2**32 (servers taking 32-bit seeds only). Semantic when true (§22.10)."""
    tool_choice: str = Field("auto", min_length=1)
    """``tool_choice`` sent with the tools."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Extra request keys merged at the top level of the body (e.g. ``enable_thinking``)."""
    max_connections: int = Field(64, ge=1)
    """Additive: pooled HTTP connections to the endpoint. Execution setting."""
    http_transport: Literal["auto", "httpx", "streams"] = "auto"
    """Additive: HTTP transport (``auto``: asyncio streams for http:// without a proxy, httpx otherwise). Execution setting."""

    @field_validator("http_transport")
    @classmethod
    def _transport_fits_url(cls, value: str, info: ValidationInfo) -> str:
        return _check_http_transport(value, info.data.get("base_url"))


class EvalConfig(_Section):
    """One evaluation: one model checkpoint × one task split.

    Paths held here are absolute after ``load_config`` (resolved against the YAML's folder) and
    names are sanitised.
    """

    experiment: ExperimentConfig = Field(default_factory=ExperimentConfig)
    tasks: TasksConfig
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    model: ModelConfig

    _source: Path | None = PrivateAttr(default=None)

    @property
    def source_path(self) -> Path | None:
        """The YAML file this config came from, if any."""
        return self._source

    @property
    def source_label(self) -> str:
        """How error messages name this config."""
        return str(self._source) if self._source is not None else "<config>"

    @property
    def output_dir_path(self) -> Path:
        """Absolute folder holding run directories."""
        return Path(self.experiment.output_dir)

    @property
    def run_dir(self) -> Path:
        """The run directory ``output_dir/experiment.name``."""
        assert self.experiment.name is not None
        return Path(self.experiment.output_dir) / self.experiment.name

    @property
    def split_file_path(self) -> Path:
        """Absolute split file path."""
        return Path(self.tasks.split_file)

    @property
    def dotenv_path(self) -> Path | None:
        """Absolute dotenv path, or None."""
        return None if self.experiment.dotenv is None else Path(self.experiment.dotenv)

    @property
    def system_prompt_file_path(self) -> Path | None:
        """Absolute system prompt file path, or None."""
        return None if self.prompt.system_prompt_file is None else Path(self.prompt.system_prompt_file)

    @property
    def skills_path(self) -> Path | None:
        """Absolute SkillBank path, or None for a bare run."""
        return None if self.skills.path is None else Path(self.skills.path)

    @property
    def test_access_ledger_path(self) -> Path:
        """Where test-split runs are recorded (§22.6)."""
        if self.experiment.test_access_ledger is not None:
            return Path(self.experiment.test_access_ledger)
        return Path(self.experiment.output_dir) / "test-access.jsonl"

    def with_overrides(self, overrides: dict[str, Any]) -> "EvalConfig":
        """A new config with *overrides* (``{section: {key: value}}``) merged in and validated again.

        Relative paths in *overrides* resolve against the original YAML's folder. Used by the
        pipeline to point one suite config at a checkpoint (name, output folder, checkpoint id).

        Raises:
            ConfigError: the merged config is invalid (same messages as ``load_config``).
        """
        data = self.model_dump(exclude_unset=True)
        for section, values in overrides.items():
            if isinstance(values, dict) and isinstance(data.get(section), dict):
                data[section] = {**data[section], **values}
            else:
                data[section] = values
        base_dir = self._source.parent if self._source is not None else Path.cwd()
        return config_from_mapping(data, base_dir=base_dir, source=self._source)

    @property
    def model_id(self) -> str:
        """Sanitised model id (``model.id`` or ``model.name``)."""
        assert self.model.id is not None
        return self.model.id


# --------------------------------------------------------------------------------------------
# error rendering


_SECTIONS: dict[str, type[BaseModel]] = {
    "experiment": ExperimentConfig,
    "tasks": TasksConfig,
    "environment": EnvironmentConfig,
    "runtime": RuntimeConfig,
    "prompt": PromptConfig,
    "skills": SkillsConfig,
    "model": ModelConfig,
}


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _num(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _expectation(error: dict[str, Any]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    table = {
        "int_type": "must be an int",
        "int_from_float": "must be an int",
        "float_type": "must be a number",
        "bool_type": "must be true or false",
        "string_type": "must be a string",
        "dict_type": "must be a mapping",
        "model_type": "must be a mapping",
        "model_attributes_type": "must be a mapping",
        "missing": "required key is missing",
    }
    if kind in table:
        return table[kind]
    if kind == "greater_than_equal":
        return f"must be >= {_num(ctx.get('ge'))}"
    if kind == "greater_than":
        return f"must be > {_num(ctx.get('gt'))}"
    if kind == "less_than_equal":
        return f"must be <= {_num(ctx.get('le'))}"
    if kind == "less_than":
        return f"must be < {_num(ctx.get('lt'))}"
    if kind == "string_too_short":
        return "must be a non-empty string"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    if kind == "value_error":
        return str(error.get("msg", "")).removeprefix("Value error, ")
    return str(error.get("msg", kind)).lower()


def _valid_keys(loc: tuple[Any, ...]) -> tuple[str, list[str]]:
    """Return (parent dotted path, valid keys) for an unknown key at *loc*."""
    if len(loc) == 1:
        return "", list(EvalConfig.model_fields)
    section = _SECTIONS.get(str(loc[0]))
    return str(loc[0]), list(section.model_fields) if section else []


def _render(label: str, error: dict[str, Any]) -> str:
    loc = tuple(error.get("loc", ()))
    dotted = ".".join(str(part) for part in loc) or "(top level)"
    if error["type"] == "extra_forbidden":
        _, valid = _valid_keys(loc)
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        if loc == ("models",):
            return f"{label}: models: a top-level models list is not supported; use exactly one model mapping (one YAML per checkpoint)"
        return f"{label}: {dotted}: unknown key (got {_show(error.get('input'))}); {hint}valid keys: {', '.join(valid)}"
    expectation = _expectation(error)
    if error["type"] == "missing":
        return f"{label}: {dotted}: {expectation}; add it to the YAML"
    if error["type"] == "value_error":
        return f"{label}: {dotted}: {expectation}"
    return f"{label}: {dotted}: {expectation} (got {_show(error.get('input'))}); fix the value in the YAML"


def _validation_to_config_error(label: str, exc: ValidationError) -> ConfigError:
    lines = [_render(label, err) for err in exc.errors(include_url=False)]
    return ConfigError("\n".join(lines), code="config-invalid", problems=lines)


# --------------------------------------------------------------------------------------------
# loading


def _resolve(base_dir: Path, value: str | None) -> str | None:
    if value is None:
        return None
    path = Path(value).expanduser()
    return str((path if path.is_absolute() else base_dir / path).resolve())


def config_from_mapping(data: Any, *, base_dir: Path, source: Path | None = None, default_name: str | None = None) -> EvalConfig:
    """Validate a parsed config mapping and normalise it (paths absolute, names sanitised).

    Raises:
        ConfigError: one line per problem, naming the file, the dotted key and the fix.
    """
    label = str(source) if source is not None else "<config>"
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: (top level): must be a mapping of sections (got {_show(data)}); see docs/config.md")
    try:
        config = EvalConfig.model_validate(data)
    except ValidationError as exc:
        raise _validation_to_config_error(label, exc) from None

    problems: list[str] = []
    exp = config.experiment
    raw_name = exp.name if exp.name is not None else default_name
    if raw_name is None:
        problems.append(f"{label}: experiment.name: required when the config has no file name; add it to the YAML")
        name = ""
    else:
        name = sanitize_name(raw_name)
        if not name:
            problems.append(f"{label}: experiment.name: must contain at least one of [A-Za-z0-9._-] (got {_show(raw_name)}); pick another name")
    raw_id = config.model.id if config.model.id is not None else config.model.name
    model_id = sanitize_name(raw_id)
    if not model_id:
        problems.append(f"{label}: model.id: must contain at least one of [A-Za-z0-9._-] (got {_show(raw_id)}); set model.id")
    if problems:
        raise ConfigError("\n".join(problems), code="config-invalid", problems=problems)

    exp.name = name
    exp.output_dir = _resolve(base_dir, exp.output_dir) or ""
    exp.dotenv = _resolve(base_dir, exp.dotenv)
    exp.test_access_ledger = _resolve(base_dir, exp.test_access_ledger)
    config.tasks.split_file = _resolve(base_dir, config.tasks.split_file) or ""
    config.prompt.system_prompt_file = _resolve(base_dir, config.prompt.system_prompt_file)
    config.prompt.prompt_texts_file = _resolve(base_dir, config.prompt.prompt_texts_file)
    config.skills.path = _resolve(base_dir, config.skills.path)
    config.model.id = model_id
    config._source = source

    if exp.dotenv is not None and not Path(exp.dotenv).is_file():
        raise ConfigError(f"{label}: experiment.dotenv: file not found (got {_show(exp.dotenv)}); create it or set experiment.dotenv: null", code="dotenv-missing")
    for key, path in (("prompt.system_prompt_file", config.prompt.system_prompt_file), ("prompt.prompt_texts_file", config.prompt.prompt_texts_file), ("skills.path", config.skills.path), ("tasks.split_file", config.tasks.split_file)):
        if path is not None and not Path(path).is_file():
            problems.append(f"{label}: {key}: file not found (got {_show(path)}); fix the path (relative paths start at the YAML's folder)")
    if problems:
        raise ConfigError("\n".join(problems), code="config-invalid", problems=problems)
    return config


def load_config(path: str | Path) -> EvalConfig:
    """Load an evaluation YAML.

    Promises: the result has absolute paths (resolved against the YAML's folder), a sanitised
    ``experiment.name`` (default: the file stem) and ``model.id`` (default: ``model.name``), and
    referenced files exist. Nothing is read from the network and nothing is written.

    Raises:
        ConfigError: unreadable YAML, unknown keys (valid keys listed), wrong types, out-of-range
            or contradictory values — one line per problem.
    """
    source = Path(path).expanduser().resolve()
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found; check the path", code="config-invalid") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source}: not valid YAML{where}: {problem}; fix the syntax", code="config-invalid") from None
    if data is None:
        raise ConfigError(f"{source}: the file is empty; it needs at least tasks and model sections (see docs/config.md)", code="config-invalid")
    return config_from_mapping(data, base_dir=source.parent, source=source, default_name=source.stem)
