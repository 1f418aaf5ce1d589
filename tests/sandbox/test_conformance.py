"""Acceptance 1: the conformance checklist of spec §20, item by item, over real HTTP (uvicorn on loopback).

Test names carry the checklist numbers. Most items run against `edge_server` (the §19.1 example catalog
plus edge-case records from `edge_catalog.py`); slot-pool items that need the whole pool use their own
small server.
"""

from __future__ import annotations

import math
import re
import threading

import httpx
import pytest

from shopsim_sandbox.testing import SandboxServer

from .edge_catalog import (
    ASYMMETRIC_ASIN,
    BUDGET_TASK_BASE,
    BULLET_POINTS_ASIN,
    EQUALS_ASIN,
    LAMP_ASIN,
    MANY_VALUES_ASIN,
    PAGING_COUNT,
    PRICE_VECTOR_TITLES,
    PRICE_VECTORS,
    SUB_TITLE_ASIN,
    TWIN_ASINS,
    TWO_PRICE_AXES_ASIN,
    budget_vectors,
)
from .shop import Shop

HOME = "页面：搜索首页\n\n页面能力：\n- 支持商品搜索\n"
NOT_LEASED = "stale or invalid lease for environment {}"


def _open(shop: Shop, task: int, query: str, asin: str, **reset: object) -> dict:
    episode = shop.reset(task, **reset)
    assert shop.step(episode, f"search[{query}]")["action_feedback"]["valid"]
    opened = shop.step(episode, f"click[{asin}]")
    assert opened["action_feedback"]["valid"], opened["action_feedback"]
    episode["state"] = opened["observation_state"]
    episode["observation"] = opened["observation"]
    return episode


# ----- envelope and errors (1–7, 48, 49, 51) ----------------------------------------------------------

def test_01_every_object_body_answers_a_result_object(edge_shop: Shop) -> None:
    for body in [{}, {"action": "finish"}, {"action": "release_one"}, {"action": "reset", "idx": 7},
                 {"action": "interact", "env_idx": 0, "lease_id": "x" * 32, "response": "search[a]"}]:
        status, payload = edge_shop.post(body)
        assert isinstance(payload, dict) and list(payload) == ["result"], (body, status, payload)


def test_02_no_json_answers_200_with_error(edge_server: SandboxServer) -> None:
    url = edge_server.env_url + "/api/shop_agent"
    with httpx.Client(trust_env=False) as client:
        for kwargs in [{"content": b"not json", "headers": {"content-type": "application/json"}},
                       {"content": b"null", "headers": {"content-type": "application/json"}},
                       {"content": b'{"action": "release_all"}', "headers": {"content-type": "text/plain"}},
                       {"content": b""}]:
            response = client.post(url, **kwargs)
            assert response.status_code == 200, kwargs
            assert response.json() == {"result": {"error": "No JSON data provided"}}
        # Outside the contract: a non-object JSON body is a 500 with a non-JSON body.
        response = client.post(url, json=[1, 2])
        assert response.status_code == 500
        with pytest.raises(ValueError):
            response.json()


def test_03_49_unsupported_actions(edge_shop: Shop) -> None:
    assert edge_shop.result({"action": "finish"}, 400) == {"error": "unsupported action: 'finish'"}
    assert edge_shop.result({"idx": 5}, 400) == {"error": "unsupported action: None"}
    assert edge_shop.result({}, 400) == {"error": "unsupported action: None"}
    assert edge_shop.result({"action": None}, 400) == {"error": "unsupported action: None"}
    assert edge_shop.result({"action": 5}, 400) == {"error": "unsupported action: 5"}


def test_04_reset_with_env_idx_is_rejected_without_taking_a_slot(edge_shop: Shop) -> None:
    before = edge_shop.health()["free_slots"]
    assert edge_shop.result({"action": "reset", "idx": 5000, "env_idx": 0}, 400) == {
        "error": "reset must not include env_idx; the server assigns a slot"}
    assert edge_shop.health()["free_slots"] == before


def test_05_reset_of_a_hole_rolls_back(edge_shop: Shop) -> None:
    before = edge_shop.health()["free_slots"]
    assert edge_shop.result({"action": "reset", "idx": 7}, 500) == {"error": "'unknown or inactive task_id 7'"}
    # an instruction with empty attributes is inactive too
    assert edge_shop.result({"action": "reset", "idx": 6012}, 500) == {"error": "'unknown or inactive task_id 6012'"}
    assert edge_shop.health()["free_slots"] == before


def test_06_reset_idx_validation(edge_shop: Shop) -> None:
    assert edge_shop.result({"action": "reset"}, 500) == {"error": "reset action requires idx parameter"}
    assert edge_shop.result({"action": "reset", "idx": None}, 500) == {"error": "reset action requires idx parameter"}
    for bad in ["5", True, 5.0]:
        assert edge_shop.result({"action": "reset", "idx": bad}, 500) == {"error": "task idx must be an integer"}


