"""Reward (contract §12): fuzzy matcher, type ladder, SKU price resolution, reward_detail and purchase.

Products and goals are built from the §19.1 example catalog; the §12.11 worked examples and the
final responses of Episodes A and B (§19.2, §19.3) are checked field by field.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from shopsim_sandbox.budget import goal_price_upper
from shopsim_sandbox.fuzzy import category_parts, matches, score, title_terms
from shopsim_sandbox.reward import (
    NO_PURCHASE_DETAIL_KEYS,
    PURCHASE_DETAIL_KEYS,
    no_purchase_detail,
    resolve_sku_price,
    score_purchase,
    type_score,
)

EXAMPLE_CATALOG: list[dict[str, Any]] = json.loads("""
[
 {"asin": "100000000101", "title": "智能热洗白色洗地机", "shop_name": "洁净旗舰店", "category": "家电›清洁电器›洗地机",
  "attribute": ["智能", "热洗"], "pricing": [1999.0, 2099.0], "images": ["https://example.invalid/p101.jpg"],
  "full_description": "智能热洗白色洗地机",
  "customization_options": {
    "颜色分类": [{"value": "白色", "price": 1999.0}, {"value": "黑色", "price": 2099.0}],
    "尺码": [{"value": "标准版", "price": 1999.0}, {"value": "大号", "price": 1999.0}]},
  "source_product_index": 5000,
  "instructions": [{"task_id": 5000, "task_uid": "shopsim-0a1b2c3d4e5f60718293a4b5", "instruction_index": 0,
    "instruction": "想买一台智能热洗的白色洗地机，预算不超过2100元", "attributes": ["智能", "热洗"],
    "instruction_options": ["白色"], "price_upper": null}]},
 {"asin": "100000000102", "title": "静音无线洗地机 家用", "shop_name": "清风电器", "category": "家电›清洁电器›洗地机",
  "attribute": ["静音", "无线"], "pricing": [1599.0], "images": ["https://example.invalid/p102.jpg"],
  "full_description": "静音无线洗地机 家用",
  "customization_options": {"颜色分类": [{"value": "灰色", "price": 1599.0}]},
  "source_product_index": 5002,
  "instructions": [{"task_id": 5002, "task_uid": "shopsim-3d4e5f60718293a4b5c6d7e8", "instruction_index": 0,
    "instruction": "想要一台静音的无线洗地机，灰色就行", "attributes": ["静音"], "instruction_options": [],
    "price_upper": null}]},
 {"asin": "100000000201", "title": "测试降噪耳机", "shop_name": "声学小铺", "category": "电子产品 › 耳机",
  "attribute": ["主动降噪", "蓝牙"], "pricing": [399.0], "images": ["https://example.invalid/p201.jpg"],
  "full_description": "测试降噪耳机",
  "customization_options": {"颜色分类": [{"value": "黑色", "price": 399.0}, {"value": "白色", "price": 399.0}]},
  "user_persona": {"用户ID": "u-1024", "预算偏好": "节省", "__reasoning__": "示例隐藏推理"},
  "source_product_index": 42,
  "instructions": [{"task_id": 42, "task_uid": "shopsim-1b2c3d4e5f60718293a4b5c6", "instruction_index": 0,
    "instruction": "买黑色降噪耳机，预算不超过500元", "instruction_simple": "买一副耳机",
    "attributes": ["黑色", "降噪"], "instruction_options": ["黑色"], "price_upper": 500.0}]},
 {"asin": "100000000301", "title": "不锈钢保温杯 500ml 商务", "shop_name": "杯具工坊", "category": "家居›杯具›保温杯",
  "attribute": ["316不锈钢", "长效保温"], "pricing": [59.0, 69.0], "images": ["https://example.invalid/p301.jpg"],
  "full_description": "不锈钢保温杯 500ml 商务",
  "customization_options": {
    "容量": [{"value": "500ml", "price": 59.0}, {"value": "750ml", "price": 69.0}],
    "颜色分类": [{"value": "白色", "price": 59.0}, {"value": "黑色", "price": 59.0}]},
  "source_product_index": 5001,
  "instructions": [{"task_id": 5001, "task_uid": "shopsim-2c3d4e5f60718293a4b5c6d7", "instruction_index": 0,
    "instruction": "想买一个500ml的白色保温杯，价格在60元左右", "attributes": ["保温", "500ml"],
    "instruction_options": ["500ml", "白色"], "price_upper": null}]}
]
""")
PRODUCTS = {p["asin"]: p for p in EXAMPLE_CATALOG}


def goal_for(task_id: int) -> dict[str, Any]:
    """The §7.3 private goal of a task of the example catalog."""
    for product in EXAMPLE_CATALOG:
        for ins in product["instructions"]:
            if ins["task_id"] == task_id:
                persona = product.get("user_persona") or {}
                return {
                    "task_id": task_id, "task_uid": ins["task_uid"],
                    "source_product_index": product["source_product_index"], "asin": product["asin"],
                    "category": product["category"], "name": product["title"],
                    "instruction_text": ins["instruction"],
                    "instruction_simple": ins.get("instruction_simple") or ins["instruction"],
                    "attributes": ins["attributes"], "goal_options": ins["instruction_options"],
                    "price_upper": goal_price_upper(ins), "price_constraint": None, "user_persona": persona,
                    "reason_key": None, "weight": 1,
                }
    raise KeyError(task_id)


def buy(asin: str, task_id: int, selection: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    product = PRODUCTS[asin]
    return score_purchase(product, goal_for(task_id), selection, resolve_sku_price(product, selection))


# --- §12.11 worked examples and Episodes A/B --------------------------------------------------

EPISODE_A_DETAIL = {
    "category_match": True, "num_attr_matches": 2, "num_option_matches": 1,
    "price_resolution": {"evidence": {"price_axis": "颜色分类"}, "method": "selected_price_axis", "price": 1999.0,
                         "status": "pass", "version": "variant-price-paper-v2"},
    "price_upper": 2100.0, "price_verifiable": True, "r_att": 1.0, "r_loose": 1.0, "r_option": 1.0, "r_price": 1.0,
    "r_strict": 1.0, "r_success": 1, "r_type": 1.0, "reward_version": "shopsimulator-paper-reward-v2",
    "target_asin_match": True, "termination_reason": "purchase", "title_score": 1.0,
}
EPISODE_A_PURCHASE = {
    "asin": "100000000101", "attributes": ["智能", "热洗"], "category": "家电›清洁电器›洗地机",
    "instruction_text": "想买一台智能热洗的白色洗地机，预算不超过2100元", "name": "智能热洗白色洗地机",
    "options": {"尺码": "标准版", "颜色分类": "白色"}, "price": 1999.0, "product_category": "",
}
EPISODE_B_DETAIL = {
    "category_match": True, "num_attr_matches": 1, "num_option_matches": 0,
    "price_resolution": {"evidence": {}, "method": "constant_option_price", "price": 399.0, "status": "pass",
                         "version": "variant-price-paper-v2"},
    "price_upper": 500.0, "price_verifiable": True, "r_att": 0.5, "r_loose": 0.5, "r_option": 0.0, "r_price": 1.0,
    "r_strict": 0.0, "r_success": 0, "r_type": 1.0, "reward_version": "shopsimulator-paper-reward-v2",
    "target_asin_match": True, "termination_reason": "purchase", "title_score": 1.0,
}
EPISODE_B_PURCHASE = {
    "asin": "100000000201", "attributes": ["主动降噪", "蓝牙"], "category": "电子产品 › 耳机",
    "instruction_text": "买黑色降噪耳机，预算不超过500元", "name": "测试降噪耳机", "options": {"颜色分类": "白色"},
    "price": 399.0, "product_category": "",
}


def _typed_equal(got: Any, want: Any) -> bool:
    """Equality that also requires the JSON types to agree (1.0 is not 1, True is not 1)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_typed_equal(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(_typed_equal, got, want))
    return type(got) is type(want) and got == want


