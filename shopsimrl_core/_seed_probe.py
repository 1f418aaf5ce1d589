"""Seed probe: does the model server reproduce a seeded request? (runtime spec §22.10)

``plan --probe-seed`` and ``run --probe-seed`` send ONE seeded request twice — the plan's first
job seed, the run's prompt and the home page's tools — and compare the two answers. The verdict
goes into ``manifest.execution.seed_honoured``; it is an execution fact, never fingerprinted.
"""

from __future__ import annotations

from typing import Any

import httpx

from ._trace import utc_now

__all__ = ["probe_seed", "PROBE_INSTRUCTION"]

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


async def probe_seed(plan: Any, *, transport: httpx.AsyncBaseTransport | None = None) -> dict[str, Any]:
    """Send one seeded request twice to the plan's model endpoint and report whether it reproduced.

    The request always carries a seed (also when ``model.send_seed`` is false: the probe asks
    whether seeds *would* work). Returns ``{"seed_honoured": bool, "seed": int, "at": str,
    "temperature": float, "first": answer, "second": answer}`` where an answer is the content,
    reasoning, tool calls (name, raw arguments) and finish reason.

    Raises:
        ModelRequestError: the endpoint failed (status, transport, exhausted retries, missing key).
    """
    from ._model import ChatModelClient

    m = plan.config.model
    seed = plan.jobs[0].seed if plan.jobs else plan.config.experiment.seed
    messages = [
        {"role": "system", "content": plan.prompt.system_prompt},
        {"role": "user", "content": plan.prompt.first_user_message(PROBE_INSTRUCTION, "")},
    ]
    tools = plan.prompt.tool_schemas(True, [])
    async with ChatModelClient(
        base_url=m.base_url,
        model=m.name,
        api_key_env=m.api_key_env,
        timeout=m.timeout,
        max_retries=m.max_retries,
        retry_backoff_seconds=m.retry_backoff_seconds,
        temperature=m.temperature,
        top_p=m.top_p,
        max_tokens=m.max_tokens,
        send_seed=True,
        tool_choice=m.tool_choice,
        extra_body=dict(m.extra_body),
        stream=m.stream,
        trust_env=m.trust_env,
        max_connections=1,
        transport=transport,
        http_transport=m.http_transport,
    ) as client:
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
