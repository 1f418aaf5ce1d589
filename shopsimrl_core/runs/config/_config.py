"""Evaluation config: YAML → validated pydantic models (runtime-semantics §3).

The schema is the earlier harness's (sections experiment / tasks / environment / runtime / prompt /
skills / model, same key names and defaults), extended only by additive keys. Unlike the earlier
harness, unknown keys, wrong types and contradictory values are errors: ``load_config`` reports
every problem on its own line, ``<file>: <dotted.key>: <expectation> (got <input>); <fix>``.
The section models themselves live in ``runs/config/_config_sections.py``; this module holds ``EvalConfig``,
loading, path resolution and error rendering.
"""

# No ``from __future__ import annotations`` here: pydantic would then evaluate each field's annotation
# string when the class is created, about 45 % of importing these models (docs/benchmarks.md, start-up).

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, PrivateAttr, ValidationError, model_validator
from pydantic_core import ErrorDetails

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.runs.config._config_sections import (
    LAUNCHED_BASE_URL,
    EnvironmentConfig,
    ExperimentConfig,
    ModelConfig,
    PromptConfig,
    RuntimeConfig,
    ServeConfig,
    SkillsConfig,
    TasksConfig,
    _Section,
    sanitize_name,
)
from shopsimrl_core.runs.config._safe_yaml import UniqueKeyLoader, yaml_shape_problem

