"""Synthetic ``shopsimrl-episode-v4`` records shaped like the runtime spec's §12.4 example.

Each builder call describes an episode as a short script of actions; the environment payloads,
feedback and reward detail are filled in consistently, so the label code sees what a real run
would store.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from shopsimrl_core.runs.planning._jobs import episode_id, episode_seed

GOLD_TITLE = "北欧风格纯羊毛米白色长款围巾礼盒装"
GOLD_OPTION = "米白色加长加厚款"
GOLD_ASIN = "640099999999"
OTHER_ASIN = "640012345678"
BRAND = "暖冬旗舰店"

REWARD_KEYS = ("r_type", "r_att", "r_option", "r_price")


def _state(page_type: str, **extra: Any) -> dict[str, Any]:
    base = {"observation_version": "shopping-observation-v7", "page_type": page_type,
            "search_available": page_type == "search_home", "actions": extra.pop("actions", [])}
    base.update(extra)
    return base


def _results(query: str, page: int = 1) -> dict[str, Any]:
    products = [
        {"asin": OTHER_ASIN, "title": "羊毛围巾 冬季保暖", "brand": BRAND, "category": "服饰 > 围巾", "price": "189.0",
         "key_attributes": ["羊毛"], "rank": 1},
        {"asin": GOLD_ASIN, "title": GOLD_TITLE, "brand": BRAND, "category": "服饰 > 围巾", "price": "199.0",
         "key_attributes": ["羊毛", "长款"], "rank": 2},
    ]
    return _state("search_results", actions=["back to search", "next >", OTHER_ASIN, GOLD_ASIN], search_text=query,
                  normalized_search_text=query, page=page, total_pages=3, total_results=50, rank_start=1,
                  rank_end=20, products=products)


def _product(asin: str, selected: dict[str, str], complete: bool) -> dict[str, Any]:
    title = GOLD_TITLE if asin == GOLD_ASIN else "羊毛围巾 冬季保暖"
    actions = ["back to search", "< prev"] + (["buy now"] if complete else []) + ["颜色分类=米白", "颜色分类=驼色"]
    return _state("product_detail", actions=actions,
                  product={"asin": asin, "title": title, "brand": BRAND, "category": "服饰 > 围巾", "price": "199.0",
                           "key_attributes": ["羊毛"]},
                  selected_options=dict(selected), available_options={"颜色分类": ["米白", "驼色"]},
                  missing_option_axes=[] if complete else ["颜色分类"], options_complete=complete)


def make_trace(
    task_id: int,
    sample_id: int = 0,
    *,
    split: str = "train",
    outcome: str = "success",
    script: list[str] | None = None,
    protocol_error_at: int | None = None,
    reasoning: str = "思考：用户想要围巾",
    persona: dict[str, Any] | None = None,
    goal_extra: dict[str, Any] | None = None,
    checkpoint_id: str = "ckpt-1",
    skills: dict[str, Any] | None = None,
    selected_skills: list[dict[str, Any]] | None = None,
    status: str = "completed",
) -> dict[str, Any]:
    """Build one trace record.

    ``outcome`` is success / wrong_option / missing_attributes / wrong_type / over_budget /
    price_unverifiable / action_limit / generation_length. ``script`` lists canonical actions; the
    default is search → click product → (premature buy) → choose option → buy.
    """
    persona = {"性别": "女", "预算偏好": "200元以内"} if persona is None else persona
    if script is None:
        script = ["search[羊毛围巾]", f"click[{GOLD_ASIN}]", "click[颜色分类=米白]", "click[buy now]"]
        if outcome == "action_limit":
            script = [
                "search[羊毛围巾]",
                f"click[{GOLD_ASIN}]",
                "click[< prev]",
                f"click[{GOLD_ASIN}]",
                "click[< prev]",
            ]
        if outcome == "generation_length":
            script = ["search[羊毛围巾]"]
    seed = episode_seed(20260830, task_id, sample_id)
    reset_state = _state("search_home")
    reset = {
        "task_instruction": "想买一条围巾",
        "observation": "页面：搜索首页\n",
        "message": f"Task {task_id} started",
        "idx": task_id,
        "task_mode": "persona",
        "interaction_mode": "single_turn",
        "environment_version": "shopsimulator-paper-aligned-v8",
        "observation_state": reset_state,
        "user_persona": persona,
    }
    system = "你是购物助手。"
    if persona:
        system += "\n\n用户个人文档：\n" + json.dumps(persona, ensure_ascii=False, sort_keys=True)
    first_user = "购物任务：\n" + reset["task_instruction"] + "\n\n" + reset["observation"]
    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": first_user},
    ]
    steps: list[dict[str, Any]] = []
    observation = first_user
    page: dict[str, Any] = reset_state
    selected: dict[str, str] = {}
    step_index = 0
    final: dict[str, Any] | None = None
    goal = {
        "task_id": task_id,
        "asin": GOLD_ASIN,
        "name": GOLD_TITLE,
        "category": "服饰 > 围巾 > 羊毛",
        "instruction_text": "PRIVATE-INSTRUCTION 想买米白色羊毛围巾 预算200",
        "instruction_simple": "想买一条围巾",
        "attributes": ["羊毛"],
        "goal_options": [GOLD_OPTION],
        "price_upper": 200.0,
        "user_persona": dict(persona, __reasoning__="PERSONA-REASONING"),
        "weight": 1,
    }
    goal.update(goal_extra or {})
    current_asin: str | None = None

    def tools_for(state: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        if state.get("search_available"):
            out.append({"type": "function", "function": {"name": "search", "parameters": {}}})
        if state.get("actions"):
            out.append(
                {"type": "function", "function": {"name": "click", "parameters": {"enum": list(state["actions"])}}}
            )
        return out

    for action in script:
        step_index += 1
        if protocol_error_at == step_index:
            err = {
                "code": "mixed_content",
                "message": "model must not mix natural-language content with an action tool call",
            }
            steps.append(
                {
                    "step_index": step_index,
                    "observation": observation,
                    "tools": tools_for(page),
                    "model": {
                        "content": "我来选",
                        "reasoning": reasoning,
                        "tool_calls": [],
                        "finish_reason": "stop",
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                        "protocol_error": err,
                        "policy_failure": None,
                        "raw_response": {"r": reasoning},
                    },
                    "protocol_error": err,
                    "protocol_feedback": {"type": "tool_protocol_error", **err},
                    "action": None,
                    "environment": None,
                }
            )
            conversation.append({"role": "assistant", "content": "我来选"})
            conversation.append(
                {"role": "user", "content": json.dumps({"type": "tool_protocol_error", **err}, ensure_ascii=False)}
            )
            step_index += 1
        name, arg = action.split("[", 1)
        arg = arg[:-1]
        valid, reason = True, "executed"
        done = False
        new_page = page
        if name == "search":
            new_page = _results(arg)
            selected = {}
        elif arg in (OTHER_ASIN, GOLD_ASIN) and page.get("page_type") == "search_results":
            current_asin = arg
            selected = {}
            new_page = _product(arg, selected, complete=False)
        elif arg.startswith("颜色分类="):
            selected = {"颜色分类": arg.split("=", 1)[1]}
            new_page = _product(current_asin or GOLD_ASIN, selected, complete=True)
        elif arg == "buy now":
            if page.get("options_complete"):
                done = True
            else:
                valid, reason = False, "incomplete_options"
        elif arg == "< prev":
            new_page = _results("羊毛围巾")
        elif arg == "next >":
            new_page = _results("羊毛围巾", page=int(page.get("page", 1)) + 1)
        else:
            valid, reason = False, "unavailable_action"
        feedback = {"action": action, "valid": valid, "reason": reason, "message": "ok" if valid else "bad"}
        if valid and not done:
            page = copy.deepcopy(new_page)
            page["last_action"] = feedback
        env = {
            "done": done,
            "reward": 0,
            "observation": f"页面：{page['page_type']}\n",
            "message": "Continue interaction",
            "idx": task_id,
            "reward_detail": {},
            "purchase": {},
            "goal": {},
            "over": done,
            "observation_state": page if not done else _state("terminal"),
            "action_feedback": feedback,
        }
        call_id = f"call-{task_id}-{step_index}"
        tool_name = "search" if name == "search" else "click"
        args = {"query": arg} if name == "search" else {"value": arg}
        model = {
            "content": None,
            "reasoning": reasoning,
            "tool_calls": [
                {
                    "call_id": call_id,
                    "name": tool_name,
                    "arguments": args,
                    "raw_arguments": json.dumps(args, ensure_ascii=False),
                }
            ],
            "finish_reason": "tool_calls",
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
            "response_id": f"r-{step_index}",
            "metadata": {},
            "latency_ms": 1.0,
            "protocol_error": None,
            "policy_failure": None,
            "raw_response": None,
        }
        steps.append(
            {
                "step_index": step_index,
                "observation": observation,
                "tools": tools_for(page if not done else page),
                "model": model,
                "action": action,
                "environment": env,
            }
        )
        conversation.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": tool_name, "arguments": json.dumps(args, ensure_ascii=False)},
                    }
                ],
            }
        )
        conversation.append({"role": "tool", "tool_call_id": call_id, "content": env["observation"]})
        observation = env["observation"]
        if done:
            final = env
            break

    components = {k: 1.0 for k in REWARD_KEYS}
    price_verifiable = True
    price = 189.0
    if outcome == "wrong_option":
        components["r_option"] = 0.0
    elif outcome == "missing_attributes":
        components["r_att"] = 0.5
    elif outcome == "wrong_type":
        components["r_type"] = 0.0
    elif outcome == "over_budget":
        components["r_price"] = 0.0
        price = 259.0
    elif outcome == "price_unverifiable":
        components["r_price"] = 0.0
        price_verifiable = False
    if outcome in ("action_limit", "generation_length"):
        detail = {
            "reward_version": "shopsimulator-paper-reward-v2",
            "termination_reason": outcome,
            "r_loose": 0.0,
            "r_strict": 0.0,
            "r_success": 0,
            "r_type": 0.0,
            "r_att": 0.0,
            "r_option": 0.0,
            "r_price": 0.0,
            "target_asin_match": False,
            "price_verifiable": False,
        }
        if outcome == "generation_length":
            step_index += 1
            pf = {"code": "generation_length", "message": "model generation reached max_tokens"}
            steps.append(
                {
                    "step_index": step_index,
                    "observation": observation,
                    "tools": tools_for(page),
                    "model": {
                        "content": None,
                        "reasoning": reasoning,
                        "tool_calls": [],
                        "finish_reason": "length",
                        "usage": {},
                        "protocol_error": None,
                        "policy_failure": pf,
                        "raw_response": {"x": reasoning},
                    },
                    "policy_failure": pf,
                    "action": None,
                    "environment": None,
                }
            )
        final = {
            "done": True,
            "over": True,
            "reward": 0.0,
            "message": "Continue interaction",
            "idx": task_id,
            "observation": "页面\n",
            "observation_state": page,
            "termination_reason": outcome,
            "reward_detail": detail,
            "purchase": {},
            "goal": goal,
        }
    else:
        assert final is not None, "script did not buy"
        r_strict = components["r_type"] * components["r_att"] * components["r_option"] * components["r_price"]
        detail = {
            "reward_version": "shopsimulator-paper-reward-v2",
            "termination_reason": "purchase",
            **components,
            "category_match": True,
            "title_score": 0.6,
            "num_attr_matches": 1,
            "num_option_matches": 1,
            "r_loose": 0.9,
            "r_strict": r_strict,
            "r_success": int(r_strict == 1.0),
            "target_asin_match": True,
            "price_verifiable": price_verifiable,
            "price_upper": 200.0,
            "price_resolution": {
                "status": "pass" if price_verifiable else "unverifiable",
                "price": price if price_verifiable else None,
                "method": "m",
            },
        }
        final = dict(final)
        final.update(
            {
                "reward": r_strict,
                "termination_reason": "purchase",
                "reward_detail": detail,
                "purchase": {
                    "asin": current_asin,
                    "name": GOLD_TITLE,
                    "category": "服饰 > 围巾",
                    "price": price,
                    "options": selected,
                },
                "goal": goal,
            }
        )
        steps[-1]["environment"] = final
    record = {
        "schema_version": "shopsimrl-episode-v4",
        "episode_id": episode_id(task_id, sample_id),
        "status": status,
        "job": {"task_id": task_id, "sample_id": sample_id, "seed": seed, "split": split},
        "provenance": {
            "model": {
                "provider": "openai_compatible_http",
                "checkpoint_id": checkpoint_id,
                "model": "m",
                "base_url": "http://127.0.0.1:1/v1",
            },
            "environment": {
                "adapter": "shopsimulator_http",
                "base_url": "http://127.0.0.1:2",
                "persona": True,
                "interaction_mode": "single_turn",
                "environment_version": "shopsimulator-paper-aligned-v8",
                "observation_version": "shopping-observation-v7",
            },
            "prompt": {"prompt_version": "p", "system_prompt_sha256": "x", "skill_renderer_version": "r"},
            "skills": skills or {"provider": "none"},
            "runtime": {"max_steps": 30, "action_protocol": "openai-function-tools-repair-v3"},
        },
        "started_at": "2026-10-02T08:15:03.120000+00:00",
        "ended_at": "2026-10-02T08:15:41.884000+00:00",
        "duration_ms": 10.0,
        "reset": reset,
        "selected_skills": selected_skills or [],
        "conversation": conversation,
        "steps": steps,
        "final": final if status == "completed" else None,
        "error": None
        if status == "completed"
        else {"stage": "model_step_1", "type": "RuntimeError", "message": "boom"},
    }
    return record


def write_traces(path, records) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
