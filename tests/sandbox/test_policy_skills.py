"""The baseline policy heeds skill hints in its system message: a hint that addresses a lapse makes it
rarer, an unrelated hint changes nothing, and without hints the play is exactly the pinned baseline.

Unit level over the ASGI transport; the same over real sockets in test_policy_success.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from typing import Any

import httpx
import pytest

from shopsim_sandbox.policy import (
    SERVED_MODEL,
    Lapses,
    build_policy_app,
    hinted_lapses,
    read_transcript,
    tools_for_state,
)

# The page texts the plain policy tests use; this file varies prices and titles around them.
from .test_policy import DETAIL_ACTIONS, HOME, INSTRUCTION, RESULTS

PERSONA = {"用户ID": "u-1", "偏好": "喜欢大号"}


RESULTS_PRICEY = RESULTS.replace("1999.0 to 2099.0", "2599.0")  # the better match is over budget


def _detail(title: str, price: str, attributes: str = "智能；热洗") -> str:
    return (
        f"页面：商品详情\n商品：\n- 标题：{title}\n- ASIN：100000000101\n- 价格：{price}\n"
        f"- 品牌：洁净旗舰店\n- 类别：家电›清洁电器›洗地机\n- 关键属性：{attributes}\n\n规格选择：\n- 颜色分类：尚未选择\n"  # noqa: E501 (page text)
        "  可选值：黑色 / 白色\n- 尺码：尚未选择\n  可选值：标准版 / 大号\n仍需选择：颜色分类、尺码\n\n"
        "上次交互结果：\n- 结果：成功\n- 说明：点击已执行\n\n可点击元素：\n- back to search\n- < prev\n- 颜色分类=黑色\n"  # noqa: E501 (page text)
        "- 颜色分类=白色\n- 尺码=标准版\n- 尺码=大号\n"
    )


DETAIL_OK = _detail("智能热洗白色洗地机", "1999.0 to 2099.0")  # fits: only the option choice shows
DETAIL_MISSING = _detail("静音无线洗地机", "1999.0", "静音；无线")  # lacks 智能热洗: patient play goes back
DETAIL_PRICEY = _detail("智能热洗白色洗地机", "2599.0")  # over budget: careful play goes back
PAGES = (HOME, RESULTS, RESULTS_PRICEY, DETAIL_OK, DETAIL_MISSING, DETAIL_PRICEY)

HINT_OPTIONS = "### 逐项选规格\n- Procedure:\n  1. 对每个规格轴逐一点击与要求最接近的值，不要保留默认值"
HINT_BUDGET = "### 价格与预算\n- Procedure:\n  1. 选完规格后查看当前价格，价格超过预算时换规格"
HINT_COMPARE = "### 多看几个\n- Procedure:\n  1. 比较两三个候选后再决定，缺少属性时返回结果页换一个商品"
HINT_SEARCH = "### 搜索词\n- Procedure:\n  1. 搜索词以商品类型的名词为主，再加一两个关键属性"
HINT_UNRELATED = "### 思考保持简短\n- Procedure:\n  1. 尽快给出一次工具调用\n- Avoid: 来回比较直到步数耗尽"


def _system(hints: list[str]) -> str:
    text = "系统提示\n\n用户个人文档：\n" + json.dumps(PERSONA, ensure_ascii=False, sort_keys=True)
    if hints:
        text += "\n\n[策略提示（可选参考）]\n说明文字"
        for n, hint in enumerate(hints):
            text += f'\n<skill id="h{n}" version="1">\n{hint}\n</skill>'
    return text


def _body(page: str, episode_seed: int, hints: list[str]) -> dict[str, Any]:
    """A request on ``page`` (HOME, RESULTS after a search, or a detail page after search + click)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _system(hints)},
        {"role": "user", "content": "购物任务：\n" + INSTRUCTION + "\n\n" + HOME},
    ]
    turns = 0
    steps = (
        []
        if page == HOME
        else [("search", "洗地机", page)]
        if page.startswith("页面：搜索结果")
        else [("search", "洗地机", RESULTS), ("click", "100000000101", page)]
    )
    for name, value, observation in steps:
        arguments = json.dumps({"query": value} if name == "search" else {"value": value}, ensure_ascii=False)
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"c{turns}", "type": "function", "function": {"name": name, "arguments": arguments}}
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{turns}", "content": observation})
        turns += 1
    state = (
        {"search_available": True, "actions": []}
        if page == HOME
        else {"search_available": False, "actions": ["back to search", "100000000102", "100000000101"]}
        if page.startswith("页面：搜索结果")
        else {"search_available": False, "actions": DETAIL_ACTIONS}
    )
    # The runtime sends seed = episode seed + step - 1.
    return {
        "model": SERVED_MODEL,
        "messages": messages,
        "seed": episode_seed + turns,
        # greedy: the draws BARE_DIGEST was recorded with (the policy then ignored temperature; above 0 it
        # now samples other episodes from the same seeds, issue 33)
        "temperature": 0.0,
        "max_tokens": 4096,
        "tools": tools_for_state(state),
        "tool_choice": "auto",
    }


