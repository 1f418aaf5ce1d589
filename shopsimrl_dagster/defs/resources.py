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

import json
from pathlib import Path
from typing import Any

import dagster as dg

import shopsimrl_core as core

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
]


class EndpointUnavailable(dg.Failure):
    """A health check failed: the endpoint is down, refuses us, or serves something unexpected."""


def _get_json(url: str, *, timeout: float, headers: dict[str, str] | None = None, what: str, fix: str) -> Any:
    # The standard library's client: a health check is two GETs per run, and importing an HTTP
    # library for them cost every run worker ~0.17 s. No proxies: the endpoints are loopback or
    # cluster-internal, where a proxy from the environment would only get in the way.
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:  # refused, unresolvable, timed out, bad URL
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise EndpointUnavailable(
            description=f"{what} unreachable at {url} ({type(reason).__name__}: {reason}); {fix}",
            metadata={"url": url},
        ) from None
    if status != 200:
        text = body.decode("utf-8", errors="replace")[:200]
        raise EndpointUnavailable(
            description=f"{what} at {url} answered HTTP {status}: {text!r}; {fix}",
            metadata={"url": url, "status": status},
        )
    try:
        return json.loads(body)
    except ValueError:
        raise EndpointUnavailable(
            description=f"{what} at {url} did not answer JSON; {fix}", metadata={"url": url}
        ) from None


class InferenceEndpoint(dg.ConfigurableResource):
    """An OpenAI-compatible chat-completions endpoint that serves checkpoints.

    The API key is read from the environment variable named by ``api_key_env`` (through
    ``dg.EnvVar``), only when a request needs it; it never appears in config, metadata or logs.
    Runs against one endpoint queue behind each other (run tag ``shopsimrl/endpoint``, limited per
    unique value in ``dagster.yaml``); within a rollout at most ``max_in_flight`` episodes run at once.
    Field names and defaults are those of ``InferenceSettings`` (the ``inference:`` section).
    """

    base_url: str = InferenceSettings.model_fields["base_url"].default
    """OpenAI base URL ending in ``/v1`` (e.g. ``http://gpu-3:30000/v1``)."""
    served_model: str = InferenceSettings.model_fields["served_model"].default
    """Model name used when a checkpoint's registry entry names none."""
    api_key_env: str | None = None
    """Environment variable holding the API key; null = no Authorization header."""
    max_in_flight: int = InferenceSettings.model_fields["max_in_flight"].default
    """Episodes in flight per rollout (each has at most one request outstanding)."""
    timeout_s: float = InferenceSettings.model_fields["timeout_s"].default
    """Per-attempt timeout of one chat completion, seconds (core ``model.timeout``)."""
    max_retries: int = InferenceSettings.model_fields["max_retries"].default
    """Total HTTP attempts per model call (core ``model.max_retries``)."""
    health_timeout_s: float = InferenceSettings.model_fields["health_timeout_s"].default
    """Timeout of the health check, seconds."""
    base_urls: list[str] = []
    """Replicas of this endpoint (core ``model.base_urls``) for checkpoints without an endpoint of their own."""

    def replicas_for(self, checkpoint: Checkpoint) -> list[str]:
        """The replica URLs serving *checkpoint*: this endpoint's, unless its registry entry names another endpoint."""
        return list(self.base_urls) if checkpoint.endpoint is None else []

    def _headers(self) -> dict[str, str]:
        if not self.api_key_env:
            return {}
        key = dg.EnvVar(self.api_key_env).get_value()
        if not key:
            raise EndpointUnavailable(
                description=f"inference endpoint {self.base_url}: environment variable {self.api_key_env} is not set; "
                f"export it in the shell that runs dagster (or set inference.api_key_env: null for an endpoint "
                f"without auth)"
            )
        return {"Authorization": f"Bearer {key}"}

    def base_url_for(self, checkpoint: Checkpoint) -> str:
        """The base URL serving *checkpoint*: its registry entry's endpoint, else this endpoint's."""
        return (checkpoint.endpoint or self.base_url).rstrip("/")

    def model_for(self, checkpoint: Checkpoint) -> str:
        """The served model name of *checkpoint*: its entry's ``served_model``, else this endpoint's default."""
        return checkpoint.served_model or self.served_model

    def health_check(self, checkpoint: Checkpoint) -> dict[str, Any]:
        """Check that the endpoint answers ``GET /models`` and serves *checkpoint*'s model.

        Returns ``{"url", "models"}`` (the served model names).

        Raises:
            EndpointUnavailable: unreachable, non-200, missing API key, or the model is not served
                (the message lists what is served).
        """
        base = self.base_url_for(checkpoint)
        model = self.model_for(checkpoint)
        fix = "start the server or fix inference.base_url / the checkpoint's endpoint in the registry"
        body = _get_json(
            f"{base}/models", timeout=self.health_timeout_s, headers=self._headers(), what="inference endpoint", fix=fix
        )
        served = (
            [str(item.get("id")) for item in (body.get("data") or []) if isinstance(item, dict)]
            if isinstance(body, dict)
            else []
        )
        if model not in served:
            raise EndpointUnavailable(
                description=f"inference endpoint {base} does not serve model {model!r} (served: "
                f"{', '.join(served) or 'none'}); "
                f"fix served_model in the checkpoint's registry entry {checkpoint.checkpoint_id}.json",
                metadata={"url": base, "served_models": served},
            )
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

    def health_check(self) -> dict[str, Any]:
        """Read ``/healthz`` and refuse a server whose versions this runtime does not know.

        Returns the ``/healthz`` body (slots, tasks, versions).

        Raises:
            EndpointUnavailable: unreachable, not ready, or an unknown environment/observation version.
        """
        base = self.base_url.rstrip("/")
        fix = "start the server (e.g. `shopsim-sandbox serve`) or fix environment.base_url in the pipeline settings"
        body = _get_json(f"{base}/healthz", timeout=self.health_timeout_s, what="ShopSimulator", fix=fix)
        if not isinstance(body, dict) or body.get("ready") is not True:
            raise EndpointUnavailable(
                description=f"ShopSimulator at {base} is not ready: {body!r}", metadata={"url": base}
            )
        checks = (
            ("environment_version", core.KNOWN_ENVIRONMENT_VERSIONS),
            ("observation_version", core.KNOWN_OBSERVATION_VERSIONS),
        )
        for key, known in checks:
            if body.get(key) not in known:
                raise EndpointUnavailable(
                    description=f"ShopSimulator at {base} reports {key} {body.get(key)!r}, which this runtime does "
                    f"not know "
                    f"(known: {', '.join(sorted(known))}); point environment.base_url at a compatible server",
                    metadata={"url": base, key: str(body.get(key))},
                )
        return body


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
        "inference_endpoint": InferenceEndpoint(**settings.inference.model_dump()),
        "shopsim_environment": ShopSimulatorEnvironment(**settings.environment.model_dump()),
        "run_storage": RunStorage(root=str(settings.runs_root)),
        "checkpoint_registry": CheckpointRegistry(folder=str(settings.checkpoint_registry)),
        "evaluation_suites": EvaluationSuites(settings_file=str(settings.source)),
    }
