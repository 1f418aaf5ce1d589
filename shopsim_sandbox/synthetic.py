"""Deterministic synthetic catalog generator (http-contract §17.3) and its persona split file (§15.1).

`generate_catalog(size, seed)` returns raw product records in the §14.1 format: Chinese titles over
14 sub-categories (≥ 8 top-level categories, `›` paths), families of near-duplicate products within a
sub-category (other option values, other shops, over-budget prices), 0–2 option axes with at most one
price-affecting axis, every SKU price-resolution method, full and simple instructions with budget
phrases, personas with a `用户ID` (some with `__reasoning__`), and task ids with holes.
`build_split_file(records, seed)` builds the matching `persona_splits.v1.json`-format document.
Same (size, seed) → byte-identical output.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

from shopsim_sandbox.versions import PERSONA_SPLIT_SCHEMA

DEFAULT_CATALOG_SIZE = 1000
DEFAULT_SEED = 0

_COLOURS = ["白色", "黑色", "灰色", "银色", "红色", "蓝色", "粉色", "绿色", "米色", "卡其色", "深蓝色", "紫色"]
_SIZES_CLOTH = ["s", "m", "l", "xl", "xxl"]
_SIZES_SHOE = ["38", "39", "40", "41", "42", "43", "44"]


@dataclass(frozen=True)
class _Kind:
    category: str
    noun: str
    attributes: tuple[str, ...]
    axes: tuple[tuple[str, tuple[str, ...]], ...]  # (axis name, value pool); first axis may carry prices
    price_range: tuple[int, int]
    models: tuple[str, ...] = ()


_KINDS: tuple[_Kind, ...] = (
    _Kind(
        "家电›清洁电器›洗地机",
        "洗地机",
        ("智能", "热洗", "静音", "无线", "自清洁", "大吸力", "长续航"),
        (("颜色分类", tuple(_COLOURS[:6])), ("规格", ("标准版", "旗舰版", "尊享版"))),
        (900, 3200),
        ("x200", "s10", "pro5"),
    ),
    _Kind(
        "家电›厨房电器›电饭煲",
        "电饭煲",
        ("智能预约", "不粘内胆", "大容量", "快煮", "陶瓷釉", "柴火饭"),
        (("容量", ("3l", "4l", "5l")), ("颜色分类", tuple(_COLOURS[:5]))),
        (150, 900),
        ("f40", "m5"),
    ),
    _Kind(
        "电子产品›耳机›蓝牙耳机",
        "耳机",
        ("主动降噪", "蓝牙", "长续航", "低延迟", "防水", "入耳式"),
        (("颜色分类", tuple(_COLOURS[:8])),),
        (99, 1600),
        ("a3", "buds2", "q30"),
    ),
    _Kind(
        "电子产品›手机配件›充电宝",
        "充电宝",
        ("快充", "大容量", "轻薄", "自带线", "磁吸"),
        (("容量", ("10000mah", "20000mah", "30000mah")), ("颜色分类", tuple(_COLOURS[:4]))),
        (59, 399),
        ("p10", "mag5"),
    ),
    _Kind(
        "服饰›女装›连衣裙",
        "连衣裙",
        ("纯棉", "修身", "碎花", "夏季", "雪纺", "收腰"),
        (("颜色分类", tuple(_COLOURS)), ("尺码", tuple(_SIZES_CLOTH))),
        (79, 699),
    ),
    _Kind(
        "服饰›男装›短袖衬衫",
        "衬衫",
        ("纯棉", "宽松", "透气", "短袖", "免烫", "商务"),
        (("颜色分类", tuple(_COLOURS)), ("尺码", tuple(_SIZES_CLOTH))),
        (59, 499),
    ),
    _Kind(
        "鞋靴›运动鞋›跑步鞋",
        "跑步鞋",
        ("减震", "透气", "轻便", "防滑", "耐磨", "网面"),
        (("颜色分类", tuple(_COLOURS[:7])), ("尺码", tuple(_SIZES_SHOE))),
        (129, 1299),
        ("air270", "gel5"),
    ),
    _Kind(
        "家居›杯具›保温杯",
        "保温杯",
        ("316不锈钢", "长效保温", "便携", "大容量", "弹盖", "茶隔"),
        (("容量", ("350ml", "500ml", "750ml", "1000ml")), ("颜色分类", tuple(_COLOURS[:6]))),
        (39, 299),
    ),
    _Kind(
        "家居›灯具›台灯",
        "台灯",
        ("护眼", "无频闪", "可调光", "充电", "折叠", "阅读"),
        (("颜色分类", tuple(_COLOURS[:4])),),
        (49, 599),
        ("led12",),
    ),
    _Kind(
        "美妆›护肤›面霜",
        "面霜",
        ("保湿", "补水", "修护", "温和", "滋润", "敏感肌"),
        (("规格", ("30g", "50g", "100g")),),
        (69, 899),
    ),
    _Kind(
        "食品›零食›坚果",
        "坚果",
        ("每日坚果", "原味", "独立包装", "低盐", "混合", "烘焙"),
        (("规格", ("500g", "750g", "1000g")), ("口味", ("原味", "盐焗", "奶香", "蜂蜜"))),
        (29, 199),
    ),
    _Kind(
        "母婴›喂养用品›奶瓶",
        "奶瓶",
        ("防胀气", "玻璃", "耐摔", "宽口径", "新生儿", "硅胶"),
        (("容量", ("160ml", "240ml", "300ml")),),
        (39, 329),
    ),
    _Kind(
        "运动户外›健身›瑜伽垫",
        "瑜伽垫",
        ("加厚", "防滑", "环保", "回弹", "加宽", "双面"),
        (("厚度", ("6mm", "8mm", "10mm", "15mm")), ("颜色分类", tuple(_COLOURS[:8]))),
        (39, 399),
    ),
    _Kind(
        "宠物用品›猫粮",
        "猫粮",
        ("全价", "幼猫", "无谷", "冻干", "成猫", "鱼肉"),
        (("规格", ("1.5kg", "2kg", "5kg", "10kg")),),
        (49, 599),
    ),
)

_SHOP_PREFIXES = (
    "洁净",
    "清风",
    "声学",
    "杯具",
    "优品",
    "悦家",
    "星辰",
    "青木",
    "乐活",
    "晨光",
    "极简",
    "暖阳",
    "橙子",
    "云朵",
    "海蓝",
    "森林",
)
_SHOP_SUFFIXES = ("旗舰店", "专营店", "小铺", "工坊", "优选店", "官方店")
_TITLE_TAILS = ("家用", "新款", "正品", "热卖", "2024款", "升级版", "")
_PREFERENCES = ("节省", "性价比", "品质优先", "不在乎价格")
_SIMPLE_TEMPLATES = ("买一个{noun}", "想要{noun}", "帮我挑个{noun}", "需要一款{noun}", "{noun}有推荐吗")


def _rounded_budget(price: float, rng: random.Random) -> int:
    # A round ceiling somewhat above the gold SKU price (so near-duplicates can exceed it).
    raw = price * rng.choice((1.05, 1.1, 1.2, 1.3))
    step = 10 if raw < 300 else (50 if raw < 2000 else 100)
    return int(-(-raw // step) * step)


def _budget_phrase(price: float, rng: random.Random) -> tuple[str, float | None]:
    """A budget sentence (from the §13.4 phrase families) and the ceiling it parses to."""
    kind = rng.randrange(6)
    if kind == 0:
        return "", None
    if kind == 5:
        # "about X" reads as X × 1.1; choose X so the gold price stays within the ceiling
        amount = _rounded_budget(price / 1.05, rng)
        return f"价格在{amount}元左右", amount * 1.1
    amount = _rounded_budget(price, rng)
    template = ("预算不超过{x}元", "预算在{x}元以下", "价格别超过{x}元", "{x}元以内")[kind - 1]
    return template.format(x=amount), float(amount)


def _price(rng: random.Random, low: int, high: int) -> float:
    return (
        float(rng.randrange(low, high + 1))
        if high - low < 100
        else float(rng.randrange(low // 10, high // 10 + 1) * 10 - 1)
    )


def _product(kind: _Kind, position: int, rng: random.Random, family: dict[str, Any]) -> dict[str, Any]:
    attrs = list(family["attributes"])
    rng.shuffle(attrs)
    own_attrs = sorted(set(attrs[: rng.randint(2, 4)]) | set(family["core"]), key=kind.attributes.index)
    shop = rng.choice(_SHOP_PREFIXES) + rng.choice(_SHOP_SUFFIXES)
    title_attrs = "".join(own_attrs[:2])
    model = f" {family['model']}" if family["model"] else ""
    tail = rng.choice(_TITLE_TAILS)
    title = f"{title_attrs}{kind.noun}{model}" + (f" {tail}" if tail else "")
    base = family["base_price"] * rng.choice((0.85, 1.0, 1.0, 1.15, 1.4))
    base = float(round(base)) - (1.0 if round(base) % 10 == 0 else 0.0)
    base = max(base, 9.0)
    method = family["method"]
    axes: dict[str, list[dict[str, Any]]] = {}
    if method != "single_listing_price":
        for axis_index, (axis, pool) in enumerate(kind.axes[: family["axis_count"]]):
            values = rng.sample(pool, k=min(len(pool), rng.randint(2, 4)))
            entries = []
            for value_index, value in enumerate(values):
                entry: dict[str, Any] = {"value": value}
                if method == "selected_price_axis" and axis_index == 0:
                    entry["price"] = base + 10.0 * value_index * (1 + int(base // 200))
                elif method in ("selected_price_axis", "constant_option_price"):
                    entry["price"] = base
                entries.append(entry)
            axes[axis] = entries
    prices = sorted({e["price"] for entries in axes.values() for e in entries if "price" in e}) or [base]
    pricing = [prices[0]] if len(prices) == 1 else [prices[0], prices[-1]]
    asin = str(100000000000 + position * 7919 + rng.randrange(7))
    record: dict[str, Any] = {
        "asin": asin,
        "title": title,
        "shop_name": shop,
        "category": kind.category,
        "attribute": own_attrs,
        "pricing": pricing,
        "images": [f"https://example.invalid/sandbox/{asin}.jpg"],
        "full_description": title,
    }
    if axes:
        record["customization_options"] = axes
    record["source_product_index"] = position
    return record


def _sku_price(record: dict, selection: dict[str, str]) -> float | None:
    axes = record.get("customization_options") or {}
    if not axes:
        return record["pricing"][0]
    prices = set()
    for axis, entries in axes.items():
        for entry in entries:
            if "price" in entry and (axis not in selection or entry["value"] == selection[axis]):
                prices.add(entry["price"])
    return prices.pop() if len(prices) == 1 else None


def _instruction(
    kind: _Kind, record: dict, position: int, seed: int, persona: bool, rng: random.Random
) -> tuple[dict, dict | None]:
    axes = record.get("customization_options") or {}
    selection: dict[str, str] = {}
    for axis, entries in axes.items():
        if rng.random() < 0.8 or not selection:
            selection[axis] = rng.choice(entries)["value"]
    if not axes:
        selection = {}
    wanted_attrs = rng.sample(record["attribute"], k=min(len(record["attribute"]), rng.choice((1, 2, 2, 3))))
    price = _sku_price(record, selection)
    phrase, ceiling = ("", None) if price is None else _budget_phrase(price, rng)
    options_text = "、".join(selection.values())
    parts = [f"想买一款{''.join(wanted_attrs)}的{kind.noun}"]
    if options_text:
        parts.append(f"要{options_text}的")
    if phrase:
        parts.append(phrase)
    full = "，".join(parts)
    uid = hashlib.sha256(f"sandbox:{seed}:{position}".encode()).hexdigest()[:24]
    instruction: dict[str, Any] = {
        "task_id": position,
        "task_uid": f"shopsim-{uid}",
        "instruction_index": 0,
        "instruction": full,
        "attributes": wanted_attrs,
        "instruction_options": list(selection.values()),
        "price_upper": None,
    }
    user = None
    if persona:
        instruction["instruction_simple"] = rng.choice(_SIMPLE_TEMPLATES).format(noun=kind.noun)
        instruction["price_upper"] = ceiling
        user = {"用户ID": f"u-{rng.randrange(10_000):04d}"}
        if ceiling is not None:
            user["预算偏好"] = f"预算大约{int(ceiling)}元以内" if rng.random() < 0.5 else rng.choice(_PREFERENCES)
        else:
            user["预算偏好"] = "不在乎价格"
        likes = [v for v in selection.values()]
        if likes:
            user["偏好"] = "喜欢" + "、".join(likes)
        if wanted_attrs:
            user["关注点"] = "、".join(wanted_attrs)
        if rng.random() < 0.25:
            user["__reasoning__"] = f"用户看重{wanted_attrs[0]}"
    return instruction, user


def generate_catalog(size: int = DEFAULT_CATALOG_SIZE, seed: int = DEFAULT_SEED) -> list[dict]:
    """Generate `size` raw product records deterministically from `seed` (http-contract §17.3).

    Task ids are source positions; about 4 % of positions are skipped to leave holes, as in the real
    corpus. The first 40 % of positions are persona tasks.
    """
    if size < 1:
        raise ValueError(f"catalog size: must be >= 1 (got {size}); pass --catalog-size N with N >= 1")
    rng = random.Random(f"shopsim-sandbox:{seed}")
    records: list[dict] = []
    persona_positions = int(size * 0.4 / 0.96)
    position = 0
    family: dict[str, Any] | None = None
    family_left = 0
    kind = _KINDS[0]
    methods = (
        "single_listing_price",
        "constant_option_price",
        "constant_option_price",
        "selected_price_axis",
        "selected_price_axis",
        "selected_price_axis",
        "price_not_deterministic",
    )
    while len(records) < size:
        if rng.random() < 0.04 and position > 0:
            position += 1  # a removed source product: its task id stays a hole
            continue
        if family_left == 0:
            kind = rng.choice(_KINDS)
            core = rng.sample(kind.attributes, k=2)
            method = rng.choice(methods)
            family = {
                "attributes": kind.attributes,
                "core": core,
                "model": rng.choice(kind.models) if kind.models and rng.random() < 0.5 else "",
                "base_price": _price(rng, *kind.price_range),
                "method": method,
                "axis_count": 0 if method == "single_listing_price" else rng.randint(1, len(kind.axes)),
            }
            family_left = rng.randint(2, 5)
        family_left -= 1
        assert family is not None  # family_left starts at 0, so the first product opens a family
        record = _product(kind, position, rng, family)
        persona = position < persona_positions
        instruction, user = _instruction(kind, record, position, seed, persona, rng)
        record["instructions"] = [instruction]
        if user is not None:
            record["user_persona"] = user
        records.append(record)
        position += 1
    return records


def catalog_json(records: list[dict]) -> str:
    """The canonical JSON text of a catalog (what `shopsim-sandbox catalog` writes)."""
    return json.dumps(records, ensure_ascii=False, indent=1) + "\n"


def task_ids_sha256(task_ids: list[int]) -> str:
    """SHA-256 of the compact JSON array of task ids, e.g. `[1,5,8]` (§15.1)."""
    return hashlib.sha256(json.dumps(list(task_ids), separators=(",", ":")).encode()).hexdigest()


def _persona_tasks(records: list[dict]) -> list[tuple[int, str, str]]:
    out = []
    for record in records:
        persona = record.get("user_persona")
        if not (isinstance(persona, dict) and persona):
            continue
        for instruction in record.get("instructions") or []:
            if instruction.get("attributes"):
                user = str(persona.get("用户ID", ""))
                out.append((instruction["task_id"], record["asin"], user))
    return out


def build_split_file(records: list[dict], seed: int = DEFAULT_SEED, *, held_out_fraction: float = 0.15) -> dict:
    """Split the persona tasks of `records` into train/val/test in the `persona_splits.v1.json` format.

    Tasks sharing an ASIN or a user id are linked and always land in the same split; groups larger
    than 20 stay in train. Test is allocated first, then val, then train (like the real policy).
    """
    tasks = _persona_tasks(records)
    parent: dict[int, int] = {t: t for t, _, _ in tasks}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first_by_key: dict[tuple[str, str], int] = {}
    for task_id, asin, user in tasks:
        for key in (("asin", asin), ("user", user)):
            if key[1] in ("",):
                continue
            if key in first_by_key:
                parent[find(task_id)] = find(first_by_key[key])
            else:
                first_by_key[key] = task_id
    groups: dict[int, list[int]] = {}
    for task_id, _, _ in tasks:
        groups.setdefault(find(task_id), []).append(task_id)
    ordered = sorted(groups.values(), key=lambda g: min(g))
    random.Random(f"shopsim-sandbox-splits:{seed}").shuffle(ordered)
    held_size = max(1, round(len(tasks) * held_out_fraction)) if tasks else 0
    assigned: dict[str, list[list[int]]] = {"test": [], "val": [], "train": []}
    counts = {"test": 0, "val": 0}
    for group in ordered:
        target = "train"
        if len(group) <= 20:
            for name in ("test", "val"):
                if counts[name] + len(group) <= held_size:
                    target = name
                    counts[name] += len(group)
                    break
        assigned[target].append(group)
    persona_eval_limit = int(len(tasks) * 0.3)
    eval_ids = {t for t, _, _ in sorted(tasks)[:persona_eval_limit]}
    splits: dict[str, dict[str, Any]] = {}
    for name in ("train", "val", "test"):
        ids = sorted(t for g in assigned[name] for t in g)
        sizes = [len(g) for g in assigned[name]]
        splits[name] = {
            "persona": True,
            "role": name,
            "task_count": len(ids),
            "task_ids": ids,
            "task_ids_sha256": task_ids_sha256(ids),
            "source_split_counts": {
                "persona_eval": sum(1 for t in ids if t in eval_ids),
                "persona_train": sum(1 for t in ids if t not in eval_ids),
            },
            "group_count": len(sizes),
            "multi_task_group_count": sum(1 for s in sizes if s > 1),
            "max_group_size": max(sizes, default=0),
        }
    catalog_sha = hashlib.sha256(catalog_json(records).encode()).hexdigest()
    all_sizes = [len(g) for g in ordered]
    return {
        "schema_version": PERSONA_SPLIT_SCHEMA,
        "version": PERSONA_SPLIT_SCHEMA,
        "source": {
            "clean_dataset_manifest": "shopsim-sandbox-synthetic",
            "clean_dataset_manifest_sha256": hashlib.sha256(
                json.dumps(
                    {"generator": "shopsim-sandbox-synthetic-v1", "size": len(records), "seed": seed}, sort_keys=True
                ).encode()
            ).hexdigest(),
            "cleaned_archive": "catalog.json",
            "cleaned_archive_sha256": catalog_sha,
            "cleaned_data_sha256": catalog_sha,
            "persona_task_count": len(tasks),
            "source_split_manifest": "synthetic",
            "source_split_manifest_sha256": task_ids_sha256(sorted(t for t, _, _ in tasks)),
        },
        "policy": {
            "version": "exact-linked-components-v1",
            "seed": seed,
            "allocation_order": ["test", "val", "train"],
            "test_size": held_size,
            "validation_size": held_size,
            "held_out_max_group_size": 20,
            "normalization": "unicode-nfkc-casefold-whitespace-v1",
            "group_keys": ["asin", "instruction_simple", "instruction", "persona_fingerprint", "user_id"],
            "test_excluded_task_ids": [],
        },
        "grouping": {
            "group_count": len(all_sizes),
            "multi_task_group_count": sum(1 for s in all_sizes if s > 1),
            "max_group_size": max(all_sizes, default=0),
        },
        "splits": splits,
        "checks": {
            "complete_coverage": sum(s["task_count"] for s in splits.values()) == len(tasks),
            "linked_groups_disjoint": True,
            "pairwise_task_disjoint": True,
            "persona_task_count": len(tasks),
            "test_exclusions_respected": True,
        },
    }


def split_file_json(split: dict) -> str:
    """The canonical text of a split file (sorted keys, 2-space indent, trailing newline)."""
    return json.dumps(split, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
