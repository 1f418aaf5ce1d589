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
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from shopsimrl_core import ConfigError
from shopsimrl_core.runs import EnvironmentConfig, ModelConfig

from .deploy.executors import ExecutionSettings

__all__ = [
    "PIPELINE_CONFIG_ENV",
    "REPO_ROOT",
    "DEFAULT_PIPELINE_CONFIG",
    "EnvironmentSettings",
    "InferenceSettings",
    "ComparisonSettings",
    "AutomationSettings",
    "ViewerSettings",
    "SkillsLineageSettings",
    "SamplingSettings",
    "EvaluationSuite",
    "PipelineSettings",
    "pipeline_config_path",
    "load_pipeline_settings",
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


class InferenceSettings(_Strict):
    """The default OpenAI-compatible endpoint (vLLM, SGLang or the sandbox baseline policy)."""

    base_url: str = "http://127.0.0.1:5800/v1"
    """OpenAI base URL ending in ``/v1``; a checkpoint's registry entry may name another."""
    served_model: str = "shopsim-baseline-policy"
    """Model name sent in requests when a checkpoint's entry does not name one."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key; null sends no Authorization header."""
    max_in_flight: int = Field(default=16, ge=1)
    """Episodes in flight against this endpoint within one rollout (the core's concurrency)."""
    timeout_s: float = Field(default=_core_default(ModelConfig, "timeout"), gt=0)
    """Per-HTTP-attempt timeout of a chat completion, in seconds (core ``model.timeout``)."""
    max_retries: int = Field(default=_core_default(ModelConfig, "max_retries"), ge=1)
    """Total HTTP attempts per model call."""
    health_timeout_s: float = Field(default=10.0, gt=0)
    """Timeout of the ``GET /models`` health check, in seconds."""
    base_urls: list[str] = Field(default_factory=list)
    """Replicas of this default endpoint (core ``model.base_urls``, docs/scaling.md), for checkpoints whose
    registry entry names no endpoint of its own; empty: ``base_url`` alone."""


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


class SamplingSettings(_Strict):
    """Decoding settings sent with every model call of a suite."""

    temperature: float = Field(default=0.0, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int = Field(default=512, ge=1)
    send_seed: bool = True
    extra_body: dict[str, Any] = Field(default_factory=dict)


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
    sampling: SamplingSettings = Field(default_factory=lambda: SamplingSettings())
    skills: str | None = None
    """A SkillBank file to inject (relative to the settings file), or null for skill-free runs."""
    max_skills: int | None = Field(default=None, ge=1)
    purpose: str = ""
    """One sentence shown in the UI."""


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
    comparison: ComparisonSettings = Field(default_factory=lambda: ComparisonSettings())
    automation: AutomationSettings = Field(default_factory=lambda: AutomationSettings())
    viewer: ViewerSettings = Field(default_factory=lambda: ViewerSettings())
    skills: SkillsLineageSettings = Field(default_factory=lambda: SkillsLineageSettings())
    execution: ExecutionSettings = Field(default_factory=lambda: ExecutionSettings())
    """Executor of the evaluation jobs: in-process (default) or Celery workers (docs/scaling.md)."""
    suites: dict[str, EvaluationSuite]
    source: Path | None = None
    """The file these settings were read from (filled in by the loader)."""

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
    return f"{path}: {loc}: {error['msg']} (got {error.get('input')!r})"


def load_pipeline_settings(path: str | Path | None = None) -> PipelineSettings:
    """Read and validate the pipeline settings file; relative paths resolve against its folder.

    Promises: every path in the result is absolute; every suite named by ``automation`` and
    ``skills`` exists.

    Raises:
        ConfigError: missing file, invalid YAML, unknown key or bad value — one line per problem,
            naming the file and the dotted key.
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
    for key in ("runs_root", "checkpoint_registry", "split_file"):
        if isinstance(raw.get(key), str):
            raw[key] = (base / Path(raw[key]).expanduser()).resolve()
    for body in (raw.get("suites") or {}).values():
        if isinstance(body, dict) and isinstance(body.get("skills"), str):
            body["skills"] = str((base / Path(body["skills"]).expanduser()).resolve())
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
