"""Trace2Skill prompt texts, tool schemas and version strings (this project's wording).

The spec makes the artifact formats normative and leaves the prompts to the implementation
(runtime-semantics §18); every output therefore records ``PROMPTS_SHA256`` (a fingerprint of all
texts and schemas below) and ``PROMPT_VERSION``, so a reader always knows which prompt produced it.
"""

from __future__ import annotations

from typing import Any

from shopsimrl_core._hashing import fingerprint

__all__ = [
    "TRACE2SKILL_SCHEMA", "EVIDENCE_CARD_SCHEMA", "EVIDENCE_CLUSTER_SCHEMA", "INITIAL_DRAFT_SCHEMA",
    "ONLINE_FAILURE_ANALYSIS_SCHEMA", "PROMPT_VERSION", "PROMPTS_SHA256", "SYSTEM", "TOOLS",
    "CARD_TEXT_FIELDS", "DEPLOYABLE_FIELDS", "AUDIT_FIELDS", "CLUSTER_TEXT_FIELDS", "CHUNK_TEXT_FIELDS",
    "action_tools",
]

TRACE2SKILL_SCHEMA = "shopsimrl-trace2skill-cold-start-v3"
EVIDENCE_CARD_SCHEMA = "shopsimrl-evidence-card-v3"
EVIDENCE_CLUSTER_SCHEMA = "shopsimrl-evidence-cluster-v2"
INITIAL_DRAFT_SCHEMA = "shopsimrl-initial-skill-draft-v2"
ONLINE_FAILURE_ANALYSIS_SCHEMA = "shopsimrl-online-failure-analysis-v1"
PROMPT_VERSION = "shopsimrl-trace2skill-prompts-v1"

CARD_TEXT_FIELDS = ("mechanism", "applicable_when", "observed_evidence", "decisive_behavior", "generalizable_lesson")
AUDIT_FIELDS = ("gold_asin", "chosen_asin", "failure_surface", "earliest_divergence", "oracle_comparison",
                "replay_evidence", "minimal_repair", "repair_validation_result")
DEPLOYABLE_FIELDS = ("failure_mechanism", "applicable_when", "observable_trigger", "corrective_procedure",
                     "verification_step", "target_chunk_id", "proposed_content")
CLUSTER_TEXT_FIELDS = ("workflow_stage", "mechanism", "applicable_when", "procedure", "verification",
                       "common_failure")
CHUNK_TEXT_FIELDS = ("title", "workflow_stage", "applicable_when", "verification", "common_failure")

_GENERAL = ("Never copy product ids, product titles, brand names, option values, prices or task numbers: "
            "what you write must hold for every other task. Reply only by calling the offered tool.")

SYSTEM: dict[str, str] = {
    "success": ("You analyse one SUCCESSFUL episode of an LLM shopping agent in a simulated Chinese online shop. "
                "Write 0 to {max_cards} evidence cards, each naming the mechanism that made the episode succeed, "
                "when it applies, the observed evidence, the decisive behaviour and a general lesson. " + _GENERAL),
    "failure": ("You audit one FAILED episode of an LLM shopping agent. You have privileged access to the gold "
                "target under privileged_gold_audit and a live, fresh session of the same task: search and click "
                "to replay the task, try counterfactual purchases, then call submit_failure_card. Gold details "
                "belong ONLY in privileged_audit; deployable_abstraction is shown to future agents and must be "
                "general. Propose ADD (or REWRITE of an active chunk) only when a counterfactual purchase "
                "succeeded. " + _GENERAL),
    "consolidate": ("You consolidate evidence cards of one channel into at most {max_clusters} clusters of the "
                    "same reusable mechanism. Every card goes into exactly one cluster or into "
                    "evidence_only_card_ids. " + _GENERAL),
    "compile": ("You compile evidence clusters into one shopping skill of 1 to {max_chunks} chunks, each a short "
                "procedure for the agent, written in Chinese. Every cluster is used by at most one chunk or listed "
                "in evidence_only_cluster_ids. " + _GENERAL),
}


def _strings(*names: str) -> dict[str, Any]:
    return {n: {"type": "string", "minLength": 1} for n in names}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


_CARD = {"type": "object", "properties": {**_strings(*CARD_TEXT_FIELDS),
                                          "related_chunk_ids": {"type": "array", "items": {"type": "string"}},
                                          "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
         "required": [*CARD_TEXT_FIELDS, "related_chunk_ids", "confidence"], "additionalProperties": False}

TOOLS: dict[str, dict[str, Any]] = {
    "submit_success_cards": _tool("submit_success_cards", "Submit the evidence cards of this successful episode.",
                                  {"cards": {"type": "array", "items": _CARD}}, ["cards"]),
    "submit_failure_card": _tool(
        "submit_failure_card", "Submit the audit card of this failed episode.",
        {"status": {"type": "string", "enum": ["PROPOSE_ADD", "PROPOSE_REWRITE", "NO_PROPOSAL"]},
         "privileged_audit": {"type": "object", "properties": {k: {"type": ["string", "null"]} for k in AUDIT_FIELDS},
                              "required": list(AUDIT_FIELDS)},
         "deployable_abstraction": {"type": "object",
                                    "properties": {k: {"type": ["string", "null"]} for k in DEPLOYABLE_FIELDS},
                                    "required": list(DEPLOYABLE_FIELDS)},
         "audit_action_summary": {"type": "string"}},
        ["status", "privileged_audit", "deployable_abstraction", "audit_action_summary"]),
    "submit_clusters": _tool(
        "submit_clusters", "Submit the clusters of this batch of evidence cards.",
        {"clusters": {"type": "array", "items": {"type": "object", "properties": {
            **_strings(*(f for f in CLUSTER_TEXT_FIELDS if f != "procedure")),
            "procedure": {"type": "string", "minLength": 1},
            "evidence_card_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
            "required": [*CLUSTER_TEXT_FIELDS, "evidence_card_ids"]}},
         "evidence_only_card_ids": {"type": "array", "items": {"type": "string"}}},
        ["clusters", "evidence_only_card_ids"]),
    "submit_initial_skill": _tool(
        "submit_initial_skill", "Submit the compiled skill.",
        {"skill_title": {"type": "string", "minLength": 1},
         "chunks": {"type": "array", "items": {"type": "object", "properties": {
             **_strings(*CHUNK_TEXT_FIELDS),
             "procedure": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
             "evidence_cluster_ids": {"type": "array", "items": {"type": "string"}}},
             "required": [*CHUNK_TEXT_FIELDS, "procedure", "evidence_cluster_ids"]}},
         "evidence_only_cluster_ids": {"type": "array", "items": {"type": "string"}},
         "conflicts_resolved": {"type": "array", "items": {"type": "string"}}},
        ["skill_title", "chunks", "evidence_only_cluster_ids", "conflicts_resolved"]),
}


def action_tools(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The live audit's action tools with the dynamic schemas of runtime-semantics §9.2."""
    tools = []
    if state.get("search_available") is True:
        tools.append(_tool("search", "Search products by keywords (only when the page offers search).",
                           {"query": {"type": "string", "minLength": 1, "description": "concise product keywords"}},
                           ["query"]))
    if state.get("actions"):
        tools.append(_tool("click", "Click one available button, product or option on this page.",
                           {"value": {"type": "string", "enum": list(state["actions"]),
                                      "description": "one current clickable value, copied verbatim"}}, ["value"]))
    return tools


PROMPTS_SHA256 = fingerprint({"version": PROMPT_VERSION, "system": SYSTEM, "tools": TOOLS,
                              "action_tools": action_tools({"search_available": True, "actions": ["x"]})})
