"""The synthetic catalog generator (spec §17.3), its split file (§15.1) and the catalog loader (§14)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from shopsim_sandbox.catalog import CatalogError, load_catalog, load_records
from shopsim_sandbox.cli import main as cli_main
from shopsim_sandbox.reward import resolve_sku_price
from shopsim_sandbox.synthetic import (
    build_split_file,
    catalog_json,
    generate_catalog,
    split_file_json,
    task_ids_sha256,
)

ROOT = Path(__file__).resolve().parents[2]
COMMITTED_SPLIT = ROOT / "configs" / "sandbox" / "persona_splits.sandbox.json"


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return generate_catalog()


def test_committed_split_file_equals_generator_output(records: list[dict]) -> None:
    assert COMMITTED_SPLIT.read_text(encoding="utf-8") == split_file_json(build_split_file(records))


def test_generator_is_deterministic_and_seed_sensitive(records: list[dict]) -> None:
    assert catalog_json(generate_catalog()) == catalog_json(records)
    assert catalog_json(generate_catalog(seed=1)) != catalog_json(records)
    assert len(generate_catalog(20_000)) == 20_000


def test_recipe_properties(records: list[dict]) -> None:
    catalog = load_records(records)
    assert len(catalog.products) == len(records)
    top_levels = {r["category"].split("›")[0] for r in records}
    assert len(top_levels) >= 8 and all(r["category"].count("›") >= 1 for r in records)
    asins = [r["asin"] for r in records]
    assert len(set(asins)) == len(asins) and all(a.isdigit() and 8 <= len(a) <= 12 for a in asins)
    methods = Counter()
    for record in records:
        assert "brand" not in record
        assert all(isinstance(p, float) and p > 0 for p in record["pricing"])
        axes = record.get("customization_options") or {}
        priced_axes = [a for a, entries in axes.items() if len({e.get("price") for e in entries if "price" in e}) > 1]
        assert len(priced_axes) <= 1
        for entries in axes.values():
            values = [e["value"] for e in entries]
            assert values and len(set(values)) == len(values)
        product = catalog.products[record["asin"]]
        methods[resolve_sku_price(product, {})["method"]] += 1
        if priced_axes:
            first = axes[priced_axes[0]][0]["value"]
            methods[resolve_sku_price(product, {priced_axes[0]: first})["method"]] += 1
        assert len(record["instructions"]) == 1 and record["instructions"][0]["attributes"]
    assert {"single_listing_price", "constant_option_price", "price_axis_unselected", "selected_price_axis",
            "price_not_deterministic"} <= set(methods)
    assert any(len(r["pricing"]) == 2 for r in records)
    personas = [r["user_persona"] for r in records if "user_persona" in r]
    assert personas and all("用户ID" in p for p in personas)
    assert any("__reasoning__" in p for p in personas)
    ids = sorted(catalog.tasks)
    assert len(ids) < ids[-1] + 1  # holes
    budgets = [t.goal["price_upper"] for t in catalog.tasks.values()]
    assert any(b is None for b in budgets) and any(b is not None for b in budgets)


def test_near_duplicates_make_gold_failure_and_non_gold_success_possible(records: list[dict]) -> None:
    catalog = load_records(records)
    by_category = Counter(r["category"] for r in records)
    assert min(by_category.values()) >= 5
    over_budget = 0
    for task in catalog.tasks.values():
        if task.goal["price_upper"] is None:
            continue
        siblings = [p for p in catalog.products.values()
                    if p["category"] == task.goal["category"] and p["asin"] != task.asin]
        over_budget += any(float(p["pricing"][0]) > task.goal["price_upper"] for p in siblings)
    assert over_budget > len(catalog.tasks) // 4


def test_split_file_format(records: list[dict]) -> None:
    split = build_split_file(records)
    assert split["schema_version"] == split["version"] == "shopsimrl-persona-splits-v1"
    persona_ids = sorted(r["instructions"][0]["task_id"] for r in records if r.get("user_persona"))
    seen: list[int] = []
    for role in ("train", "val", "test"):
        part = split["splits"][role]
        assert part["role"] == role and part["persona"] is True
        assert part["task_ids"] == sorted(part["task_ids"]) and part["task_count"] == len(part["task_ids"])
        assert part["task_ids_sha256"] == task_ids_sha256(part["task_ids"])
        seen += part["task_ids"]
    assert sorted(seen) == persona_ids and len(set(seen)) == len(seen)
    assert split["splits"]["val"]["task_count"] >= 30
    reference = json.loads(Path("/work/shared/reference/persona_splits.v1.json").read_text()) \
        if Path("/work/shared/reference/persona_splits.v1.json").exists() else None
    if reference is not None:
        assert set(split) == set(reference) and set(split["source"]) == set(reference["source"])
        assert set(split["policy"]) == set(reference["policy"])
        assert set(split["splits"]["val"]) == set(reference["splits"]["val"])


def test_task_ids_sha256_is_over_compact_json() -> None:
    import hashlib

    assert task_ids_sha256([1, 5, 8]) == hashlib.sha256(b"[1,5,8]").hexdigest()


def test_catalog_cli_writes_both_files(tmp_path: Path) -> None:
    assert cli_main(["catalog", "--out", str(tmp_path), "--size", "50", "--seed", "3"]) == 0
    catalog = load_catalog(tmp_path / "catalog.json")
    assert len(catalog.products) == 50
    split = json.loads((tmp_path / "persona_splits.json").read_text())
    assert split["policy"]["seed"] == 3


def test_loader_rules() -> None:
    base = {"title": "t", "shop_name": "s", "category": "a›b", "attribute": ["x"], "images": ["i"]}

    def rec(asin: str, task: int, **extra: object) -> dict:
        return {**base, "asin": asin, "instructions": [{"task_id": task, "instruction": "买", "attributes": ["x"]}],
                **extra}

    catalog = load_records([rec("1", 1), rec("1", 2), rec("nan", 3), rec("1" * 21, 4),
                            rec("5", 5, pricing=[1999, 2099.0, 5.0], brand="B",
                                customization_options={"颜色": [{"value": " 黑色/白色 "}], "空": [], "无": None})])
    assert sorted(catalog.products) == ["1", "5"] and sorted(catalog.tasks) == [1, 5]
    product = catalog.products["5"]
    assert product["price_display"] == "1999 to 2099.0" and "brand" not in product
    assert product["display_options"] == {"颜色": ["黑色 | 白色"], "空": []}
    assert catalog.tasks[5].goal["price_upper"] is None and catalog.tasks[5].goal["instruction_simple"] == "买"
    with pytest.raises(CatalogError, match="duplicate task_id 1"):
        load_records([rec("1", 1), rec("2", 1)])
    with pytest.raises(CatalogError, match="price_upper"):
        load_records([rec("1", 1) | {"instructions": [{"task_id": 1, "attributes": ["x"], "price_upper": -1}]}])


def test_bad_catalog_file_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert cli_main(["serve", "--catalog", str(bad), "--no-policy", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(bad) in err