def test_07_51_interaction_mode_validation_order(edge_shop: Shop) -> None:
    modes = "choose one of ['multi_turn', 'single_turn']"
    assert edge_shop.result({"action": "reset", "idx": 5000, "interaction_mode": "x"}, 500) == {
        "error": f"unsupported interaction_mode 'x'; {modes}"}
    assert edge_shop.result({"action": "reset", "idx": 5000, "interaction_mode": None}, 500) == {
        "error": f"unsupported interaction_mode 'None'; {modes}"}
    assert edge_shop.result({"action": "reset", "idx": "5", "interaction_mode": "bad"}, 500) == {
        "error": "task idx must be an integer"}
    assert edge_shop.result({"action": "reset", "idx": 7, "interaction_mode": "bad"}, 500) == {
        "error": "'unknown or inactive task_id 7'"}
    assert edge_shop.result({"action": "reset", "idx": 5000, "interaction_mode": ["a"]}, 500) == {
        "error": f"unsupported interaction_mode \"['a']\"; {modes}"}
    assert edge_shop.health()["free_slots"] == 4


def test_48_healthz_keys(edge_shop: Shop) -> None:
    health = edge_shop.health()
    assert sorted(health) == ["debug_ui", "environment_slots", "environment_version", "free_slots",
                              "observation_version", "primary_reward", "ready", "replay_ui", "tasks"]
    assert health["primary_reward"] == "r_strict" and health["ready"] is True
    assert health["environment_slots"] == 4
    assert health["debug_ui"] == "/debug-ui" and health["replay_ui"] == "/replay-ui"
    assert health["environment_version"] == "shopsimulator-paper-aligned-v8"
    assert health["observation_version"] == "shopping-observation-v7"


def test_responses_are_compact_sorted_ascii_json(edge_server: SandboxServer) -> None:
    with httpx.Client(trust_env=False) as client:
        text = client.post(edge_server.env_url + "/api/shop_agent", json={"action": "reset", "idx": 7}).text
    assert text == '{"result":{"error":"\'unknown or inactive task_id 7\'"}}\n'
    health = httpx.get(edge_server.env_url + "/healthz", trust_env=False).text
    assert health.startswith('{"debug_ui":"/debug-ui","environment_slots":4,')


# ----- reset (8–11, 52) ------------------------------------------------------------------------------


def test_08_09_successful_reset(edge_shop: Shop) -> None:
    first = edge_shop.reset(5000)
    second = edge_shop.reset(5000)
    for answer in (first, second):
        assert isinstance(answer["env_idx"], int) and 0 <= answer["env_idx"] < 4
        assert re.fullmatch(r"[0-9a-f]{32}", answer["lease_id"])
        assert answer["message"] == "Task 5000 started" and answer["idx"] == 5000
        assert "instruction" not in answer
        assert answer["observation"] == HOME
        assert sorted(answer["observation_state"]) == [
            "actions",
            "observation_version",
            "page_type",
            "search_available",
        ]
        assert answer["task_mode"] == "standard" and answer["interaction_mode"] == "single_turn"
        assert "private_task_instruction" not in answer and "goal_options" not in answer
    assert first["lease_id"] != second["lease_id"] and first["env_idx"] != second["env_idx"]
    edge_shop.release(first)
    edge_shop.release(second)


def test_10_11_52_persona_fields(edge_shop: Shop) -> None:
    standard = edge_shop.reset(5000, if_persona=True)
    assert standard["user_persona"] == {} and standard["task_mode"] == "persona"
    assert standard["task_instruction"] == "想买一台智能热洗的白色洗地机，预算不超过2100元"
    persona = edge_shop.reset(42, if_persona=True)
    assert persona["task_instruction"] == "买一副耳机" and persona["task_mode"] == "persona"
    assert persona["user_persona"] == {"用户ID": "u-1024", "预算偏好": "节省"}
    full = edge_shop.reset(42)
    assert full["task_instruction"] == "买黑色降噪耳机，预算不超过500元" and full["task_mode"] == "standard"
    assert "__reasoning__" not in full["user_persona"]
    for episode in (standard, persona, full):
        edge_shop.release(episode)
    reasoning_only = edge_shop.reset(6003, if_persona=True)
    assert reasoning_only["task_instruction"] == "买个东西" and reasoning_only["user_persona"] == {}
    goal = edge_shop.terminate(reasoning_only)["goal"]
    assert goal["user_persona"] == {"__reasoning__": "只有隐藏推理"}
    edge_shop.release(reasoning_only)


def test_private_goal_fields_only_on_request(edge_shop: Shop) -> None:
    answer = edge_shop.reset(5001, include_private_goal=True)
    assert answer["private_task_instruction"] == "想买一个500ml的白色保温杯，价格在60元左右"
    assert answer["goal_options"] == ["500ml", "白色"] and answer["reason_key"] is None
    step = edge_shop.step(answer, "search[保温杯]")
    assert step["goal"] == {} and "price_upper" not in str(step["observation_state"])
    edge_shop.release(answer)


