"""End-to-end episodes over REAL loopback HTTP: the sandbox environment server and its baseline
policy (OpenAI-compatible), both real uvicorn servers in a subprocess."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from shopsim_sandbox.faults import FaultConfig
from shopsim_sandbox.testing import SandboxServer
from shopsimrl_core import (
    ChatModelClient,
    EpisodeSettings,
    JsonSkillBank,
    NoSkills,
    ShopSimulatorClient,
    load_prompt,
    plan_jobs,
    run_episode,
)
from shopsimrl_core.episode._trace import is_complete, validate_trace

PROMPT = load_prompt()


def split_ids(split_file: Path, name: str) -> list[int]:
    return json.loads(Path(split_file).read_text(encoding="utf-8"))["splits"][name]["task_ids"]


async def run_jobs(env_url: str, policy_url: str | None, model_name: str | None, jobs, *, max_steps: int = 30,
                   stream: bool = False, skills=None, model_transport=None, max_retries: int = 3,
                   max_connections: int = 64) -> list[dict[str, Any]]:
    async with ChatModelClient(base_url=policy_url or "http://unused/v1", model=model_name or "m", api_key_env=None,
                               stream=stream, max_retries=max_retries, retry_backoff_seconds=0.0, timeout=30.0,
                               transport=model_transport, trust_env=False) as model, \
            ShopSimulatorClient(base_url=env_url, persona=True, timeout=30.0, max_connections=max_connections) as env:
        settings = EpisodeSettings(max_steps=max_steps, persona=True, model_identity=model.identity,
                                   environment_identity=env.identity)
        return await asyncio.gather(*[
            run_episode(job, model=model, env=env, prompt=PROMPT, skills=skills or NoSkills(), settings=settings)
            for job in jobs])


def free_slots(env_url: str) -> int:
    return httpx.get(env_url + "/healthz", trust_env=False).json()["free_slots"]


def assert_no_lease_fields(record: dict[str, Any]) -> None:
    text = json.dumps(record, ensure_ascii=False)
    assert '"lease_id"' not in text and '"env_idx"' not in text
    assert "private_task_instruction" not in text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "sse"])
def test_baseline_policy_episodes_end_to_end(sandbox, stream):
    jobs = plan_jobs(split_ids(sandbox.split_file, "val")[:8], split="val", experiment_seed=20260830)
    records = asyncio.run(run_jobs(sandbox.env_url, sandbox.policy_url, sandbox.served_model, jobs, stream=stream))
    assert [r["episode_id"] for r in records] == [j.episode_id for j in jobs]
    for record, job in zip(records, jobs):
        validate_trace(record)
        assert is_complete(record), record["error"]
        assert record["job"] == job.to_dict()
        assert_no_lease_fields(record)
        final = record["final"]
        assert final["termination_reason"] in ("purchase", "action_limit", "generation_length")
        assert final["reward"] == final["reward_detail"]["r_strict"]
        assert record["provenance"]["environment"]["environment_version"] == "shopsimulator-paper-aligned-v8"
        assert record["provenance"]["environment"]["observation_version"] == "shopping-observation-v7"
        assert record["steps"][0]["tools"][0]["function"]["name"] == "search"
        assert [s["request_seed"] for s in record["steps"]] == [job.seed + i for i in range(len(record["steps"]))]
        for step in record["steps"]:
            assert step["model"]["response_id"] and step["model"]["usage"] is not None
            assert set(step["timing"]) == {"model_ms", "env_ms", "harness_ms"}
            if step["action"] is not None and step["action"].startswith("click["):
                enum = step["tools"][-1]["function"]["parameters"]["properties"]["value"]["enum"]
                assert step["action"][6:-1] in enum
        # conversation replays the assistant/tool pairs; the last tool message is the final page
        assert record["conversation"][-1]["role"] == "tool"
        assert (
            record["conversation"][-1]["content"] == final["observation"] or final["termination_reason"] != "purchase"
        )
    assert sum(r["final"]["termination_reason"] == "purchase" for r in records) >= 1
    assert free_slots(sandbox.env_url) == sandbox.slots


def test_skills_reach_the_real_policy(sandbox):
    jobs = plan_jobs(split_ids(sandbox.split_file, "val")[:1], split="val", experiment_seed=1)
    bank = {"skills": [{"skill_id": "chunk-spec", "content": "先核对规格再购买。"}]}
    record = asyncio.run(
        run_jobs(sandbox.env_url, sandbox.policy_url, sandbox.served_model, jobs, skills=JsonSkillBank(bank))
    )[0]
    assert is_complete(record)
    assert record["selected_skills"][0]["metadata"] == {"selection_scope": "global"}
    assert '<skill id="chunk-spec" version="1">' in record["conversation"][0]["content"]


def test_step_limit_terminates_on_the_real_server(sandbox):
    jobs = plan_jobs(split_ids(sandbox.split_file, "val")[:2], split="val", experiment_seed=7)
    records = asyncio.run(run_jobs(sandbox.env_url, sandbox.policy_url, sandbox.served_model, jobs, max_steps=1))
    for record in records:
        validate_trace(record)
        assert record["status"] == "completed" and len(record["steps"]) == 1
        assert record["final"]["termination_reason"] == "action_limit"
        assert record["final"]["message"] == "Episode terminated: action_limit"
        assert record["final"]["reward"] == 0.0 and record["final"]["goal"]  # the goal arrives only at the end
    assert free_slots(sandbox.env_url) == sandbox.slots


def test_generation_length_terminates_on_the_real_server(sandbox):
    def truncated(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            json={
                "id": "r1",
                "choices": [
                    {"index": 0, "finish_reason": "length", "message": {"content": None, "reasoning_content": "…"}}
                ],
            },
        )

    jobs = plan_jobs(split_ids(sandbox.split_file, "val")[:1], split="val", experiment_seed=3)
    record = asyncio.run(run_jobs(sandbox.env_url, None, None, jobs, model_transport=httpx.MockTransport(truncated)))[0]
    validate_trace(record)
    assert record["status"] == "completed" and len(record["steps"]) == 1
    assert record["final"]["termination_reason"] == "generation_length"
    assert record["final"]["reward_detail"]["r_success"] == 0
    assert free_slots(sandbox.env_url) == sandbox.slots


def test_unknown_task_fails_at_reset_without_leaking_a_slot(sandbox):
    jobs = plan_jobs([10**8], split="val", experiment_seed=3)
    record = asyncio.run(run_jobs(sandbox.env_url, sandbox.policy_url, sandbox.served_model, jobs))[0]
    validate_trace(record)
    assert record["status"] == "failed" and record["error"]["stage"] == "reset"
    assert (
        record["error"]["type"] == "ShopSimulatorError" and "unknown or inactive task_id" in record["error"]["message"]
    )
    assert free_slots(sandbox.env_url) == sandbox.slots


def test_cancellation_releases_the_real_lease(sandbox):
    started = asyncio.Event()

    async def stuck(request: httpx.Request) -> httpx.Response:
        started.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def go():
        jobs = plan_jobs(split_ids(sandbox.split_file, "val")[:3], split="val", experiment_seed=5)
        task = asyncio.create_task(
            run_jobs(sandbox.env_url, None, None, jobs, model_transport=httpx.MockTransport(stuck))
        )
        await started.wait()
        await asyncio.sleep(0.05)
        assert free_slots(sandbox.env_url) < sandbox.slots  # leases are held while the model "thinks"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert free_slots(sandbox.env_url) == sandbox.slots


def test_model_failure_releases_the_real_lease(sandbox):
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": "bad key"}})

    jobs = plan_jobs(split_ids(sandbox.split_file, "val")[:2], split="val", experiment_seed=5)
    records = asyncio.run(run_jobs(sandbox.env_url, None, None, jobs, model_transport=httpx.MockTransport(refuse)))
    for record in records:
        assert record["error"]["stage"] == "model_step_1" and record["error"]["type"] == "ModelRequestError"
        assert record["reset"] is not None and record["error"]["message"].startswith("non-retryable model HTTP 401")
    assert free_slots(sandbox.env_url) == sandbox.slots


def test_faulty_policy_retries_and_repairs_over_real_http():
    """Real 429/500/503 answers are retried; malformed outputs become repair turns; length ends episodes."""
    faults = FaultConfig(rate_429=0.1, rate_500=0.05, rate_503=0.05, malformed_rate=0.2, length_rate=0.03, seed=11)
    with SandboxServer(catalog_size=300, slots=8, policy_faults=faults) as server:
        jobs = plan_jobs(split_ids(server.split_file, "val")[:10], split="val", experiment_seed=20260830)
        records = asyncio.run(run_jobs(server.env_url, server.policy_url, server.served_model, jobs, max_retries=8))
        for record in records:
            validate_trace(record)
            assert is_complete(record), record["error"]
        codes = {s["protocol_error"]["code"] for r in records for s in r["steps"] if "protocol_error" in s}
        assert codes and codes <= {"tool_call_count", "invalid_arguments_json"}
        repaired = [r for r in records if any("protocol_error" in s for s in r["steps"])]
        assert any(
            m["role"] in ("tool", "user") and m["content"].startswith('{"type":"tool_protocol_error"')
            for r in repaired
            for m in r["conversation"]
        )
        assert free_slots(server.env_url) == server.slots


def test_blocked_reset_does_not_starve_a_running_episode():
    """One slot, one pooled connection: the second episode's reset blocks in the server until the
    first episode releases, which needs a connection of its own (separate reset pool)."""
    with SandboxServer(catalog_size=200, slots=1, policy=True) as server:
        jobs = plan_jobs(split_ids(server.split_file, "val")[:3], split="val", experiment_seed=9)

        async def go():
            return await asyncio.wait_for(
                run_jobs(server.env_url, server.policy_url, server.served_model, jobs, max_connections=1), 120
            )

        records = asyncio.run(go())
        assert all(is_complete(r) for r in records)
        assert free_slots(server.env_url) == 1


def test_cancelling_a_blocked_reset_does_not_leak_its_slot():
    """Ctrl-C while a reset waits for a slot: the server may lease a slot to that reset after the
    cancellation; the runtime must wait for that answer and release the lease."""
    with SandboxServer(catalog_size=200, slots=1, policy=False) as server:
        started = asyncio.Event()

        async def stuck(request: httpx.Request) -> httpx.Response:
            started.set()
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

        async def go():
            jobs = plan_jobs(split_ids(server.split_file, "val")[:2], split="val", experiment_seed=5)
            task = asyncio.create_task(
                run_jobs(server.env_url, None, None, jobs, model_transport=httpx.MockTransport(stuck))
            )
            await started.wait()
            await asyncio.sleep(0.2)  # the second episode's reset is now blocked in the server
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(go())
        assert free_slots(server.env_url) == 1
