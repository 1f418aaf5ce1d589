"""Resources: one per external thing the pipeline touches.

- ``InferenceEndpoint``: an OpenAI-compatible GPU endpoint (vLLM, SGLang) or the sandbox policy.
- ``ShopSimulatorEnvironment``: the ShopSimulator server (real or sandbox).
- ``RunStorage``: every path the pipeline writes (run directories, generated configs, plans, skills,
  Gate A, SkillBank snapshots, progress charts, the test-access ledger).
- ``CheckpointRegistry``: the folder training jobs drop checkpoint entries into.
- ``EvaluationSuites``: the suites of the pipeline settings file.

The configured instances at the bottom come from the pipeline settings file (see
``shopsimrl_dagster.settings``): each resource's fields are its settings section's keys, with the
same names and defaults (``resources_from_settings`` passes the section through unchanged, and the
section defaults are the core config's). By default they point at a sandbox on 127.0.0.1:5700 / :5800.
Assets never build HTTP clients or read environment variables: they ask these resources.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg

import shopsimrl_core as core
from shopsimrl_core.serving import holding_servers

from ..registry import Checkpoint, read_registry
from ..settings import EnvironmentSettings, EvaluationSuite, InferenceSettings, PipelineSettings, load_pipeline_settings

__all__ = [
    "EndpointUnavailable",
    "InferenceEndpoint",
    "ShopSimulatorEnvironment",
    "RunStorage",
    "CheckpointRegistry",
    "EvaluationSuites",
    "resources_from_settings",
    "unavailable",
]


class EndpointUnavailable(dg.Failure):
    """A health check failed: the endpoint is down, refuses us, or serves something unexpected."""


def unavailable(exc: core.PreflightError, fixes: dict[str, str], default_fix: str) -> EndpointUnavailable:
    """The ``EndpointUnavailable`` of a failed core health check: its one line, then the fix for its code.

    The core's message names the URL and what it saw; *fixes* maps a code (``model-not-served``, …) to
    where the pipeline sets what is wrong, *default_fix* covers the rest. The metadata carries the URL,
    the code, and the HTTP status and served models when known.
    """
    metadata: dict[str, Any] = {"url": str(getattr(exc, "url", "")), "code": exc.code}
    for key in ("status", "served_models"):
        if key in exc.context:
            metadata[key] = exc.context[key]
    if "key" in exc.context:  # environment-incompatible: the version key and what the server reported
        metadata[exc.context["key"]] = str(exc.context["value"])
    return EndpointUnavailable(description=f"{exc}; {fixes.get(exc.code, default_fix)}", metadata=metadata)


class InferenceEndpoint(dg.ConfigurableResource):
    """How checkpoints are served: the pipeline's ``inference`` section, passed through as given.

    ``section`` is that section as JSON (``InferenceSettings`` reads it; its core keys are the core's
    ``model`` keys with the core's defaults, so nothing here keeps defaults of its own). In ``external``
    mode a checkpoint is served at its registry entry's ``endpoint`` or the section's ``base_url``; in
    ``launch`` mode a checkpoint whose entry names ``weights`` (or an adapter) gets a server launched
    for its run by the core (``shopsimrl_core.serving``) from ``launch``. Every launched rollout shares
    one server pool (``RunStorage.servers_dir``): suites of a checkpoint, and runs of checkpoints that
    serve the same thing (adapters over one base), attach to one running server, kept for
    ``launch.idle_timeout`` seconds unused.

    The API key is read from the environment variable named by ``api_key_env`` only when a request needs
    it; it never appears in config, metadata or logs. Within a rollout at most ``max_in_flight``
    episodes run at once; across runs the instance's queue limits runs per endpoint and launched
    servers to the GPU pool's slots (``shopsimrl/endpoint`` and ``shopsimrl/gpu-pool`` run tags).
    """

    section: str = "{}"
    """The ``inference`` section of the pipeline settings, as JSON."""

    @contextlib.contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[InferenceEndpoint]:
        """The resource for one run; in ``launch`` mode the servers its rollouts used stay up until the run ends.

        A run that materializes several suites of a checkpoint (in-process executor: one process) then
        loads the checkpoint once, even with ``launch.idle_timeout`` 0 (``core.serving.holding_servers``).
        """
        if self.settings().mode != "launch":
            yield self
            return
        log = context.log
        with holding_servers(log.info if log is not None else print):
            yield self

    @classmethod
    def of(cls, **section: Any) -> InferenceEndpoint:
        """The resource for an ``inference`` section given as keyword arguments (validated at once)."""
        InferenceSettings.model_validate(section)
        return cls(section=json.dumps(section))

    def settings(self) -> InferenceSettings:
        """The section, validated by the core's models."""
        return InferenceSettings.model_validate(json.loads(self.section))

    @property
    def max_in_flight(self) -> int:
        """Episodes in flight per rollout."""
        return self.settings().max_in_flight

    @property
    def api_key_env(self) -> str | None:
        """The environment variable holding the API key (core ``model.api_key_env``)."""
        return self.settings().core().api_key_env

    def auth(self) -> core.EndpointAuth:
        """How requests to the endpoint authenticate (core ``ModelConfig.auth``)."""
        return self.settings().core().auth()

    @property
    def timeout(self) -> float:
        """Seconds per HTTP attempt (core ``model.timeout``)."""
        return self.settings().core().timeout

    def launches(self, checkpoint: Checkpoint) -> bool:
        """Whether *checkpoint*'s runs launch their own server (``launch`` mode and the entry names weights)."""
        return self.settings().mode == "launch" and checkpoint.serves_weights and checkpoint.endpoint is None

    def replicas_for(self, checkpoint: Checkpoint) -> list[str]:
        """The replica URLs serving *checkpoint*: the section's, for checkpoints on the default endpoint."""
        if checkpoint.endpoint is not None or self.launches(checkpoint):
            return []
        return list(self.settings().core().base_urls)

    def base_url_for(self, checkpoint: Checkpoint) -> str:
        """Where *checkpoint* is served: its entry's endpoint, ``launched`` for a launched server, else the default."""
        if self.launches(checkpoint):
            return "launched"
        return (checkpoint.endpoint or self.settings().base_url).rstrip("/")

    def model_for(self, checkpoint: Checkpoint) -> str:
        """The served model name of *checkpoint*.

        Its entry's ``served_model``; for a launched server the checkpoint id (an adapter on SGLang:
        ``base:<id>``, the form SGLang requests a hot-loaded adapter under); else the section's ``name``.
        """
        if checkpoint.served_model:
            return checkpoint.served_model
        if not self.launches(checkpoint):
            return self.settings().name
        launch = self.settings().launch
        if checkpoint.adapter is not None and launch is not None and launch.serve.get("server") == "sglang":
            return f"base:{checkpoint.checkpoint_id}"
        return checkpoint.checkpoint_id

    def model_section(self, checkpoint: Checkpoint, sampling: dict[str, Any]) -> dict[str, Any]:
        """The core ``model`` section of *checkpoint*'s rollout.

        The section's core keys as given, the suite's *sampling* keys over them, then the checkpoint's id,
        name and endpoint (none for a launched server: the launch fills it in).
        """
        section: dict[str, Any] = {
            **self.settings().model,
            **sampling,
            "id": checkpoint.checkpoint_id,
            "checkpoint_id": checkpoint.checkpoint_id,
            "name": self.model_for(checkpoint),
        }
        if self.launches(checkpoint):
            section.pop("base_url", None)
            section.pop("base_urls", None)
        else:
            section["base_url"] = self.base_url_for(checkpoint)
            replicas = self.replicas_for(checkpoint)
            if replicas:
                section["base_urls"] = replicas
            else:
                section.pop("base_urls", None)
        return section

    def serve_section(self, checkpoint: Checkpoint) -> dict[str, Any] | None:
        """The core ``serve`` section launching *checkpoint* (launch settings plus its weights), or None."""
        if not self.launches(checkpoint):
            return None
        launch = self.settings().launch
        assert launch is not None  # the settings refuse launch mode without it
        serve: dict[str, Any] = {**launch.serve, "weights": checkpoint.served_weights}
        if checkpoint.adapter is not None:
            serve["adapter"] = checkpoint.adapter
        return serve

    def health_check(self, checkpoint: Checkpoint) -> dict[str, Any]:
        """Check that the endpoint answers ``GET /models`` and serves *checkpoint*'s model.

        Returns ``{"url", "models"}`` (the served model names). A checkpoint whose server is launched for
        its run is not checked here: the launch waits until the server lists the model and answers a probe.

        Raises:
            EndpointUnavailable: unreachable, non-200, missing API key, or the model is not served
                (the message lists what is served).
        """
        if self.launches(checkpoint):
            return {"url": "launched", "models": []}
        settings = self.settings()
        model = settings.core()
        base = self.base_url_for(checkpoint)
        try:
            served = core.check_model(
                base,
                self.model_for(checkpoint),
                auth=model.auth(),
                timeout=settings.health_timeout_s,
                what="inference endpoint",
                http_transport=model.http_transport,
                trust_env=model.trust_env,
            )
        except core.PreflightError as exc:
            fixes = {
                "api-key-missing": "export it in the shell that runs dagster (or set inference.api_key_env: null "
                "for an endpoint without auth)",
                "model-unauthorized": "export a valid API key in the variable inference.api_key_env names",
                "model-not-served": f"fix served_model in the checkpoint's registry entry "
                f"{checkpoint.checkpoint_id}.json",
            }
            fix = "start the server or fix inference.base_url / the checkpoint's endpoint in the registry"
            raise unavailable(exc, fixes, fix) from None
        return {"url": base, "models": served}


class ShopSimulatorEnvironment(dg.ConfigurableResource):
    """The ShopSimulator HTTP server (the real one, or ``shopsim-sandbox serve``)."""

    base_url: str = EnvironmentSettings.model_fields["base_url"].default
    """Server root; the health check reads ``<base_url>/healthz``."""
    timeout_s: float = EnvironmentSettings.model_fields["timeout_s"].default
    """Timeout of environment calls other than the blocking ``reset``, seconds (core ``environment.timeout``)."""
    persona: bool | None = None
    """Persona mode; null takes the split's flag."""
    health_timeout_s: float = EnvironmentSettings.model_fields["health_timeout_s"].default
    """Timeout of the ``/healthz`` check, seconds."""
    base_urls: list[str] = []
    """Several servers used as one (core ``environment.base_urls``); empty: ``base_url`` alone."""
    identity: str | None = None
    """The environment's stable name in run plans instead of its URL (core ``environment.identity``)."""

    def health_check(self) -> dict[str, Any]:
        """Read ``/healthz`` and refuse a server whose versions this runtime does not know.

        Returns the ``/healthz`` body (slots, tasks, versions).

        Raises:
            EndpointUnavailable: unreachable, not ready, or an unknown environment/observation version.
        """
        try:
            return core.check_environment(self.base_url, timeout=self.health_timeout_s, what="ShopSimulator")
        except core.PreflightError as exc:
            fixes = {"environment-incompatible": "point environment.base_url at a compatible server"}
            fix = "start the server (e.g. `shopsim-sandbox serve`) or fix environment.base_url in the pipeline settings"
            raise unavailable(exc, fixes, fix) from None


class RunStorage(dg.ConfigurableResource):
    """Every path the pipeline reads or writes, all under one runs root.

    Nothing else in the Dagster layer spells a path below the runs root: ask this resource.
    """

    root: str
    """Absolute path of the runs root (``runs/`` in the repository by default)."""

    @property
    def root_path(self) -> Path:
        """The runs root as a Path."""
        return Path(self.root)

    def run_dir(self, suite: str, checkpoint_id: str) -> Path:
        """The run directory of *checkpoint_id* under *suite* (it may not exist yet)."""
        return self.root_path / suite / checkpoint_id

    def run_rel(self, suite: str, checkpoint_id: str) -> str:
        """The run directory relative to the runs root (``<suite>/<checkpoint_id>``), as the viewer names it."""
        return f"{suite}/{checkpoint_id}"

    def eval_config_path(self, suite: str, checkpoint_id: str) -> Path:
        """The generated evaluation YAML of one rollout (rerun by hand with ``shopsimrl run``)."""
        return self.root_path / "_configs" / suite / f"{checkpoint_id}.yaml"

    def plan_path(self, suite: str) -> Path:
        """Where ``job_plan`` writes the jobs of *suite*."""
        return self.root_path / "_plans" / f"{suite}.json"

    def ledger_path(self) -> Path:
        """The project-level test-access ledger (runtime-semantics §22.6), one for every suite."""
        return self.root_path / "test-access.jsonl"

    def skills_dir(self, checkpoint_id: str) -> Path:
        """Candidates and the cold-start draft of *checkpoint_id*."""
        return self.root_path / "skills" / checkpoint_id

    def gate_dir(self, checkpoint_id: str) -> Path:
        """Gate A's masked val run and contributions for *checkpoint_id*."""
        return self.root_path / "gate-a" / checkpoint_id

    def skillbanks_dir(self) -> Path:
        """Immutable ``skillbank-<sha256>.json`` snapshots."""
        return self.root_path / "skillbanks"

    def servers_dir(self) -> Path:
        """GPU locks and records of launched inference servers (``shopsimrl_core.serving``), shared by every suite."""
        return self.root_path / "_servers"

    def progress_dir(self, suite: str) -> Path:
        """Where the per-suite progress chart and table are written."""
        return self.root_path / "_progress" / suite


class CheckpointRegistry(dg.ConfigurableResource):
    """The folder of checkpoint entries (one JSON file per checkpoint)."""

    folder: str

    def checkpoints(self, problems: list[str] | None = None) -> list[Checkpoint]:
        """Every valid registered checkpoint, sorted by training step.

        Bad files are skipped and described in *problems* (one line each, naming the file and the fix).
        """
        return read_registry(self.folder, problems=problems)

    def get(self, checkpoint_id: str) -> Checkpoint:
        """The entry of *checkpoint_id*.

        Raises:
            dg.Failure: not registered (the partition exists but its registry file is gone).
        """
        for entry in self.checkpoints():
            if entry.checkpoint_id == checkpoint_id:
                return entry
        raise dg.Failure(
            description=f"checkpoint {checkpoint_id!r} is not in the registry {self.folder}; "
            f"register it with `python -m shopsimrl_dagster.registry add --id {checkpoint_id} --step N`"
        )


class EvaluationSuites(dg.ConfigurableResource):
    """The evaluation suites and comparison settings of the pipeline settings file."""

    settings_file: str

    def settings(self) -> PipelineSettings:
        """The parsed settings (re-read on every call so edits apply to the next run)."""
        return load_pipeline_settings(self.settings_file)

    def suite(self, name: str) -> EvaluationSuite:
        """The suite called *name* (``ConfigError`` lists the defined ones)."""
        return self.settings().suite(name)


def resources_from_settings(settings: PipelineSettings) -> dict[str, dg.ConfigurableResource]:
    """The resource instances a code location uses, built from *settings* (sections passed through as is)."""
    return {
        "inference_endpoint": InferenceEndpoint(section=json.dumps(settings.inference.section())),
        "shopsim_environment": ShopSimulatorEnvironment(**settings.environment.model_dump()),
        "run_storage": RunStorage(root=str(settings.runs_root)),
        "checkpoint_registry": CheckpointRegistry(folder=str(settings.checkpoint_registry)),
        "evaluation_suites": EvaluationSuites(settings_file=str(settings.source)),
    }