# ----- slot pool (12, 16–18, 43) ---------------------------------------------------------------------


def test_12_16_17_18_43_slot_pool_blocks_and_releases() -> None:
    with SandboxServer(slots=2, policy=False, catalog_path="example") as server:
        shop = Shop(server.env_url)
        a, b = shop.reset(5000), shop.reset(5001)
        assert shop.health()["free_slots"] == 0
        waiting: dict = {}

        def blocked_reset() -> None:
            waiting["answer"] = Shop(server.env_url).reset(5002)

        thread = threading.Thread(target=blocked_reset)
        thread.start()
        thread.join(timeout=1.0)
        assert thread.is_alive() and "answer" not in waiting  # still blocked: no slot is free
        # a finished episode keeps its slot (43)
        shop.terminate(a, "generation_length")
        assert shop.health()["free_slots"] == 0
        assert shop.result({"action": "release_one", "env_idx": a["env_idx"], "lease_id": a["lease_id"]}) == {
            "message": f"Environment {a['env_idx']} has been released"
        }
        thread.join(timeout=30)
        assert waiting["answer"]["env_idx"] == a["env_idx"] and waiting["answer"]["lease_id"] != a["lease_id"]
        assert shop.release(a, 409) == {"error": NOT_LEASED.format(a["env_idx"])}
        assert shop.health()["free_slots"] == 0
        shop.release(waiting["answer"])
        assert shop.health()["free_slots"] == 1  # 16: release raises free_slots by one
        assert shop.result({"action": "release_all"}) == {"message": "All environments have been initialized"}
        assert shop.health()["free_slots"] == 2
        assert shop.step(b, "search[x]", 409) == {"error": NOT_LEASED.format(b["env_idx"])}
        assert shop.release(b, 409) == {"error": NOT_LEASED.format(b["env_idx"])}
        shop.close()


# ----- lease checks (13–15, 50) ----------------------------------------------------------------------


@pytest.mark.parametrize("op", ["interact", "terminate", "release_one"])
def test_13_15_50_malformed_env_idx_or_lease(edge_shop: Shop, op: str) -> None:
    episode = edge_shop.reset(5000)
    error = {"error": f"{op} requires a valid env_idx and lease_id"}
    base = {"action": op, "response": "search[x]", "termination_reason": "action_limit"}
    env, lease = episode["env_idx"], episode["lease_id"]
    bad_bodies = [
        {"lease_id": lease},
        {"env_idx": True, "lease_id": lease},
        {"env_idx": float(env), "lease_id": lease},
        {"env_idx": str(env), "lease_id": lease},
        {"env_idx": env},
        {"env_idx": env, "lease_id": ""},
    ]
    bad_bodies += [{"env_idx": env, "lease_id": v} for v in (0, 0.0, False, [], {}, None)]
    for extra in bad_bodies:
        assert edge_shop.result({**base, **extra}, 400) == error, extra
    for odd in (123, True, ["x"]):
        assert edge_shop.result({**base, "env_idx": env, "lease_id": odd}, 409) == {"error": NOT_LEASED.format(env)}
    edge_shop.release(episode)


def test_14_wrong_lease_or_out_of_range_slot(edge_shop: Shop) -> None:
    episode = edge_shop.reset(5000)
    wrong = "0" * 32
    assert edge_shop.step({"env_idx": episode["env_idx"], "lease_id": wrong}, "search[x]", 409) == {
        "error": NOT_LEASED.format(episode["env_idx"])
    }
    for env in (4, 99, -1):
        assert edge_shop.step({"env_idx": env, "lease_id": episode["lease_id"]}, "search[x]", 409) == {
            "error": NOT_LEASED.format(env)
        }
    edge_shop.release(episode)


# ----- interact basics (19, 20, 28–30) ---------------------------------------------------------------


def test_19_and_non_string_response(edge_shop: Shop) -> None:
    episode = edge_shop.reset(5000)
    body = {"action": "interact", "env_idx": episode["env_idx"], "lease_id": episode["lease_id"]}
    assert edge_shop.result(body, 500) == {"error": "interact action requires response parameter"}
    assert edge_shop.result({**body, "response": None}, 500) == {"error": "interact action requires response parameter"}
    for value, name in [(5, "int"), (1.5, "float"), (True, "bool"), (["x"], "list"), ({}, "dict")]:
        assert edge_shop.result({**body, "response": value}, 500) == {
            "error": f"'{name}' object has no attribute 'replace'"
        }
    # none of these consumed an action: 30 steps are still available
    for _ in range(29):
        assert edge_shop.step(episode, "click[]")["done"] is False
    assert edge_shop.step(episode, "click[]")["done"] is True
    edge_shop.release(episode)


