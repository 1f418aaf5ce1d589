"""Baseline policy endpoint: OpenAI wire format, honest decisions, streaming (unit level, ASGI transport).

The same behaviour is exercised over real sockets in test_policy_http.py.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from shopsim_sandbox.app import build_env_app
from shopsim_sandbox.catalog import example_catalog
from shopsim_sandbox.policy import (
    SERVED_MODEL,
    Lapses,
    Transcript,
    build_policy_app,
    decide_action,
    play_episode,
    read_transcript,
    search_query,
    tools_for_state,
)

HOME = "页面：搜索首页\n\n页面能力：\n- 支持商品搜索\n"
RESULTS = (
    "页面：搜索结果\n搜索词：智能热洗洗地机\n结果：第 1/1 页，共 2 项，当前显示排名 1-2\n\n商品列表：\n"
    "1. 静音无线洗地机 家用\n   ASIN：100000000102\n   价格：1599.0\n   品牌：清风电器\n   类别：家电›清洁电器›洗地机\n"
    "   关键属性：静音；无线\n"
    "2. 智能热洗白色洗地机\n   ASIN：100000000101\n   价格：1999.0 to 2099.0\n   品牌：洁净旗舰店\n"
    "   类别：家电›清洁电器›洗地机\n   关键属性：智能；热洗\n\n"
    "上次交互结果：\n- 结果：成功\n- 说明：搜索已执行\n\n可点击元素：\n- back to search\n- 100000000102\n- 100000000101\n"  # noqa: E501 (page text)
)
DETAIL = (
    "页面：商品详情\n商品：\n- 标题：智能热洗白色洗地机\n- ASIN：100000000101\n- 价格：1999.0 to 2099.0\n"
    "- 品牌：洁净旗舰店\n- 类别：家电›清洁电器›洗地机\n- 关键属性：智能；热洗\n\n规格选择：\n- 颜色分类：尚未选择\n"
    "  可选值：黑色 / 白色\n- 尺码：尚未选择\n  可选值：标准版 / 大号\n仍需选择：颜色分类、尺码\n\n"
    "上次交互结果：\n- 结果：成功\n- 说明：点击已执行\n\n可点击元素：\n- back to search\n- < prev\n- 颜色分类=黑色\n"
    "- 颜色分类=白色\n- 尺码=标准版\n- 尺码=大号\n"
)
INSTRUCTION = "想买一台智能热洗的白色洗地机，预算不超过2100元"
DETAIL_ACTIONS = ["back to search", "< prev", "颜色分类=黑色", "颜色分类=白色", "尺码=标准版", "尺码=大号"]


def _request(
    observation: str, state: dict[str, Any], *, history: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    messages = [
        {"role": "system", "content": "系统提示"},
        {"role": "user", "content": "购物任务：\n" + INSTRUCTION + "\n\n" + HOME},
    ]
    if history is not None:
        messages += history
        messages.append({"role": "tool", "tool_call_id": "call-x", "content": observation})
    body = {
        "model": SERVED_MODEL,
        "messages": messages,
        "stream": False,
        "temperature": 0.6,
        "max_tokens": 4096,
        "seed": 7,
        "tools": tools_for_state(state),
        "tool_choice": "auto",
    }
    body.update(extra)
    return body


def _post(app: Any, body: Any, path: str = "/v1/chat/completions", **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://policy") as client:
            if isinstance(body, (bytes, str)):
                return await client.post(path, content=body, **kwargs)
            return await client.post(path, json=body, **kwargs)

    return asyncio.run(go())


def _history(name: str, value: str) -> list[dict[str, Any]]:
    arguments = json.dumps({"query": value} if name == "search" else {"value": value}, ensure_ascii=False)
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call-x", "type": "function", "function": {"name": name, "arguments": arguments}}],
        }
    ]


def test_models_lists_the_served_model() -> None:
    app = build_policy_app()

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://policy") as client:
            return await client.get("/v1/models")

    data = asyncio.run(go()).json()
    assert data["object"] == "list" and [m["id"] for m in data["data"]] == [SERVED_MODEL]


def test_search_page_gets_exactly_one_search_call() -> None:
    response = _post(build_policy_app(), _request(HOME, {"search_available": True, "actions": []}))
    assert response.status_code == 200
    data = response.json()
    assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None and message["reasoning_content"]
    (call,) = message["tool_calls"]
    assert call["type"] == "function" and call["id"] and call["function"]["name"] == "search"
    query = json.loads(call["function"]["arguments"])["query"]
    assert "洗地机" in query and "2100" not in query and "预算" not in query
    usage = data["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_results_page_opens_best_matching_product_from_enum() -> None:
    state = {"search_available": False, "actions": ["back to search", "100000000102", "100000000101"]}
    body = _request(RESULTS, state, history=_history("search", "智能热洗 白色洗地机"))
    (call,) = _post(build_policy_app(), body).json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "click"
    assert json.loads(call["function"]["arguments"]) == {"value": "100000000101"}


def test_product_page_chooses_the_mentioned_option_then_the_first_value() -> None:
    state = {"search_available": False, "actions": DETAIL_ACTIONS}
    body = _request(DETAIL, state, history=_history("click", "100000000101"))
    (call,) = _post(build_policy_app(lapses=False), body).json()["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"value": "颜色分类=白色"}
    # With colour chosen, the size axis (not mentioned) gets its first value.
    observation = (
        DETAIL.replace("- 颜色分类：尚未选择", "- 颜色分类：已选择 白色")
        .replace("仍需选择：颜色分类、尺码", "仍需选择：尺码")
        .replace("- 颜色分类=白色\n", "")
    )
    actions = [a for a in DETAIL_ACTIONS if a != "颜色分类=白色"]
    t = read_transcript(
        _request(observation, {"actions": actions}, history=[])["messages"], tools_for_state({"actions": actions})
    )
    import random

    assert decide_action(t, random.Random(0)).value == "尺码=标准版"


def test_product_missing_a_wish_or_over_budget_is_left_for_the_results_page() -> None:
    import random

    base = dict(
        observation=DETAIL,
        click_enum=DETAIL_ACTIONS,
        tools_offered=True,
        past_actions=[("search", "x"), ("click", "100000000101")],
    )
    # The user wants headphones: this cleaner page lacks the wish, so go back to the list.
    t = Transcript(instruction="买一副耳机", **base)
    assert decide_action(t, random.Random(0)).value == "< prev"
    # Within budget 2100 (lowest listed price 1999): stay; with budget 1500: leave.
    assert decide_action(Transcript(instruction=INSTRUCTION, **base), random.Random(0)).value == "颜色分类=白色"
    t = Transcript(instruction="想买一台智能热洗的白色洗地机，预算不超过1500元", **base)
    assert decide_action(t, random.Random(0)).value == "< prev"
    # A budget-ignoring episode stays; an impatient one stays whatever is missing.
    assert decide_action(t, random.Random(0), Lapses(ignore_budget=True)).value == "颜色分类=白色"
    t = Transcript(instruction="买一副耳机", **base)
    assert decide_action(t, random.Random(0), Lapses(impatient=True)).value == "颜色分类=黑色"
    assert (
        decide_action(Transcript(instruction=INSTRUCTION, **base), random.Random(0), Lapses(first_option=True)).value
        == "颜色分类=黑色"
    )


def test_results_page_skips_products_already_opened() -> None:
    import random

    t = Transcript(
        instruction=INSTRUCTION,
        observation=RESULTS,
        click_enum=["back to search", "100000000102", "100000000101"],
        tools_offered=True,
        past_actions=[("search", "x"), ("click", "100000000101")],
    )
    assert decide_action(t, random.Random(0)).value == "100000000102"
    t.past_actions.append(("click", "100000000102"))
    # Both seen and no further page: settle for the best one again; on the revisit it is bought.
    assert decide_action(t, random.Random(0)).value == "100000000101"
    t.past_actions.append(("click", "100000000101"))
    revisit = Transcript(
        instruction="买一副耳机",
        observation=DETAIL,
        click_enum=DETAIL_ACTIONS,
        tools_offered=True,
        past_actions=t.past_actions,
    )
    assert decide_action(revisit, random.Random(0)).value == "颜色分类=黑色"


def test_lapses_vary_between_episodes_but_not_within_one() -> None:
    state = {"search_available": False, "actions": DETAIL_ACTIONS}
    app = build_policy_app(seed=0)
    values = set()
    for episode_seed in range(40):
        # Two turns so far (search, click), so this request's seed is episode seed + 2.
        history = _history("search", "x") + [{"role": "tool", "tool_call_id": "call-x", "content": RESULTS}]
        history += _history("click", "100000000101")
        body = _request(DETAIL, state, history=history, seed=episode_seed + 2)
        first = _post(app, body).json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        again = _post(app, body).json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        assert first == again
        values.add(json.loads(first)["value"])
    assert values == {"颜色分类=白色", "颜色分类=黑色"}


def test_buy_now_when_offered() -> None:
    actions = ["back to search", "< prev", "buy now", "颜色分类=黑色", "尺码=大号"]
    body = _request(DETAIL, {"search_available": False, "actions": actions}, history=_history("click", "尺码=标准版"))
    (call,) = _post(build_policy_app(), body).json()["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"value": "buy now"}


def test_click_values_always_come_from_the_enum_and_search_only_when_offered() -> None:
    # An observation that mentions products the enum does not list: the policy must not click them.
    state = {"search_available": False, "actions": ["back to search", "100000000102"]}
    body = _request(RESULTS, state, history=_history("search", "x"))
    (call,) = _post(build_policy_app(), body).json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "click"
    assert json.loads(call["function"]["arguments"])["value"] in state["actions"]


def test_persona_document_drives_option_choice() -> None:
    transcript = Transcript(
        instruction="买一台洗地机",
        persona_text="喜欢白色 节省",
        observation=DETAIL,
        click_enum=DETAIL_ACTIONS,
        tools_offered=True,
    )
    messages = [
        {"role": "system", "content": '提示\n\n用户个人文档：\n{"偏好": "喜欢白色", "用户ID": "u-1"}'},
        {"role": "user", "content": "购物任务：\n买一副耳机\n\n" + HOME},
    ]
    parsed = read_transcript(messages, None)
    assert parsed.instruction == "买一副耳机" and parsed.persona_text == "喜欢白色"
    import random

    assert decide_action(transcript, random.Random(0)).value == "颜色分类=白色"


def test_thinking_off_drops_reasoning_content() -> None:
    body = _request(HOME, {"search_available": True, "actions": []}, chat_template_kwargs={"enable_thinking": False})
    message = _post(build_policy_app(), body).json()["choices"][0]["message"]
    assert "reasoning_content" not in message
    body = _request(HOME, {"search_available": True, "actions": []}, enable_thinking=False)
    assert "reasoning_content" not in _post(build_policy_app(), body).json()["choices"][0]["message"]


def test_without_tools_the_answer_is_a_text_action() -> None:
    body = _request(HOME, {"search_available": True, "actions": []})
    del body["tools"], body["tool_choice"]
    choice = _post(build_policy_app(), body).json()["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["tool_calls"] == []
    assert choice["message"]["content"].startswith("Action: search[")


def test_tiny_max_tokens_truncates_with_finish_reason_length() -> None:
    body = _request(HOME, {"search_available": True, "actions": []}, max_tokens=2)
    data = _post(build_policy_app(), body).json()
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["choices"][0]["message"]["tool_calls"] == [] and data["usage"]["completion_tokens"] == 2


def test_same_request_same_answer_and_seed_dependence() -> None:
    body = _request(HOME, {"search_available": True, "actions": []})
    a = _post(build_policy_app(seed=3), body).json()
    b = _post(build_policy_app(seed=3), body).json()
    assert a["id"] == b["id"] and a["choices"] == b["choices"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"not json", 400),
        (b"[1, 2]", 400),
        (json.dumps({"model": "other", "messages": [{"role": "user", "content": "x"}]}).encode(), 404),
        (json.dumps({"model": SERVED_MODEL, "messages": []}).encode(), 400),
    ],
)
def test_bad_requests_get_openai_error_bodies(body: bytes, status: int) -> None:
    response = _post(build_policy_app(), body, headers={"content-type": "application/json"})
    assert response.status_code == status
    error = response.json()
    assert error["object"] == "error" and error["code"] == status and error["message"]


# --- streaming -----------------------------------------------------------------------------------


def _sse_payloads(text: str) -> list[Any]:
    lines = [line for line in text.split("\n") if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[len("data: ") :]) for line in lines[:-1]]


def _assemble(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    content, reasoning, finish, usage = "", "", None, None
    calls: dict[int, dict[str, Any]] = {}
    for payload in payloads:
        usage = payload.get("usage") or usage
        for choice in payload["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or ""
            finish = choice.get("finish_reason") or finish
            for fragment in delta.get("tool_calls") or []:
                slot = calls.setdefault(fragment["index"], {"id": None, "name": "", "arguments": ""})
                slot["id"] = fragment.get("id") or slot["id"]
                function = fragment.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
    return {
        "content": content,
        "reasoning": reasoning,
        "finish": finish,
        "usage": usage,
        "calls": [calls[i] for i in sorted(calls)],
    }


def test_streaming_assembles_to_the_non_streaming_answer() -> None:
    state = {"search_available": False, "actions": DETAIL_ACTIONS}
    plain = _post(build_policy_app(), _request(DETAIL, state, history=_history("click", "100000000101"))).json()
    response = _post(
        build_policy_app(),
        _request(
            DETAIL,
            state,
            history=_history("click", "100000000101"),
            stream=True,
            stream_options={"include_usage": True},
        ),
    )
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    payloads = _sse_payloads(response.text)
    assert all(p["object"] == "chat.completion.chunk" and p["id"] == payloads[0]["id"] for p in payloads)
    got = _assemble(payloads)
    message = plain["choices"][0]["message"]
    (call,) = message["tool_calls"]
    # Ids are derived from the request body, which differs by the stream flag.
    assert [(c["name"], c["arguments"]) for c in got["calls"]] == [("click", call["function"]["arguments"])]
    assert got["calls"][0]["id"].startswith("chatcmpl-tool-")
    assert got["finish"] == "tool_calls" and got["content"] == "" and got["reasoning"] == message["reasoning_content"]
    assert got["usage"] == plain["usage"]
    assert payloads[-1]["choices"] == []  # the usage chunk comes last, with no choices


def test_streaming_without_include_usage_has_no_usage() -> None:
    body = _request(HOME, {"search_available": True, "actions": []}, stream=True)
    got = _assemble(_sse_payloads(_post(build_policy_app(), body).text))
    assert got["usage"] is None and len(got["calls"]) == 1 and got["calls"][0]["name"] == "search"


# --- whole episodes against the real environment app (in process) ---------------------------------


def test_plays_example_tasks_to_a_purchase() -> None:
    async def go() -> list[dict[str, Any]]:
        env_app = build_env_app(example_catalog(), slots=2)
        async with (
            httpx.AsyncClient(transport=httpx.ASGITransport(app=env_app), base_url="http://env") as env,
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=build_policy_app(lapses=False)), base_url="http://policy/v1"
            ) as model,
        ):
            return [await play_episode(env, model, task_id, persona=False) for task_id in (5000, 5001, 42)]

    a, c, b = asyncio.run(go())
    assert a["termination_reason"] == "purchase" and a["reward"] == 1.0
    assert a["purchase"]["options"] == {"颜色分类": "白色", "尺码": "标准版"}
    assert c["reward"] == 1.0 and c["purchase"]["options"] == {"容量": "500ml", "颜色分类": "白色"}
    # Task 42 in standard mode asks for 黑色: the right option, yet only one of two attributes matches.
    assert b["purchase"]["options"] == {"颜色分类": "黑色"} and b["reward"] == 0.5


def test_search_query_drops_budget_and_filler() -> None:
    assert search_query(INSTRUCTION) == "智能热洗 白色洗地机"
    assert search_query("买一副耳机") == "耳机"
    assert search_query("想买一个500ml的白色保温杯，价格在60元左右") == "500ml 白色保温杯"
    assert search_query("想要一台静音的无线洗地机，灰色就行") == "静音 无线洗地机 灰色"


def test_calls_rejected_as_protocol_errors_are_not_past_actions() -> None:
    feedback = json.dumps(
        {
            "type": "tool_protocol_error",
            "code": "tool_call_count",
            "message": "m",
            "instruction": "i",
            "available_tools": ["click"],
        },
        ensure_ascii=False,
    )
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "购物任务：\n" + INSTRUCTION + "\n\n" + HOME},
        *_history("search", "洗地机"),
        {"role": "tool", "tool_call_id": "call-x", "content": RESULTS},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "click", "arguments": '{"value": "100000000101"}'},
                },
                {
                    "id": "b",
                    "type": "function",
                    "function": {"name": "click", "arguments": '{"value": "100000000101"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": feedback},
        {"role": "tool", "tool_call_id": "b", "content": feedback},
        {"role": "user", "content": feedback},
    ]
    t = read_transcript(messages, tools_for_state({"actions": ["back to search", "100000000101"]}))
    assert t.past_actions == [("search", "洗地机")]
    assert t.observation == RESULTS and t.instruction == INSTRUCTION
    # search turn, the two-call turn, and the text-only repair turn (user feedback after a tool message)
    assert t.turns == 3
