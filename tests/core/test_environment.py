"""Environment adapter (runtime spec §8, HTTP contract §4–§6, §18) with httpx.MockTransport."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from test_episode_fakes import LEASE, FakeShop

from shopsimrl_core import LeaseError, ShopSimulatorClient, ShopSimulatorError
from shopsimrl_core.adapters._environment import sanitize_payload


def client(handler, **kwargs) -> ShopSimulatorClient:
    return ShopSimulatorClient(base_url="http://env.test/", persona=kwargs.pop("persona", False),
                               transport=httpx.MockTransport(handler), **kwargs)


def run(coro):
    return asyncio.run(coro)


def test_requests_follow_the_contract_and_lease_is_released():
    shop = FakeShop()

    async def go():
        async with client(shop) as env:
            async with env.session() as session:
                reset = await session.reset(19)
                assert reset["lease_id"] == LEASE and session.holds_lease
                await session.interact("search[围巾]")
                final = await session.terminate("action_limit")
                assert final["done"] is True
            assert not session.holds_lease
    run(go())
    assert shop.requests == [
        {
            "action": "reset",
            "idx": 19,
            "if_persona": False,
            "include_private_goal": False,
            "interaction_mode": "single_turn",
        },
        {"action": "interact", "env_idx": 3, "lease_id": LEASE, "response": "search[围巾]"},
        {"action": "terminate", "env_idx": 3, "lease_id": LEASE, "termination_reason": "action_limit"},
        {"action": "release_one", "env_idx": 3, "lease_id": LEASE},
    ]


def test_identity_and_url():
    env = client(FakeShop(), persona=True)
    assert env.identity == {
        "adapter": "shopsimulator_http",
        "base_url": "http://env.test",
        "persona": True,
        "interaction_mode": "single_turn",
    }
    assert env.url == "http://env.test/api/shop_agent"


def test_reset_has_no_read_timeout_other_calls_do():
    env = ShopSimulatorClient(base_url="http://x", persona=True, timeout=7.0)
    step, reset = env._clients()
    assert reset.read_timeout is None and reset.timeout == 7.0
    assert step.read_timeout == 7.0 and step.timeout == 7.0
    assert step.trust_env is False and reset.trust_env is False
    assert type(step).__name__ == "H1Engine" and step is not reset  # two pools
    run(env.aclose())


def test_sanitize_removes_lease_and_private_reset_keys():
    payload = {
        "env_idx": 1,
        "lease_id": "x",
        "observation": "o",
        "private_task_instruction": "s",
        "goal_options": [],
        "reason_key": None,
    }
    assert sanitize_payload(payload, reset=True) == {"observation": "o"}
    assert sanitize_payload({"env_idx": 1, "lease_id": "x", "goal": {"a": 1}}) == {"goal": {"a": 1}}


async def _one(shop, body: str = "search[x]", **kwargs):
    async with client(shop, **kwargs) as env:
        async with env.session() as session:
            await session.reset(19)
            return await session.interact(body)


@pytest.mark.parametrize(
    ("response", "error", "match"),
    [
        (
            httpx.Response(200, json={"result": {"error": "No JSON data provided"}}),
            ShopSimulatorError,
            "No JSON data provided",
        ),
        (
            httpx.Response(500, json={"result": {"error": "episode is already terminated; reset before stepping"}}),
            ShopSimulatorError,
            "HTTP 500: episode is already terminated",
        ),
        (
            httpx.Response(409, json={"result": {"error": "stale or invalid lease for environment 3"}}),
            LeaseError,
            "409",
        ),
        (httpx.Response(200, text="not json"), ShopSimulatorError, "no result object"),
        (  # RFC 8259 has no NaN and a trace line cannot hold one: refused where it arrives, and named
            httpx.Response(200, content=b'{"result": {"observation": "o", "reward": NaN}}'),
            ShopSimulatorError,
            r"no result object \(the body is not JSON: NaN is not a finite number",
        ),
        (
            httpx.Response(200, content=b'{"result": {"observation": "o", "reward": 1e400}}'),
            ShopSimulatorError,
            "1e400 is not a finite number",
        ),
        (httpx.Response(200, json={"result": {"observation": 5}}), ShopSimulatorError, "no string observation"),
        (
            httpx.Response(200, json={"result": {"observation": "o", "observation_state": {}}}),
            ShopSimulatorError,
            "observation_version",
        ),
    ],
)
def test_interact_errors(response, error, match):
    shop = FakeShop(fail={"interact": response})
    with pytest.raises(error, match=match) as info:
        run(_one(shop))
    if error is ShopSimulatorError:
        assert not isinstance(info.value, LeaseError)
    assert shop.requests[-1]["action"] == "release_one"


def test_interact_is_never_retried_on_transport_error():
    shop = FakeShop()

    def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["action"] == "interact":
            shop.requests.append(json.loads(request.content))
            raise httpx.ReadTimeout("lost response")
        return shop(request)

    with pytest.raises(ShopSimulatorError, match="interact request failed: ReadTimeout"):
        run(_one(handler))
    assert shop.actions_of("interact") == ["search[x]"]
    assert shop.requests[-1]["action"] == "release_one"


def test_terminate_checks_reason_and_echo():
    shop = FakeShop(
        fail={
            "terminate": httpx.Response(
                200,
                json={
                    "result": {
                        "done": True,
                        "observation": "o",
                        "observation_state": {"observation_version": "shopping-observation-v7"},
                        "termination_reason": "action_limit",
                    }
                },
            )
        }
    )

    async def go():
        async with client(shop) as env, env.session() as session:
            await session.reset(1)
            with pytest.raises(ValueError):
                await session.terminate("finish")
            with pytest.raises(ShopSimulatorError, match="echoed termination_reason 'action_limit'"):
                await session.terminate("generation_length")

    run(go())


def test_one_lease_per_session_and_calls_need_a_lease():
    async def go():
        async with client(FakeShop()) as env, env.session() as session:
            with pytest.raises(ShopSimulatorError, match="without a lease"):
                await session.interact("search[x]")
            await session.reset(1)
            with pytest.raises(ShopSimulatorError, match="already holds a lease"):
                await session.reset(2)

    run(go())


def test_release_409_is_ignored_and_close_is_idempotent():
    shop = FakeShop(release_status=409)

    async def go():
        async with client(shop) as env:
            session = env.session()
            await session.reset(1)
            await session.close()
            await session.close()

    run(go())
    assert [r["action"] for r in shop.requests] == ["reset", "release_one"]


def fast(env: ShopSimulatorClient) -> ShopSimulatorClient:
    """The client with its backoff sleeps recorded instead of slept."""
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    env.sleep = sleep
    env.slept = sleeps  # type: ignore[attr-defined]
    return env


def test_release_error_other_than_409_is_raised_after_its_retries():
    shop = FakeShop(fail={"release_one": httpx.Response(500, json={"result": {"error": "release failed"}})})

    async def go():
        async with fast(client(shop)) as env:
            session = env.session()
            await session.reset(1)
            with pytest.raises(ShopSimulatorError, match=r"release_one failed with HTTP 500: release failed \(after 4"):
                await session.close()

    run(go())
    assert [r["action"] for r in shop.requests] == ["reset"] + ["release_one"] * 4


def test_a_release_whose_500_freed_the_slot_is_released_by_its_retry():
    shop = FakeShop(release_status=500)  # frees the lease, then answers 500: the retry gets 409 = released

    async def go():
        async with fast(client(shop)) as env:
            session = env.session()
            await session.reset(1)
            await session.close()

    run(go())
    assert [r["action"] for r in shop.requests] == ["reset", "release_one", "release_one"]


class Flaky:
    """Answers the listed failures for an action, in order, then passes the request on to *shop*."""

    def __init__(self, shop: FakeShop, **failures: list) -> None:
        self.shop = shop
        self.failures = {action: list(answers) for action, answers in failures.items()}
        self.seen: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        action = json.loads(request.content)["action"]
        self.seen.append(action)
        pending = self.failures.get(action)
        if pending:
            answer = pending.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return self.shop(request)


def _fault(status: int, error: str = "injected fault") -> httpx.Response:
    return httpx.Response(status, json={"result": {"error": error}})


@pytest.mark.parametrize(
    "failures",
    [
        [_fault(503), _fault(500), _fault(502)],
        [httpx.ConnectError("refused"), httpx.RemoteProtocolError("Server disconnected"), _fault(504)],
        [_fault(429)],
    ],
    ids=["5xx", "transport", "429"],
)
def test_reset_is_repeated_on_5xx_and_transport_failures(failures):
    shop = FakeShop()
    flaky = Flaky(shop, reset=failures)

    async def go():
        async with fast(client(flaky)) as env:
            async with env.session() as session:
                await session.reset(19)
            return env

    env = run(go())
    assert flaky.seen == ["reset"] * (len(failures) + 1) + ["release_one"]
    assert env.retries == len(failures) and len(env.slept) == len(failures)
    assert all(0.0 < s <= 2.0 for s in env.slept)


def test_a_reset_refused_by_the_contract_is_not_repeated():
    shop = FakeShop(fail={"reset": _fault(500, "'unknown or inactive task_id 7'")})

    async def go():
        async with fast(client(shop)) as env:
            with pytest.raises(ShopSimulatorError, match="unknown or inactive task_id 7"):
                await env.session().reset(7)

    run(go())
    assert [r["action"] for r in shop.requests] == ["reset"]


def test_interact_is_repeated_only_when_the_server_cannot_have_acted():
    shop = FakeShop()
    stale = httpx.RemoteProtocolError("x")
    flaky = Flaky(shop, interact=[_fault(503), _fault(429), httpx.ConnectError("refused")])

    async def go():
        async with fast(client(flaky)) as env:
            async with env.session() as session:
                await session.reset(19)
                await session.interact("search[围巾]")
                for answer in (_fault(500), _fault(502), _fault(504), stale):
                    flaky.failures["interact"] = [answer]
                    with pytest.raises(ShopSimulatorError) as caught:
                        await session.interact("click[p1]")
                    assert "after" not in str(caught.value)  # one try: it may have been applied

    run(go())
    assert shop.actions_of("interact") == ["search[围巾]"]  # the failed ones never reached the shop
    assert flaky.seen.count("interact") == 4 + 4


def test_retry_attempts_bound_the_tries():
    shop = FakeShop(fail={"reset": _fault(503)})

    async def go():
        async with fast(client(shop, retry_attempts=2)) as env:
            with pytest.raises(ShopSimulatorError, match=r"HTTP 503: injected fault \(after 2 tries\)"):
                await env.session().reset(1)

    run(go())
    assert len(shop.requests) == 2
    with pytest.raises(ValueError, match="retry_attempts"):
        client(shop, retry_attempts=0)


def test_health_is_repeated_on_5xx():
    answers = [httpx.Response(503, text="busy"), httpx.Response(200, json={"ready": True, "free_slots": 2})]

    def handler(request: httpx.Request) -> httpx.Response:
        return answers.pop(0)

    async def go():
        async with fast(client(handler)) as env:
            return await env.health(), env.retries

    assert run(go()) == ({"ready": True, "free_slots": 2}, 1)


def test_environment_version_pinning():
    shop = FakeShop()
    with pytest.raises(
        ShopSimulatorError, match="environment_version 'shopsimulator-paper-aligned-v8' is not supported"
    ):
        run(_one(shop, expected_environment_versions={"other-v1"}))
    assert shop.requests[-1]["action"] == "release_one"
    # an empty collection switches the observation-version check off
    result = run(_one(FakeShop(observation_version="custom-v1"), expected_observation_versions=()))
    assert result["observation_state"]["observation_version"] == "custom-v1"


def test_health_and_closed_client():
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/healthz"
        return httpx.Response(200, json={"ready": True, "free_slots": 8})

    async def go():
        env = client(handler)
        assert (await env.health())["ready"] is True
        await env.aclose()
        with pytest.raises(RuntimeError, match="closed"):
            await env.health()

    run(go())


def test_health_unreachable_is_a_one_line_error():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    with pytest.raises(ShopSimulatorError, match="is the server at http://env.test running"):
        run(client(handler).health())