def test_20_action_line_with_real_or_escaped_newline(edge_shop: Shop) -> None:
    for text in ["Thought: x\nAction: search[耳机]", "Thought: x\\nAction: search[耳机]"]:
        episode = edge_shop.reset(42)
        answer = edge_shop.step(episode, text)
        assert answer["action_feedback"] == {
            "action": "search[耳机]",
            "message": "搜索已执行",
            "reason": "executed",
            "valid": True,
        }
        assert answer["observation_state"]["search_text"] == "耳机"
        edge_shop.release(episode)


def _feedback(shop: Shop, episode: dict, response: str) -> dict:
    return shop.step(episode, response)["action_feedback"]


@pytest.mark.parametrize(
    "response,reason,message",
    [
        (
            "Action: search[a]\nAction: search[b]",
            "multiple_actions_not_allowed",
            "一次调用只能执行一个 search[...] 或 click[...] 动作",
        ),
        ("click[a], click[b]", "multiple_actions_not_allowed", "一次调用只能执行一个 search[...] 或 click[...] 动作"),
        ("click[a] click [b]", "multiple_actions_not_allowed", "一次调用只能执行一个 search[...] 或 click[...] 动作"),
        ("search[x]\nclick[y]", "multiple_actions_not_allowed", "一次调用只能执行一个 search[...] 或 click[...] 动作"),
        ("click[a]；Search [b]", "multiple_actions_not_allowed", "一次调用只能执行一个 search[...] 或 click[...] 动作"),
        ("buy now", "invalid_format", "动作必须使用 search[...] 或 click[...] 格式"),
        ("finish", "invalid_format", "动作必须使用 search[...] 或 click[...] 格式"),
        ("click[x] trailing", "invalid_format", "动作必须严格使用 search[...] 或 click[...] 格式"),
        ("click[a\\nb]", "invalid_format", "动作必须严格使用 search[...] 或 click[...] 格式"),
        ("[x]", "invalid_format", "动作必须严格使用 search[...] 或 click[...] 格式"),
        ("click[]", "empty_argument", "click[...] 的点击值不能为空"),
        ("click", "empty_argument", "click[...] 的点击值不能为空"),
        ("search[ ]", "empty_argument", "search[...] 的关键词不能为空"),
        ("search", "empty_argument", "search[...] 的关键词不能为空"),
        ("Action:\nAction: click[x]", "invalid_format", "动作必须使用 search[...] 或 click[...] 格式"),
        ("Thought: a\nAction:", "invalid_format", "动作格式无效"),
        ("Thought: a\nAction: ", "invalid_format", "动作不能为空"),
        ("   ", "invalid_format", "动作不能为空"),
        ("buy\rnow", "invalid_format", "动作格式无效"),
        ("Thought: x Action: click[y]", "invalid_format", "动作必须使用 search[...] 或 click[...] 格式"),
        ("ACTION：click[x]", "invalid_format", "动作必须使用 search[...] 或 click[...] 格式"),
        ("Action: click[a]\nAction: ", "invalid_format", "动作必须严格使用 search[...] 或 click[...] 格式"),
        ("click[buy now]", "unavailable_action", "当前页面不存在可点击项：buy now"),
    ],
)
def test_21_22_23_54_55_invalid_actions_on_home(edge_shop: Shop, response: str, reason: str, message: str) -> None:
    episode = edge_shop.reset(5000)
    answer = edge_shop.step(episode, response)
    feedback = answer["action_feedback"]
    assert (feedback["valid"], feedback["reason"], feedback["message"]) == (False, reason, message)
    # 28: invalid actions keep the page, answer `Invalid action`, integer reward 0, done false
    assert answer["message"] == "Invalid action" and answer["reward"] == 0 and type(answer["reward"]) is int
    assert answer["done"] is False and answer["over"] is False
    assert answer["observation_state"] == {**episode["observation_state"], "last_action": feedback}
    edge_shop.release(episode)


def test_54_55_action_variants_that_execute(edge_shop: Shop) -> None:
    for text in [
        "Action:\nsearch[耳机]",
        "Action\n:\nsearch[耳机]",
        "ſearch[耳机]",
        "SEARCH[耳机]",
        "Search [耳机]",
        "  action :  search[耳机]  ",
    ]:
        episode = edge_shop.reset(42)
        feedback = _feedback(edge_shop, episode, text)
        assert feedback["valid"] and feedback["reason"] == "executed", (text, feedback)
        edge_shop.release(episode)


