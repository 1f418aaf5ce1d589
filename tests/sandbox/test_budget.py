"""Budget parser (contract §13): every test vector of §13.4, both tables, plus the §13.1 source order."""

from __future__ import annotations

import math

import pytest

from shopsim_sandbox.budget import chinese_numeral_value, goal_price_upper, parse_price_upper

# §13.4, first table (text-only rows).
MAIN_VECTORS = [
    ("预算在1000元以下。", 1000.0),
    ("价格不超过 2199 元", 2199.0),
    ("价格在70元左右", 77.0),
    ("价格在130-140元之间", 140.0),
    ("价格30元到40元之间", 40.0),
    ("价格在10-20之间", 20.0),
    ("预算4k+", None),
    ("预算在1万元左右", 11000.0),
    ("预算1万2以内", 12000.0),
    ("差不多30元左右", 33.0),
    ("预算七十元上下", 77.0),
    ("价格别超过160元", 160.0),
    ("预期价格在350元和400元之间", 400.0),
    ("预算是17000元", 17000.0),
    ("预算不超过一千八", 1800.0),
    ("预算就二十来块钱", 22.0),
    ("五元以内", 5.0),
    ("价格要超过20元", None),
    ("价格在40元左右", 44.0),
    ("想买一个500ml的白色保温杯，价格在60元左右", 66.0),
    ("想买一台智能热洗的白色洗地机，预算不超过2100元", 2100.0),
    ("二十几块", 29.0),
    ("个位数价格", 9.0),
]

# §13.4, second table (exact matching rules).
EXACT_VECTORS = [
    ("不超过300元低于400元", 300.0),
    ("预算不超过300元低于400元", 300.0),
    ("价格在50元以内，预算不超过80元", 80.0),
    ("预算不低于300元", 300.0),
    ("预算不低于300", None),
    ("预算不要超过20元", 20.0),
    ("预算不超过0元，50元以内", None),
    ("价格在0-20之间", None),
    ("预算20-10元之间", 20.0),
    ("大约0元，价格50元以内", 50.0),
    ("预算0万0以内", 0.0),
    ("预算1万2000元", 2010000.0),
    ("预算1万25以内", 35000.0),
    ("预算 在 1万2以内", 10000.0),
    ("预算金额 控制在1万2以内", 10000.0),
    ("预算在 1万2以内", 12000.0),
    ("价格一般在300元以内", 1.0),
    ("5千左右", 1100.0),
    ("2千左右的预算", 1100.0),
    ("三千左右吧", 3300.0000000000005),
    ("预算一亿二万元", 1000000020000.0),
    ("预算２０００元以内", 2000.0),
    ("预算是1.5k元", 1500.0),
    ("100以内能拿下", 100.0),
    ("100以内能 拿下", None),
    ("二 十几块", 19.0),
]


def _same(got: float | None, want: float | None) -> bool:
    if want is None or got is None:
        return got is want
    # Bit-identical: equal values of type float (0.0 must not be -0.0 either).
    return type(got) is float and got == want and math.copysign(1, got) == math.copysign(1, want)


@pytest.mark.parametrize(("text", "expected"), MAIN_VECTORS + EXACT_VECTORS)
def test_budget_vector(text: str, expected: float | None) -> None:
    got = parse_price_upper(text)
    assert _same(got, expected), f"{text!r}: got {got!r}, want {expected!r}"


def test_simple_instruction_wins_over_full() -> None:
    instruction = {"instruction": "买一盏预算不超过500元的台灯", "instruction_simple": "找一盏价格在200元以内的台灯",
                   "price_upper": None}
    assert goal_price_upper(instruction) == 200.0


def test_precomputed_value_wins() -> None:
    assert goal_price_upper({"instruction": "预算不超过900元", "price_upper": 100}) == 100.0
    assert goal_price_upper({"instruction": "预算不超过900元", "price_upper": "100"}) == 100.0


def test_no_budget_wording_gives_null_whatever_the_gold_price() -> None:
    # The gold product costs 9999, but only the instruction text counts.
    assert goal_price_upper({"instruction": "想买一台静音的无线洗地机，灰色就行", "price_upper": None}) is None


def test_full_instruction_parsed_when_simple_has_no_budget() -> None:
    instruction = {"instruction": "买黑色降噪耳机，预算不超过500元", "instruction_simple": "买一副耳机"}
    assert goal_price_upper(instruction) == 500.0


def test_empty_precomputed_string_falls_back_to_text() -> None:
    assert goal_price_upper({"instruction": "价格在70元左右", "price_upper": ""}) == 77.0


@pytest.mark.parametrize("bad", [-1, "inf", "nan", "abc", [1]])
def test_invalid_precomputed_value_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="price_upper"):
        goal_price_upper({"task_id": 9, "instruction": "x", "price_upper": bad})


@pytest.mark.parametrize(("run", "value"), [
    ("二零", 20), ("一二三", 123), ("一千八", 1800), ("两万五", 25000), ("一百二", 120), ("七十", 70),
    ("十", 10), ("两万五千", 25000), ("万", 0), ("一亿二万", 1_000_000_020_000), ("千", 1000),
])
def test_chinese_numerals(run: str, value: int) -> None:
    assert chinese_numeral_value(run) == value


def test_episode_c_budget_is_sixty_times_one_point_one() -> None:
    assert parse_price_upper("想买一个500ml的白色保温杯，价格在60元左右") == 60 * 1.1