__all__ = [
    "EvalConfig",
    "load_config",
    "config_from_mapping",
]


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
    serve: ServeConfig | None = None
    """Additive: launch the checkpoint's inference server for the run (``shopsimrl_core.serving``)."""

    _source: Path | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _launched_base_url(cls, data: Any) -> Any:
        # A launched server's URL is known only once it runs: the config may omit model.base_url, which
        # then holds a placeholder that no request ever reaches (the launch replaces it).
        if isinstance(data, dict) and isinstance(data.get("serve"), dict) and isinstance(data.get("model"), dict):
            if "base_url" not in data["model"]:
                data = {**data, "model": {**data["model"], "base_url": LAUNCHED_BASE_URL}}
        return data

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
    "serve": ServeConfig,
}


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _num(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _expectation(error: ErrorDetails) -> str:
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


def _render(label: str, error: ErrorDetails) -> str:
    loc = tuple(error.get("loc", ()))
    dotted = ".".join(str(part) for part in loc) or "(top level)"
    if error["type"] == "extra_forbidden":
        import difflib  # only for a config with an unknown key: not on every run's start-up

        _, valid = _valid_keys(loc)
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        if loc == ("models",):
            return (
                f"{label}: models: a top-level models list is not supported; "
                "use exactly one model mapping (one YAML per checkpoint)"
            )
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


def _get(data: dict[str, Any], section: str, key: str) -> Any:
    value = data.get(section)
    return value.get(key) if isinstance(value, dict) else None


def _resolve_weights(base_dir: Path, value: str | None) -> str | None:
    # Weights are a local path, a hub id marked "hub:" ("hub:Qwen/Qwen3-4B") or a URI ("s3://…"): a
    # relative path resolves against the YAML's folder (whether it exists is checked by the plan).
    if value is None or "://" in value or value.startswith("hub:") or value.startswith("-"):
        return value
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    return str((base_dir / path).resolve())


def _resolve(base_dir: Path, value: str | None) -> str | None:
    if value is None:
        return None
    path = Path(value).expanduser()
    return str((path if path.is_absolute() else base_dir / path).resolve())


def config_from_mapping(
    data: Any, *, base_dir: Path, source: Path | None = None, default_name: str | None = None
) -> EvalConfig:
    """Validate a parsed config mapping and normalise it (paths absolute, names sanitised).

    Raises:
        ConfigError: one line per problem, naming the file, the dotted key and the fix.
    """
    label = str(source) if source is not None else "<config>"
    if not isinstance(data, dict):
        raise ConfigError(
            f"{label}: (top level): must be a mapping of sections (got {_show(data)}); see docs/config.md"
        )
    if not set(data) & set(EvalConfig.model_fields):
        # a split file, a pipeline YAML or a Dagster config given by mistake: one line, not one per key
        keys = ", ".join(map(str, list(data)[:6])) or "none"
        raise ConfigError(
            f"{label}: (top level): holds no section of an evaluation config (its keys: {keys}); is this the "
            "evaluation YAML? It needs at least tasks and model sections (see docs/config.md)"
        )
    urls = [
        key
        for key, value in (
            ("tasks.split_file", _get(data, "tasks", "split_file")),
            ("experiment.dotenv", _get(data, "experiment", "dotenv")),
            ("prompt.system_prompt_file", _get(data, "prompt", "system_prompt_file")),
            ("prompt.prompt_texts_file", _get(data, "prompt", "prompt_texts_file")),
            ("skills.path", _get(data, "skills", "path")),
        )
        if isinstance(value, str) and "://" in value
    ]
    if urls:
        lines = [f"{label}: {key}: must be a local file path, not a URL; download the file and name it" for key in urls]
        raise ConfigError("\n".join(lines), code="config-invalid", problems=lines)
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
            problems.append(
                f"{label}: experiment.name: must contain at least one of [A-Za-z0-9._-] (got {_show(raw_name)}); "
                "pick another name"
            )
    raw_id = config.model.id if config.model.id is not None else config.model.name
    model_id = sanitize_name(raw_id)
    if not model_id:
        problems.append(
            f"{label}: model.id: must contain at least one of [A-Za-z0-9._-] (got {_show(raw_id)}); set model.id"
        )
    if problems:
        raise ConfigError("\n".join(problems), code="config-invalid", problems=problems)

    exp.name = name
    exp.output_dir = _resolve(base_dir, exp.output_dir) or ""
    exp.dotenv = _resolve(base_dir, exp.dotenv)
    exp.test_access_ledger = _resolve(base_dir, exp.test_access_ledger)
    config.tasks.split_file = _resolve(base_dir, config.tasks.split_file) or ""
    config.environment.shared_runs_root = _resolve(base_dir, config.environment.shared_runs_root)
    config.prompt.system_prompt_file = _resolve(base_dir, config.prompt.system_prompt_file)
    config.prompt.prompt_texts_file = _resolve(base_dir, config.prompt.prompt_texts_file)
    config.skills.path = _resolve(base_dir, config.skills.path)
    config.model.id = model_id
    if config.serve is not None:
        config.serve.weights = _resolve_weights(base_dir, config.serve.weights) or ""
        config.serve.adapter = _resolve_weights(base_dir, config.serve.adapter)
        config.serve.state_dir = _resolve(base_dir, config.serve.state_dir)
    config._source = source

    if exp.dotenv is not None and Path(exp.dotenv).is_dir():
        # a folder is there, so "missing" would send the user looking for a file that is not the problem
        raise ConfigError(
            f"{label}: experiment.dotenv: is a directory, not a file (got "
            f"{json.dumps(exp.dotenv, ensure_ascii=False)}); name the .env file inside it, or set "
            "experiment.dotenv: null",
            code="config-invalid",
        )
    if exp.dotenv is not None and not Path(exp.dotenv).is_file():
        raise ConfigError(
            f"{label}: experiment.dotenv: file not found (got {json.dumps(exp.dotenv, ensure_ascii=False)}); create "
            "it or set experiment.dotenv: null",
            code="dotenv-missing",
        )
    _check_state_dir(label, config)
    for key, path in (
        ("prompt.system_prompt_file", config.prompt.system_prompt_file),
        ("prompt.prompt_texts_file", config.prompt.prompt_texts_file),
        ("skills.path", config.skills.path),
        ("tasks.split_file", config.tasks.split_file),
    ):
        if path is not None and Path(path).is_dir():
            problems.append(
                f"{label}: {key}: is a directory, not a file (got {json.dumps(path, ensure_ascii=False)}); name the "
                "file inside it"
            )
        elif path is not None and not Path(path).is_file():
            problems.append(
                f"{label}: {key}: file not found (got {json.dumps(path, ensure_ascii=False)}); fix the path "
                "(relative paths start at the YAML's folder)"
            )
    if problems:
        raise ConfigError("\n".join(problems), code="config-invalid", problems=problems)
    return config


def _check_state_dir(label: str, config: EvalConfig) -> None:
    """Refuse a ``serve.state_dir`` that is, or lies under, something other than a folder.

    The folder is created when a server starts; a file in its place used to surface there as
    ``os-error … File exists`` (issue 33), after the plan was made.
    """
    state_dir = None if config.serve is None else config.serve.state_dir
    if state_dir is None:
        return
    for candidate in (Path(state_dir), *Path(state_dir).parents):
        if candidate.exists():
            if candidate.is_dir():
                return
            where = "is a file" if candidate == Path(state_dir) else f"lies under a file ({candidate})"
            raise ConfigError(
                f"{label}: serve.state_dir: {where}, not a folder (got {json.dumps(state_dir, ensure_ascii=False)}); "
                "name a folder for the GPU locks and server records, or leave serve.state_dir unset",
                code="config-invalid",
            )


_UniqueKeyLoader = UniqueKeyLoader  # the name other loaders import


def read_text_input(path: Path, what: str, fix: str) -> str:
    """Read a UTF-8 input file, turning every OS and decoding failure into one ``ConfigError`` line.

    The message names *path*, what went wrong and *fix*; the code tells the CLI which exit code to use
    (``input-missing``, ``input-not-a-file``, ``input-unreadable``, ``input-not-utf8``).
    """
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found; {fix}", code="input-missing") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: {what} is a directory, not a file; {fix}", code="input-not-a-file") from None
    except NotADirectoryError:
        raise ConfigError(
            f"{path}: a parent of this {what} path is a file, not a directory; {fix}", code="input-not-a-file"
        ) from None
    except PermissionError:
        raise ConfigError(
            f"{path}: {what} is not readable (permission denied); fix its permissions", code="input-unreadable"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: {what} is not UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); save it as UTF-8",
            code="input-not-utf8",
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"{path}: {what} cannot be read ({exc.strerror or exc}); {fix}", code="input-unreadable"
        ) from None