def test_24_25_28_29_30_results_page(edge_shop: Shop) -> None:
    episode = edge_shop.reset(5001)
    answer = edge_shop.step(episode, "search[保温杯 500ml]")
    assert answer["message"] == "Continue interaction" and answer["reward"] == 0.0 and type(answer["reward"]) is float
    assert (answer["reward_detail"], answer["purchase"], answer["goal"]) == ({}, {}, {})
    assert "termination_reason" not in answer
    assert answer["idx"] == f"slot-{episode['env_idx']}-5001" and answer["over"] == answer["done"] is False
    state = answer["observation_state"]
    for response, reason, message in [
        ("search[保温杯 白色]", "search_unavailable", "当前页面不提供搜索操作"),
        ("click[Back to Search]", "unavailable_action", "当前页面不存在可点击项：Back to Search"),
        ("click[Next >]", "unavailable_action", "当前页面不存在可点击项：Next >"),
        ("click[ 100000000301]", "unavailable_action", "当前页面不存在可点击项： 100000000301"),
    ]:
        again = edge_shop.step(episode, response)
        assert (again["action_feedback"]["reason"], again["action_feedback"]["message"]) == (reason, message)
        assert again["observation_state"] == {**state, "last_action": again["action_feedback"]}
    edge_shop.release(episode)


# ----- product page (26, 27, 32, 33, 53, §8.6 labels) ------------------------------------------------


def test_26_27_32_33_product_page(edge_shop: Shop) -> None:
    episode = _open(edge_shop, 5000, "智能热洗洗地机", "100000000101")
    state = episode["state"]
    assert state["actions"] == [
        "back to search",
        "< prev",
        "颜色分类=白色",
        "颜色分类=黑色",
        "尺码=标准版",
        "尺码=大号",
    ]
    assert "selected_price" not in state and "- 价格：1999.0 to 2099.0\n" in episode["observation"]
    buy = edge_shop.step(episode, "click[buy now]")["action_feedback"]
    assert buy == {
        "action": "click[buy now]",
        "message": "购买前还需选择规格轴：颜色分类、尺码",
        "missing_option_axes": ["颜色分类", "尺码"],
        "reason": "incomplete_options",
        "valid": False,
    }
    black = edge_shop.step(episode, "click[颜色分类=黑色]")
    assert black["observation_state"]["selected_price"] == 2099.0 and "- 价格：2099.0\n" in black["observation"]
    assert "颜色分类=黑色" not in black["observation_state"]["actions"]
    again = edge_shop.step(episode, "click[颜色分类=黑色]")["action_feedback"]
    assert (again["reason"], again["message"]) == ("already_selected", "该规格已经选中：颜色分类=黑色")
    complete = edge_shop.step(episode, "click[尺码=大号]")["observation_state"]
    assert complete["actions"][:3] == ["back to search", "< prev", "buy now"] and complete["options_complete"]
    assert complete["selected_options"] == {"尺码": "大号", "颜色分类": "黑色"}
    back = edge_shop.step(episode, "click[< prev]")["observation_state"]
    assert back["page_type"] == "search_results" and back["page"] == 1
    reopened = edge_shop.step(episode, "click[100000000101]")["observation_state"]
    assert reopened["selected_options"] == {} and reopened["missing_option_axes"] == ["颜色分类", "尺码"]
    edge_shop.release(episode)


def test_53_axis_with_more_than_100_values(edge_shop: Shop) -> None:
    episode = _open(edge_shop, 6001, "多色马克杯", MANY_VALUES_ASIN)
    state = episode["state"]
    shown = state["available_options"]["颜色分类"]
    assert len(shown) == 99 and shown[:3] == ["色000", "色001", "色001"] and "色100" not in shown
    labels = [a for a in state["actions"] if a.startswith("颜色分类=")]
    assert len(labels) == 148 and labels.count("颜色分类=色001") == 1 and "颜色分类=色149" in labels
    assert "  可选值：" + " / ".join(shown) + "\n" in episode["observation"]
    picked = edge_shop.step(episode, "click[颜色分类=色149]")
    assert picked["action_feedback"]["valid"] and picked["observation_state"]["selected_options"] == {
        "颜色分类": "色149"
    }
    edge_shop.release(episode)


def test_labels_with_equals_signs_select_the_last_pair(edge_shop: Shop) -> None:
    episode = _open(edge_shop, 6002, "等号奇怪商品", EQUALS_ASIN)
    assert episode["state"]["actions"] == ["back to search", "< prev", "a=b=c", "a=x"]
    chosen = edge_shop.step(episode, "click[a=b=c]")["observation_state"]
    assert chosen["selected_options"] == {"a=b": "c"} and "a=b=c" in chosen["actions"]
    again = edge_shop.step(episode, "click[a=b=c]")["action_feedback"]
    assert again["reason"] == "already_selected"
    edge_shop.release(episode)


def test_product_without_axes_renders_reference_text(edge_shop: Shop) -> None:
    episode = _open(edge_shop, 6009, "简易台灯", LAMP_ASIN)
    assert episode["observation"] == (
        "页面：商品详情\n商品：\n- 标题：简易 台灯\n- ASIN：100000000401\n- 价格：89.0\n- 品牌：光源店\n"
        "- 类别：家居›灯具\n- 关键属性：护眼\n\n"
        "规格选择：\n- 此商品没有规格选项\n规格状态：已选择全部规格，可以购买\n\n"
        "上次交互结果：\n- 结果：成功\n- 说明：点击已执行\n\n"
        "可点击元素：\n- back to search\n- < prev\n- buy now\n"
    )
    state = episode["state"]
    assert (
        state["available_options"],
        state["missing_option_axes"],
        state["options_complete"],
        state["selected_price"],
    ) == ({}, [], True, 89.0)
    edge_shop.release(episode)