def test_episode_a_purchase_matches_spec_exactly() -> None:
    detail, purchase = buy("100000000101", 5000, {"颜色分类": "白色", "尺码": "标准版"})
    assert _typed_equal(detail, EPISODE_A_DETAIL), detail
    assert _typed_equal(purchase, EPISODE_A_PURCHASE), purchase
    assert set(detail) == PURCHASE_DETAIL_KEYS and len(detail) == 17


def test_worked_example_wrong_colour_within_budget() -> None:
    detail, purchase = buy("100000000101", 5000, {"颜色分类": "黑色", "尺码": "标准版"})
    assert score("黑色", "白色") == 50
    assert detail["price_resolution"]["price"] == 2099.0 and purchase["price"] == 2099.0
    assert detail["r_price"] == 1.0
    assert detail["num_option_matches"] == 0 and detail["r_option"] == 0.0
    assert detail["r_strict"] == 0.0 and detail["r_success"] == 0
    assert detail["r_loose"] == 0.75


def test_episode_b_wrong_colour_matches_spec_exactly() -> None:
    detail, purchase = buy("100000000201", 42, {"颜色分类": "白色"})
    assert _typed_equal(detail, EPISODE_B_DETAIL), detail
    assert _typed_equal(purchase, EPISODE_B_PURCHASE), purchase


