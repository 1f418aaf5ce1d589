"""Fault knobs (shopsim_sandbox.faults) and their effect on the baseline policy endpoint."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import httpx
import pytest

from shopsim_sandbox.faults import (
    FaultConfig,
    FaultInjector,
    add_fault_arguments,
    fault_config_from_args,
    fault_config_to_argv,
)
from shopsim_sandbox.policy import SERVED_MODEL, build_policy_app, tools_for_state
from shopsim_sandbox.policy import server as policy_module

HOME = "页面：搜索首页\n\n页面能力：\n- 支持商品搜索\n"


def _body(n: int = 0, **extra: Any) -> dict[str, Any]:
    body = {"model": SERVED_MODEL, "seed": n, "stream": False,
            "messages": [{"role": "user", "content": f"购物任务：\n买一副耳机{n}\n\n" + HOME}],
            "tools": tools_for_state({"search_available": True, "actions": []}), "tool_choice": "auto"}
    body.update(extra)
    return body


def _post_many(app: Any, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as client:
            return [await client.post("/v1/chat/completions", json=b) for b in bodies]
    return asyncio.run(go())


# --- FaultConfig and the injector ------------------------------------------------------------------

def test_default_config_is_inactive_and_injects_nothing() -> None:
    injector = FaultInjector(None)
    assert not injector.config.active
    assert all(injector.decide("k").status is None for _ in range(50))


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"rate_429": 1.5}, "rate_429"),
    ({"slow_rate": -0.1}, "slow_rate"),
    ({"latency_ms": -1}, "latency_ms"),
    ({"rate_429": 0.6, "rate_500": 0.6}, "rate_429 + rate_500 + rate_503"),
    ({"malformed_kinds": ("text", "nonsense")}, "malformed_kinds"),
])
def test_invalid_config_names_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field.replace("+", r"\+")):
        FaultConfig(**kwargs)


def test_draws_are_deterministic_and_roughly_at_rate() -> None:
    config = FaultConfig(rate_429=0.2, rate_503=0.1, seed=5)
    first = [FaultInjector(config).decide(f"k{i}").status for i in range(2000)]
    second = [FaultInjector(config).decide(f"k{i}").status for i in range(2000)]
    assert first == second
    assert 300 <= first.count(429) <= 500 and 120 <= first.count(503) <= 280 and 500 not in first
    other_seed = [FaultInjector(FaultConfig(rate_429=0.2, rate_503=0.1, seed=6)).decide(f"k{i}").status
                  for i in range(2000)]
    assert other_seed != first


def test_retrying_the_same_key_gets_a_fresh_draw() -> None:
    injector = FaultInjector(FaultConfig(rate_500=0.5, seed=1))
    statuses = [injector.decide("same-request").status for _ in range(40)]
    assert 500 in statuses and None in statuses


def test_config_dict_round_trip_and_unknown_key() -> None:
    config = FaultConfig(rate_429=0.1, malformed_rate=0.2, malformed_kinds=("bad_json",), seed=3)
    assert FaultConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match="unknown key"):
        FaultConfig.from_dict({"rate_42": 1})


def test_cli_flags_round_trip() -> None:
    parser = argparse.ArgumentParser()
    add_fault_arguments(parser)
    assert fault_config_from_args(parser.parse_args([]), "policy") is None
    assert fault_config_from_args(parser.parse_args([]), "env") is None
    policy = FaultConfig(latency_ms=5.0, rate_429=0.1, rate_500=0.05, slow_rate=0.2, slow_ms=300.0,
                         malformed_rate=0.3, malformed_kinds=("text", "bad_json"), length_rate=0.1, seed=9)
    env = FaultConfig(rate_503=0.25, latency_ms=1.0, seed=9)
    args = parser.parse_args(fault_config_to_argv(policy, "policy") + fault_config_to_argv(env, "env"))
    assert fault_config_from_args(args, "policy") == policy
    assert fault_config_from_args(args, "env") == env


def test_cli_rejects_out_of_range_rate_with_flag_prefix() -> None:
    parser = argparse.ArgumentParser()
    add_fault_arguments(parser)
    with pytest.raises(ValueError, match=r"--env-\* fault flags: FaultConfig.rate_503"):
        fault_config_from_args(parser.parse_args(["--env-fault-503-rate", "2"]), "env")


# --- the policy endpoint under faults ----------------------------------------------------------------

@pytest.mark.parametrize("status", [429, 500, 503])
def test_status_faults_answer_with_openai_error_bodies(status: int) -> None:
    app = build_policy_app(faults=FaultConfig(**{f"rate_{status}": 1.0}))
    (response,) = _post_many(app, [_body()])
    assert response.status_code == status
    assert response.json()["object"] == "error" and response.json()["code"] == status


def test_status_faults_hit_a_fraction_and_retries_recover() -> None:
    app = build_policy_app(faults=FaultConfig(rate_503=0.5, seed=2))
    statuses = [r.status_code for r in _post_many(app, [_body(0)] * 30)]
    assert 503 in statuses and 200 in statuses


def test_malformed_text_kind() -> None:
    app = build_policy_app(faults=FaultConfig(malformed_rate=1.0, malformed_kinds=("text",)))
    choice = _post_many(app, [_body()])[0].json()["choices"][0]
    assert choice["message"]["tool_calls"] == [] and choice["message"]["content"].startswith("Action: search[")
    assert choice["finish_reason"] == "stop"


def test_malformed_two_calls_kind() -> None:
    app = build_policy_app(faults=FaultConfig(malformed_rate=1.0, malformed_kinds=("two_calls",)))
    calls = _post_many(app, [_body()])[0].json()["choices"][0]["message"]["tool_calls"]
    assert len(calls) == 2 and calls[0]["id"] != calls[1]["id"]


def test_malformed_bad_json_kind() -> None:
    app = build_policy_app(faults=FaultConfig(malformed_rate=1.0, malformed_kinds=("bad_json",)))
    (call,) = _post_many(app, [_body()])[0].json()["choices"][0]["message"]["tool_calls"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(call["function"]["arguments"])


def test_length_fault_has_no_tool_call() -> None:
    app = build_policy_app(faults=FaultConfig(length_rate=1.0))
    choice = _post_many(app, [_body()])[0].json()["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["tool_calls"] == []


def test_length_fault_in_a_stream() -> None:
    app = build_policy_app(faults=FaultConfig(length_rate=1.0))
    text = _post_many(app, [_body(stream=True)])[0].text
    payloads = [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: {")]
    finishes = [c["finish_reason"] for p in payloads for c in p["choices"] if c["finish_reason"]]
    assert finishes == ["length"] and not any("tool_calls" in c["delta"] for p in payloads for c in p["choices"])


def test_mixed_faults_are_reproducible() -> None:
    config = FaultConfig(rate_429=0.1, malformed_rate=0.3, length_rate=0.1, seed=11)
    bodies = [_body(n) for n in range(40)]

    def outcomes() -> list[tuple[int, str]]:
        return [(r.status_code, r.text if r.status_code != 200 else json.dumps(r.json()["choices"]))
                for r in _post_many(build_policy_app(faults=config), bodies)]
    first = outcomes()
    assert first == outcomes()
    assert len({status for status, _ in first}) == 2


def test_latency_and_slow_responses_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def record(seconds: float) -> None:
        slept.append(seconds)
        await real_sleep(0)
    monkeypatch.setattr(policy_module.asyncio, "sleep", record)
    app = build_policy_app(latency_ms=20, faults=FaultConfig(latency_ms=5, slow_rate=1.0, slow_ms=100))
    assert _post_many(app, [_body()])[0].status_code == 200
    assert slept == [pytest.approx(0.125)]
    slept.clear()
    assert _post_many(build_policy_app(), [_body()])[0].status_code == 200
    assert slept == []


def test_injector_memory_is_bounded_and_recent_keys_keep_counting() -> None:
    config = FaultConfig(rate_500=0.5, seed=3)
    bounded = FaultInjector(config, max_keys=4)
    unbounded = FaultInjector(config)
    sequence = ["a", "a", "b", "c", "a", "d", "e", "a"]
    assert [bounded.decide(k) for k in sequence] == [unbounded.decide(k) for k in sequence]
    assert len(bounded._seen) == 4
