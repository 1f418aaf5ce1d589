"""Search engine details of spec §16 (normalization, tokens, document fields, FTS5 ranking)."""

from __future__ import annotations

import pytest

from shopsim_sandbox.search import SearchIndex, document_fields, model_tokens, normalize_query, tokenize


@pytest.mark.parametrize("text,normalized,tokens", [
    ("  迷你，冰箱 100 CNY ", "迷你 冰箱 100元", ["迷你", "冰箱", "元", "100"]),
    ("100rmb的杯子", "100rmb的杯子", ["的杯", "杯子", "100rmb"]),
    ("100 rmb 杯子", "100元 杯子", ["元", "杯子", "100"]),
    ("小冰箱", "小冰箱", ["小冰", "冰箱"]),
    ("RTX4060 显卡", "rtx4060 显卡", ["显卡", "rtx4060"]),
    ("café", "café", ["caf"]),
    ("Ünïcode", "ünïcode", ["n", "code"]),
    ("カタカナ", "カタカナ", []),
    ("人民币99块钱", "元99元", ["元", "99"]),
    ("a|b、c：d", "a b c d", ["a", "b", "c", "d"]),
])
def test_normalization_and_tokens(text: str, normalized: str, tokens: list[str]) -> None:
    assert normalize_query(text) == normalized
    assert tokenize(text) == tokens


def test_document_fields_follow_the_field_table() -> None:
    record = {"asin": " 42 ", "title": "abc--1 b..a1 X200", "brand": "原牌", "shop_name": "店铺",
              "product_category": "备用类目", "attribute": ["防水", {"b": 1, "a": [2, None]}],
              "customization_options": {"颜色": [{"value": "黑色"}, {"value": ""}, "白色", None], "": [{"value": "x1"}],
                                        "尺码": {"value": "大号"}},
              "small_description": [], "sub_title": ["s1", {"b": 1, "a": [2, None]}]}
    fields = document_fields(record)

    def stored(text: str) -> str:
        return " ".join(tokenize(text))

    assert fields["title"] == stored("abc--1 b..a1 X200")
    assert fields["brand"] == stored("原牌")
    assert fields["category"] == stored("备用类目")
    assert fields["model"] == stored("abc b a1 x200") and model_tokens(record["title"]) == ["abc", "b", "a1", "x200"]
    assert fields["attributes"] == stored("防水 a 2 b 1")
    assert fields["options"] == stored("x1 尺码 大号 颜色 黑色 白色")
    assert fields["bullets"] == stored("s1 a 2 b 1")


def test_ranking_weights_tie_break_and_loaded_filter() -> None:
    records = [
        {"asin": "30", "title": "普通杯子", "shop_name": "店", "category": "家居›杯具", "attribute": ["保温"]},
        {"asin": "20", "title": "保温杯", "shop_name": "店", "category": "家居›杯具", "attribute": []},
        {"asin": "10", "title": "普通杯子", "shop_name": "店", "category": "家居›杯具", "attribute": ["保温"]},
        {"asin": "99", "title": "保温杯", "shop_name": "店", "category": "家居›杯具", "attribute": []},
        {"asin": "10", "title": "重复键被跳过 保温", "shop_name": "店", "category": "x"},
        {"asin": "nan", "title": "保温"},
    ]
    index = SearchIndex(records, {"10", "20", "30"})
    assert index.document_count == 4
    normalized, hits = index.search("保温")
    # the title match (weight 3.0) beats the attribute match (1.5); equal scores go by ASIN; 99 is indexed
    # but not a loaded product, so it is dropped after ranking
    assert normalized == "保温" and hits == ["20", "10", "30"]
    assert index.search("。。")[1] == []


def test_latin_phrase_tokens_match_as_phrases() -> None:
    index = SearchIndex([{"asin": "1", "title": "型号 a1.b2-c"}, {"asin": "2", "title": "型号 c b2 a1"}], {"1", "2"})
    assert index.search("a1.b2-c")[1] == ["1"]
    assert sorted(index.search("b2")[1]) == ["1", "2"]
