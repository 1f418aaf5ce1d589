r"""The leakage firewall: deployable skill text must not carry instance data (runtime-semantics §18.3).

A skill is injected into every future episode, so anything it copies from one trace (a product id,
a product title, a brand, the gold option, a task id) either leaks the answer of that task or
teaches the model a fact that is false for every other task. ``check_text`` returns the findings;
a text with any finding is rejected, and the caller keeps the finding as the rejection reason.

Finding codes (the first six are the spec's, ``contains_product_id`` is this project's addition for
catalogs whose product ids are shorter than ten digits):

    mentions_asin                  (?i)\bASIN\b
    contains_long_identifier       \b\d{10,}\b
    contains_task_id               (?i)\btask[-_ ]?\d+\b
    copies_instance_product_title  a title of >= 6 characters from the goal, the purchase or any visited product
    copies_instance_brand          a visited brand of >= 3 characters
    copies_gold_option             a gold option value of >= 6 characters
    contains_product_id            any product id seen in the source traces (>= 4 characters)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from shopsimrl_core._hashing import json_object

__all__ = ["FirewallContext", "Finding", "check_text", "context_from_traces", "redact_identifiers"]

_ASIN = re.compile(r"(?i)\bASIN\b")
_LONG_ID = re.compile(r"\b\d{10,}\b")
_TASK_ID = re.compile(r"(?i)\btask[-_ ]?\d+\b")

MIN_TITLE_CHARS = 6
MIN_BRAND_CHARS = 3
MIN_OPTION_CHARS = 6
MIN_PRODUCT_ID_CHARS = 4


@dataclass(frozen=True)
class Finding:
    """One reason a text is not deployable: the finding code and the offending substring."""

    code: str
    match: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "match": self.match}


@dataclass
class FirewallContext:
    """Instance strings the text must not copy, collected from the source traces."""

    titles: set[str] = field(default_factory=set)
    brands: set[str] = field(default_factory=set)
    gold_options: set[str] = field(default_factory=set)
    product_ids: set[str] = field(default_factory=set)

    def add_trace(self, record: dict[str, Any]) -> None:
        """Collect titles, brands, gold options and product ids from one trace record."""
        final = json_object(record.get("final"))
        for obj in (final.get("goal"), final.get("purchase")):
            if isinstance(obj, dict):
                self._title(obj.get("name"))
                self._title(obj.get("title"))
                self._pid(obj.get("asin"))
        goal = json_object(final.get("goal"))
        for option in goal.get("goal_options") or []:
            if isinstance(option, str) and len(option.strip()) >= MIN_OPTION_CHARS:
                self.gold_options.add(option.strip())
        states = []
        reset = record.get("reset")
        if isinstance(reset, dict):
            states.append(reset.get("observation_state"))
        for step in record.get("steps") or []:
            env = step.get("environment") if isinstance(step, dict) else None
            if isinstance(env, dict):
                states.append(env.get("observation_state"))
                for key in ("goal", "purchase"):
                    obj = env.get(key)
                    if isinstance(obj, dict):
                        self._title(obj.get("name"))
                        self._pid(obj.get("asin"))
        for state in states:
            if not isinstance(state, dict):
                continue
            products = list(state.get("products") or [])
            if isinstance(state.get("product"), dict):
                products.append(state["product"])
            for product in products:
                if isinstance(product, dict):
                    self._title(product.get("title"))
                    self._pid(product.get("asin"))
                    brand = product.get("brand")
                    if isinstance(brand, str) and len(brand.strip()) >= MIN_BRAND_CHARS:
                        self.brands.add(brand.strip())

    def _title(self, value: Any) -> None:
        if isinstance(value, str) and len(value.strip()) >= MIN_TITLE_CHARS:
            self.titles.add(value.strip())

    def _pid(self, value: Any) -> None:
        if isinstance(value, str) and len(value.strip()) >= MIN_PRODUCT_ID_CHARS:
            self.product_ids.add(value.strip())


def context_from_traces(records: Iterable[dict[str, Any]]) -> FirewallContext:
    """Build the firewall context of a set of source traces."""
    ctx = FirewallContext()
    for record in records:
        ctx.add_trace(record)
    return ctx


def check_text(text: str, context: FirewallContext | None = None) -> list[Finding]:
    """Return every firewall finding in *text* (empty list = deployable).

    Without a context only the three pattern checks run (the spec's rule for clusters and chunks);
    with one, titles, brands, gold options and product ids of the source traces are checked too.
    """
    findings: list[Finding] = []
    for code, pattern in (
        ("mentions_asin", _ASIN),
        ("contains_long_identifier", _LONG_ID),
        ("contains_task_id", _TASK_ID),
    ):
        m = pattern.search(text)
        if m:
            findings.append(Finding(code, m.group(0)))
    if context is None:
        return findings
    folded = text.casefold()
    for code, values in (
        ("copies_instance_product_title", context.titles),
        ("copies_instance_brand", context.brands),
        ("copies_gold_option", context.gold_options),
    ):
        for value in sorted(values):
            if value.casefold() in folded:
                findings.append(Finding(code, value))
                break
    for pid in sorted(context.product_ids):
        if re.search(r"(?<![0-9A-Za-z])" + re.escape(pid) + r"(?![0-9A-Za-z])", text):
            findings.append(Finding("contains_product_id", pid))
            break
    return findings


_REDACTIONS = (
    (re.compile(r"(?i)\bASIN\s*[:=]?\s*[A-Z0-9-]+"), "product id: <redacted>"),
    (re.compile(r"\b\d{10,}\b"), "<product_id>"),
    (re.compile(r"(?i)\btask[-_ ]?\d+\b"), "<task_id>"),
)


def redact_identifiers(text: str) -> str:
    """Redact identifiers in free text before it goes into an analyst prompt (runtime-semantics §18.2 step 2)."""
    for pattern, replacement in _REDACTIONS:
        text = pattern.sub(replacement, text)
    return text
