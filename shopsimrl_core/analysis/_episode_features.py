"""Feature extractors over one trace record, for the episode labels (``_labels``).

A trace record is read once into an :class:`EpisodeView`: the parts the labels need, typed, with
every malformed part replaced by an empty value (a stored trace is untrusted input, and a label
must never raise on one). Each extractor is then a small pure function of the view that returns
its columns and, where a label needs them, the 1-based ``step_index`` values that justify it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from shopsimrl_core._hashing import canonical_json
from shopsimrl_core.episode._trace import is_complete

__all__ = [
    "EpisodeView",
    "StepView",
    "SearchFeatures",
    "ProductFeatures",
    "BuyFeatures",
    "ErrorFeatures",
    "BudgetFeatures",
    "outcome_of",
    "search_features",
    "result_page_steps",
    "product_features",
    "loop_steps",
    "buy_features",
    "error_features",
    "budget_features",
    "num",
    "category_key",
]

_CATEGORY_SPLIT = re.compile(r"\s*[›>/\\]\s*")
_BUDGET_KEY = re.compile(r"预算|budget|价位|价格", re.IGNORECASE)


def num(value: Any) -> float | None:
    """*value* as a float when it is a real number (booleans are not), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _frozen(value: Any) -> Hashable:
    # Page keys and product ids are compared and collected in sets; a list or object where a
    # string belongs (a malformed trace) becomes a stable hashable stand-in instead of a crash.
    if isinstance(value, (dict, list)):
        return ("unhashable", json.dumps(value, sort_keys=True, default=str))
    hashable: Hashable = value
    return hashable


def _state_key(state: Mapping[str, Any]) -> tuple[Hashable, ...]:
    page = _frozen(state.get("page_type"))
    if page == "search_results":
        return (page, _frozen(state.get("search_text")), _frozen(state.get("page")))
    if page == "product_detail":
        return (page, _frozen(_mapping(state.get("product")).get("asin")))
    return (page,)


def category_key(category: Any) -> str | None:
    """The first two levels of a ``A › B › C`` category path, joined by `` > ``; None when empty."""
    if not isinstance(category, str) or not category.strip():
        return None
    parts = [p.strip() for p in _CATEGORY_SPLIT.split(category) if p.strip()]
    return " > ".join(parts[:2]) if parts else None


@dataclass(frozen=True)
class StepView:
    """One step of a trace, as the labels read it.

    ``acted`` is false for steps without an ``environment`` block (protocol errors, policy
    failures); every environment-derived field is then empty.
    """

    position: int
    index: int
    protocol_code: str | None
    policy_code: str | None
    acted: bool
    action: str = ""
    has_feedback: bool = False
    valid: Any = None
    reason: Any = None
    done: bool = False
    has_state: bool = False
    page_type: Any = None
    state_key: tuple[Hashable, ...] | None = None
    asin: Hashable = None

    @classmethod
    def from_step(cls, position: int, step: Mapping[str, Any]) -> StepView:
        """Read one step dict (position is 1-based; it stands in for a missing ``step_index``)."""
        index = step["step_index"] if isinstance(step.get("step_index"), int) else position
        protocol = step.get("protocol_error")
        policy = step.get("policy_failure")
        protocol_code = str(protocol.get("code", "unknown")) if isinstance(protocol, dict) else None
        policy_code = str(policy.get("code", "unknown")) if isinstance(policy, dict) else None
        env = step.get("environment")
        if not isinstance(env, dict):
            return cls(position, index, protocol_code, policy_code, acted=False)
        feedback = _mapping(env.get("action_feedback"))
        state = _mapping(env.get("observation_state"))
        return cls(
            position,
            index,
            protocol_code,
            policy_code,
            acted=True,
            action=step["action"] if isinstance(step.get("action"), str) else "",
            has_feedback=bool(feedback),
            valid=feedback.get("valid"),
            reason=feedback.get("reason"),
            done=env.get("done") is True,
            has_state=bool(state),
            page_type=state.get("page_type"),
            state_key=_state_key(state) if state else None,
            asin=_frozen(_mapping(state.get("product")).get("asin"))
            if state.get("page_type") == "product_detail"
            else None,
        )

    @property
    def not_refused(self) -> bool:
        """The environment did not mark the action invalid (``valid`` is anything but ``false``)."""
        return self.valid is not False

    @property
    def is_option_click(self) -> bool:
        """A ``click[name=value]`` the environment accepted."""
        return self.action.startswith("click[") and "=" in self.action and self.not_refused