def _decisions(app: Any, page: str, hints: list[str], seeds: range) -> list[str]:
    async def go() -> list[str]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://policy") as client:
            out = []
            for seed in seeds:
                answer = (await client.post("/v1/chat/completions", json=_body(page, seed, hints))).json()
                out.append(answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
            return out

    return asyncio.run(go())


SEEDS = range(200)
# sha256 over the bare decisions on every page of PAGES for SEEDS,
# recorded with the policy as it was before it read skill hints: hint support must not move bare play.
BARE_DIGEST = "251199e73382ee8e399867d6f5dd23f660b0856f030cd8301b4690f5149abf02"


def test_bare_play_is_the_pinned_baseline() -> None:
    app = build_policy_app(seed=0)
    decisions = [d for page in PAGES for d in _decisions(app, page, [], SEEDS)]
    assert hashlib.sha256("\n".join(decisions).encode()).hexdigest() == BARE_DIGEST


def _is_lapse(decision: str, lapse_value: str) -> bool:
    """``lapse_value`` exactly, or any option of the axis when it ends with ``=``."""
    args = json.loads(decision)
    value = args.get("value", args.get("query"))
    return value == lapse_value or (lapse_value.endswith("=") and value.startswith(lapse_value))


def _rate(decisions: list[str], lapse_value: str) -> float:
    return sum(_is_lapse(d, lapse_value) for d in decisions) / len(decisions)


@pytest.mark.parametrize(
    ("page", "hint", "lapse_value"),
    [
        (DETAIL_OK, HINT_OPTIONS, "颜色分类=黑色"),  # first option instead of the asked-for 白色
        (DETAIL_MISSING, HINT_COMPARE, "颜色分类="),  # goes on to buy although 智能热洗 is missing
        (RESULTS_PRICEY, HINT_BUDGET, "100000000101"),  # opens the better match although it is over budget
        (HOME, HINT_SEARCH, "智能热洗 白色洗地机"),  # instruction words only, persona wishes dropped
    ],
    ids=["first_option", "impatient", "ignore_budget", "terse_query"],
)
def test_a_relevant_hint_makes_its_lapse_rarer_and_only_removes_lapses(page: str, hint: str, lapse_value: str) -> None:
    app = build_policy_app(seed=0)
    bare = _decisions(app, page, [], SEEDS)
    hinted = _decisions(app, page, [HINT_UNRELATED, hint], SEEDS)
    bare_rate, hinted_rate = _rate(bare, lapse_value), _rate(hinted, lapse_value)
    assert bare_rate >= 0.2, bare_rate  # the lapse is common without the hint
    assert hinted_rate <= 0.5 * bare_rate, (bare_rate, hinted_rate)
    # Same uniform draws either way: the hint removes lapses, it never adds one. (On a results page the
    # rare runner-up slip picks the second of the ranking, so there a removed lapse can show reversed.)
    removed = sum(_is_lapse(b, lapse_value) and not _is_lapse(h, lapse_value) for b, h in zip(bare, hinted))
    reversed_ = sum(not _is_lapse(b, lapse_value) and _is_lapse(h, lapse_value) for b, h in zip(bare, hinted))
    assert removed >= 10
    assert reversed_ <= (removed // 5 if page.startswith("页面：搜索结果") else 0), (removed, reversed_)
    assert sum(b != h for b, h in zip(bare, hinted)) == removed + reversed_


def test_first_option_lapses_are_exactly_the_hinted_draws() -> None:
    """A hinted first-option lapse happens exactly when its draw falls below a quarter of the base rate.

    The expected episodes are recomputed from the policy's seeding rule (app seed, episode seed,
    instruction, persona) and ``Lapses.draw`` with the hinted set; the served decisions must match
    them one for one, not merely in rate.
    """
    app = build_policy_app(seed=0)
    seeds = range(400)
    served = [_is_lapse(d, "颜色分类=黑色") for d in _decisions(app, DETAIL_OK, [HINT_OPTIONS], seeds)]
    expected = []
    for seed in seeds:
        body = _body(DETAIL_OK, seed, [HINT_OPTIONS])
        t = read_transcript(body["messages"], body["tools"])
        draw = random.Random(f"0|{seed}|{t.instruction}|{t.persona_text}")
        expected.append(Lapses.draw(draw, hinted_lapses(t.skill_hints)).first_option)
    assert "first_option" in hinted_lapses(
        read_transcript(_body(DETAIL_OK, 0, [HINT_OPTIONS])["messages"], None).skill_hints
    )
    assert served == expected
    assert sum(expected) < sum(  # the hint made the lapse rarer than the unhinted draws of the same seeds
        Lapses.draw(random.Random(f"0|{seed}|{t.instruction}|{t.persona_text}")).first_option for seed in seeds
    )


@pytest.mark.parametrize(
    "page", PAGES, ids=["home", "results", "results_pricey", "detail_ok", "detail_missing", "detail_pricey"]
)
def test_an_unrelated_hint_changes_no_decision(page: str) -> None:
    app = build_policy_app(seed=0)
    assert _decisions(app, page, [HINT_UNRELATED], range(60)) == _decisions(app, page, [], range(60))


def test_hints_outside_skill_blocks_or_system_messages_are_ignored() -> None:
    body = _body(DETAIL_OK, 3, [])
    body["messages"][0]["content"] += "\n\n" + HINT_OPTIONS  # no <skill> tags
    body["messages"][1]["content"] += f'\n<skill id="x" version="1">\n{HINT_OPTIONS}\n</skill>'  # a user message
    t = read_transcript(body["messages"], body["tools"])
    assert t.skill_hints == [] and t.persona_text == "喜欢大号"


def test_without_lapses_hints_change_nothing() -> None:
    app = build_policy_app(seed=0, lapses=False)
    for page in PAGES:
        hinted = _decisions(app, page, [HINT_OPTIONS, HINT_BUDGET, HINT_COMPARE, HINT_SEARCH], range(20))
        assert hinted == _decisions(app, page, [], range(20))


def test_draw_with_no_hint_is_the_plain_draw() -> None:
    for key in range(50):
        assert Lapses.draw(random.Random(key), frozenset()) == Lapses.draw(random.Random(key))
    assert hinted_lapses([]) == frozenset()
    assert hinted_lapses([HINT_UNRELATED]) == frozenset()


def test_cues_read_the_rule_based_miners_chunks() -> None:
    """The chunks the project's rule-based miner writes for the failures these lapses cause are heard."""
    from shopsimrl_core.episode._prompts import load_prompt
    from shopsimrl_core.skills._candidates import FailureGroup, RuleBasedMiner, render_chunk

    def heard(label: str) -> frozenset[str]:
        (chunk,) = RuleBasedMiner().propose(FailureGroup(label=label, support=2))
        return hinted_lapses([render_chunk(chunk)])

    assert "first_option" in heard("outcome:wrong_option")
    assert "impatient" in heard("outcome:missing_attributes")
    assert "terse_query" in heard("outcome:wrong_type")
    assert "ignore_budget" in heard("outcome:over_budget") and "ignore_budget" in heard("budget:ignored")
    for label in (
        "outcome:action_limit",
        "outcome:generation_length",
        "behaviour:loop",
        "outcome:price_unverifiable",
        "invalid_action:unavailable_action",
        "protocol_error:tool_call_count",
    ):
        assert heard(label) == frozenset(), label
    # The runtime's own system message (persona section, then skill block) parses as intended.
    (chunk,) = RuleBasedMiner().propose(FailureGroup(label="outcome:wrong_option", support=2))
    system = load_prompt().system_message(PERSONA, [{"skill_id": "a", "version": "1", "content": render_chunk(chunk)}])
    t = read_transcript(
        [{"role": "system", "content": system}, {"role": "user", "content": "购物任务：\n买耳机"}], None
    )
    assert t.skill_hints == [render_chunk(chunk)] and t.persona_text == "喜欢大号"
