"""In-process fakes for unit tests of the episode runtime (httpx.MockTransport handlers).

The same behaviour is also exercised against the real sandbox over loopback HTTP in
test_episode_sandbox.py. This module holds no tests.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

LEASE = "3f9a1c0e5b7d4e2f8a6b9c1d2e3f4a5b"
HOME = "页面：搜索首页\n\n页面能力：\n- 支持商品搜索\n"
GOAL = {
    "task_id": 19,
    "asin": "p1",
    "instruction_text": "私密目标",
    "goal_options": ["白"],
    "user_persona": {"性别": "女"},
}


def zero_detail(reason: str) -> dict[str, Any]:
    return {
        "reward_version": "shopsimulator-paper-reward-v2",
        "termination_reason": reason,
        "r_type": 0.0,
        "r_att": 0.0,
        "r_option": 0.0,
        "r_price": 0.0,
        "r_loose": 0.0,
        "r_strict": 0.0,
        "r_success": 0,
        "target_asin_match": False,
        "price_verifiable": False,
    }


class FakeShop:
    """A tiny scripted ShopSimulator: home → results [p1] → product p1 (axis 颜色) → buy now."""

    def __init__(
        self,
        *,
        fail: dict[str, httpx.Response] | None = None,
        release_status: int = 200,
        persona: dict[str, Any] | None = None,
        observation_version: str = "shopping-observation-v7",
        reset_extra: dict[str, Any] | None = None,
        actions_override: Any = None,
    ) -> None:
        self.fail = fail or {}
        self.release_status = release_status
        self.persona = {"性别": "女"} if persona is None else persona
        self.observation_version = observation_version
        self.reset_extra = reset_extra or {}
        self.actions_override = actions_override
        self.requests: list[dict[str, Any]] = []
        self.lease: str | None = None
        self.page = "search_home"
        self.selected = False
        self.count = 0
        self.done = False

    def actions_of(self, name: str) -> list[str]:
        return [r.get("response") or r.get("termination_reason") for r in self.requests if r["action"] == name]

    def state(self) -> dict[str, Any]:
        base = {
            "observation_version": self.observation_version,
            "page_type": self.page,
            "search_available": self.page == "search_home",
        }
        if self.page == "search_home":
            base["actions"] = []
        elif self.page == "search_results":
            base["actions"] = ["back to search", "p1"]
        elif self.page == "product_detail":
            base["actions"] = ["back to search", "< prev"] + (["buy now"] if self.selected else ["颜色=白"])
        else:
            base["actions"] = []
        if self.actions_override is not None and self.page != "search_home":
            base["actions"] = self.actions_override
        return base

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        action = body["action"]
        if action in self.fail:
            return self.fail[action]
        if action == "reset":
            self.lease, self.page, self.selected, self.count, self.done = LEASE, "search_home", False, 0, False
            result = {
                "task_instruction": "买一条白色围巾",
                "observation": HOME,
                "observation_state": self.state(),
                "message": f"Task {body['idx']} started",
                "env_idx": 3,
                "lease_id": LEASE,
                "idx": body["idx"],
                "task_mode": "persona" if body["if_persona"] else "standard",
                "interaction_mode": "single_turn",
                "environment_version": "shopsimulator-paper-aligned-v8",
                "user_persona": self.persona,
            }
            if body.get("include_private_goal"):
                result.update(private_task_instruction="SECRET", goal_options=["白"], reason_key=None)
            result.update(self.reset_extra)
            return httpx.Response(200, json={"result": result})
        if body.get("lease_id") != self.lease:
            return httpx.Response(
                409, json={"result": {"error": f"stale or invalid lease for environment {body.get('env_idx')}"}}
            )
        if action == "release_one":
            self.lease = None
            if self.release_status != 200:
                return httpx.Response(self.release_status, json={"result": {"error": "release failed"}})
            return httpx.Response(200, json={"result": {"message": "Environment 3 has been released"}})
        if action == "terminate":
            if self.done:
                return httpx.Response(500, json={"result": {"error": "episode is already terminated"}})
            self.done = True
            reason = body["termination_reason"]
            return httpx.Response(
                200,
                json={
                    "result": {
                        "done": True,
                        "over": True,
                        "reward": 0.0,
                        "observation": "终止",
                        "observation_state": self.state(),
                        "message": f"Episode terminated: {reason}",
                        "env_idx": 3,
                        "idx": "slot-3-19",
                        "reward_detail": zero_detail(reason),
                        "purchase": {},
                        "goal": GOAL,
                        "termination_reason": reason,
                        "lease_id": LEASE,
                    }
                },
            )
        if action == "interact":
            if self.done:
                return httpx.Response(
                    500, json={"result": {"error": "episode is already terminated; reset before stepping"}}
                )
            text = body["response"]
            self.count += 1
            valid = True
            if text.startswith("search[") and self.page == "search_home":
                self.page = "search_results"
            elif text == "click[p1]" and self.page == "search_results":
                self.page = "product_detail"
            elif text == "click[颜色=白]" and self.page == "product_detail":
                self.selected = True
            elif text == "click[back to search]":
                self.page, self.selected = "search_home", False
            elif text == "click[buy now]" and self.page == "product_detail" and self.selected:
                self.page, self.done = "terminal", True
            else:
                valid = False
            feedback = {
                "action": text,
                "valid": valid,
                "reason": "executed" if valid else "unavailable_action",
                "message": "ok" if valid else "bad",
            }
            result = {
                "done": False,
                "over": False,
                "reward": 0.0 if valid else 0,
                "observation": f"页面：{self.page}\n",
                "observation_state": self.state(),
                "action_feedback": feedback,
                "message": "Continue interaction" if valid else "Invalid action",
                "env_idx": 3,
                "idx": "slot-3-19",
                "lease_id": LEASE,
                "reward_detail": {},
                "purchase": {},
                "goal": {},
            }
            if self.done:
                detail = zero_detail("purchase") | {"r_strict": 1.0, "r_success": 1, "r_loose": 1.0}
                result.update(
                    done=True,
                    over=True,
                    reward=1.0,
                    reward_detail=detail,
                    purchase={"asin": "p1", "price": 10.0},
                    goal=GOAL,
                    termination_reason="purchase",
                )
            elif self.count >= 30:
                self.done = True
                result.update(
                    done=True,
                    over=True,
                    reward=0.0,
                    reward_detail=zero_detail("action_limit"),
                    goal=GOAL,
                    termination_reason="action_limit",
                )
            return httpx.Response(200, json={"result": result})
        return httpx.Response(400, json={"result": {"error": f"unsupported action: {action!r}"}})


def tool_call(name: str, arguments: Any, call_id: str = "call-1") -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def reply(
    *calls: dict[str, Any],
    content: str | None = None,
    finish_reason: str = "tool_calls",
    reasoning: str | None = "想一想",
) -> httpx.Response:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-x",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        },
    )


class ScriptedModel:
    """MockTransport handler answering chat completions from a script (the last answer repeats)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


BUY_SCRIPT = (
    reply(tool_call("search", {"query": " 白色 围巾 "})),
    reply(tool_call("click", {"value": "p1"}, "call-2")),
    reply(tool_call("click", {"value": "颜色=白"}, "call-3")),
    reply(tool_call("click", {"value": "buy now"}, "call-4")),
)
