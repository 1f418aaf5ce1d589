"""Pipeline settings: which environment, which endpoint, where runs live, and the evaluation suites.

One YAML file (``configs/pipeline/pipeline.yaml`` by default, or the file named by the environment
variable ``SHOPSIMRL_PIPELINE_CONFIG``) configures the whole code location. Relative paths in it
resolve against the file's folder, like the evaluation configs of the core library.

A *suite* is a named evaluation setting — split, sampling, repeats, seed, decoding — that is applied
to a checkpoint. ``val`` runs for every checkpoint; ``test`` is guarded (opt-in per launch); ``train``
samples with repeats for skill building.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from shopsimrl_core import ConfigError
from shopsimrl_core.runs import EnvironmentConfig, ModelConfig, PromptConfig, ServeConfig

from .deploy.executors import ExecutionSettings
from .training_settings import TrainingSettings, absolute_training_paths

__all__ = [
    "PIPELINE_CONFIG_ENV",
    "REPO_ROOT",
    "DEFAULT_PIPELINE_CONFIG",
    "EnvironmentSettings",
    "InferenceSettings",
    "LaunchSettings",
    "AnalystSettings",
    "SAMPLING_KEYS",
    "ComparisonSettings",
    "AutomationSettings",
    "ViewerSettings",
    "SkillsLineageSettings",
    "EvaluationSuite",
    "PipelineSettings",
    "pipeline_config_path",
    "load_pipeline_settings",
    "read_settings_mapping",
]

PIPELINE_CONFIG_ENV = "SHOPSIMRL_PIPELINE_CONFIG"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PIPELINE_CONFIG = REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _core_default(section: type[BaseModel], name: str) -> Any:
    # One set of defaults: a pipeline setting that becomes a core config key takes the core's default.
    return section.model_fields[name].default


class EnvironmentSettings(_Strict):
    """Where the ShopSimulator server (real or sandbox) answers."""

    base_url: str = _core_default(EnvironmentConfig, "base_url")
    """Server root, without a trailing path (``/healthz`` is appended for the health check)."""
    timeout_s: float = Field(default=_core_default(EnvironmentConfig, "timeout"), gt=0)
    """Per-request timeout for environment calls other than the blocking ``reset``, in seconds."""
    persona: bool | None = None
    """Persona mode; null takes the split's ``persona`` flag."""
    health_timeout_s: float = Field(default=10.0, gt=0)
    """Timeout of the ``GET /healthz`` check, in seconds."""
    base_urls: list[str] = Field(default_factory=list)
    """Several servers used as one (core ``environment.base_urls``, docs/scaling.md); empty: ``base_url`` alone."""
    identity: str | None = None
    """A stable name for the environment in run plans instead of its URL (core ``environment.identity``);
    set it when the server's URL changes between runs (the demo's sandbox on a free port)."""


_RENAMED_MODEL_KEYS = {"served_model": "name", "timeout_s": "timeout"}
"""Names of the first pipeline versions, accepted as spellings of the core's keys."""
_PER_CHECKPOINT_MODEL_KEYS = ("id", "checkpoint_id")
_PER_CHECKPOINT_SERVE_KEYS = ("weights", "adapter")
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "send_seed", "seed_mod_2_32", "tool_choice", "extra_body")
"""Core ``model`` keys a suite's ``sampling`` may set for its runs (they win over the ``inference`` section)."""


def _core_errors(exc: ValidationError, where: str, own: tuple[str, ...] = ()) -> str:
    """One line per error of a core model, located under *where* (*own*: the section's keys besides the core's)."""
    lines = []
    for error in exc.errors():
        loc = f"{where}.{'.'.join(str(p) for p in error['loc'])}"
        if error["type"] == "extra_forbidden":
            models: dict[str, type[BaseModel]] = {"ModelConfig": ModelConfig, "ServeConfig": ServeConfig}
            model = models.get(exc.title)
            known = set(model.model_fields) if model is not None else set()
            valid = sorted((known | set(own)) - set(_PER_CHECKPOINT_MODEL_KEYS))
            lines.append(f"{loc}: unknown key; valid keys: {', '.join(valid)} (docs/pipeline.md)")
        else:
            lines.append(f"{loc}: {error['msg']} (got {error.get('input')!r})")
    return "; ".join(lines)


