"""Resources: one per external thing the pipeline touches.

- ``InferenceEndpoint``: an OpenAI-compatible GPU endpoint (vLLM, SGLang) or the sandbox policy.
- ``ShopSimulatorEnvironment``: the ShopSimulator server (real or sandbox).
- ``RunStorage``: where run directories live.
- ``CheckpointRegistry``: the folder training jobs drop checkpoint entries into.
- ``EvaluationSuites``: the suites of the pipeline settings file.

The configured instances at the bottom come from the pipeline settings file (see
``shopsimrl_dagster.settings``); by default they point at a sandbox on 127.0.0.1:5700 / :5800.
Assets never build HTTP clients or read environment variables: they ask these resources.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import httpx

import shopsimrl_core as core

from ..registry import Checkpoint, read_registry
from ..settings import EvaluationSuite, PipelineSettings, load_pipeline_settings

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
    # Loopback and cluster-internal endpoints: proxies from the environment would only get in the way.
    try:
        response = httpx.get(url, timeout=timeout, headers=headers or {}, trust_env=False)
    except httpx.HTTPError as exc:
        raise EndpointUnavailable(
            description=f"{what} unreachable at {url} ({type(exc).__name__}: {exc}); {fix}",
            metadata={"url": url},
        ) from None
    if response.status_code != 200:
        raise EndpointUnavailable(
            description=f"{what} at {url} answered HTTP {response.status_code}: {response.text[:200]!r}; {fix}",
            metadata={"url": url, "status": response.status_code},
        )
    try:
        return response.json()
    except ValueError:
        raise EndpointUnavailable(description=f"{what} at {url} did not answer JSON; {fix}", metadata={"url": url}) from None


class InferenceEndpoint(dg.ConfigurableResource):
    """An OpenAI-compatible chat-completions endpoint that serves checkpoints.

    The API key is read from the environment variable named by ``api_key_env`` (through
    ``dg.EnvVar``), only when a request needs it; it never appears in config, metadata or logs.
    All rollouts against one endpoint share the Dagster pool ``gpu_endpoint`` (limit in
    ``dagster.yaml``); within a rollout at most ``max_in_flight`` episodes run at once.
    """

    base_url: str
    """OpenAI base URL ending in ``/v1`` (e.g. ``http://gpu-3:30000/v1``)."""
    served_model: str
    """Model name used when a checkpoint's registry entry names none."""
    api_key_env: str | None = None
    """Environment variable holding the API key; null = no Authorization header."""
    max_in_flight: int = 16
    """Episodes in flight per rollout (each has at most one request outstanding)."""
    timeout_s: float = 180.0
    """Per-attempt timeout of one chat completion, seconds."""
    max_retries: int = 3
    """Total HTTP attempts per model call."""
    health_timeout_s: float = 10.0
    """Timeout of the health check, seconds."""

    def _headers(self) -> dict[str, str]:
        if not self.api_key_env:
            return {}
        key = dg.EnvVar(self.api_key_env).get_value()
        if not key:
            raise EndpointUnavailable(
                description=f"inference endpoint {self.base_url}: environment variable {self.api_key_env} is not set; "
                f"export it in the shell that runs dagster (or set inference.api_key_env: null for an endpoint without auth)"
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
        body = _get_json(f"{base}/models", timeout=self.health_timeout_s, headers=self._headers(), what="inference endpoint", fix=fix)
        served = [str(item.get("id")) for item in (body.get("data") or []) if isinstance(item, dict)] if isinstance(body, dict) else []
        if model not in served:
            raise EndpointUnavailable(
                description=f"inference endpoint {base} does not serve model {model!r} (served: {', '.join(served) or 'none'}); "
                f"fix served_model in the checkpoint's registry entry {checkpoint.checkpoint_id}.json",
                metadata={"url": base, "served_models": served},
            )
        return {"url": base, "models": served}


class ShopSimulatorEnvironment(dg.ConfigurableResource):
    """The ShopSimulator HTTP server (the real one, or ``shopsim-sandbox serve``)."""

    base_url: str = "http://127.0.0.1:5700"
    """Server root; the health check reads ``<base_url>/healthz``."""
    timeout_s: float = 30.0
    """Timeout of environment calls other than the blocking ``reset``, seconds."""
    persona: bool | None = None
    """Persona mode; null takes the split's flag."""
    health_timeout_s: float = 10.0

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
            raise EndpointUnavailable(description=f"ShopSimulator at {base} is not ready: {body!r}", metadata={"url": base})
        checks = (
            ("environment_version", core.KNOWN_ENVIRONMENT_VERSIONS),
            ("observation_version", core.KNOWN_OBSERVATION_VERSIONS),
        )
        for key, known in checks:
            if body.get(key) not in known:
                raise EndpointUnavailable(
                    description=f"ShopSimulator at {base} reports {key} {body.get(key)!r}, which this runtime does not know "
                    f"(known: {', '.join(sorted(known))}); point environment.base_url at a compatible server",
                    metadata={"url": base, key: str(body.get(key))},
                )
        return body


class RunStorage(dg.ConfigurableResource):
    """Where run directories live: ``<root>/<suite>/<checkpoint_id>/``."""

    root: str
    """Absolute path of the runs root (``runs/`` in the repository by default)."""

    @property
    def root_path(self) -> Path:
        """The runs root as a Path."""
        return Path(self.root)

    def run_dir(self, suite: str, checkpoint_id: str) -> Path:
        """The run directory of *checkpoint_id* under *suite* (it may not exist yet)."""
        return self.root_path / suite / checkpoint_id


class CheckpointRegistry(dg.ConfigurableResource):
    """The folder of checkpoint entries (one JSON file per checkpoint)."""

    folder: str

    def checkpoints(self) -> list[Checkpoint]:
        """Every registered checkpoint, sorted by training step."""
        return read_registry(self.folder)

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
    """The resource instances a code location uses, built from *settings*."""
    inference = settings.inference
    environment = settings.environment
    return {
        "inference_endpoint": InferenceEndpoint(
            base_url=inference.base_url,
            served_model=inference.served_model,
            api_key_env=inference.api_key_env,
            max_in_flight=inference.max_in_flight,
            timeout_s=inference.timeout_s,
            max_retries=inference.max_retries,
            health_timeout_s=inference.health_timeout_s,
        ),
        "shopsim_environment": ShopSimulatorEnvironment(
            base_url=environment.base_url, timeout_s=environment.timeout_s, persona=environment.persona
        ),
        "run_storage": RunStorage(root=str(settings.runs_root)),
        "checkpoint_registry": CheckpointRegistry(folder=str(settings.checkpoint_registry)),
        "evaluation_suites": EvaluationSuites(settings_file=str(settings.source)),
    }


@dg.definitions
def resources() -> dg.Definitions:
    """The live resources: the endpoint and environment named in the pipeline settings file."""
    return dg.Definitions(resources=resources_from_settings(load_pipeline_settings()))