@dataclass(frozen=True)
class EpisodeView:
    """The parts of one trace record the labels read, each of the right type or empty."""

    record: Mapping[str, Any]
    episode_id: str
    job: dict[str, Any]
    model_provenance: dict[str, Any]
    skills_provenance: dict[str, Any]
    final: dict[str, Any]
    detail: dict[str, Any]
    goal: dict[str, Any]
    purchase: dict[str, Any]
    reset: dict[str, Any]
    steps: tuple[StepView, ...]
    last_step_index: Any
    selected_skill_ids: list[Any]
    termination: str | None
    complete: bool
    reset_key: tuple[Hashable, ...] | None = None
    purchased_asin: Hashable = None

    @classmethod
    def from_record(cls, record: Mapping[str, Any], episode_id: str) -> EpisodeView:
        """Read a trace record (``episode_id`` already checked by the caller)."""
        provenance = _mapping(record.get("provenance"))
        final = _mapping(record.get("final"))
        detail = _mapping(final.get("reward_detail"))
        reset = _mapping(record.get("reset"))
        raw_steps = record.get("steps")
        steps = [s for s in raw_steps if isinstance(s, dict)] if isinstance(raw_steps, list) else []
        selected = record.get("selected_skills")
        termination = final.get("termination_reason") or detail.get("termination_reason")
        reset_state = reset.get("observation_state")
        return cls(
            record=record,
            episode_id=episode_id,
            job=_mapping(record.get("job")),
            model_provenance=_mapping(provenance.get("model")),
            skills_provenance=_mapping(provenance.get("skills")),
            final=final,
            detail=detail,
            goal=_mapping(final.get("goal")),
            purchase=_mapping(final.get("purchase")),
            reset=reset,
            steps=tuple(StepView.from_step(i, s) for i, s in enumerate(steps, start=1)),
            last_step_index=steps[-1].get("step_index", len(steps)) if steps else None,
            selected_skill_ids=[s.get("skill_id") for s in selected if isinstance(s, dict)]
            if isinstance(selected, list)
            else [],
            termination=str(termination) if termination is not None else None,
            complete=is_complete(dict(record)),
            reset_key=_state_key(reset_state) if isinstance(reset_state, dict) else None,
            purchased_asin=_frozen(_mapping(final.get("purchase")).get("asin")),
        )

    @property
    def acted_steps(self) -> list[StepView]:
        """The steps that reached the environment."""
        return [s for s in self.steps if s.acted]


# --------------------------------------------------------------------------- outcome


def outcome_of(view: EpisodeView) -> tuple[str, list[str]]:
    """The outcome class (first match wins, as listed in ``_labels``) and the reward components below 1."""
    if not view.complete:
        return "failed", []
    detail = view.detail
    components = [k for k in ("r_type", "r_att", "r_option", "r_price") if (num(detail.get(k)) or 0.0) < 1.0]
    termination = view.termination
    if termination in ("generation_length", "action_limit"):
        return termination, components
    if termination != "purchase":
        return "other", components
    if detail.get("r_success") == 1:
        return "success", []
    for component, outcome in (("r_type", "wrong_type"), ("r_att", "missing_attributes"), ("r_option", "wrong_option")):
        if component in components:
            return outcome, components
    if "r_price" in components:
        return ("over_budget" if detail.get("price_verifiable") is True else "price_unverifiable"), components
    return "other", components


# --------------------------------------------------------------------------- behaviour


@dataclass(frozen=True)
class SearchFeatures:
    """Accepted searches, and the positions/indices of searches that repeat an earlier query."""

    steps: list[int]
    repeats: list[tuple[int, int]]


def search_features(view: EpisodeView) -> SearchFeatures:
    """Searches the environment accepted; a repeat is a query seen before (whitespace and case folded)."""
    steps: list[int] = []
    repeats: list[tuple[int, int]] = []
    queries: list[str] = []
    for step in view.acted_steps:
        if step.action.startswith("search[") and step.not_refused:
            steps.append(step.index)
            query = " ".join(step.action[len("search[") : -1].split()).casefold()
            if query in queries:
                repeats.append((step.position, step.index))
            queries.append(query)
    return SearchFeatures(steps, repeats)


def result_page_steps(view: EpisodeView) -> list[int]:
    """Steps that showed a result page (query, page number) for the first time."""
    seen: set[tuple[Hashable, ...]] = set()
    out: list[int] = []
    for step in view.acted_steps:
        if step.page_type == "search_results" and step.state_key is not None and step.state_key not in seen:
            seen.add(step.state_key)
            out.append(step.index)
    return out


@dataclass(frozen=True)
class ProductFeatures:
    """Product pages entered, re-entries, option clicks, and what happened on the purchased product."""

    seen: list[Hashable]
    reentries: list[tuple[int, int]]
    option_steps: list[int]
    purchased_view_step: int | None
    purchased_option_steps: list[int]


