"""Endpoint replicas against real sandbox policy servers on loopback (and a relay that can take one down)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import pytest

from shopsimrl_core.adapters._model import ModelRequestError
from shopsimrl_core.adapters._replicas import ReplicaSet, ReplicatedChatModelClient

from .relay import Relay

MESSAGES = [{"role": "user", "content": "任务：买一部手机。当前页面：搜索页"}]


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def _client(urls: list[str], served_model: str, **options: Any) -> ReplicatedChatModelClient:
    return ReplicatedChatModelClient(replica_urls=urls, base_url=urls[0], model=served_model, api_key_env=None,
                                     trust_env=False, max_retries=4, retry_backoff_seconds=0.05, timeout=20, **options)


async def _complete_many(client: ReplicatedChatModelClient, count: int) -> list[Any]:
    return await asyncio.gather(*(client.complete(MESSAGES, None, seed=i) for i in range(count)))


def test_requests_go_to_both_replicas_and_name_the_one_that_answered(sandbox: Any, second_sandbox: Any) -> None:
    urls = [sandbox.policy_url, second_sandbox.policy_url]

    async def main() -> tuple[list[Any], list[dict[str, Any]]]:
        async with _client(urls, sandbox.served_model) as client:
            outputs = await _complete_many(client, 12)
            return outputs, client.replica_set.snapshot()

    outputs, snapshot = asyncio.run(main())
    answered_by = [o.metadata["replica"] for o in outputs]
    assert set(answered_by) == {u.rstrip("/") for u in urls}
    assert [s["answered"] for s in snapshot] == [answered_by.count(u) for u in urls]
    assert all(o.protocol_error is None or o.content is not None for o in outputs)
    # Twelve requests at once over two uncapped replicas: least-outstanding splits them evenly.
    assert sorted(s["answered"] for s in snapshot) == [6, 6]
    assert all(s["outstanding"] == 0 for s in snapshot)


def test_the_identity_is_the_endpoint_not_the_replicas(sandbox: Any, second_sandbox: Any) -> None:
    one = _client([sandbox.policy_url], sandbox.served_model)
    two = _client([sandbox.policy_url, second_sandbox.policy_url], sandbox.served_model)
    assert one.identity == two.identity
    assert one.identity["base_url"] == sandbox.policy_url.rstrip("/")


def test_per_replica_cap_makes_the_next_request_wait() -> None:
    async def main() -> list[str]:
        replicas = ReplicaSet(["http://a.invalid/v1", "http://b.invalid/v1"], max_in_flight=1)
        first, second = await replicas.acquire(), await replicas.acquire()
        assert {first.base_url, second.base_url} == {"http://a.invalid/v1", "http://b.invalid/v1"}
        third = asyncio.ensure_future(replicas.acquire())
        await asyncio.sleep(0.05)
        order = ["third waiting" if not third.done() else "third served early"]
        replicas.release(second, ok=True)
        got = await asyncio.wait_for(third, timeout=5)
        order.append(f"third on {got.base_url}")
        assert got is second
        assert max(r.outstanding for r in replicas.replicas) == 1
        return order

    assert asyncio.run(main()) == ["third waiting", "third on http://b.invalid/v1"]


def test_a_dead_replica_is_ejected_and_readmitted_after_a_probe(sandbox: Any, second_sandbox: Any) -> None:
    relay = Relay(_port(second_sandbox.policy_url)).start()
    try:
        relayed = relay.url + "/v1"
        urls = [sandbox.policy_url, relayed]

        async def main() -> dict[str, Any]:
            async with _client(urls, sandbox.served_model, replica_probe_seconds=0.1) as client:
                before = await _complete_many(client, 6)
                relay.down()
                during = await _complete_many(client, 8)  # each lands, on the live replica
                dead = client.replica_set.replicas[1]
                ejected = dead.ejected
                relay.up()
                for _ in range(200):
                    if not dead.ejected:
                        break
                    await asyncio.sleep(0.05)
                readmitted = not dead.ejected
                after = await _complete_many(client, 8)
                return {"before": before, "during": during, "after": after, "ejected": ejected,
                        "readmitted": readmitted, "ejections": dead.ejections, "failed": dead.failed}

        result = asyncio.run(main())
    finally:
        relay.stop()
    assert relayed in {o.metadata["replica"] for o in result["before"]}
    assert {o.metadata["replica"] for o in result["during"]} == {sandbox.policy_url.rstrip("/")}
    assert result["ejected"] and result["ejections"] == 1
    assert result["readmitted"]
    assert relayed in {o.metadata["replica"] for o in result["after"]}
    # The attempts that hit the dead replica (>= 2, to eject it) were retried on the live one.
    assert result["failed"] >= 2
    assert sum(o.attempts for o in result["during"]) == len(result["during"]) + result["failed"]


def test_non_retryable_status_is_not_retried_on_another_replica(sandbox: Any, second_sandbox: Any) -> None:
    async def main() -> tuple[str, list[dict[str, Any]]]:
        # An unknown model name: the sandbox answers 404 (not in §7.2's retryable set).
        async with _client([sandbox.policy_url, second_sandbox.policy_url], "no-such-model") as client:
            with pytest.raises(ModelRequestError) as info:
                await client.complete(MESSAGES, None, seed=1)
            return str(info.value), client.replica_set.snapshot()

    message, snapshot = asyncio.run(main())
    assert "non-retryable" in message
    assert sum(s["failed"] for s in snapshot) == 0 and sum(s["answered"] for s in snapshot) == 0
    assert not any(s["ejected"] for s in snapshot)


def test_all_replicas_down_is_a_model_request_error_not_a_hang(sandbox: Any) -> None:
    relay = Relay(_port(sandbox.policy_url)).start()
    relay.down()
    other = Relay(_port(sandbox.policy_url)).start()
    other.down()

    async def main() -> str:
        async with _client([relay.url + "/v1", other.url + "/v1"], sandbox.served_model) as client:
            with pytest.raises(ModelRequestError) as info:
                await client.complete(MESSAGES, None, seed=1)
            return str(info.value)

    try:
        message = asyncio.run(main())
    finally:
        relay.stop()
        other.stop()
    assert "after 4 attempts" in message and "ConnectError" in message
