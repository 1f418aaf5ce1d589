"""Edge-case catalog records for the conformance suite (added to the §19.1 example catalog)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"

MANY_VALUES_ASIN = "100000000501"
EQUALS_ASIN = "100000000502"
TWO_PRICE_AXES_ASIN = "100000000504"
SUB_TITLE_ASIN = "100000000505"
BULLET_POINTS_ASIN = "100000000506"
ASYMMETRIC_ASIN = "100000000507"
LAMP_ASIN = "100000000401"
TWIN_ASINS = ("100000000591", "100000000592")
PAGING_COUNT = 170

# (asin, customization_options or None (absent), pricing or None (absent), selection, expected resolution)
PRICE_VECTORS: list[tuple[str, Any, Any, dict, dict]] = [
    ("100000000601", {"颜色": [{"value": "黑色", "price": 10.0}, {"value": "黑 色", "price": 20.0},
                              {"value": "白色", "price": 10.0}]}, [10.0], {"颜色": "黑色"},
     {"status": "pass", "price": 20.0, "method": "selected_price_axis", "evidence": {"price_axis": "颜色"}}),
    ("100000000602", {"颜色": [{"value": "黑色", "price": "5"}, {"value": "白色", "price": 5.0}]}, [10.0], {},
     {"status": "pass", "price": 5.0, "method": "constant_option_price", "evidence": {}}),
    ("100000000603", {"颜色": [{"value": "黑色", "price": True}, {"value": "白色", "price": " 1e0 "}]}, [10.0], {},
     {"status": "pass", "price": 1.0, "method": "constant_option_price", "evidence": {}}),
    ("100000000604", {"颜色": [{"value": "黑色", "price": 10.0}, {"value": "白色", "price": "nan"}]}, [10.0], {},
     {"status": "pass", "price": 10.0, "method": "constant_option_price", "evidence": {}}),
    ("100000000605", {"颜色": None}, [89.0], {},
     {"status": "unverifiable", "price": None, "method": "price_not_deterministic",
      "evidence": {"candidate_prices": []}}),
    ("100000000606", None, ["89"], {},
     {"status": "pass", "price": 89.0, "method": "single_listing_price", "evidence": {}}),
    ("100000000607", None, None, {},
     {"status": "pass", "price": 100.0, "method": "single_listing_price", "evidence": {}}),
]
PRICE_VECTOR_TITLES = ["价向甲", "价向乙", "价向丙", "价向丁", "价向戊", "价向己", "价向庚"]

BUDGET_TASK_BASE = 8000


def budget_vectors() -> list[tuple[str, float | None]]:
    """The §13.4 single-text test vectors (input, expected price_upper)."""
    return [(text, value) for text, value in json.loads((DATA / "budget_vectors.json").read_text(encoding="utf-8"))]


def _instruction(task_id: int, text: str, attributes: list[str], options: list[str] | None = None,
                 **extra: Any) -> dict:
    return {"task_id": task_id, "task_uid": f"shopsim-{task_id:024x}", "instruction_index": 0, "instruction": text,
            "attributes": attributes, "instruction_options": options or [], "price_upper": None, **extra}


def _record(asin: str, title: str, instructions: list[dict], **fields: Any) -> dict:
    record = {"asin": asin, "title": title, "shop_name": fields.pop("shop_name", "边界店"),
              "category": fields.pop("category", "测试›边界"), "attribute": fields.pop("attribute", ["边界"]),
              "images": ["https://example.invalid/x.jpg"], "full_description": title}
    record.update(fields)
    record["instructions"] = instructions
    return record


def edge_records() -> list[dict]:
    """All edge-case records, with task ids 6000–6099, 7000+ (paging) and 8000+ (budget vectors)."""
    many = [{"value": f"色{i:03d}", "price": 10.0} for i in range(150)]
    many[2] = {"value": "色001", "price": 10.0}   # a duplicate value
    many[3] = {"value": "   ", "price": 10.0}     # a blank value inside the first 100
    records = [
        _record(
            MANY_VALUES_ASIN,
            "多色马克杯",
            [_instruction(6001, "买多色马克杯", ["马克杯"])],
            pricing=[10.0],
            customization_options={"颜色分类": many},
        ),
        _record(
            EQUALS_ASIN,
            "等号奇怪商品",
            [_instruction(6002, "买等号奇怪商品", ["等号"])],
            pricing=[5.0],
            customization_options={
                "a": [{"value": "b=c", "price": 5.0}, {"value": "x", "price": 5.0}],
                "a=b": [{"value": "c", "price": 5.0}],
            },
        ),
        _record(
            "100000000503",
            "推理人设商品",
            [_instruction(6003, "买推理人设商品全量说明", ["推理"], instruction_simple="买个东西")],
            pricing=[5.0],
            user_persona={"__reasoning__": "只有隐藏推理"},
        ),
        _record(
            TWO_PRICE_AXES_ASIN,
            "双价轴保温壶",
            [_instruction(6004, "买双价轴保温壶，预算不超过100元", ["保温"])],
            pricing=[59.0, 79.0],
            customization_options={
                "容量": [{"value": "500ml", "price": 59.0}, {"value": "750ml", "price": 69.0}],
                "颜色分类": [{"value": "白色", "price": 59.0}, {"value": "黑色", "price": 79.0}],
            },
        ),
        _record(
            SUB_TITLE_ASIN,
            "普通商品甲",
            [_instruction(6005, "买普通商品甲", ["普通"])],
            pricing=[5.0],
            sub_title=["独角兽限定"],
        ),
        _record(
            BULLET_POINTS_ASIN,
            "普通商品乙",
            [_instruction(6006, "买普通商品乙", ["普通"])],
            pricing=[5.0],
            BulletPoints=["麒麟纪念"],
        ),
        _record(
            ASYMMETRIC_ASIN,
            "不对称颜色围巾",
            [
                _instruction(6007, "买不对称颜色围巾", ["围巾"], ["色红红色黑款黑红款"]),
                _instruction(6008, "买白色围巾", ["围巾"], ["白色"]),
            ],
            pricing=[30.0],
            customization_options={
                "颜色分类": [{"value": "色红红色黑黑款", "price": 30.0}, {"value": "白色/大号", "price": 30.0}]
            },
        ),
        _record(
            LAMP_ASIN,
            "简易 台灯",
            [_instruction(6009, "买简易台灯", ["护眼"])],
            pricing=[89.0],
            shop_name="光源店",
            category="家居›灯具",
            attribute=["护眼"],
        ),
        _record(TWIN_ASINS[1], "孪生测试品", [_instruction(6010, "买孪生测试品", ["孪生"])], pricing=[5.0]),
        _record(TWIN_ASINS[0], "孪生测试品", [_instruction(6011, "买孪生测试品", ["孪生"])], pricing=[5.0]),
        _record("100000000510", "缺属性商品", [_instruction(6012, "买缺属性商品", [])], pricing=[5.0]),
    ]
    for index, (asin, options, pricing, _selection, _expected) in enumerate(PRICE_VECTORS):
        fields: dict[str, Any] = {}
        if options is not None:
            fields["customization_options"] = options
        if pricing is not None:
            fields["pricing"] = pricing
        records.append(
            _record(
                asin,
                PRICE_VECTOR_TITLES[index],
                [_instruction(6020 + index, f"买{PRICE_VECTOR_TITLES[index]}", ["价向"])],
                **fields,
            )
        )
    for i in range(PAGING_COUNT):
        records.append(
            _record(
                f"{100000001000 + i}", f"分页测试商品{i}", [_instruction(7000 + i, "分页", ["分页"])], pricing=[5.0]
            )
        )
    budget_instructions = [
        _instruction(BUDGET_TASK_BASE + i, text, ["预算"]) for i, (text, _value) in enumerate(budget_vectors())
    ]
    budget_instructions += [
        _instruction(
            BUDGET_TASK_BASE + 900,
            "买一盏预算不超过500元的台灯",
            ["预算"],
            instruction_simple="找一盏价格在200元以内的台灯",
        ),
        _instruction(BUDGET_TASK_BASE + 901, "预算不超过900元", ["预算"], price_upper=100),
        _instruction(BUDGET_TASK_BASE + 902, "买一个很贵的东西", ["预算"]),
    ]
    records.append(_record("100000000999", "预算向量商品", budget_instructions, pricing=[9999.0]))
    return records
