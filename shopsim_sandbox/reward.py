"""Reward ``shopsimulator-paper-reward-v2`` (http-contract §12).

SKU price resolution, the four factors, ``reward_detail`` and ``purchase``.

Products are catalog records as loaded (§14.1; only raw field names are read here, so any
load-time extras are ignored), goals are the private goal objects of §7.3, selected options are
``{raw axis: normalized display value}``. All arithmetic is IEEE double in the order of §12.2.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any

from shopsim_sandbox.fuzzy import category_parts, matches, title_terms

__all__ = [
    "REWARD_VERSION",
    "VARIANT_PRICE_VERSION",
    "PURCHASE_DETAIL_KEYS",
    "NO_PURCHASE_DETAIL_KEYS",
    "price_match_form",
    "option_price",
    "resolve_sku_price",
    "type_score",
    "reward_text",
    "score_purchase",
    "no_purchase_detail",
]

REWARD_VERSION = "shopsimulator-paper-reward-v2"
VARIANT_PRICE_VERSION = "variant-price-paper-v2"

PURCHASE_DETAIL_KEYS = frozenset({
    "reward_version", "termination_reason", "r_type", "category_match", "title_score", "num_attr_matches",
    "num_option_matches", "r_att", "r_option", "r_price", "r_loose", "r_strict", "r_success",
    "target_asin_match", "price_verifiable", "price_upper", "price_resolution",
})
NO_PURCHASE_DETAIL_KEYS = frozenset({
    "reward_version", "termination_reason", "r_loose", "r_strict", "r_success", "r_type", "r_att",
    "r_option", "r_price", "target_asin_match", "price_verifiable",
})


# --- SKU price resolution (§12.8) ----------------------------------------------------------------

def price_match_form(value: Any) -> str:
    """NFKC, casefold, ``/`` → ``|``, all whitespace removed; a falsy value (absent, null, false, 0, "") → ``""``."""
    if not value:
        return ""
    text = unicodedata.normalize("NFKC", value if isinstance(value, str) else _py_str(value)).casefold()
    return "".join(text.replace("/", "|").split())


def option_price(value: Any) -> float | None:
    """A price converted like Python ``float()``; None (missing) when unconvertible, negative, inf or NaN."""
    if isinstance(value, (bool, int, float)):
        try:
            price = float(value)
        except OverflowError:
            return None
    elif isinstance(value, str):
        try:
            price = float(value)
        except ValueError:
            return None
    else:
        return None
    if math.isnan(price) or math.isinf(price) or price < 0:
        return None
    return price


def _listing_prices(product: dict[str, Any]) -> list[Any]:
    pricing = product.get("pricing")
    if pricing is None or pricing == [] or pricing == "":
        return [100.0]
    if isinstance(pricing, list):
        return pricing[:2]
    return [pricing]


def _resolution(status: str, price: float | None, method: str, evidence: dict[str, Any]) -> dict[str, Any]:
    return {"status": status, "price": price, "version": VARIANT_PRICE_VERSION, "method": method, "evidence": evidence}


def resolve_sku_price(product: dict[str, Any], selected_options: dict[str, str]) -> dict[str, Any]:
    """The §12.8 price-resolution record ``{status, price, version, method, evidence}`` for a selection.

    Pure function of the raw ``customization_options``, the ``pricing`` list and the selection.
    """
    raw_axes = product.get("customization_options")
    if not isinstance(raw_axes, dict) or not raw_axes:
        distinct = {p for p in (option_price(v) for v in _listing_prices(product)) if p is not None}
        if len(distinct) == 1:
            return _resolution("pass", next(iter(distinct)), "single_listing_price", {})
        return _resolution("unverifiable", None, "price_not_deterministic", {"candidate_prices": []})

    # Surviving entries per axis: keyed by price-match form, the last entry of a form wins.
    surviving: dict[str, dict[str, float | None]] = {}
    for axis, entries in raw_axes.items():
        by_form: dict[str, float | None] = {}
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            form = price_match_form(entry.get("value"))
            if form:
                by_form[form] = option_price(entry.get("price"))
        surviving[axis] = by_form

    price_axes = [axis for axis, by_form in surviving.items()
                  if len({p for p in by_form.values() if p is not None}) > 1]
    if len(price_axes) >= 2:
        return _resolution("unverifiable", None, "multiple_price_affecting_axes", {"price_affecting_axes": price_axes})
    if len(price_axes) == 1:
        axis = price_axes[0]
        evidence = {"price_axis": axis}
        selected = selected_options.get(axis) if isinstance(selected_options, dict) else None
        if selected is None:
            return _resolution("unverifiable", None, "price_axis_unselected", evidence)
        price = surviving[axis].get(price_match_form(selected))
        if price is None:
            return _resolution("unverifiable", None, "selected_variant_price_missing", evidence)
        return _resolution("pass", price, "selected_price_axis", evidence)
    prices = sorted({p for by_form in surviving.values() for p in by_form.values() if p is not None})
    if len(prices) == 1:
        return _resolution("pass", prices[0], "constant_option_price", {})
    return _resolution("unverifiable", None, "price_not_deterministic", {"candidate_prices": prices})


# --- reward factors ------------------------------------------------------------------------------

def _py_str(value: Any) -> str:
    """Python ``str`` of a JSON value (``True``, ``None``, ``1.0``), as the reference server writes it."""
    return value if isinstance(value, str) else str(value)


def type_score(purchased: dict[str, Any], goal: dict[str, Any]) -> tuple[float, bool, float]:
    """``(R_type, category_match, title_score)`` of §12.4 with the lexical title-term fallback."""
    category_match = len(category_parts(_py_str(purchased.get("category", "")))
                         & category_parts(_py_str(goal.get("category", "")))) >= 2
    gold_terms = set(title_terms(_py_str(goal.get("name", ""))))
    if gold_terms:
        bought_terms = set(title_terms(_py_str(purchased.get("title", ""))))
        title_score = len(bought_terms & gold_terms) / len(gold_terms)
    else:
        title_score = 0.2
    if category_match or title_score > 0.2:
        r_type = 1.0
    elif title_score == 0:
        r_type = 0.0
    elif title_score < 0.1:
        r_type = 0.1
    else:
        r_type = 0.5
    return r_type, category_match, float(title_score)


def reward_text(product: dict[str, Any]) -> str:
    """``title + " " + " ".join(bullets) + " " + description`` of §12.5 (bullets/description per §14.2)."""
    if "small_description" in product:
        raw_bullets = product["small_description"]
        bullets = raw_bullets if isinstance(raw_bullets, list) else [raw_bullets]
    else:
        bullets = [""]
    description = product.get("full_description") or ""
    return (_py_str(product.get("title", "")) + " " + " ".join(_py_str(b) for b in bullets) + " "
            + _py_str(description))


def _attribute_matches(product: dict[str, Any], goal_attributes: list[Any]) -> int:
    attributes = [_py_str(a) for a in (product.get("attribute") or [])]
    text = reward_text(product).casefold()
    count = 0
    for goal_attr in goal_attributes:
        goal_text = _py_str(goal_attr)
        if any(matches(attr, goal_text) for attr in attributes) or goal_text.casefold() in text:
            count += 1
    return count


def _option_matches(selected_options: dict[str, str], goal_options: list[Any]) -> int:
    values = [_py_str(v) for v in selected_options.values()]
    return sum(1 for goal_value in goal_options if any(matches(v, _py_str(goal_value)) for v in values))


def _first_instruction_text(product: dict[str, Any]) -> str:
    instructions = product.get("instructions") or []
    if instructions and isinstance(instructions[0], dict):
        return _py_str(instructions[0].get("instruction", ""))
    return ""


def score_purchase(product: dict[str, Any], goal: dict[str, Any], selected_options: dict[str, str],
                   price_resolution: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Score a purchase: returns ``(reward_detail, purchase)`` — the 17-key object of §12.9 and §12.10's object.

    ``price_resolution`` is the record current at ``buy now`` (normally ``resolve_sku_price`` of
    the same selection). The top-level reward of the response is ``reward_detail["r_strict"]``.
    """
    goal_attributes = list(goal.get("attributes") or [])
    goal_options = list(goal.get("goal_options") or [])
    n_att, n_opt = len(goal_attributes), len(goal_options)
    m_att = _attribute_matches(product, goal_attributes)
    m_opt = _option_matches(selected_options, goal_options)
    r_type, category_match, title_score = type_score(product, goal)

    price_upper = goal.get("price_upper")
    price_upper = None if price_upper is None else float(price_upper)
    verifiable = price_resolution.get("status") == "pass"
    price = price_resolution.get("price")
    if price_upper is None:
        r_price = 1.0
    else:
        r_price = 1.0 if verifiable and price is not None and price <= price_upper else 0.0

    # n_att >= 1 for every active task; guard anyway so a bad goal cannot crash the server.
    r_att = m_att / n_att if n_att else 0.0
    r_option = m_opt / n_opt if n_opt else 1.0
    r_loose = (r_type * (m_att + m_opt + r_price)) / (n_att + n_opt + 1)
    r_strict = ((r_type * r_att) * r_option) * r_price
    r_success = int(r_type == 1.0 and r_att == 1.0 and r_option == 1.0 and r_price == 1.0)

    detail = {
        "reward_version": REWARD_VERSION,
        "termination_reason": "purchase",
        "r_type": r_type,
        "category_match": category_match,
        "title_score": title_score,
        "num_attr_matches": m_att,
        "num_option_matches": m_opt,
        "r_att": float(r_att),
        "r_option": float(r_option),
        "r_price": r_price,
        "r_loose": float(r_loose),
        "r_strict": float(r_strict),
        "r_success": r_success,
        "target_asin_match": _py_str(product.get("asin", "")) == _py_str(goal.get("asin", "")),
        "price_verifiable": verifiable,
        "price_upper": price_upper,
        "price_resolution": price_resolution,
    }
    purchase = {
        "asin": product.get("asin"),
        "category": product.get("category"),
        "name": product.get("title"),
        "product_category": product.get("product_category") or "",
        "instruction_text": _first_instruction_text(product),
        "attributes": list(product.get("attribute") or []),
        "price": price if verifiable else None,
        "options": dict(selected_options),
    }
    return detail, purchase


def no_purchase_detail(reason: str) -> dict[str, Any]:
    """The 11-key zero ``reward_detail`` of an episode that ended without purchase.

    *reason* is the termination reason (``action_limit``, ``generation_length``).
    """
    return {
        "reward_version": REWARD_VERSION,
        "termination_reason": reason,
        "r_loose": 0.0,
        "r_strict": 0.0,
        "r_success": 0,
        "r_type": 0.0,
        "r_att": 0.0,
        "r_option": 0.0,
        "r_price": 0.0,
        "target_asin_match": False,
        "price_verifiable": False,
    }
