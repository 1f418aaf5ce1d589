"""Catalog model and loader (http-contract §14): raw product records plus load-time derived fields.

A loaded product is the raw record dict (legacy marketplace fields dropped, `pricing` normalized)
extended with derived keys the episode engine and the reward read:

* ``price_display`` – the listing price string of §14.2 (``"1999.0 to 2099.0"``),
* ``display_options`` – ``{axis: [display values]}`` for every displayed axis in catalog order
  (axes whose list is ``null`` are absent; see §14.1),
* ``key_attributes`` – §8.5,
* ``bullets`` / ``description`` – the reward text pieces of §14.2.

Goals (§7.3) are built once per active instruction at load time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Fields of §14.1 that survive loading; everything else (brand, list_price, seller_*, …) is dropped.
_KEPT_FIELDS = (
    "asin", "title", "shop_name", "category", "product_category", "pricing", "customization_options",
    "attribute", "full_description", "small_description", "images", "instructions", "user_persona",
    "reason_key", "source_product_index",
)


class CatalogError(ValueError):
    """A catalog file or record that the server refuses to load."""


def display_option_value(value: str) -> str:
    """Return the normalized display form of a raw option value (§14.2)."""
    return value.strip().replace("/", " | ").lower()


def _python_str(value: Any) -> str:
    # The real server formats JSON values with Python `str`; json.loads keeps ints as ints.
    return str(value)


def price_display(pricing: list[Any]) -> str:
    """Return the listing price string of §14.2 from a load-normalized `pricing` list."""
    if len(pricing) == 1:
        return _python_str(pricing[0])
    return _python_str(pricing[0]) + " to " + _python_str(pricing[1])


def _normalized_pricing(raw: Any) -> list[Any]:
    if not isinstance(raw, list) or not raw:
        return [100.0]
    return list(raw[:2])


def _display_options(raw: Any) -> dict[str, list[str]]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, list[str]] = {}
    for axis, entries in raw.items():
        if entries is None:
            continue  # a null list is not displayed, selectable or required (§14.1)
        values: list[str] = []
        if isinstance(entries, list):
            for entry in entries:
                if isinstance(entry, dict) and isinstance(entry.get("value"), str):
                    values.append(display_option_value(entry["value"]))
        out[str(axis)] = values
    return out


def _option_labels(options: dict[str, list[str]]) -> tuple[list[tuple[str, str, str]], dict[str, tuple[str, str]]]:
    # Every clickable (label, axis, value) in catalog order, and which pair a label selects: when two
    # pairs produce the same label the one produced last in catalog order wins (§8.6).
    labels: list[tuple[str, str, str]] = []
    targets: dict[str, tuple[str, str]] = {}
    for axis, values in options.items():
        if axis == "":
            continue
        for value in values:
            if value == "":
                continue
            label = f"{axis}={value}"
            labels.append((label, axis, value))
            targets[label] = (axis, value)
    return labels, targets


def _key_attributes(attrs: Any) -> list[str]:
    if not isinstance(attrs, list):
        return []
    return [s for s in (_python_str(a) for a in attrs[:10]) if s.strip()]


def _bullets(record: dict) -> list[str]:
    if "small_description" not in record:
        return [""]
    value = record["small_description"]
    if isinstance(value, list):
        return [_python_str(v) for v in value]
    return [_python_str(value)]


def persona_of(record: dict) -> dict:
    """Return the raw persona object of a record, `{}` when it is missing or not an object (§7.1)."""
    persona = record.get("user_persona")
    return dict(persona) if isinstance(persona, dict) else {}


def _as_budget_float(value: Any, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"{where}: price_upper {value!r} is not a number; use a float or null") from exc
    if not math.isfinite(number) or number < 0:
        raise CatalogError(f"{where}: price_upper {value!r} must be finite and >= 0; fix or set null")
    return number


def goal_price_upper(instruction: dict, where: str = "instruction") -> float | None:
    """Resolve a goal's budget ceiling as §13.1 prescribes (precomputed value, else parse the text)."""
    from shopsim_sandbox.budget import parse_price_upper

    pre = instruction.get("price_upper")
    if pre is not None and pre != "":
        return _as_budget_float(pre, where)
    full = instruction.get("instruction") or ""
    simple = instruction.get("instruction_simple") or ""
    text = simple if simple else full
    result = parse_price_upper(text)
    if result is None and text != full:
        result = parse_price_upper(full)
    return result