def _core_model(
    fields: dict[str, Any], where: str, defaults: dict[str, Any], own: tuple[str, ...] = ()
) -> ModelConfig:
    """Validate *fields* with the core's own ``ModelConfig``; errors name ``<where>.<key>``."""
    try:
        return ModelConfig.model_validate({**defaults, **fields})
    except ValidationError as exc:
        raise ValueError(_core_errors(exc, where, own)) from None


class LaunchSettings(_Strict):
    """``inference.launch``: how ``launch`` mode serves checkpoints (the core's ``serve`` section, docs/config.md).

    Every key of the core's ``serve`` section but ``weights`` and ``adapter`` (which each checkpoint's
    registry entry gives), validated by the core's ``ServeConfig``, plus ``max_servers``.
    """

    serve: dict[str, Any]
    """The core ``serve`` keys as given (passed unchanged into every launched rollout's config)."""
    max_servers: int | None = Field(default=None, ge=1)
    """Servers at once (Dagster's run queue limit); null = ``len(gpus) // gpus_per_server`` (1 without GPUs)."""

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "serve" in data:
            return data
        return {"serve": {k: v for k, v in data.items() if k != "max_servers"},
                **({"max_servers": data["max_servers"]} if "max_servers" in data else {})}

    @model_validator(mode="after")
    def _core_validates(self) -> LaunchSettings:
        given = [k for k in _PER_CHECKPOINT_SERVE_KEYS if k in self.serve]
        if given:
            raise ValueError(f"inference.launch.{given[0]}: set per checkpoint in its registry entry, not here")
        try:
            ServeConfig.model_validate({**self.serve, "weights": "<checkpoint weights>"})
        except ValidationError as exc:
            raise ValueError(_core_errors(exc, "inference.launch", ("max_servers",))) from None
        return self

    def core(self) -> ServeConfig:
        """The section as the core reads it (with a placeholder for the per-checkpoint weights)."""
        return ServeConfig.model_validate({**self.serve, "weights": "<checkpoint weights>"})

    @property
    def slots(self) -> int:
        """How many launched servers may run at once (the GPU pool's slots)."""
        if self.max_servers is not None:
            return self.max_servers
        serve = self.core()
        if not serve.gpus or serve.gpus_per_server == 0:
            return 1
        return max(1, len(serve.gpus) // serve.gpus_per_server)


class _EndpointSection(_Strict):
    """A section naming an OpenAI-compatible endpoint: the core's ``model`` keys, flat, beside the pipeline's own.

    Every key of the core's ``model`` section (docs/config.md) is accepted under its own name and
    default, validated by the core's ``ModelConfig`` and passed on unchanged. ``id`` and
    ``checkpoint_id`` are the checkpoint's. Only ``name`` and ``base_url``, which the core requires,
    get a default here (``_DEFAULTS``).
    """

    _SECTION: ClassVar[str] = ""
    _OWN_KEYS: ClassVar[tuple[str, ...]] = ("health_timeout_s",)
    _DEFAULTS: ClassVar[dict[str, Any]] = {}

    health_timeout_s: float = Field(default=10.0, gt=0)
    """Timeout of the ``GET /models`` health check, in seconds."""
    model: dict[str, Any] = Field(default_factory=dict)
    """The core ``model`` keys as given in the section (gathered by the loader from the flat section)."""

    @model_validator(mode="before")
    @classmethod
    def _gather_model_keys(cls, data: Any) -> Any:
        # The file spells the core's keys flat, next to the pipeline's own; they are kept apart here so
        # that each rollout's config gets exactly the keys the file gave (core defaults for the rest).
        if not isinstance(data, dict) or "model" in data:
            return data
        own = {k: v for k, v in data.items() if k in cls._OWN_KEYS}
        model: dict[str, Any] = {}
        for key, value in data.items():
            if key in cls._OWN_KEYS:
                continue
            name = _RENAMED_MODEL_KEYS.get(str(key), str(key))
            if name in model:
                raise ValueError(f"{cls._SECTION}.{key}: same key as {cls._SECTION}.{name}; give only {name}")
            model[name] = value
        return {**own, "model": model}

    @model_validator(mode="after")
    def _core_validates(self) -> _EndpointSection:
        given = [k for k in _PER_CHECKPOINT_MODEL_KEYS if k in self.model]
        if given:
            raise ValueError(f"{self._SECTION}.{given[0]}: set per checkpoint (the checkpoint id), not in the settings")
        self.core()
        return self

    def core(self) -> ModelConfig:
        """The section as the core's ``ModelConfig`` (core defaults filled in)."""
        return _core_model(self.model, self._SECTION, self._DEFAULTS, self._OWN_KEYS)

    @property
    def base_url(self) -> str:
        """The endpoint's OpenAI base URL."""
        return self.core().base_url

    @property
    def name(self) -> str:
        """The model name requested."""
        return self.core().name

    def section(self) -> dict[str, Any]:
        """The section as the file spells it (flat), for a resource's config."""
        return {**self.model, **self.model_dump(exclude={"model"}, exclude_none=True)}


class InferenceSettings(_EndpointSection):
    """The ``inference`` section: the default endpoint and how checkpoints are served.

    The core's ``model`` keys (``tool_call_content``, ``stream``, ``http_transport``, ``timeout`` …) go
    unchanged into every rollout's config; a suite's ``sampling`` wins for the sampling keys. The
    pipeline's own keys are ``mode``, ``max_in_flight``, ``health_timeout_s`` and ``launch``.
    """

    _SECTION: ClassVar[str] = "inference"
    _OWN_KEYS: ClassVar[tuple[str, ...]] = ("mode", "max_in_flight", "health_timeout_s", "launch")
    _DEFAULTS: ClassVar[dict[str, Any]] = {"name": "shopsim-baseline-policy", "base_url": "http://127.0.0.1:5800/v1"}

    mode: Literal["external", "launch"] = "external"
    """``external``: checkpoints are served already (their entry's ``endpoint``, else ``base_url``);
    ``launch``: a checkpoint whose entry gives ``weights`` (or an ``adapter``) gets a server launched
    for its run from ``launch`` (docs/pipeline.md, "Serving checkpoints")."""
    max_in_flight: int = Field(default=16, ge=1)
    """Episodes in flight against the endpoint within one rollout (the core's ``experiment.concurrency``)."""
    launch: LaunchSettings | None = None
    """How ``launch`` mode starts servers; required in that mode."""

    @model_validator(mode="after")
    def _launch_needs_settings(self) -> InferenceSettings:
        if self.mode == "launch" and self.launch is None:
            raise ValueError("inference.launch: required with mode launch (at least launch.server)")
        return self

    def section(self) -> dict[str, Any]:
        """The section as the file spells it (flat), for the resource's config."""
        flat = super().section()
        if self.launch is not None:
            flat["launch"] = self.launch.model_dump(exclude_none=True)
        return flat


class AnalystSettings(_EndpointSection):
    """The ``analyst`` section: the Trace2Skill analyst model's endpoint (the core's ``model`` keys)."""

    _SECTION: ClassVar[str] = "analyst"
    _OWN_KEYS: ClassVar[tuple[str, ...]] = ("health_timeout_s", "identity")
    _DEFAULTS: ClassVar[dict[str, Any]] = {"name": "shopsim-analyst", "base_url": "http://127.0.0.1:5900/v1"}

    identity: str | None = Field(default=None, min_length=1)
    """A stable name for the analyst in its cache keys, in place of ``base_url`` (as ``environment.identity``):
    for an analyst whose URL changes between runs while the model does not. Null keeps ``base_url``."""


class ComparisonSettings(_Strict):
    """How ``checkpoint_comparison`` pairs a checkpoint with a reference."""

    baseline: str = "previous"
    """``previous`` (the registered checkpoint with the next lower training step) or a checkpoint id."""
    bootstrap_samples: int = Field(default=2000, ge=100)
    bootstrap_seed: int = 20260901
    confidence_level: float = Field(default=0.95, gt=0, lt=1)


class AutomationSettings(_Strict):
    """What the sensor and the nightly schedule launch."""

    new_checkpoint_suites: list[str] = Field(default_factory=lambda: ["val"])
    """Suites the registry sensor evaluates for every newly registered checkpoint."""
    nightly_suite: str = "val"
    """Suite the nightly schedule runs on the latest checkpoint (highest training step)."""
    nightly_cron: str = "0 3 * * *"
    nightly_timezone: str = "UTC"
    sensor_interval_s: int = Field(default=60, ge=5)
    """Minimum seconds between two reads of the registry folder."""
    sensor_running: bool = True
    """Whether the registry sensor runs as soon as the daemon starts (it can still be toggled in the UI)."""
    schedule_running: bool = True
    """Whether the nightly schedule runs as soon as the daemon starts (it can still be toggled in the UI)."""


class ViewerSettings(_Strict):
    """Where the trace viewer (``shopsimrl view RUNS_ROOT``) answers; evaluated partitions link there."""

    base_url: str = "http://127.0.0.1:3300"
    """Viewer root; a run's page is ``<base_url>/run/<suite>/<checkpoint_id>``."""


class SkillsLineageSettings(_Strict):
    """Which suites the skills lineage reads (fixed lineage edges, not a run option)."""

    train_suite: str = "train"
    """Suite whose labelled traces are the skill evidence (must run on a train-role split)."""
    val_suite: str = "val"
    """Suite of the bare validation run Gate A pairs with (skill-free, full val split, repeats 1)."""


class EvaluationSuite(_Strict):
    """One named evaluation setting applied to a checkpoint."""

    split: str
    """Name of the split in ``split_file``."""
    sample_size: int | None = Field(default=None, ge=1)
    """Tasks drawn (seeded, CPython sample order); null runs the whole split."""
    repeats: int = Field(default=1, ge=1)
    """Episodes per task (``sample_id`` 0 … repeats-1)."""
    seed: int = 20260830
    """Experiment seed: drives task sampling and episode seeds."""
    max_steps: int = Field(default=30, ge=1)
    """Model turns per episode, repair turns included."""
    sampling: dict[str, Any] = Field(default_factory=dict)
    """Core ``model`` sampling keys for this suite's runs (``temperature``, ``max_tokens``, ``top_p``,
    ``send_seed``, ``seed_mod_2_32``, ``tool_choice``, ``extra_body``); they win over ``inference``."""
    skills: str | None = None
    """A SkillBank file to inject (relative to the settings file), or null for skill-free runs."""
    max_skills: int | None = Field(default=None, ge=1)
    purpose: str = ""
    """One sentence shown in the UI."""

    @field_validator("sampling")
    @classmethod
    def _sampling_keys(cls, sampling: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(sampling) - set(SAMPLING_KEYS))
        if unknown:
            raise ValueError(f"sampling.{unknown[0]}: unknown key; valid keys: {', '.join(SAMPLING_KEYS)}")
        _core_model(sampling, "sampling", InferenceSettings._DEFAULTS)
        return sampling


class PipelineSettings(_Strict):
    """The whole pipeline configuration (``configs/pipeline/pipeline.yaml``)."""

    runs_root: Path
    """Where run directories live: ``<runs_root>/<suite>/<checkpoint_id>/``."""
    checkpoint_registry: Path
    """Folder that training jobs drop ``<checkpoint_id>.json`` files into."""
    split_file: Path
    """The frozen split file every suite draws from."""
    environment: EnvironmentSettings = Field(default_factory=lambda: EnvironmentSettings())
    inference: InferenceSettings = Field(default_factory=lambda: InferenceSettings())
    analyst: AnalystSettings = Field(default_factory=lambda: AnalystSettings())
    """The Trace2Skill analyst's endpoint (the ``analyst_skills`` job)."""
    prompt: dict[str, Any] = Field(default_factory=dict)
    """The core's ``prompt`` section (``language``, ``system_prompt_file`` …) for every rollout, validated
    by the core's ``PromptConfig``; relative files resolve against this file's folder."""
    comparison: ComparisonSettings = Field(default_factory=lambda: ComparisonSettings())
    automation: AutomationSettings = Field(default_factory=lambda: AutomationSettings())
    viewer: ViewerSettings = Field(default_factory=lambda: ViewerSettings())
    skills: SkillsLineageSettings = Field(default_factory=lambda: SkillsLineageSettings())
    execution: ExecutionSettings = Field(default_factory=lambda: ExecutionSettings())
    """Executor of the evaluation jobs: in-process (default) or Celery workers (docs/scaling.md)."""
    training: TrainingSettings | None = None
    """The trainer of a training round, run through Dagster Pipes (docs/pipeline.md, "Training rounds")."""
    suites: dict[str, EvaluationSuite]
    source: Path | None = None
    """The file these settings were read from (filled in by the loader)."""

    @field_validator("prompt")
    @classmethod
    def _core_prompt(cls, prompt: dict[str, Any]) -> dict[str, Any]:
        try:
            PromptConfig.model_validate(prompt)
        except ValidationError as exc:
            raise ValueError(
                "; ".join(f"prompt.{'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got {e.get('input')!r})"
                          for e in exc.errors())
            ) from None
        return prompt

    @field_validator("suites")
    @classmethod
    def _names_are_directory_safe(cls, suites: dict[str, EvaluationSuite]) -> dict[str, EvaluationSuite]:
        for name in suites:
            if not name or any(not (c.isalnum() or c in "._-") for c in name):
                raise ValueError(f"suite name {name!r} must use only letters, digits, '.', '_' and '-'")
        return suites

    def suite(self, name: str) -> EvaluationSuite:
        """Return the suite called *name*.

        Raises:
            ConfigError: unknown suite; the message lists the defined ones.
        """
        try:
            return self.suites[name]
        except KeyError:
            raise ConfigError(
                f"{self.source}: suites.{name}: unknown suite; defined suites: {', '.join(sorted(self.suites))}",
                code="suite-unknown",
            ) from None


def pipeline_config_path() -> Path:
    """The settings file in use: ``$SHOPSIMRL_PIPELINE_CONFIG`` when set, else the repository default."""
    override = os.environ.get(PIPELINE_CONFIG_ENV)
    return Path(override).expanduser().resolve() if override else DEFAULT_PIPELINE_CONFIG


def _format_error(path: Path, error: ErrorDetails) -> str:
    loc = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"{path}: {loc}: unknown key; remove it or fix its spelling (see docs/pipeline.md)"
    if error["type"] == "value_error":
        # Our validators name the dotted key themselves (e.g. "inference.launch.gpus: …").
        message = str(error["msg"]).removeprefix("Value error, ")
        return f"{path}: {message}" if message.split(":", 1)[0].startswith(loc.split(".", 1)[0]) else (
            f"{path}: {loc}: {message}"
        )
    return f"{path}: {loc}: {error['msg']} (got {error.get('input')!r})"


def read_settings_mapping(path: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    """The settings file as a mapping with every relative path made absolute (against the file's folder).

    Returns ``(source, mapping)``; the mapping can be edited and written elsewhere as a settings file
    of its own (the local sandbox does, to point the settings at the ports it got).

    Raises:
        ConfigError: missing file, invalid YAML, or not a mapping.
    """
    source = Path(path).expanduser().resolve() if path is not None else pipeline_config_path()
    try:
        raw = yaml.safe_load(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{source}: pipeline settings file not found; set {PIPELINE_CONFIG_ENV} to an existing file",
            code="pipeline-config-missing",
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({exc}); fix the file", code="pipeline-config-invalid") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: must be a mapping of settings", code="pipeline-config-invalid")
    base = source.parent

    def absolute(value: str) -> str:
        return str((base / Path(value).expanduser()).resolve())

    for key in ("runs_root", "checkpoint_registry", "split_file"):
        if isinstance(raw.get(key), str):
            raw[key] = absolute(raw[key])
    prompt = raw.get("prompt")
    if isinstance(prompt, dict):
        for key in ("system_prompt_file", "prompt_texts_file"):
            if isinstance(prompt.get(key), str):
                prompt[key] = absolute(prompt[key])
    inference = raw.get("inference")
    launch = inference.get("launch") if isinstance(inference, dict) else None
    if isinstance(launch, dict) and isinstance(launch.get("state_dir"), str):
        launch["state_dir"] = absolute(launch["state_dir"])
    absolute_training_paths(raw.get("training"), absolute)
    for body in (raw.get("suites") or {}).values() if isinstance(raw.get("suites"), dict) else ():
        if isinstance(body, dict) and isinstance(body.get("skills"), str):
            body["skills"] = absolute(body["skills"])
    return source, raw


def load_pipeline_settings(path: str | Path | None = None) -> PipelineSettings:
    """Read and validate the pipeline settings file; relative paths resolve against its folder.

    Promises: every path in the result is absolute; every suite named by ``automation`` and
    ``skills`` exists.

    Raises:
        ConfigError: missing file, invalid YAML, unknown key or bad value — one line per problem,
            naming the file and the dotted key.
    """
    source, raw = read_settings_mapping(path)
    try:
        settings = PipelineSettings.model_validate({**raw, "source": source})
    except ValidationError as exc:
        lines = [_format_error(source, err) for err in exc.errors()]
        raise ConfigError("\n".join(lines), code="pipeline-config-invalid") from None
    for name in [
        *settings.automation.new_checkpoint_suites,
        settings.automation.nightly_suite,
        settings.skills.train_suite,
        settings.skills.val_suite,
    ]:
        settings.suite(name)
    return settings
