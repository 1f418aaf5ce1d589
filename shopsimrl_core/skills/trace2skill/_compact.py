"""Compact, redacted traces for analyst prompts (runtime-semantics §18.2 step 2).

Only the failure analyst's audit gets ``privileged_gold_audit`` (the gold goal and the full
purchase); everything else an analyst sees is the public episode: instruction, persona without
identifying fields, steps and the public purchase fields.
"""

from __future__ import annotations

from typing import Any

from shopsimrl_core._hashing import json_object
from shopsimrl_core.skills._firewall import redact_identifiers

__all__ = ["compact_trace", "privileged_gold", "PERSONA_DROPPED", "page_view"]

PERSONA_DROPPED = ("用户ID", "注册时间", "最后更新时间")
_PRODUCT_FIELDS = ("title", "brand", "category", "key_attributes", "price")
_PUBLIC_PURCHASE = ("attributes", "category", "options", "price", "product_category")
_TEXT_LIMIT = 600


def _text(value: Any, limit: int = _TEXT_LIMIT) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    text = redact_identifiers(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _persona(record: dict[str, Any]) -> dict[str, Any]:
    persona = json_object(json_object(record.get("reset")).get("user_persona"))
    return {k: (_text(v) if isinstance(v, str) else v) for k, v in persona.items()
            if k not in PERSONA_DROPPED and not str(k).startswith("__")}


def page_view(state: dict[str, Any]) -> dict[str, Any]:
    """The parts of an ``observation_state`` a prompt needs: page, offered actions, product, options."""
    product = json_object(state.get("product"))
    view: dict[str, Any] = {
        "page_type": state.get("page_type"),
        "search_available": bool(state.get("search_available")),
        "actions": list(state.get("actions") or []),
        # the audit replays the task live, so it needs the product id to know where it is
        "product": {k: product[k] for k in ("asin", *_PRODUCT_FIELDS) if k in product} or None,
        "selected_options": state.get("selected_options"),
        "missing_option_axes": state.get("missing_option_axes"),
        "selected_price": state.get("selected_price"),
        "products": [{k: p.get(k) for k in ("asin", "title", "brand", "price") if k in p}
                     for p in state.get("products") or [] if isinstance(p, dict)][:10] or None,
    }
    return {k: v for k, v in view.items() if v is not None}


def compact_trace(record: dict[str, Any], *, max_steps: int | None = None) -> dict[str, Any]:
    """The public, redacted episode of §18.2 step 2 (no gold goal, no purchase identifiers)."""
    steps = []
    for step in (record.get("steps") or [])[: max_steps or None]:
        if not isinstance(step, dict):
            continue
        env = json_object(step.get("environment"))
        state = json_object(env.get("observation_state"))
        feedback = json_object(env.get("action_feedback"))
        product = json_object(state.get("product"))
        item = {
            "step_index": step.get("step_index"),
            "observation": _text(step.get("observation")),
            "reasoning": _text(json_object(step.get("model")).get("reasoning")),
            "action": _text(step.get("action")),
            "protocol_error": json_object(step.get("protocol_error")).get("code"),
            "action_feedback": {k: feedback.get(k) for k in ("valid", "reason") if k in feedback} or None,
            "page_type": state.get("page_type"),
            "product": {k: (_text(product[k]) if isinstance(product[k], str) else product[k])
                        for k in _PRODUCT_FIELDS if k in product} or None,
            "selected_options": state.get("selected_options"),
            "missing_option_axes": state.get("missing_option_axes"),
            "selected_price": state.get("selected_price"),
        }
        steps.append({k: v for k, v in item.items() if v is not None})
    final = json_object(record.get("final"))
    purchase = json_object(final.get("purchase"))
    reset = json_object(record.get("reset"))
    return {
        "episode_id": record.get("episode_id"),
        "task_instruction": _text(reset.get("task_instruction")),
        "persona": _persona(record),
        "outcome": {
            "reward": final.get("reward"),
            "reward_detail": final.get("reward_detail"),
            "termination_reason": final.get("termination_reason"),
            "purchase": {k: purchase[k] for k in _PUBLIC_PURCHASE if k in purchase},
        },
        "steps": steps,
    }


def privileged_gold(record: dict[str, Any]) -> dict[str, Any]:
    """``privileged_gold_audit`` of §18.2: the gold goal and the full purchase. Audit-only, never deployable."""
    final = json_object(record.get("final"))
    goal = {k: v for k, v in json_object(final.get("goal")).items() if k != "user_persona"}
    return {"goal": goal, "purchase": json_object(final.get("purchase"))}
