"""Acceptance 3: 64 concurrent leased episodes over real HTTP, then every slot is free again."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from shopsim_sandbox.testing import SandboxServer

EPISODES = 64
SLOTS = 24  # fewer slots than episodes, so resets also queue inside the server


async def _episode(client: httpx.AsyncClient, task_id: int, query: str) -> dict:
    async def call(body: dict) -> dict:
        response = await client.post("/api/shop_agent", json=body)
        assert response.status_code == 200, (body, response.text)
        return response.json()["result"]

    reset = await call({"action": "reset", "idx": task_id, "if_persona": False})
    lease = {"env_idx": reset["env_idx"], "lease_id": reset["lease_id"]}
    try:
        answer = await call({"action": "interact", **lease, "response": f"search[{query}]"})
        state = answer["observation_state"]
        answer = await call({"action": "interact", **lease, "response": f"click[{state['actions'][-1]}]"})
        state = answer["observation_state"]
        while not answer["done"] and state["missing_option_axes"]:
            axis = state["missing_option_axes"][0]
            value = state["available_options"][axis][0]
            answer = await call({"action": "interact", **lease, "response": f"click[{axis}={value}]"})
            state = answer["observation_state"]
        final = await call({"action": "interact", **lease, "response": "click[buy now]"})
        assert final["done"] and final["termination_reason"] == "purchase"
        assert final["reward"] == final["reward_detail"]["r_strict"]
        return final
    finally:
        await call({"action": "release_one", **lease})


async def _run_all(url: str, tasks: list[tuple[int, str]]) -> list[dict]:
    limits = httpx.Limits(max_connections=EPISODES, max_keepalive_connections=EPISODES)
    async with httpx.AsyncClient(base_url=url, timeout=120.0, limits=limits, trust_env=False) as client:
        return await asyncio.gather(*(_episode(client, task_id, query) for task_id, query in tasks))


@pytest.mark.slow
def test_64_concurrent_leased_episodes_release_every_slot() -> None:
    with SandboxServer(catalog_size=400, slots=SLOTS, policy=False) as server:
        from shopsim_sandbox.catalog import load_catalog

        catalog = load_catalog(server.catalog_file)
        tasks = [(task.task_id, task.goal["name"]) for task in list(catalog.tasks.values())[:EPISODES]]
        results = asyncio.run(_run_all(server.env_url, tasks))
        assert len(results) == EPISODES
        health = httpx.get(server.env_url + "/healthz", trust_env=False).json()
        assert health["free_slots"] == health["environment_slots"] == SLOTS