@dataclass
class Task:
    """One active task: its goal (§7.3), the gold product and what `reset` shows."""

    task_id: int
    asin: str
    goal: dict
    has_persona: bool
    visible_persona: dict


@dataclass
class Catalog:
    """A loaded catalog: raw records (for the search index), products by ASIN and active tasks."""

    records: list[dict]
    products: dict[str, dict]
    tasks: dict[int, Task]
    inactive_task_ids: set[int] = field(default_factory=set)
    source: str = "memory"

    @property
    def active_task_count(self) -> int:
        """Number of tasks `reset` accepts (reported as `/healthz.tasks`)."""
        return len(self.tasks)


def _load_product(record: dict) -> dict:
    product = {k: record[k] for k in _KEPT_FIELDS if k in record}
    category = record.get("product_category")
    product["product_category"] = category if category is not None else ""
    product["pricing"] = _normalized_pricing(record.get("pricing"))
    product["price_display"] = price_display(product["pricing"])
    product["display_options"] = _display_options(record.get("customization_options"))
    product["key_attributes"] = _key_attributes(record.get("attribute"))
    product["option_labels"], product["label_targets"] = _option_labels(product["display_options"])
    product["bullets"] = _bullets(record)
    product["description"] = record.get("full_description") or ""
    return product


def _build_goal(product: dict, instruction: dict, where: str) -> dict:
    full = instruction.get("instruction") or ""
    simple = instruction.get("instruction_simple") or full
    return {
        "task_id": instruction["task_id"],
        "task_uid": instruction.get("task_uid"),
        "source_product_index": product.get("source_product_index"),
        "asin": product["asin"],
        "category": product.get("category", ""),
        "name": product.get("title", ""),
        "instruction_text": full,
        "instruction_simple": simple,
        "attributes": list(instruction.get("attributes") or []),
        "goal_options": list(instruction.get("instruction_options") or []),
        "price_upper": goal_price_upper(instruction, where),
        "price_constraint": None,
        "user_persona": persona_of(product),
        "reason_key": product.get("reason_key"),
        "weight": 1,
    }


def load_records(records: Iterable[dict], source: str = "memory") -> Catalog:
    """Load raw product records (§14.1) into a `Catalog`; raises `CatalogError` on duplicate task ids."""
    records = list(records)
    products: dict[str, dict] = {}
    tasks: dict[int, Task] = {}
    inactive: set[int] = set()
    seen_task_ids: set[int] = set()
    for position, record in enumerate(records):
        if not isinstance(record, dict):
            raise CatalogError(
                f"{source}: record {position} is not an object; every catalog entry must be a JSON object"
            )
        asin = record.get("asin")
        asin = asin if isinstance(asin, str) else ("" if asin is None else str(asin))
        if not asin or asin == "nan" or len(asin) > 20 or asin in products:
            continue
        product = _load_product({**record, "asin": asin})
        products[asin] = product
        for index, instruction in enumerate(record.get("instructions") or []):
            where = f"{source}: record {position} (asin {asin}) instruction {index}"
            task_id = instruction.get("task_id")
            if not isinstance(task_id, int) or isinstance(task_id, bool):
                raise CatalogError(f"{where}: task_id must be an integer")
            if task_id in seen_task_ids:
                raise CatalogError(f"{where}: duplicate task_id {task_id}; task ids must be unique across the catalog")
            seen_task_ids.add(task_id)
            if not instruction.get("attributes"):
                inactive.add(task_id)
                continue
            raw_persona = record.get("user_persona")
            has_persona = isinstance(raw_persona, dict) and len(raw_persona) > 0
            visible = {k: v for k, v in persona_of(record).items() if k != "__reasoning__"}
            tasks[task_id] = Task(task_id, asin, _build_goal(product, instruction, where), has_persona, visible)
    return Catalog(records=records, products=products, tasks=tasks, inactive_task_ids=inactive, source=source)


def load_catalog(path: Path | str) -> Catalog:
    """Read a catalog JSON array from `path` and load it; one-line `CatalogError` on bad input."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CatalogError(f"{path}: catalog file not found; pass an existing JSON file") from exc
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); fix the file") from exc
    if not isinstance(data, list):
        raise CatalogError(f"{path}: a catalog must be a JSON array of product records")
    return load_records(data, source=str(path))


EXAMPLE_CATALOG_PATH = Path(__file__).parent / "data" / "example_catalog.json"


def example_catalog() -> Catalog:
    """Load the four-product example catalog of http-contract §19.1 (episodes A–C replay against it)."""
    return load_catalog(EXAMPLE_CATALOG_PATH)