# ----- search (31, 34–36, 59) ------------------------------------------------------------------------


def test_31_35_pagination(edge_shop: Shop) -> None:
    episode = edge_shop.reset(7000)
    first = edge_shop.step(episode, "search[分页测试]")["observation_state"]
    assert PAGING_COUNT > 150
    assert (first["total_results"], first["total_pages"], first["page"]) == (150, 8, 1)
    assert first["total_pages"] == max(1, math.ceil(first["total_results"] / 20))
    assert first["actions"][:2] == ["back to search", "next >"] and len(first["products"]) == 20
    assert first["actions"][2:] == [p["asin"] for p in first["products"]]
    assert [p["rank"] for p in first["products"]] == list(range(1, 21))
    second = edge_shop.step(episode, "click[next >]")["observation_state"]
    assert second["actions"][:3] == ["back to search", "< prev", "next >"]
    assert (second["rank_start"], second["rank_end"]) == (21, 40)
    for _ in range(6):
        last = edge_shop.step(episode, "click[next >]")["observation_state"]
    assert last["page"] == 8 and last["actions"][:2] == ["back to search", "< prev"] and len(last["products"]) == 10
    assert (last["rank_start"], last["rank_end"]) == (141, 150)
    assert edge_shop.step(episode, "click[next >]")["action_feedback"]["reason"] == "unavailable_action"
    edge_shop.release(episode)


def test_34_search_without_hits(edge_shop: Shop) -> None:
    episode = edge_shop.reset(5000)
    answer = edge_shop.step(episode, "search[zzzz]")
    assert answer["observation"] == (
        "页面：搜索结果\n搜索词：zzzz\n结果：第 1/1 页，共 0 项，当前显示排名 0-0\n\n商品列表：\n（本页没有商品）\n\n"
        "上次交互结果：\n- 结果：成功\n- 说明：搜索已执行\n\n可点击元素：\n- back to search\n"
    )
    assert answer["observation_state"]["actions"] == ["back to search"]
    home = edge_shop.step(episode, "click[back to search]")
    assert home["observation"] == (
        "页面：搜索首页\n\n上次交互结果：\n- 结果：成功\n- 说明：点击已执行\n\n页面能力：\n- 支持商品搜索\n"
    )
    edge_shop.release(episode)


def test_36_search_is_deterministic_with_asin_tie_break(edge_shop: Shop) -> None:
    episode = edge_shop.reset(6010)
    first = edge_shop.step(episode, "search[孪生测试品]")["observation_state"]
    edge_shop.step(episode, "click[back to search]")
    second = edge_shop.step(episode, "search[孪生测试品]")["observation_state"]
    assert first["products"] == second["products"]
    assert [p["asin"] for p in first["products"]][:2] == list(TWIN_ASINS)
    edge_shop.release(episode)


def test_59_search_fields_and_normalization(edge_shop: Shop) -> None:
    for query, asin in [("独角兽", SUB_TITLE_ASIN), ("麒麟", BULLET_POINTS_ASIN)]:
        episode = edge_shop.reset(6005)
        state = edge_shop.step(episode, f"search[{query}]")["observation_state"]
        assert [p["asin"] for p in state["products"]] == [asin]
        edge_shop.release(episode)
    episode = edge_shop.reset(6005)
    assert (
        edge_shop.step(episode, "search[100rmb的杯子]")["observation_state"]["normalized_search_text"] == "100rmb的杯子"
    )
    edge_shop.step(episode, "click[back to search]")
    state = edge_shop.step(episode, "search[  迷你，冰箱 100 CNY ]")["observation_state"]
    assert state["normalized_search_text"] == "迷你 冰箱 100元" and state["search_text"] == "  迷你，冰箱 100 CNY "
    assert "搜索词：迷你，冰箱 100 CNY\n" in edge_shop.step(episode, "click[x]")["observation"]
    edge_shop.release(episode)
    from shopsim_sandbox.search import model_tokens

    assert model_tokens("abc--1 b..a1 X200") == ["abc", "b", "a1", "x200"]


# ----- rendering (37) --------------------------------------------------------------------------------


