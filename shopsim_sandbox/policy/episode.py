"""Measuring the baseline: a minimal episode loop of its own, independent of ``shopsimrl_core``.

It lets the sandbox can report the policy's success rate without the runtime under test.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from shopsim_sandbox.policy.decide import _PERSONA_HEADER, _TASK_PREFIX, SERVED_MODEL

__all__ = ["measure_success", "play_episode", "tools_for_state"]

_SYSTEM_PROMPT = ("你在一个模拟购物网站上为用户购物。每轮只调用一个提供的工具：可搜索时用简洁关键词 search，"
                  "click 必须原样复制一个可点击值；购买前为每个规格轴选择取值。")
_SKILL_HEADER = (
    "[策略提示（可选参考）]\n下面是通用的购物策略提示，不一定适用于本次任务；采用前请对照当前任务和页面逐条核实。"
)


def _skill_block(skills: Sequence[str]) -> str:
    lines = [_SKILL_HEADER]
    for number, content in enumerate(skills, start=1):
        lines += [f'<skill id="hint-{number}" version="1">', content.strip(), "</skill>"]
    return "\n".join(lines)


def tools_for_state(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The runtime's dynamic tool schemas for an ``observation_state`` (runtime-semantics §9.2)."""
    tools: list[dict[str, Any]] = []
    if state.get("search_available") is True:
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": "search",
                    "description": "按关键词搜索商品（仅在页面提供搜索时可用）",
                    "parameters": {
                        "type": "object",
                        "properties": {"query": {"type": "string", "minLength": 1, "description": "简洁的商品关键词"}},
                        "required": ["query"],
                        "additionalProperties": False,
                    },
                },
            }
        )
    actions = state.get("actions") or []
    if actions:
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": "click",
                    "description": "点击当前页面上的一个按钮、商品或规格",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "value": {
                                "type": "string",
                                "enum": list(actions),
                                "description": "原样复制一个当前可点击值",
                            }
                        },
                        "required": ["value"],
                        "additionalProperties": False,
                    },
                },
            }
        )
    return tools


async def play_episode(
    env: Any,
    model: Any,
    task_id: int,
    *,
    persona: bool = True,
    seed: int = 0,
    model_name: str = SERVED_MODEL,
    max_steps: int = 30,
    skills: Sequence[str] = (),
    temperature: float = 0.0,
) -> dict[str, Any]:
    """Play one episode with ``httpx.AsyncClient`` s for the environment and the policy; returns the final result.

    ``env`` posts to ``/api/shop_agent``; ``model`` to ``/v1/chat/completions`` (base URL ending in
    ``/v1``). ``skills`` (hint texts) are appended to the system message as ``<skill>`` blocks, laid
    out like the runtime's skill block; none gives the bare prompt. The lease is always released.
    Raises ``RuntimeError`` on an HTTP error answer.
    """
    reset = (await env.post("/api/shop_agent", json={"action": "reset", "idx": task_id, "if_persona": persona})).json()
    result = reset["result"]
    if "error" in result:
        raise RuntimeError(f"reset {task_id}: {result['error']}")
    env_idx, lease = result["env_idx"], result["lease_id"]
    system = _SYSTEM_PROMPT
    if result.get("user_persona"):
        system += "\n\n" + _PERSONA_HEADER + json.dumps(result["user_persona"], ensure_ascii=False, sort_keys=True)
    if skills:
        system += "\n\n" + _skill_block(skills)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": _TASK_PREFIX + result["task_instruction"] + "\n\n" + result["observation"]},
    ]
    state = result["observation_state"]
    final: dict[str, Any] | None = None
    try:
        for step in range(1, max_steps + 1):
            tools = tools_for_state(state)
            answer = await model.post(
                "/chat/completions",
                json={
                    "model": model_name,
                    "messages": messages,
                    "stream": False,
                    "temperature": temperature,
                    "max_tokens": 1024,
                    "seed": seed + step - 1,
                    "tools": tools,
                    "tool_choice": "auto",
                },
            )
            if answer.status_code != 200:
                raise RuntimeError(f"model HTTP {answer.status_code}: {answer.text[:200]}")
            choice = answer.json()["choices"][0]
            calls = choice["message"].get("tool_calls") or []
            if choice.get("finish_reason") == "length" and len(calls) != 1:
                final = (
                    await env.post(
                        "/api/shop_agent",
                        json={
                            "action": "terminate",
                            "env_idx": env_idx,
                            "lease_id": lease,
                            "termination_reason": "generation_length",
                        },
                    )
                ).json()["result"]
                break
            if len(calls) != 1:
                messages.append({"role": "user", "content": "请只调用一个工具。"})
                continue
            call = calls[0]
            args = json.loads(call["function"]["arguments"])
            action = f"{call['function']['name']}[{str(next(iter(args.values()))).strip()}]"
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            step_result = (
                await env.post(
                    "/api/shop_agent",
                    json={"action": "interact", "env_idx": env_idx, "lease_id": lease, "response": action},
                )
            ).json()["result"]
            if "error" in step_result:
                raise RuntimeError(f"interact: {step_result['error']}")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": step_result["observation"]})
            if step_result["done"]:
                final = step_result
                break
            state = step_result["observation_state"]
        if final is None:
            final = (
                await env.post(
                    "/api/shop_agent",
                    json={
                        "action": "terminate",
                        "env_idx": env_idx,
                        "lease_id": lease,
                        "termination_reason": "action_limit",
                    },
                )
            ).json()["result"]
    finally:
        await env.post("/api/shop_agent", json={"action": "release_one", "env_idx": env_idx, "lease_id": lease})
    return final


async def measure_success(
    env_url: str,
    policy_url: str,
    task_ids: list[int],
    *,
    persona: bool = True,
    seed: int = 0,
    concurrency: int = 8,
    model_name: str = SERVED_MODEL,
    skills: Sequence[str] = (),
    temperature: float = 0.0,
) -> dict[str, Any]:
    """Play every task once over real HTTP and return ``{episodes, successes, success_rate, mean_reward}``.

    ``policy_url`` is the OpenAI base URL (ending in ``/v1``); ``skills`` and ``temperature`` as in
    ``play_episode``.
    """
    import httpx

    gate = asyncio.Semaphore(concurrency)
    async with (
        httpx.AsyncClient(base_url=env_url, timeout=60) as env,
        httpx.AsyncClient(base_url=policy_url, timeout=60) as model,
    ):

        async def one(task_id: int) -> dict[str, Any]:
            async with gate:
                return await play_episode(
                    env, model, task_id, persona=persona, seed=seed + task_id, model_name=model_name, skills=skills,
                    temperature=temperature,
                )

        finals = await asyncio.gather(*(one(t) for t in task_ids))
    successes = sum(int((f.get("reward_detail") or {}).get("r_success", 0)) for f in finals)
    rewards = [float(f.get("reward") or 0.0) for f in finals]
    n = len(finals)
    return {
        "episodes": n,
        "successes": successes,
        "success_rate": successes / n if n else 0.0,
        "mean_reward": sum(rewards) / n if n else 0.0,
        "purchases": sum(1 for f in finals if f.get("termination_reason") == "purchase"),
    }
