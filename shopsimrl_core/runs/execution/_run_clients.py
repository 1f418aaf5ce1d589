"""What a run builds around its episodes: the API-key check, episode settings, the pooled clients.

Promise: ``_check_api_key`` refuses a run whose ``model.api_key_env`` variable is unset before
anything is written; ``_make_settings`` turns a plan into the episode runtime's settings;
``_make_clients`` builds ONE model client and ONE environment client for the whole run (replicated /
pooled when the config lists several servers); ``_close_env`` closes the environment client within
a grace period; ``_model_probe`` is the outage gate's model check and ``_completion_probe`` its
check after endpoint faults.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from shopsimrl_core._errors import ConfigError

if TYPE_CHECKING:
    from shopsimrl_core.runs.config._config import EvalConfig
    from shopsimrl_core.runs.execution._evaluation_options import EvaluationOptions
    from shopsimrl_core.runs.planning._plan import EvalPlan

__all__: list[str] = []


def _check_api_key(config: EvalConfig) -> None:
    name = config.model.api_key_env
    if name is not None and not os.environ.get(name):
        raise ConfigError(
            f"{config.source_label}: model.api_key_env: environment variable {name} is not set; "
            "export it, put it in the experiment.dotenv file, "
            "or set model.api_key_env: null for endpoints without auth",
            code="api-key-missing",
        )


def _make_settings(plan: EvalPlan) -> Any:
    from shopsimrl_core.episode._runtime import EpisodeSettings

    return EpisodeSettings(
        max_steps=plan.config.runtime.max_steps,
        persona=plan.persona,
        model_identity=plan.model_identity,
        environment_identity=plan.environment_identity,
        prompt_identity=dict(plan.prompt.identity),
        skills_identity=dict(plan.skills.identity),
        runtime=plan.runtime_identity,
        tool_call_content=plan.config.model.tool_call_content,
    )


def _make_clients(plan: EvalPlan, opts: EvaluationOptions) -> tuple[Any, Any]:
    from shopsimrl_core.adapters._replicas import ReplicatedChatModelClient
    from shopsimrl_core.runs.leases._env_pool import environment_client

    config = plan.config
    # Plain clients unless model.base_urls / environment.base_urls list replicas or servers (docs/scaling.md).
    model = ReplicatedChatModelClient.from_config(config.model, transport=opts.model_transport)
    env = environment_client(config.environment, persona=plan.persona, transport=opts.env_transport)
    return model, env


async def _close_env(env: Any, grace: float) -> None:
    """Close the environment client within about *grace* seconds.

    Resets still waiting after *grace* s lose their connection (the server then drops them)
    instead of holding the shutdown.
    """
    closing = asyncio.ensure_future(env.aclose())
    done, _ = await asyncio.wait([closing], timeout=grace)
    if not done:
        closing.cancel()
        await asyncio.gather(closing, return_exceptions=True)
        await env.aclose()


def _model_probe(plan: EvalPlan, opts: EvaluationOptions) -> Callable[[], Awaitable[Any]]:
    async def probe() -> None:
        from shopsimrl_core.runs.endpoints._preflight import _check_models

        await _check_models(plan.config, opts.model_transport)

    return probe


def _completion_probe(plan: EvalPlan, opts: EvaluationOptions) -> Callable[[], Awaitable[Any]]:
    """The outage gate's check after endpoint faults: one tiny completion must come back as a completion."""

    async def probe() -> None:
        from shopsimrl_core.runs.endpoints._preflight import _check_probe

        await _check_probe(plan.config, opts.model_transport)

    return probe


def _gate_probes(
    plan: EvalPlan, opts: EvaluationOptions, env: Any
) -> tuple[dict[str, Callable[[], Awaitable[Any]]], dict[str, float]]:
    """The outage gate's probes per service, and the probe timeouts that differ from its default."""
    from shopsimrl_core.runs.leases._outage import MODEL_ENDPOINT

    probes = {
        "environment": env.health,
        "model": _model_probe(plan, opts),
        MODEL_ENDPOINT: _completion_probe(plan, opts),
    }
    return probes, {MODEL_ENDPOINT: min(plan.config.model.timeout, 60.0) + 5.0}