def test_37_observation_is_the_rendering_of_the_state(sandbox: SandboxServer) -> None:
    """A walk over the default catalog: every observation re-renders from its state byte for byte."""
    from shopsim_sandbox.catalog import load_catalog
    from shopsim_sandbox.observation import render

    catalog = load_catalog(sandbox.catalog_file)
    shop = Shop(sandbox.env_url)
    checked = 0
    for task_id in sorted(catalog.tasks)[:6]:
        episode = shop.reset(task_id)
        answers = [shop.step(episode, "search[" + catalog.tasks[task_id].goal["name"] + "]")]
        state = answers[-1]["observation_state"]
        answers.append(shop.step(episode, "click[" + state["actions"][-1] + "]"))
        state = answers[-1]["observation_state"]
        for action in state["actions"][2:5]:
            answers.append(shop.step(episode, f"click[{action}]"))
        answers.append(shop.step(episode, "click[< prev]"))
        for answer in answers:
            state = answer["observation_state"]
            axes = None
            if state["page_type"] == "product_detail":
                axes = list(catalog.products[state["product"]["asin"]]["display_options"])
            assert answer["observation"] == render(state, axes)
            assert answer["observation"].endswith("\n") and not answer["observation"].endswith("\n\n")
            checked += 1
        shop.release(episode)
    assert checked >= 30
    shop.close()


# ----- counting, limits, termination (38–42) ---------------------------------------------------------


def test_38_39_counting_and_limits(edge_shop: Shop) -> None:
    episode = edge_shop.reset(7000)
    edge_shop.step(episode, "search[分页测试]")  # 1
    edge_shop.step(episode, "click[next >]")  # 2 pagination
    edge_shop.step(episode, "click[< prev]")  # 3
    edge_shop.terminate(episode, "oops", status=500)  # not counted
    for _ in range(26):  # 4–29 invalid
        assert edge_shop.step(episode, "click[nope]")["done"] is False
    last = edge_shop.step(episode, "click[nope]")  # 30
    assert last["done"] is True and last["over"] is True and last["termination_reason"] == "action_limit"
    assert last["reward"] == 0.0 and type(last["reward"]) is float and last["purchase"] == {}
    assert last["message"] == "Invalid action" and last["goal"]["task_id"] == 7000
    assert last["reward_detail"] == {
        "price_verifiable": False,
        "r_att": 0.0,
        "r_loose": 0.0,
        "r_option": 0.0,
        "r_price": 0.0,
        "r_strict": 0.0,
        "r_success": 0,
        "r_type": 0.0,
        "reward_version": "shopsimulator-paper-reward-v2",
        "target_asin_match": False,
        "termination_reason": "action_limit",
    }
    assert last["observation_state"]["page_type"] == "search_results"
    edge_shop.release(episode)
    multi = edge_shop.reset(7000, interaction_mode="multi_turn")
    for _ in range(39):
        assert edge_shop.step(multi, "click[]")["done"] is False
    assert edge_shop.step(multi, "click[]")["termination_reason"] == "action_limit"
    edge_shop.release(multi)


def test_39_purchase_on_the_30th_action_wins(edge_shop: Shop) -> None:
    episode = _open(edge_shop, 6009, "简易台灯", LAMP_ASIN)  # 2 actions
    for _ in range(27):
        edge_shop.step(episode, "click[nope]")
    final = edge_shop.step(episode, "click[buy now]")
    assert final["done"] and final["termination_reason"] == "purchase"
    edge_shop.release(episode)


def test_40_41_42_terminate(edge_shop: Shop) -> None:
    episode = edge_shop.reset(5001)
    edge_shop.step(episode, "search[保温杯]")
    assert edge_shop.terminate(episode, "oops", status=500) == {"error": "unsupported termination reason: oops"}
    assert edge_shop.terminate(episode, None, status=500) == {"error": "unsupported termination reason: None"}
    assert edge_shop.step(episode, "click[back to search]")["done"] is False  # still live
    edge_shop.step(episode, "search[保温杯]")
    ended = edge_shop.terminate(episode, "generation_length")
    assert sorted(ended) == [
        "done",
        "env_idx",
        "goal",
        "idx",
        "lease_id",
        "message",
        "observation",
        "observation_state",
        "over",
        "purchase",
        "reward",
        "reward_detail",
        "termination_reason",
    ]
    assert ended["done"] is ended["over"] is True and ended["reward"] == 0.0
    assert ended["message"] == "Episode terminated: generation_length"
    assert ended["observation_state"]["page_type"] == "search_results"
    assert len(ended["reward_detail"]) == 11 and ended["reward_detail"]["termination_reason"] == "generation_length"
    assert edge_shop.step(episode, "search[x]", 500) == {
        "error": "episode is already terminated; reset before stepping"
    }
    assert edge_shop.terminate(episode, status=500) == {"error": "episode is already terminated"}
    edge_shop.release(episode)
    fresh = edge_shop.reset(5001)
    default = edge_shop.result({"action": "terminate", "env_idx": fresh["env_idx"], "lease_id": fresh["lease_id"]})
    assert default["termination_reason"] == "action_limit"
    edge_shop.release(fresh)


# ----- reward (44–46, 56–58) -------------------------------------------------------------------------

REWARD_KEYS = sorted(
    [
        "reward_version",
        "termination_reason",
        "r_type",
        "category_match",
        "title_score",
        "num_attr_matches",
        "num_option_matches",
        "r_att",
        "r_option",
        "r_price",
        "r_loose",
        "r_strict",
        "r_success",
        "target_asin_match",
        "price_verifiable",
        "price_upper",
        "price_resolution",
    ]
)