def test_episode_b_right_colour_succeeds() -> None:
    detail, _ = buy("100000000201", 42, {"颜色分类": "黑色"})
    # 黑色 is both an attribute and an option goal; as a selected option it matches only the option.
    assert detail["num_option_matches"] == 1 and detail["num_attr_matches"] == 1
    assert detail["r_strict"] == 0.5 and detail["r_success"] == 0


def test_non_gold_product_scored_against_other_goal() -> None:
    # Buying the grey cleaner for task 5000: same category path, different attributes and option.
    detail, purchase = buy("100000000102", 5000, {"颜色分类": "灰色"})
    assert detail["target_asin_match"] is False
    assert detail["category_match"] is True and detail["r_type"] == 1.0
    assert detail["num_attr_matches"] == 0 and detail["num_option_matches"] == 0
    assert detail["price_resolution"]["method"] == "constant_option_price" and detail["r_price"] == 1.0
    assert detail["r_loose"] == 0.25 and detail["r_strict"] == 0.0
    assert purchase["instruction_text"] == "想要一台静音的无线洗地机，灰色就行"


def test_cup_task_gold_within_and_over_budget() -> None:
    ok, _ = buy("100000000301", 5001, {"容量": "500ml", "颜色分类": "白色"})
    assert ok["price_upper"] == 66.0 and ok["price_resolution"]["price"] == 59.0
    assert ok["r_success"] == 1 and ok["r_strict"] == 1.0
    # 保温 is a substring of the title; 500ml too.
    assert ok["num_attr_matches"] == 2
    over, _ = buy("100000000301", 5001, {"容量": "750ml", "颜色分类": "白色"})
    assert over["price_resolution"] == {"status": "pass", "price": 69.0, "version": "variant-price-paper-v2",
                                        "method": "selected_price_axis", "evidence": {"price_axis": "容量"}}
    assert over["r_price"] == 0.0 and over["r_strict"] == 0.0 and over["r_success"] == 0
    assert over["num_option_matches"] == 1  # 白色 only
    assert over["r_loose"] == (1.0 * (2 + 1 + 0.0)) / (2 + 2 + 1)


