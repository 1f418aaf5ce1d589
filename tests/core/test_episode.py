"""Episode runtime (runtime spec §9, §12) against in-process fakes (httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from test_episode_fakes import BUY_SCRIPT, FakeShop, ScriptedModel, reply, tool_call

from shopsimrl_core import EpisodeJob, EpisodeSettings, JsonSkillBank, NoSkills, load_prompt, run_episode
from shopsimrl_core.adapters._environment import ShopSimulatorClient
from shopsimrl_core.adapters._json import dumps_line
from shopsimrl_core.adapters._model import ChatModelClient
from shopsimrl_core.episode._runtime import DECODED_PARTS
from shopsimrl_core.episode._trace import is_complete, validate_trace

JOB = EpisodeJob(task_id=19, sample_id=0, seed=2694671387, split="val")
PROMPT = load_prompt()


def run(shop: FakeShop, model: Any, *, max_steps: int = 30, skills=None, send_seed: bool = True, job: EpisodeJob = JOB):
    async def go():
        async with ChatModelClient(base_url="http://model.test/v1", model="m", api_key_env=None, max_retries=2,
                                   retry_backoff_seconds=0.0, send_seed=send_seed,
                                   transport=httpx.MockTransport(model)) as client, \
                ShopSimulatorClient(base_url="http://env.test", persona=True,
                                    transport=httpx.MockTransport(shop)) as env:
            settings = EpisodeSettings(max_steps=max_steps, persona=True, model_identity=client.identity,
                                       environment_identity=env.identity)
            return await run_episode(job, model=client, env=env, prompt=PROMPT, skills=skills or NoSkills(),
                                     settings=settings)
    return asyncio.run(go())


def leaked_lease_fields(record: dict[str, Any]) -> bool:
    text = json.dumps(record, ensure_ascii=False)
    return "lease_id" in text or "env_idx" in text


def test_purchase_episode_completes_with_full_trace():
    shop, model = FakeShop(), ScriptedModel(*BUY_SCRIPT)
    record = run(shop, model)
    validate_trace(record)
    assert is_complete(record) and record["error"] is None
    assert list(record)[:14] == [
        "schema_version",
        "episode_id",
        "status",
        "job",
        "provenance",
        "started_at",
        "ended_at",
        "duration_ms",
        "reset",
        "selected_skills",
        "conversation",
        "steps",
        "final",
        "error",
    ]
    assert record["episode_id"] == "task-000019__sample-000"
    assert record["job"] == {"task_id": 19, "sample_id": 0, "seed": 2694671387, "split": "val"}
    # per-call seeds seed, seed+1, ...
    assert [r["seed"] for r in model.requests] == [2694671387 + i for i in range(4)]
    assert [s["request_seed"] for s in record["steps"]] == [2694671387 + i for i in range(4)]
    # dynamic tools: home page offers only search; click enum equals the page's actions
    first_tools = model.requests[0]["tools"]
    assert [t["function"]["name"] for t in first_tools] == ["search"]
    assert model.requests[1]["tools"][0]["function"]["parameters"]["properties"]["value"]["enum"] == [
        "back to search",
        "p1",
    ]
    assert [s["action"] for s in record["steps"]] == [
        "search[白色 围巾]",
        "click[p1]",
        "click[颜色=白]",
        "click[buy now]",
    ]
    assert shop.actions_of("interact") == ["search[白色 围巾]", "click[p1]", "click[颜色=白]", "click[buy now]"]
    # private goal never requested; lease fields and private reset keys never stored
    assert shop.requests[0] == {
        "action": "reset",
        "idx": 19,
        "if_persona": True,
        "include_private_goal": False,
        "interaction_mode": "single_turn",
    }
    assert not leaked_lease_fields(record)
    assert shop.requests[-1]["action"] == "release_one"
    # conversation: system, user, then assistant/tool pairs; reasoning is never replayed
    conversation = record["conversation"]
    assert [m["role"] for m in conversation] == ["system", "user"] + ["assistant", "tool"] * 4
    assert conversation[1]["content"] == "购物任务：\n买一条白色围巾\n\n" + record["reset"]["observation"]
    assert '用户个人文档：\n{"性别": "女"}' in conversation[0]["content"]
    assert all("reasoning" not in json.dumps(m) and "reasoning_content" not in m for m in conversation)
    assert conversation[2]["tool_calls"][0] == {
        "id": "call-1",
        "type": "function",
        "function": {"name": "search", "arguments": '{"query": " 白色 围巾 "}'},
    }
    assert conversation[-1] == {"role": "tool", "tool_call_id": "call-4", "content": "页面：terminal\n"}
    assert model.requests[3]["messages"] == conversation[:8]  # the full history is sent each turn
    # step records
    first = record["steps"][0]
    assert first["observation"] == conversation[1]["content"]
    assert first["model"]["reasoning"] == "想一想"
    assert set(first["timing"]) == {"model_ms", "env_ms", "harness_ms"} and all(
        v >= 0 for v in first["timing"].values()
    )
    assert record["steps"][1]["observation"] == "页面：search_results\n"
    assert record["final"]["termination_reason"] == "purchase" and record["final"]["reward"] == 1.0
    assert record["steps"][-1]["environment"] == record["final"]
    # provenance
    assert record["provenance"]["environment"] == {
        "adapter": "shopsimulator_http",
        "base_url": "http://env.test",
        "persona": True,
        "interaction_mode": "single_turn",
        "environment_version": "shopsimulator-paper-aligned-v8",
        "observation_version": "shopping-observation-v7",
    }
    assert record["provenance"]["prompt"] == PROMPT.identity
    assert record["provenance"]["skills"] == {"provider": "none"}
    assert record["provenance"]["runtime"] == {"max_steps": 30, "action_protocol": PROMPT.action_protocol}
    assert record["duration_ms"] > 0 and set(record["timing"]) >= {"model_ms", "env_ms", "harness_ms", "reset_ms"}


def test_no_seed_sent_when_send_seed_false():
    model = ScriptedModel(*BUY_SCRIPT)
    record = run(FakeShop(), model, send_seed=False)
    assert all("seed" not in r for r in model.requests)
    assert [s["request_seed"] for s in record["steps"]] == [None] * 4


def test_mixed_content_repair_goes_to_tool_messages_and_uses_a_step():
    model = ScriptedModel(reply(tool_call("search", {"query": "围巾"}), content="我来搜索。"), *BUY_SCRIPT)
    shop = FakeShop()
    record = run(shop, model)
    assert record["status"] == "completed" and len(record["steps"]) == 5
    bad = record["steps"][0]
    assert bad["action"] is None and bad["environment"] is None
    assert bad["protocol_error"] == {
        "code": "mixed_content",
        "message": "model must not mix natural-language content with an action tool call",
    }
    assert bad["model"]["protocol_error"] == bad["protocol_error"]
    assert bad["model"]["raw_response"]["choices"][0]["message"]["content"] == "我来搜索。"
    assert bad["protocol_feedback"] == {
        "type": "tool_protocol_error",
        "code": "mixed_content",
        "message": bad["protocol_error"]["message"],
        "instruction": PROMPT.repair_instruction,
        "available_tools": ["search"],
    }
    conversation = record["conversation"]
    assert conversation[2] == {
        "role": "assistant",
        "content": "我来搜索。",
        "tool_calls": [
            {"id": "call-1", "type": "function", "function": {"name": "search", "arguments": '{"query": "围巾"}'}}
        ],
    }
    assert conversation[3]["role"] == "tool" and conversation[3]["tool_call_id"] == "call-1"
    assert json.loads(conversation[3]["content"]) == bad["protocol_feedback"]
    assert conversation[3]["content"].startswith('{"type":"tool_protocol_error","code":"mixed_content"')
    # nothing reached the environment on the bad turn; the next turn is on the same page
    assert shop.actions_of("interact")[0] == "search[白色 围巾]"
    assert record["steps"][1]["observation"] == bad["observation"]
    assert [r["seed"] for r in model.requests][:2] == [JOB.seed, JOB.seed + 1]


def test_text_only_turn_repairs_with_user_message():
    model = ScriptedModel(reply(content="Action: click[buy now]", finish_reason="stop"), *BUY_SCRIPT)
    record = run(FakeShop(), model)
    step = record["steps"][0]
    assert step["protocol_error"] == {
        "code": "tool_call_count",
        "message": "model must return exactly one tool call, got 0",
    }
    conversation = record["conversation"]
    assert conversation[2] == {"role": "assistant", "content": "Action: click[buy now]"}
    assert conversation[3]["role"] == "user" and json.loads(conversation[3]["content"])["code"] == "tool_call_count"


def test_blank_turn_repairs_with_user_message_only():
    model = ScriptedModel(reply(content="  ", finish_reason="stop"), *BUY_SCRIPT)
    record = run(FakeShop(), model)
    assert record["steps"][0]["protocol_error"]["code"] == "tool_call_count"
    assert record["conversation"][2]["role"] == "user"


def test_two_calls_get_one_tool_feedback_each():
    model = ScriptedModel(
        reply(tool_call("search", {"query": "a"}), tool_call("search", {"query": "b"}, "call-b")), *BUY_SCRIPT
    )
    record = run(FakeShop(), model)
    conversation = record["conversation"]
    assert [m["role"] for m in conversation[2:5]] == ["assistant", "tool", "tool"]
    assert [m["tool_call_id"] for m in conversation[3:5]] == ["call-1", "call-b"]
    assert record["steps"][0]["model"]["tool_calls"][1]["arguments"] == {"query": "b"}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (tool_call("search", {"q": "x"}), "search tool requires exactly one query argument"),
        (tool_call("search", {"query": "x", "page": 2}), "search tool requires exactly one query argument"),
        (tool_call("search", {"query": "   "}), "search query must be a non-empty string"),
        (tool_call("search", {"query": 5}), "search query must be a non-empty string"),
    ],
)
def test_bad_search_arguments_are_invalid_tool_arguments(call, message):
    record = run(FakeShop(), ScriptedModel(reply(call), *BUY_SCRIPT))
    assert record["steps"][0]["protocol_error"] == {"code": "invalid_tool_arguments", "message": message}
    assert record["steps"][0]["model"]["raw_response"] is not None


def test_bad_click_arguments_are_invalid_tool_arguments():
    script = [BUY_SCRIPT[0], reply(tool_call("click", {"value": " "}, "c")), *BUY_SCRIPT[1:]]
    record = run(FakeShop(), ScriptedModel(*script))
    assert record["steps"][1]["protocol_error"] == {
        "code": "invalid_tool_arguments",
        "message": "click value must be a non-empty string",
    }
    script = [BUY_SCRIPT[0], reply(tool_call("click", {"value": "p1", "x": 1}, "c")), *BUY_SCRIPT[1:]]
    record = run(FakeShop(), ScriptedModel(*script))
    assert record["steps"][1]["protocol_error"]["message"] == "click tool requires exactly one value argument"


def test_unavailable_tool_is_a_protocol_error():
    script = [reply(tool_call("click", {"value": "p1"})), *BUY_SCRIPT]
    record = run(FakeShop(), ScriptedModel(*script))
    assert record["steps"][0]["protocol_error"]["code"] == "unavailable_tool"
    assert record["status"] == "completed"


def test_click_outside_enum_goes_to_the_environment():
    script = [BUY_SCRIPT[0], reply(tool_call("click", {"value": "Buy Now"}, "c")), *BUY_SCRIPT[1:]]
    shop = FakeShop()
    record = run(shop, ScriptedModel(*script))
    step = record["steps"][1]
    assert "protocol_error" not in step and step["action"] == "click[Buy Now]"
    assert step["environment"]["action_feedback"]["valid"] is False
    assert "click[Buy Now]" in shop.actions_of("interact")


def test_step_limit_terminates_with_action_limit():
    shop = FakeShop()
    record = run(shop, ScriptedModel(*BUY_SCRIPT[:2]), max_steps=2)
    validate_trace(record)
    assert record["status"] == "completed" and len(record["steps"]) == 2
    assert shop.actions_of("terminate") == ["action_limit"]
    assert (
        record["final"]["termination_reason"] == "action_limit" and record["final"]["reward_detail"]["r_strict"] == 0.0
    )
    assert record["provenance"]["runtime"]["max_steps"] == 2


def test_protocol_errors_count_against_the_step_limit():
    shop = FakeShop()
    record = run(shop, ScriptedModel(reply(content="hello", finish_reason="stop")), max_steps=3)
    assert len(record["steps"]) == 3 and all("protocol_error" in s for s in record["steps"])
    assert shop.actions_of("interact") == [] and shop.actions_of("terminate") == ["action_limit"]
    assert record["status"] == "completed"


def test_generation_length_completes_with_zero_reward_in_one_step():
    shop = FakeShop()
    model = ScriptedModel(reply(content=None, finish_reason="length", reasoning="很长的思考"))
    record = run(shop, model)
    validate_trace(record)
    assert record["status"] == "completed" and len(record["steps"]) == 1 and len(model.requests) == 1
    step = record["steps"][0]
    assert step["policy_failure"] == {
        "code": "generation_length",
        "message": "model generation reached max_tokens before returning exactly one valid tool call",
    }
    assert step["action"] is None and step["environment"] is None and "protocol_error" not in step
    assert step["model"]["reasoning"] == "很长的思考"
    assert shop.actions_of("terminate") == ["generation_length"]
    assert record["final"]["termination_reason"] == "generation_length"
    assert all(v == 0 for k, v in record["final"]["reward_detail"].items() if k.startswith("r_"))
    assert record["conversation"][2:] == []  # no repair turn


def test_model_request_error_fails_episode_and_releases_lease():
    shop = FakeShop()
    model = ScriptedModel(BUY_SCRIPT[0], httpx.Response(400, text="bad request"))
    record = run(shop, model)
    validate_trace(record)
    assert record["status"] == "failed" and record["final"] is None
    assert record["error"]["stage"] == "model_step_2" and record["error"]["type"] == "ModelRequestError"
    assert record["error"]["message"] == "non-retryable model HTTP 400: bad request"
    assert "Traceback" in record["error"]["traceback"]
    assert len(record["steps"]) == 1
    assert shop.requests[-1]["action"] == "release_one"


def test_environment_error_fails_at_environment_stage():
    shop = FakeShop(fail={"interact": httpx.Response(500, json={"result": {"error": "boom"}})})
    record = run(shop, ScriptedModel(*BUY_SCRIPT))
    assert record["error"]["stage"] == "environment_step_1" and record["error"]["type"] == "ShopSimulatorError"
    assert "boom" in record["error"]["message"]
    assert shop.requests[-1]["action"] == "release_one"
    assert shop.actions_of("interact") == ["search[白色 围巾]"]  # never retried


def test_a_nan_from_the_environment_fails_the_step_and_never_reaches_the_trace_line():
    shop = FakeShop()

    def nan_reward(request: httpx.Request) -> httpx.Response:
        answer = shop(request)
        body = json.loads(answer.content)
        if body.get("result", {}).get("done") is not True:
            return answer
        body["result"]["reward"] = float("nan")
        content = json.dumps(body).encode()  # what a Python server writes for a float("nan") score
        assert b'"reward": NaN' in content
        return httpx.Response(answer.status_code, content=content)

    record = run(nan_reward, ScriptedModel(*BUY_SCRIPT))  # type: ignore[arg-type]
    assert record["status"] == "failed" and record["error"]["stage"].startswith("environment_step_")
    assert "NaN is not a finite number" in record["error"]["message"]
    assert shop.requests[-1]["action"] == "release_one"
    # the parts the evaluator does not walk for NaN hold none: the full walk agrees
    assert dumps_line(record, finite=DECODED_PARTS) == dumps_line(record)


def test_lease_lost_is_lease_error():
    shop = FakeShop(
        fail={"interact": httpx.Response(409, json={"result": {"error": "stale or invalid lease for environment 3"}})}
    )
    record = run(shop, ScriptedModel(*BUY_SCRIPT))
    assert record["error"]["type"] == "LeaseError" and record["status"] == "failed"


def test_release_409_is_ignored_and_other_release_errors_are_cleanup_errors():
    record = run(FakeShop(release_status=409), ScriptedModel(*BUY_SCRIPT))
    assert record["status"] == "completed" and record["error"] is None
    # a release that keeps failing (repeated by the adapter, issue 24) is a cleanup error
    release_500 = httpx.Response(500, json={"result": {"error": "release failed"}})
    record = run(FakeShop(fail={"release_one": release_500}), ScriptedModel(*BUY_SCRIPT))
    assert record["status"] == "completed" and is_complete(record)
    assert record["error"]["stage"] == "cleanup" and record["error"]["type"] == "CleanupError"
    assert record["error"]["message"].startswith("environment.close: ShopSimulatorError: ")
    failed = run(
        FakeShop(fail={"release_one": release_500, "interact": httpx.Response(500, json={"result": {"error": "x"}})}),
        ScriptedModel(*BUY_SCRIPT),
    )
    assert failed["error"]["stage"] == "environment_step_1"
    assert failed["error"]["cleanup_errors"][0].startswith("environment.close: ShopSimulatorError")


def test_reset_failure_has_no_reset_and_no_release():
    shop = FakeShop(fail={"reset": httpx.Response(500, json={"result": {"error": "'unknown or inactive task_id 19'"}})})
    record = run(shop, ScriptedModel(*BUY_SCRIPT))
    validate_trace(record)
    assert record["error"]["stage"] == "reset" and record["reset"] is None
    assert [r["action"] for r in shop.requests] == ["reset"]


def test_incompatible_observation_version_fails_reset_but_releases():
    shop = FakeShop(observation_version="shopping-observation-v99")
    record = run(shop, ScriptedModel(*BUY_SCRIPT))
    assert record["error"]["stage"] == "reset" and "observation_version" in record["error"]["message"]
    assert [r["action"] for r in shop.requests] == ["reset", "release_one"]


def test_retired_instruction_key_is_refused():
    shop = FakeShop(reset_extra={"instruction": "old"})
    record = run(shop, ScriptedModel(*BUY_SCRIPT))
    assert record["error"]["stage"] == "reset" and "instruction" in record["error"]["message"]


def test_page_without_usable_actions_fails_under_the_previous_stage():
    shop = FakeShop(actions_override=["ok", ""])
    record = run(shop, ScriptedModel(*BUY_SCRIPT))
    assert record["status"] == "failed" and record["error"]["stage"] == "environment_step_1"
    assert record["error"]["type"] == "EpisodeError"
    shop = FakeShop(actions_override=[])
    record = run(shop, ScriptedModel(*BUY_SCRIPT))
    assert "no tool can be offered" in record["error"]["message"]


def test_skills_see_only_the_public_context_and_land_in_the_system_prompt():
    seen: list[dict[str, Any]] = []

    class Spy(JsonSkillBank):
        def select(self, context):
            seen.append(context)
            return super().select(context)

    bank = {
        "skills": [
            {"skill_id": "chunk-a", "content": "先核对规格。", "version": "active-1"},
            {"skill_id": "only-5", "task_ids": [5], "content": "x"},
        ]
    }
    record = run(FakeShop(), ScriptedModel(*BUY_SCRIPT), skills=Spy(bank))
    assert set(seen[0]) == {
        "task_id",
        "sample_id",
        "split",
        "task_instruction",
        "user_persona",
        "observation_state",
        "task_mode",
    }
    assert "SECRET" not in json.dumps(seen, ensure_ascii=False)
    assert [s["skill_id"] for s in record["selected_skills"]] == ["chunk-a"]
    assert '<skill id="chunk-a" version="active-1">\n先核对规格。\n</skill>' in record["conversation"][0]["content"]
    assert record["provenance"]["skills"]["provider"] == "json_skillbank"


def test_cancellation_releases_the_lease_and_propagates():
    shop = FakeShop()
    started = asyncio.Event()

    async def stuck_model(request: httpx.Request) -> httpx.Response:
        started.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def go():
        async with (
            ChatModelClient(
                base_url="http://m/v1", model="m", api_key_env=None, transport=httpx.MockTransport(stuck_model)
            ) as client,
            ShopSimulatorClient(base_url="http://env.test", persona=True, transport=httpx.MockTransport(shop)) as env,
        ):
            settings = EpisodeSettings(
                max_steps=5, persona=True, model_identity=client.identity, environment_identity=env.identity
            )
            task = asyncio.create_task(
                run_episode(JOB, model=client, env=env, prompt=PROMPT, skills=NoSkills(), settings=settings)
            )
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(go())
    assert [r["action"] for r in shop.requests] == ["reset", "release_one"]
