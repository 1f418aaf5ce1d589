"""Several ShopSimulator servers as one environment, against real sandbox servers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import urlsplit

import pytest

from shopsimrl_core import ShopSimulatorError
from shopsimrl_core.adapters import ShopSimulatorClient
from shopsimrl_core.runs.leases._env_pool import EnvironmentPool

from .relay import Relay


def _client(url: str) -> ShopSimulatorClient:
    return ShopSimulatorClient(base_url=url, persona=False, timeout=10)


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def test_episodes_spread_by_free_slots_and_stay_on_their_server(sandbox: Any, second_sandbox: Any) -> None:
    async def main() -> tuple[list[str], list[str], dict[str, Any]]:
        a, b = _client(sandbox.env_url), _client(second_sandbox.env_url)
        async with EnvironmentPool([a, b]) as pool, contextlib.AsyncExitStack() as held:
            # Another run holds 4 of server A's slots.
            for task_id in range(4):
                foreign = await held.enter_async_context(a.session())
                await foreign.reset(task_id)
            first = [await held.enter_async_context(pool.session()) for _ in range(4)]
            for task_id, session in enumerate(first):
                await session.reset(100 + task_id)
            # Now both have 12 free (16 - 4): the next ones alternate.
            second = [await held.enter_async_context(pool.session()) for _ in range(4)]
            for task_id, session in enumerate(second):
                await session.reset(200 + task_id)
            for session in first + second:
                # Sent to the server holding the lease; on the other one this lease would be a 409.
                await session.interact("search[手机]")
            health = await pool.health()
            return [s.base_url for s in first], [s.base_url for s in second], health

    first, second, health = asyncio.run(main())
    a, b = sandbox.env_url.rstrip("/"), second_sandbox.env_url.rstrip("/")
    assert first == [b, b, b, b]
    assert sorted(second) == sorted([a, a, b, b])
    assert health["environment_slots"] == 32 and health["free_slots"] == 32 - 4 - 8
    assert [s["ok"] for s in health["servers"]] == [True, True]


def test_a_down_server_is_skipped_and_comes_back(sandbox: Any, second_sandbox: Any) -> None:
    relay = Relay(_port(second_sandbox.env_url)).start()

    async def main() -> dict[str, Any]:
        pool = EnvironmentPool([_client(sandbox.env_url), _client(relay.url)], probe_interval_s=0.1)
        async with pool:
            await pool.health()  # both up; equal free slots
            relay.down()
            during = []
            for task_id in range(4):
                async with pool.session() as session:
                    await session.reset(task_id)
                    await session.interact("search[手机]")
                    during.append(session.base_url)
            marked_down = pool.servers[1].down
            health_during = await pool.health()
            relay.up()
            for _ in range(200):
                if not pool.servers[1].down:
                    break
                await asyncio.sleep(0.05)
            back = not pool.servers[1].down
            after = []
            async with contextlib.AsyncExitStack() as held:
                for task_id in range(4):
                    session = await held.enter_async_context(pool.session())
                    await session.reset(10 + task_id)
                    after.append(session.base_url)
            return {"during": during, "down": marked_down, "health": health_during, "back": back, "after": after}

    try:
        result = asyncio.run(main())
    finally:
        relay.stop()
    a = sandbox.env_url.rstrip("/")
    assert result["during"] == [a] * 4
    assert result["down"]
    assert [s["ok"] for s in result["health"]["servers"]] == [True, False]
    assert result["health"]["environment_slots"] == 16
    assert result["back"]
    assert relay.url in result["after"] and a in result["after"]


def test_every_server_down_fails_health_and_reset(sandbox: Any) -> None:
    relays = [Relay(_port(sandbox.env_url)).start() for _ in range(2)]
    for relay in relays:
        relay.down()

    async def main() -> tuple[str, str]:
        async with EnvironmentPool([_client(r.url) for r in relays]) as pool:
            with pytest.raises(ShopSimulatorError) as health_error:
                await pool.health()
            with pytest.raises(ShopSimulatorError) as reset_error:
                async with pool.session() as session:
                    await session.reset(0)
            return str(health_error.value), str(reset_error.value)

    try:
        health_message, reset_message = asyncio.run(main())
    finally:
        for relay in relays:
            relay.stop()
    assert "health check failed" in health_message
    assert "request failed" in reset_message