def test_unverifiable_price_fails_budget_but_passes_without_budget() -> None:
    product = copy.deepcopy(PRODUCTS["100000000101"])
    resolution = resolve_sku_price(product, {"尺码": "标准版"})  # price axis 颜色分类 unselected
    assert resolution["status"] == "unverifiable" and resolution["method"] == "price_axis_unselected"
    detail, purchase = score_purchase(product, goal_for(5000), {"尺码": "标准版"}, resolution)
    assert detail["r_price"] == 0.0 and detail["price_verifiable"] is False and purchase["price"] is None
    no_budget = dict(goal_for(5000), price_upper=None)
    detail, _ = score_purchase(product, no_budget, {"尺码": "标准版"}, resolution)
    assert detail["r_price"] == 1.0 and detail["price_upper"] is None and detail["price_verifiable"] is False


def test_r_loose_order_of_operations() -> None:
    # r_type 0.5, 1 of 3 attributes, 0 of 1 option, price ok: 0.5*(1+0+1.0)/(3+1+1)
    product = {"asin": "11112222", "title": "红色马克", "category": "厨房›杯子", "attribute": ["陶瓷"],
               "customization_options": {}, "pricing": [10.0], "instructions": [{"instruction": "x"}]}
    goal = {"asin": "99998888", "category": "家居›餐具", "name": "陶瓷马克杯 大容量 北欧风 简约",
            "attributes": ["陶瓷", "大容量", "北欧"], "goal_options": ["蓝色"], "price_upper": 20.0}
    detail, _ = score_purchase(product, goal, {}, resolve_sku_price(product, {}))
    r_type, category_match, title_score = type_score(product, goal)
    assert (r_type, category_match) == (0.5, False) and 0.1 <= title_score <= 0.2
    assert detail["r_loose"] == (0.5 * (1 + 0 + 1.0)) / (3 + 1 + 1)
    assert detail["r_strict"] == ((0.5 * (1 / 3)) * 0.0) * 1.0


def test_selected_option_is_the_first_fuzzy_argument() -> None:
    product = {"asin": "12345678", "title": "测试商品", "category": "a›b", "attribute": ["x"],
               "customization_options": {"款式": [{"value": "色红红色黑黑款", "price": 5.0}]}, "pricing": [5.0]}
    goal = {"asin": "12345678", "category": "a›b", "name": "测试商品", "attributes": ["x"],
            "goal_options": ["色红红色黑款黑红款"], "price_upper": None}
    detail, _ = score_purchase(product, goal, {"款式": "色红红色黑黑款"}, resolve_sku_price(product, {}))
    assert detail["num_option_matches"] == 1


def test_attribute_matches_bullets_and_description_text() -> None:
    product = {"asin": "12345678", "title": "杯子", "category": "a›b", "attribute": [],
               "small_description": ["加厚 防烫"], "full_description": "北欧 风格", "pricing": [5.0]}
    goal = {"asin": "1", "category": "c›d", "name": "杯子", "attributes": ["防烫", "北欧", "none"],
            "goal_options": [], "price_upper": None}
    detail, _ = score_purchase(product, goal, {}, resolve_sku_price(product, {}))
    assert detail["num_attr_matches"] == 2
    # An explicit null bullet is written as the text "None" (Python str), so "none" then matches.
    detail, _ = score_purchase(dict(product, small_description=None), goal, {}, resolve_sku_price(product, {}))
    assert detail["num_attr_matches"] == 1 + 1  # "北欧" from description, "none" from the null bullet


def test_no_purchase_detail_has_exactly_eleven_keys() -> None:
    detail = no_purchase_detail("action_limit")
    assert set(detail) == NO_PURCHASE_DETAIL_KEYS and len(detail) == 11
    assert detail == {"reward_version": "shopsimulator-paper-reward-v2", "termination_reason": "action_limit",
                      "r_loose": 0.0, "r_strict": 0.0, "r_success": 0, "r_type": 0.0, "r_att": 0.0,
                      "r_option": 0.0, "r_price": 0.0, "target_asin_match": False, "price_verifiable": False}
    assert no_purchase_detail("generation_length")["termination_reason"] == "generation_length"


# --- fuzzy matcher (§12.3) -----------------------------------------------------------------------

