"""The episode engine: one leased slot's shopping session, page by page.

It holds the page state machine (http-contract §10), action validation and dispatch (§9.3),
counting and limits (§11) and the terminal payloads (§5.2, §5.3, §12).

An `Episode` holds one leased slot's shopping session. It does no lease or HTTP checking; the app
layer does that and calls `step` / `terminate` only for calls that passed §5.2 steps 1–4.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from shopsim_sandbox import reward as _reward
from shopsim_sandbox.actions import MSG_NOT_SEARCH_CLICK, extract_action, parse_action
from shopsim_sandbox.catalog import Catalog, Task
from shopsim_sandbox.observation import home_state, product_summary, render, terminal_state
from shopsim_sandbox.search import SearchIndex
from shopsim_sandbox.versions import MAX_ACTIONS, OBSERVATION_VERSION, SEARCH_PAGE_SIZE

_OPTIONS_SHOWN = 100


class EpisodeOver(Exception):
    """Raised when an ended episode is stepped or terminated again."""


def _feedback(action: str, valid: bool, reason: str, message: str) -> dict:
    return {"action": action, "valid": valid, "reason": reason, "message": message}


class Episode:
    """One episode of one task in one slot."""

    def __init__(self, catalog: Catalog, index: SearchIndex, task: Task, interaction_mode: str, env_idx: int):
        self.catalog = catalog
        self.index = index
        self.task = task
        self.env_idx = env_idx
        self.session_key = f"slot-{env_idx}-{task.task_id}"
        self.max_actions = MAX_ACTIONS[interaction_mode]
        self.action_count = 0
        self.done = False
        self.page = "search_home"
        self.results: list[str] = []
        self.search_text = ""
        self.normalized_search_text = ""
        self.result_page = 1
        self.asin: str | None = None
        self.selected: dict[str, str] = {}
        self.price_resolution: dict | None = None
        self.last_action: dict | None = None

    # ----- state -------------------------------------------------------------------------------

    def _results_state(self) -> dict:
        total = len(self.results)
        total_pages = max(1, math.ceil(total / SEARCH_PAGE_SIZE))
        start = (self.result_page - 1) * SEARCH_PAGE_SIZE
        page_asins = self.results[start:start + SEARCH_PAGE_SIZE]
        products = [product_summary(self.catalog.products[a], rank=start + i + 1) for i, a in enumerate(page_asins)]
        actions = ["back to search"]
        if self.result_page > 1:
            actions.append("< prev")
        if self.result_page < total_pages:
            actions.append("next >")
        actions += page_asins
        state = {
            "actions": actions,
            "observation_version": OBSERVATION_VERSION,
            "page_type": "search_results",
            "search_available": False,
            "search_text": self.search_text,
            "normalized_search_text": self.normalized_search_text,
            "page": self.result_page,
            "total_pages": total_pages,
            "total_results": total,
            "rank_start": start + 1 if page_asins else 0,
            "rank_end": start + len(page_asins) if page_asins else 0,
            "products": products,
        }
        if self.last_action is not None:
            state["last_action"] = self.last_action
        return state

    def _product(self) -> dict:
        assert self.asin is not None  # only called while a product page is open
        return self.catalog.products[self.asin]

    def _missing_axes(self) -> list[str]:
        return [axis for axis in self._product()["display_options"] if axis not in self.selected]

    def _product_state(self) -> dict:
        product = self._product()
        options = product["display_options"]
        missing = self._missing_axes()
        complete = not missing
        actions = ["back to search", "< prev"]
        if complete:
            actions.append("buy now")
        seen = set(actions)
        for label, axis, value in product["option_labels"]:
            if self.selected.get(axis) == value or label in seen:
                continue
            seen.add(label)
            actions.append(label)
        state = {
            "actions": actions,
            "observation_version": OBSERVATION_VERSION,
            "page_type": "product_detail",
            "search_available": False,
            "product": product_summary(product),
            "selected_options": dict(self.selected),
            "available_options": {axis: [v for v in values[:_OPTIONS_SHOWN] if v.strip()]
                                  for axis, values in options.items()},
            "missing_option_axes": missing,
            "options_complete": complete,
        }
        if self.price_resolution is not None and self.price_resolution.get("status") == "pass":
            state["selected_price"] = self.price_resolution["price"]
        if self.last_action is not None:
            state["last_action"] = self.last_action
        return state

    def state(self) -> dict:
        """The current `observation_state`."""
        if self.page == "search_home":
            return home_state(self.last_action)
        if self.page == "search_results":
            return self._results_state()
        if self.page == "product_detail":
            return self._product_state()
        return terminal_state(self.last_action)

    def observation(self) -> tuple[str, dict]:
        """The current (`observation`, `observation_state`) pair."""
        state = self.state()
        axis_order = list(self._product()["display_options"]) if self.page == "product_detail" else None
        return render(state, axis_order), state

    # ----- transitions -------------------------------------------------------------------------

    def _resolve_price(self) -> None:
        self.price_resolution = _reward.resolve_sku_price(self._product(), dict(self.selected))

    def _open_product(self, asin: str) -> None:
        self.page = "product_detail"
        self.asin = asin
        self.selected = {}
        self._resolve_price()

    def _go_home(self) -> None:
        self.page = "search_home"
        self.asin = None
        self.selected = {}
        self.price_resolution = None
        self.results = []
        self.result_page = 1

    def _dispatch(self, action: str) -> tuple[dict, bool]:
        """Validate and execute one extracted action; returns (feedback, purchased)."""
        parsed = parse_action(action)
        if not parsed.ok:
            return _feedback(action, False, parsed.reason, parsed.message), False
        name, arg = parsed.name, parsed.arg
        if name == "search":
            if arg is None or not arg.strip():
                return _feedback(action, False, "empty_argument", "search[...] 的关键词不能为空"), False
            if self.page != "search_home":
                return _feedback(action, False, "search_unavailable", "当前页面不提供搜索操作"), False
            self.normalized_search_text, self.results = self.index.search(arg)
            self.search_text = arg
            self.result_page = 1
            self.selected = {}
            self.asin = None
            self.price_resolution = None
            self.page = "search_results"
            return _feedback(action, True, "executed", "搜索已执行"), False
        if name != "click":
            return _feedback(action, False, "invalid_format", MSG_NOT_SEARCH_CLICK), False
        if arg is None or not arg.strip():
            return _feedback(action, False, "empty_argument", "click[...] 的点击值不能为空"), False
        if self.page == "product_detail":
            if any(arg == f"{axis}={value}" for axis, value in self.selected.items()):
                return _feedback(action, False, "already_selected", f"该规格已经选中：{arg}"), False
            if arg == "buy now":
                missing = self._missing_axes()
                if missing:
                    fb = _feedback(action, False, "incomplete_options", "购买前还需选择规格轴：" + "、".join(missing))
                    fb["missing_option_axes"] = missing
                    return fb, False
                return _feedback(action, True, "executed", "购买已执行"), True
        actions = self.state()["actions"]
        if arg not in actions:
            return _feedback(action, False, "unavailable_action", f"当前页面不存在可点击项：{arg}"), False
        executed = _feedback(action, True, "executed", "点击已执行")
        if arg == "back to search":
            self._go_home()
        elif self.page == "search_results":
            if arg == "< prev":
                self.result_page -= 1
            elif arg == "next >":
                self.result_page += 1
            else:
                self._open_product(arg)
        elif self.page == "product_detail":
            if arg == "< prev":
                self.page = "search_results"
                self.asin = None
                self.selected = {}
                self.price_resolution = None
            else:
                axis, value = self._product()["label_targets"][arg]
                self.selected[axis] = value
                self._resolve_price()
        return executed, False

    def _goal(self) -> dict:
        return copy.deepcopy(self.task.goal)

    def step(self, response: str) -> dict:
        """Consume one action (§5.2 step 6) and return the `result` payload of `interact`."""
        if self.done:
            raise EpisodeOver("episode is already terminated; reset before stepping")
        action = extract_action(response)
        self.action_count += 1
        feedback, purchased = self._dispatch(action)
        self.last_action = dict(feedback)
        result: dict[str, Any] = {
            "action_feedback": feedback,
            "env_idx": self.env_idx,
            "idx": self.session_key,
            "message": "Continue interaction" if feedback["valid"] else "Invalid action",
            "reward": 0.0 if feedback["valid"] else 0,
            "reward_detail": {},
            "purchase": {},
            "goal": {},
        }
        if purchased:
            product = self._product()
            assert self.price_resolution is not None  # resolved when the product page opened
            detail, purchase = _reward.score_purchase(product, self.task.goal, dict(self.selected),
                                                      self.price_resolution)
            self.page = "terminal"
            self.done = True
            result.update(reward=detail["r_strict"], reward_detail=detail, purchase=purchase,
                          goal=self._goal(), termination_reason="purchase")
        elif self.action_count >= self.max_actions:
            self.done = True
            result.update(reward=0.0, reward_detail=_reward.no_purchase_detail("action_limit"),
                          goal=self._goal(), termination_reason="action_limit")
        observation, state = self.observation()
        result.update(observation=observation, observation_state=state, done=self.done, over=self.done)
        return result

    def terminate(self, reason: str) -> dict:
        """End a live episode at the runner's request (§5.3); the page is left unchanged."""
        if self.done:
            raise EpisodeOver("episode is already terminated")
        self.done = True
        observation, state = self.observation()
        return {
            "done": True,
            "over": True,
            "reward": 0.0,
            "observation": observation,
            "observation_state": state,
            "message": f"Episode terminated: {reason}",
            "env_idx": self.env_idx,
            "idx": self.session_key,
            "reward_detail": _reward.no_purchase_detail(reason),
            "purchase": {},
            "goal": self._goal(),
            "termination_reason": reason,
        }