def test_44_45_purchase_reward(edge_shop: Shop) -> None:
    episode = _open(edge_shop, 5000, "智能热洗洗地机", "100000000101")
    edge_shop.step(episode, "click[颜色分类=白色]")
    edge_shop.step(episode, "click[尺码=标准版]")
    final = edge_shop.step(episode, "click[buy now]")
    assert sorted(final["reward_detail"]) == REWARD_KEYS
    assert final["reward"] == final["reward_detail"]["r_strict"] == 1.0 and final["reward_detail"]["r_success"] == 1
    assert final["message"] == "Continue interaction" and final["observation_state"]["page_type"] == "terminal"
    assert sorted(final["purchase"]) == [
        "asin",
        "attributes",
        "category",
        "instruction_text",
        "name",
        "options",
        "price",
        "product_category",
    ]
    edge_shop.release(episode)


def test_46_fuzzy_subset_and_mismatch(edge_shop: Shop) -> None:
    episode = _open(edge_shop, 6008, "不对称颜色围巾", ASYMMETRIC_ASIN)
    edge_shop.step(episode, "click[颜色分类=白色 | 大号]")
    assert (
        edge_shop.step(episode, "click[buy now]")["reward_detail"]["num_option_matches"] == 1
    )  # 白色 vs 白色 | 大号 = 100
    edge_shop.release(episode)
    from shopsim_sandbox.fuzzy import score

    assert score("白色", "黑色") == 50 and score("白色", "白色 | 大号") == 100


def test_56_purchased_value_is_the_first_fuzzy_argument(edge_shop: Shop) -> None:
    episode = _open(edge_shop, 6007, "不对称颜色围巾", ASYMMETRIC_ASIN)
    edge_shop.step(episode, "click[颜色分类=色红红色黑黑款]")
    detail = edge_shop.step(episode, "click[buy now]")["reward_detail"]
    assert detail["num_option_matches"] == 1 and detail["r_option"] == 1.0
    edge_shop.release(episode)


@pytest.mark.parametrize("index", range(len(PRICE_VECTORS)))
def test_57_price_resolution_vectors(edge_shop: Shop, index: int) -> None:
    asin, _options, _pricing, selection, expected = PRICE_VECTORS[index]
    episode = _open(edge_shop, 6020 + index, PRICE_VECTOR_TITLES[index], asin)
    for axis, value in selection.items():
        state = edge_shop.step(episode, f"click[{axis}={value}]")["observation_state"]
    state = episode["state"] if not selection else state
    for axis in state["missing_option_axes"]:
        state = edge_shop.step(episode, f"click[{axis}={state['available_options'][axis][0]}]")["observation_state"]
    assert ("selected_price" in state) == (expected["status"] == "pass")
    if expected["status"] == "pass":
        assert state["selected_price"] == expected["price"]
    final = edge_shop.step(episode, "click[buy now]")
    assert final["reward_detail"]["price_resolution"] == {**expected, "version": "variant-price-paper-v2"}
    edge_shop.release(episode)
    if asin == "100000000606":
        assert state["product"]["price"] == "89"
    if asin == "100000000607":
        assert state["product"]["price"] == "100.0"


def test_58_two_price_affecting_axes_are_served(edge_shop: Shop) -> None:
    episode = _open(edge_shop, 6004, "双价轴保温壶", TWO_PRICE_AXES_ASIN)
    edge_shop.step(episode, "click[容量=500ml]")
    edge_shop.step(episode, "click[颜色分类=白色]")
    detail = edge_shop.step(episode, "click[buy now]")["reward_detail"]
    assert detail["price_resolution"]["method"] == "multiple_price_affecting_axes"
    assert detail["price_resolution"]["evidence"] == {"price_affecting_axes": ["容量", "颜色分类"]}
    assert detail["price_verifiable"] is False and detail["r_price"] == 0.0
    edge_shop.release(episode)


# ----- budget parser over HTTP (47) ------------------------------------------------------------------


def test_47_budget_vectors_reach_the_goal(edge_shop: Shop) -> None:
    expected = [(BUDGET_TASK_BASE + i, text, value) for i, (text, value) in enumerate(budget_vectors())]
    expected += [
        (BUDGET_TASK_BASE + 900, "simple wins", 200.0),
        (BUDGET_TASK_BASE + 901, "precomputed", 100.0),
        (BUDGET_TASK_BASE + 902, "never the gold price", None),
    ]
    wrong = []
    for task_id, text, value in expected:
        episode = edge_shop.reset(task_id)
        goal = edge_shop.terminate(episode)["goal"]
        edge_shop.release(episode)
        if goal["price_upper"] != value or (value is not None and type(goal["price_upper"]) is not float):
            wrong.append((text, goal["price_upper"], value))
    assert len(expected) == 52 and wrong == []