@pytest.mark.parametrize(("a", "b", "expected"), [
    ("白色", "白色 | 大号", 100),
    ("白色", "黑色", 50),
    ("深海blue色", "天空blue款", 57),
    ("白色", "标准版", 0),
    ("色红红色黑黑款", "色红红色黑款黑红款", 88),
    ("色红红色黑款黑红款", "色红红色黑黑款", 75),
    ("大号色白", "白大色红白", 67),
    ("白大色红白", "大号色白", 22),
    ("XL", "xl", 100),
    ("黑色/白色", "白色", 100),
])
def test_fuzzy_scores(a: str, b: str, expected: int) -> None:
    assert score(a, b) == expected


def test_match_threshold_is_strictly_above_85() -> None:
    assert matches("白色", "白色 | 大号") and not matches("白色", "黑色")
    assert matches("色红红色黑黑款", "色红红色黑款黑红款") and not matches("色红红色黑款黑红款", "色红红色黑黑款")


# --- R_type (§12.4) ------------------------------------------------------------------------------

def test_category_parts_and_title_terms() -> None:
    assert category_parts(" 电子产品 › 耳机 ") == {"电子产品", "耳机"}
    assert category_parts("A > B/C\\\\D››") == {"a", "b", "c", "d"}
    assert title_terms("Sony WH-1000XM5 降噪耳机 x") == ["sony", "wh-1000xm5", "x", "降噪", "噪耳", "耳机"]
    assert title_terms("杯 子") == ["杯", "子"]


@pytest.mark.parametrize(
    ("bought", "gold", "expected"),
    [
        # category match (2 shared parts) wins regardless of titles
        (
            {"category": "家电›清洁电器›吸尘器", "title": "无关"},
            {"category": "家电›清洁电器›洗地机", "name": "洗地机"},
            1.0,
        ),
        # one shared part only; titles share 1 of 2 bigrams -> 0.5 > 0.2
        ({"category": "家电›厨房", "title": "洗地机"}, {"category": "家电›清洁", "name": "洗地"}, 1.0),
        # no overlap at all -> 0.0
        ({"category": "a›b", "title": "耳机"}, {"category": "c›d", "name": "杯子"}, 0.0),
        # 1 of 11 gold terms -> 0.0909 < 0.1 -> 0.1
        ({"category": "a›b", "title": "aa"}, {"category": "c›d", "name": "aa bb cc dd ee ff gg hh ii jj kk"}, 0.1),
        # 1 of 5 -> 0.2 exactly -> 0.5
        ({"category": "a›b", "title": "aa"}, {"category": "c›d", "name": "aa bb cc dd ee"}, 0.5),
        # gold title without terms -> title_score 0.2 -> 0.5
        ({"category": "a›b", "title": "aa"}, {"category": "c›d", "name": "!!"}, 0.5),
    ],
)
def test_type_ladder(bought: dict[str, str], gold: dict[str, str], expected: float) -> None:
    assert type_score(bought, gold)[0] == expected


# --- SKU price resolution (§12.8) ----------------------------------------------------------------


def _axis(entries: list[Any], **extra: Any) -> dict[str, Any]:
    return {"customization_options": {"颜色": entries}, "pricing": [10.0], **extra}