def product_features(view: EpisodeView) -> ProductFeatures:
    """Walk the product pages: a re-entry is arriving at a product page already left once."""
    seen: list[Hashable] = []
    reentries: list[tuple[int, int]] = []
    options: list[int] = []
    purchased_view: int | None = None
    purchased_options: list[int] = []
    last: Hashable = None
    for step in view.acted_steps:
        if step.page_type == "product_detail":
            if step.asin != last:
                if step.asin in seen:
                    reentries.append((step.position, step.index))
                seen.append(step.asin)
            if step.is_option_click:
                options.append(step.index)
            if step.asin is not None and step.asin == view.purchased_asin:
                if purchased_view is None:
                    purchased_view = step.index
                if step.is_option_click:
                    purchased_options.append(step.index)
            last = step.asin
        elif step.has_state:
            last = None
    return ProductFeatures(seen, reentries, options, purchased_view, purchased_options)


def loop_steps(view: EpisodeView, search: SearchFeatures, products: ProductFeatures) -> list[int]:
    """Loop evidence in step order: repeated queries, product re-entries and page oscillation.

    Oscillation is A-B-A-B between two page states, counted once per step, even without a product page.
    """
    by_position: dict[int, list[int]] = {}
    for position, index in search.repeats + products.reentries:
        by_position.setdefault(position, []).append(index)
    loops: list[int] = []
    history: list[tuple[Hashable, ...]] = [view.reset_key] if view.reset_key is not None else []
    for step in view.steps:
        loops.extend(by_position.get(step.position, []))  # a step's repeated query before its re-entry
        key = step.state_key
        if key is None:
            continue
        if len(history) >= 3 and key == history[-2] and history[-1] == history[-3] and key != history[-1]:
            if step.index not in loops:
                loops.append(step.index)
        history.append(key)
    return loops


@dataclass(frozen=True)
class BuyFeatures:
    """``buy now`` clicks: how many, whether the first lacked options, the premature ones, the purchase."""

    attempts: int
    first_incomplete: bool | None
    premature_steps: list[int]
    purchase_step: int | None


def buy_features(view: EpisodeView) -> BuyFeatures:
    """Buy attempts; the purchase step is the last accepted step that ended a ``purchase`` episode."""
    attempts = 0
    first: bool | None = None
    premature: list[int] = []
    purchase: int | None = None
    for step in view.acted_steps:
        if step.action == "click[buy now]":
            attempts += 1
            incomplete = step.reason == "incomplete_options"
            if first is None:
                first = incomplete
            if incomplete:
                premature.append(step.index)
        if step.done and view.termination == "purchase" and step.not_refused:
            purchase = step.index
    return BuyFeatures(attempts, first, premature, purchase)


@dataclass(frozen=True)
class ErrorFeatures:
    """Refused actions (with reasons), protocol errors (with codes) and the last policy failure code."""

    invalid_steps: list[int]
    invalid_reasons: list[str]
    protocol_steps: list[int]
    protocol_codes: list[str]
    policy_code: str | None


def error_features(view: EpisodeView) -> ErrorFeatures:
    """Collect the error evidence of every step, in step order."""
    invalid_steps: list[int] = []
    invalid_reasons: list[str] = []
    protocol_steps: list[int] = []
    protocol_codes: list[str] = []
    policy: str | None = None
    for step in view.steps:
        if step.protocol_code is not None:
            protocol_steps.append(step.index)
            protocol_codes.append(step.protocol_code)
        if step.policy_code is not None:
            policy = step.policy_code
        if step.has_feedback and step.valid is False:
            invalid_steps.append(step.index)
            invalid_reasons.append(str(step.reason or "unknown"))
    return ErrorFeatures(invalid_steps, invalid_reasons, protocol_steps, protocol_codes, policy)


@dataclass(frozen=True)
class BudgetFeatures:
    """The budget, the price paid, whether the budget was kept, and the persona's budget hints."""

    price_upper: float | None
    purchase_price: float | None
    status: str
    persona_hint: str | None


def budget_features(view: EpisodeView) -> BudgetFeatures:
    """``status`` is ``no_purchase``, ``no_budget``, ``unverifiable``, ``respected`` or ``ignored``."""
    detail = view.detail
    price_upper = num(detail.get("price_upper"))
    if price_upper is None:
        price_upper = num(view.goal.get("price_upper"))
    price = num(_mapping(detail.get("price_resolution")).get("price"))
    if price is None:
        price = num(view.purchase.get("price"))
    if view.termination != "purchase":
        status = "no_purchase"
    elif price_upper is None:
        status = "no_budget"
    elif detail.get("price_verifiable") is not True or price is None:
        status = "unverifiable"
    else:
        status = "respected" if price <= price_upper else "ignored"
    persona = _mapping(view.reset.get("user_persona"))
    hints = {k: v for k, v in persona.items() if isinstance(k, str) and _BUDGET_KEY.search(k)}
    return BudgetFeatures(price_upper, price, status, canonical_json(hints) if hints else None)
