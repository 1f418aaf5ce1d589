"""Observation states (http-contract §8.1–§8.6) and their byte-exact Chinese text rendering (§8.7)."""

from __future__ import annotations

from typing import Any

from shopsim_sandbox.versions import OBSERVATION_VERSION

HOME_STATE_KEYS = ("actions", "observation_version", "page_type", "search_available")


def _clean(value: Any) -> str:
    return " ".join(str(value).split())


def _clean_list(values: list[Any]) -> list[str]:
    return [c for c in (_clean(v) for v in values) if c]


def _or(value: Any, fallback: str) -> str:
    cleaned = _clean(value) if value is not None else ""
    return cleaned if cleaned else fallback


def _price_text(price: Any) -> str:
    if price is None or price == "":
        return "未提供"
    return _clean(price)


def home_state(last_action: dict | None = None) -> dict:
    """State of the search home page."""
    state = {"actions": [], "observation_version": OBSERVATION_VERSION, "page_type": "search_home",
             "search_available": True}
    if last_action is not None:
        state["last_action"] = last_action
    return state


def terminal_state(last_action: dict | None) -> dict:
    """State of the terminal page shown after a purchase."""
    return {"actions": [], "observation_version": OBSERVATION_VERSION, "page_type": "terminal",
            "search_available": False, "last_action": last_action}


def product_summary(product: dict, rank: int | None = None) -> dict:
    """The §8.5 product summary of a loaded product (with `rank` on results pages)."""
    summary = {
        "asin": product["asin"],
        "title": product.get("title", ""),
        "brand": product.get("shop_name", ""),
        "category": product.get("category", ""),
        "price": product["price_display"],
        "key_attributes": list(product["key_attributes"]),
    }
    if rank is not None:
        summary["rank"] = rank
    return summary


def _lines_search_results(state: dict) -> list[str]:
    lines = [
        "页面：搜索结果",
        f"搜索词：{_or(state.get('search_text'), '未提供')}",
        f"结果：第 {state['page']}/{state['total_pages']} 页，共 {state['total_results']} 项，"
        f"当前显示排名 {state['rank_start']}-{state['rank_end']}",
        "",
        "商品列表：",
    ]
    products = state.get("products") or []
    if not products:
        lines.append("（本页没有商品）")
    for item in products:
        lines.append(f"{item['rank']}. {_or(item.get('title'), '未命名商品')}")
        lines.append(f"   ASIN：{_clean(item['asin'])}")
        lines.append(f"   价格：{_price_text(item.get('price'))}")
        lines.append(f"   品牌：{_or(item.get('brand'), '未提供')}")
        lines.append(f"   类别：{_or(item.get('category'), '未提供')}")
        attrs = _clean_list(item.get("key_attributes") or [])
        if attrs:
            lines.append("   关键属性：" + "；".join(attrs))
    return lines


def _lines_product(state: dict, header: str) -> list[str]:
    product = state["product"]
    price = state["selected_price"] if "selected_price" in state else product.get("price")
    lines = [
        header,
        "商品：",
        f"- 标题：{_or(product.get('title'), '未命名商品')}",
        f"- ASIN：{_clean(product['asin'])}",
        f"- 价格：{_price_text(price)}",
        f"- 品牌：{_or(product.get('brand'), '未提供')}",
        f"- 类别：{_or(product.get('category'), '未提供')}",
    ]
    attrs = _clean_list(product.get("key_attributes") or [])
    if attrs:
        lines.append("- 关键属性：" + "；".join(attrs))
    lines += ["", "规格选择："]
    axes = state.get("_axis_order")
    if axes is None:
        axes = list(state.get("available_options", {}))
    if not axes:
        lines.append("- 此商品没有规格选项")
    selected = state.get("selected_options", {})
    for axis in axes:
        if axis in selected:
            lines.append(f"- {_clean(axis)}：已选择 {_clean(selected[axis])}")
        else:
            lines.append(f"- {_clean(axis)}：尚未选择")
        values = _clean_list(state["available_options"].get(axis, []))
        if values:
            lines.append("  可选值：" + " / ".join(values))
    missing = _clean_list(state.get("missing_option_axes") or [])
    if missing:
        lines.append("仍需选择：" + "、".join(missing))
    elif state.get("options_complete"):
        lines.append("规格状态：已选择全部规格，可以购买")
    return lines


def render(state: dict, axis_order: list[str] | None = None) -> str:
    """Render `observation` from `observation_state` byte-exactly (§8.7).

    `axis_order` gives the product's axis order on product pages: `available_options` is key-sorted on
    the wire, so the catalog order must be supplied by the caller (it defaults to the dict order).
    """
    page = state["page_type"]
    if page == "search_home":
        lines = ["页面：搜索首页"]
    elif page == "search_results":
        lines = _lines_search_results(state)
    elif page in ("product_detail", "information_subpage"):
        header = "页面：商品详情" if page == "product_detail" else "页面：商品属性页"
        view = dict(state)
        if axis_order is not None:
            view["_axis_order"] = axis_order
        lines = _lines_product(view, header)
        if page == "information_subpage":
            subpage = _or(state.get("subpage"), "attributes")
            lines += ["", f"子页面：{subpage}", f"内容：{_clean(state.get('content', ''))}"]
    else:
        lines = ["页面：任务已终止", "不能再执行操作。"]
    last = state.get("last_action")
    if last is not None:
        lines += [
            "",
            "上次交互结果：",
            "- 结果：" + ("成功" if last.get("valid") else "无效"),
            f"- 说明：{_clean(last.get('message', ''))}",
        ]
        if last.get("reason") != "executed":
            lines.append(f"- 原因代码：{_clean(last.get('reason', ''))}")
    lines.append("")
    interaction: list[str] = []
    if state.get("search_available"):
        interaction += ["页面能力：", "- 支持商品搜索"]
    actions = _clean_list(state.get("actions") or [])
    if actions:
        if interaction:
            interaction.append("")
        interaction.append("可点击元素：")
        interaction += [f"- {a}" for a in actions]
    if not interaction:
        interaction = ["当前页面没有可交互元素。"]
    lines += interaction
    return "\n".join(lines).strip() + "\n"