@pytest.mark.parametrize(
    ("product", "selection", "expected"),
    [
        (
            _axis(
                [{"value": "黑色", "price": 10.0}, {"value": "黑 色", "price": 20.0}, {"value": "白色", "price": 10.0}]
            ),
            {"颜色": "黑色"},
            ("pass", 20.0, "selected_price_axis", {"price_axis": "颜色"}),
        ),
        (
            _axis(
                [{"value": "黑色", "price": 10.0}, {"value": "黑 色", "price": 20.0}, {"value": "白色", "price": 10.0}]
            ),
            {"颜色": "黑 色"},
            ("pass", 20.0, "selected_price_axis", {"price_axis": "颜色"}),
        ),
        (
            _axis([{"value": "黑色", "price": "5"}, {"value": "白色", "price": 5.0}]),
            {},
            ("pass", 5.0, "constant_option_price", {}),
        ),
        (
            _axis([{"value": "黑色", "price": True}, {"value": "白色", "price": " 1e0 "}]),
            {},
            ("pass", 1.0, "constant_option_price", {}),
        ),
        (
            _axis([{"value": "黑色", "price": 10.0}, {"value": "白色", "price": "nan"}]),
            {},
            ("pass", 10.0, "constant_option_price", {}),
        ),
        (
            {"customization_options": {"颜色": None}, "pricing": [89.0]},
            {},
            ("unverifiable", None, "price_not_deterministic", {"candidate_prices": []}),
        ),
        ({"pricing": ["89"]}, {}, ("pass", 89.0, "single_listing_price", {})),
        ({}, {}, ("pass", 100.0, "single_listing_price", {})),
        ({"customization_options": {}, "pricing": [59.0, 59.0]}, {}, ("pass", 59.0, "single_listing_price", {})),
        (
            {"customization_options": None, "pricing": [59.0, 69.0]},
            {},
            ("unverifiable", None, "price_not_deterministic", {"candidate_prices": []}),
        ),
        # an axis without prices: unverifiable although the listing has a single price
        (
            _axis([{"value": "黑色"}, {"value": "白色"}]),
            {},
            ("unverifiable", None, "price_not_deterministic", {"candidate_prices": []}),
        ),
        # two constant axes with different prices
        (
            {"customization_options": {"a": [{"value": "x", "price": 2.0}], "b": [{"value": "y", "price": 1.0}]}},
            {},
            ("unverifiable", None, "price_not_deterministic", {"candidate_prices": [1.0, 2.0]}),
        ),
        (
            _axis([{"value": "黑色", "price": 10.0}, {"value": "白色", "price": 12.0}]),
            {},
            ("unverifiable", None, "price_axis_unselected", {"price_axis": "颜色"}),
        ),
        (
            _axis([{"value": "黑色", "price": 10.0}, {"value": "白色", "price": 12.0}, {"value": "红色", "price": -1}]),
            {"颜色": "红色"},
            ("unverifiable", None, "selected_variant_price_missing", {"price_axis": "颜色"}),
        ),
        # displayed "黑色 | 白色" matches the raw "黑色/白色"; non-object entries and empty values ignored
        (
            _axis(
                [
                    {"value": "黑色/白色", "price": 10.0},
                    "junk",
                    {"value": "", "price": 99.0},
                    {"value": "红", "price": 12},
                ]
            ),
            {"颜色": "黑色 | 白色"},
            ("pass", 10.0, "selected_price_axis", {"price_axis": "颜色"}),
        ),
        (
            {
                "customization_options": {
                    "a": [{"value": "x", "price": 1.0}, {"value": "y", "price": 2.0}],
                    "b": [{"value": "p", "price": 3.0}, {"value": "q", "price": 4.0}],
                }
            },
            {"a": "x", "b": "p"},
            ("unverifiable", None, "multiple_price_affecting_axes", {"price_affecting_axes": ["a", "b"]}),
        ),
    ],
)
def test_price_resolution(product: dict[str, Any], selection: dict[str, str], expected: tuple[Any, ...]) -> None:
    status, price, method, evidence = expected
    got = resolve_sku_price(product, selection)
    assert got == {
        "status": status,
        "price": price,
        "version": "variant-price-paper-v2",
        "method": method,
        "evidence": evidence,
    }
    if price is not None:
        assert type(got["price"]) is float


def test_example_catalog_resolutions() -> None:
    assert resolve_sku_price(PRODUCTS["100000000201"], {})["method"] == "constant_option_price"
    assert resolve_sku_price(PRODUCTS["100000000101"], {"颜色分类": "黑色"})["price"] == 2099.0
