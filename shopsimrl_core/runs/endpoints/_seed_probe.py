"""Seed probe: does the model server reproduce a seeded request? (runtime-semantics §22.10)

``plan --probe-seed`` and ``run --probe-seed`` send ONE seeded request twice — the plan's first
job seed, the run's prompt and the home page's tools — and compare the two answers. The verdict
goes into ``manifest.execution.seed_honoured``; it is an execution fact, never fingerprinted.
``check_seed_width`` is the run preflight for servers that take 32-bit seeds only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: `shopsimrl run` does not import httpx
    import httpx

from shopsimrl_core.episode._trace import utc_now

__all__ = ["probe_seed", "check_seed_width", "widest_call_seed", "PROBE_INSTRUCTION"]

# A fixed, harmless first turn; the answer only has to be comparable, not useful.
PROBE_INSTRUCTION = "seed probe: search for a wool scarf"


def _answer(output: Any) -> dict[str, Any]:
    # Call ids and response ids are server bookkeeping, not sampled text: leave them out.
    return {
        "content": output.content,
        "reasoning": output.reasoning,
        "tool_calls": [(c.get("name"), c.get("raw_arguments")) for c in output.tool_calls],
        "finish_reason": output.finish_reason,
    }


def _client(plan: Any, transport: httpx.AsyncBaseTransport | None) -> Any:
    from shopsimrl_core.adapters._model import ChatModelClient

    return ChatModelClient.from_config(plan.config.model, transport=transport, send_seed=True, max_connections=1)


def _probe_request(plan: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    messages = [
        {"role": "system", "content": plan.prompt.system_prompt},
        {"role": "user", "content": plan.prompt.first_user_message(PROBE_INSTRUCTION, "")},
    ]
    return messages, plan.prompt.tool_schemas(True, [])


def widest_call_seed(plan: Any) -> int | None:
    """The largest per-call seed the plan can send (``job.seed + max_steps − 1``), or None without jobs."""
    if not plan.jobs:
        return None
    widest: int = max(job.seed for job in plan.jobs) + plan.config.runtime.max_steps - 1
    return widest


async def check_seed_width(plan: Any, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
    """Preflight of §22.10: refuse the run if the server does not accept its widest seed.

    When the run would send a seed >= 2**32 (and ``seed_mod_2_32`` is off), that seed is sent once;
    otherwise no request is made.

    Raises:
        ConfigError: code ``seed-too-wide`` — the server refused the wide seed.
    """
    from shopsimrl_core._errors import ConfigError
    from shopsimrl_core.adapters._model import ModelRequestError

    m = plan.config.model
    widest = widest_call_seed(plan)
    if not m.send_seed or m.seed_mod_2_32 or widest is None or widest < 2**32:
        return
    messages, tools = _probe_request(plan)
    try:
        async with _client(plan, transport) as client:
            await client.complete(messages, tools, seed=widest)
    except ModelRequestError as exc:
        raise ConfigError(
            f"{plan.config.source_label}: model.seed_mod_2_32: the run sends seeds up to {widest} (>= 2**32) and the "
            "model "
            f"server refused one ({exc}); set model.seed_mod_2_32: true to send them mod 2**32 (nothing was written)",
            code="seed-too-wide",
        ) from None


async def probe_seed(plan: Any, *, transport: httpx.AsyncBaseTransport | None = None) -> dict[str, Any]:
    """Send one seeded request twice to the plan's model endpoint and report whether it reproduced.

    The request always carries a seed (also when ``model.send_seed`` is false: the probe asks
    whether seeds *would* work). Returns ``{"seed_honoured": bool, "seed": int, "at": str,
    "temperature": float, "first": answer, "second": answer}`` where an answer is the content,
    reasoning, tool calls (name, raw arguments) and finish reason.

    Raises:
        ModelRequestError: the endpoint failed (status, transport, exhausted retries, missing key).
    """
    m = plan.config.model
    seed = plan.jobs[0].seed if plan.jobs else plan.config.experiment.seed
    messages, tools = _probe_request(plan)
    async with _client(plan, transport) as client:
        first = _answer(await client.complete(messages, tools, seed=seed))
        second = _answer(await client.complete(messages, tools, seed=seed))
    return {
        "seed_honoured": first == second,
        "seed": seed,
        "at": utc_now(),
        "temperature": m.temperature,
        "first": first,
        "second": second,
    }