def load_config(path: str | Path) -> EvalConfig:
    """Load an evaluation YAML.

    Promises: the result has absolute paths (resolved against the YAML's folder), a sanitised
    ``experiment.name`` (default: the file stem) and ``model.id`` (default: ``model.name``), and
    referenced files exist. Nothing is read from the network and nothing is written.

    Raises:
        ConfigError: unreadable YAML, unknown keys (valid keys listed), wrong types, out-of-range
            or contradictory values — one line per problem.
    """
    if not str(path).strip():
        # Path("") is the current folder: without this, `run ""` read "config file is a directory"
        raise ConfigError("config path is empty; pass the evaluation YAML", code="input-missing")
    source = Path(path).expanduser().resolve()
    text = read_text_input(source, "config file", "check the path")
    try:
        # an alias bomb or a 5,000-deep list: one line, before anything is composed (runs/config/_safe_yaml.py)
        shape = yaml_shape_problem(text)
        if shape is not None:
            raise ConfigError(f"{source}: {shape}", code="config-invalid")
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"{source}: not valid YAML{where}: {problem}; fix the syntax", code="config-invalid"
        ) from None
    if data is None:
        raise ConfigError(
            f"{source}: the file is empty; it needs at least tasks and model sections (see docs/config.md)",
            code="config-invalid",
        )
    return config_from_mapping(data, base_dir=source.parent, source=source, default_name=source.stem)
