"""Frozen version strings and constants of the ShopSimulator HTTP contract (http-contract §3).

The real server refuses to start when any of these deviate, so the sandbox hard-codes them too.
"""

from __future__ import annotations

ENVIRONMENT_VERSION = "shopsimulator-paper-aligned-v8"
OBSERVATION_VERSION = "shopping-observation-v7"
REWARD_VERSION = "shopsimulator-paper-reward-v2"
PRIMARY_REWARD = "r_strict"
VARIANT_PRICE_VERSION = "variant-price-paper-v2"
TOOL_SCHEMA_VERSION = "shopping-tools-paper-v4"
SEARCH_VERSION = "shopsimulator-multifield-bm25-v3"
OPTION_DOCUMENT_VERSION = "public-axis-value-v1"
SEARCH_SCHEMA_VERSION = 1
BUDGET_PARSER_VERSION = "instruction-budget-v1"
CATALOG_FILTER = "single-price-axis-v1"
PERSONA_SPLIT_SCHEMA = "shopsimrl-persona-splits-v1"

SEARCH_TOP_K = 150
SEARCH_PAGE_SIZE = 20
SEARCH_FIELD_WEIGHTS = {
    "title": 3.0,
    "brand": 2.0,
    "category": 2.0,
    "model": 2.5,
    "attributes": 1.5,
    "options": 1.2,
    "bullets": 0.8,
}
MAX_ACTIONS = {"single_turn": 30, "multi_turn": 40}
REPORTED_METRICS = [
    "r_loose", "r_strict", "r_success", "r_type", "r_att", "r_option", "r_price",
    "target_asin_match", "price_verifiable",
]
DEBUG_UI_PATH = "/debug-ui"
REPLAY_UI_PATH = "/replay-ui"
DEFAULT_PORT = 5700
DEFAULT_SLOTS = 20
