"""Evidence cards: the success analyst and the live, gold-aware failure audit (runtime-semantics §18.2 steps 3–4).

- ``success_cards``: one non-interactive call per successful episode (``submit_success_cards``);
  the analyst sees the public compact trace only, never gold data.
- ``failure_card``: a live audit of one failed episode. It opens a FRESH environment session of
  the same task through the core's ``ShopSimulatorClient``, lets the analyst search and click
  with the §9.2 dynamic schemas, records every purchase as a terminal *trial* (then opens a new
  session, so several counterfactual trials are possible) and ends with ``submit_failure_card``.
  The privileged gold goal is in the audit prompt only; the card's deployable abstraction is
  firewalled against the source trace, the gold goal and every product the audit saw, and a card
  with findings (or without a successful counterfactual, or without a valid live action, or a
  REWRITE during cold start / of a non-active chunk online) is forced to ``NO_PROPOSAL``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shopsimrl_core._hashing import json_object
from shopsimrl_core.episode._runtime import canonical_action
from shopsimrl_core.skills import FirewallContext, check_text, context_from_traces
from shopsimrl_core.skills.trace2skill._compact import compact_trace, page_view, privileged_gold
from shopsimrl_core.skills.trace2skill._prompts import (
    AUDIT_FIELDS,
    CARD_TEXT_FIELDS,
    DEPLOYABLE_FIELDS,
    EVIDENCE_CARD_SCHEMA,
    SYSTEM,
    TOOLS,
    action_tools,
)
from shopsimrl_core.skills.trace2skill._structured import AnalystModel, compact, structured_call

__all__ = ["success_cards", "failure_card", "success_messages", "firewall_message"]

_STATUSES = ("PROPOSE_ADD", "PROPOSE_REWRITE", "NO_PROPOSAL")
_REQUIRED_FOR_PROPOSAL = ("failure_mechanism", "applicable_when", "corrective_procedure", "proposed_content")


def firewall_message(findings: Sequence[Any]) -> str:
    """The contract error a firewall finding turns into (the analyst is told what to remove)."""
    return "leakage firewall: " + ", ".join(f"{f.code} ({f.match})" for f in findings) + "; remove instance data"


def success_messages(record: dict[str, Any], max_cards: int) -> list[dict[str, Any]]:
    """The original messages of a success call (system + the public compact trace)."""
    return [{"role": "system", "content": SYSTEM["success"].format(max_cards=max_cards)},
            {"role": "user", "content": compact({"channel": "success", "max_cards": max_cards,
                                                 "episode": compact_trace(record)})}]


def _check_success(max_cards: int, firewall: FirewallContext) -> Any:
    def validate(name: str, args: dict[str, Any]) -> str | None:
        cards = args.get("cards")
        if set(args) != {"cards"} or not isinstance(cards, list):
            return "arguments must be exactly {\"cards\": [...]}"
        if len(cards) > max_cards:
            return f"at most {max_cards} cards, got {len(cards)}"
        for i, card in enumerate(cards):
            if not isinstance(card, dict):
                return f"cards[{i}] must be an object"
            for key in CARD_TEXT_FIELDS:
                if not isinstance(card.get(key), str) or not card[key].strip():
                    return f"cards[{i}].{key} must be a non-blank string"
            related = card.get("related_chunk_ids")
            if not isinstance(related, list) or not all(isinstance(x, str) for x in related):
                return f"cards[{i}].related_chunk_ids must be a list of strings"
            conf = card.get("confidence")
            if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0 <= conf <= 1:
                return f"cards[{i}].confidence must be a number in [0, 1]"
            findings = check_text("\n".join(card[k] for k in CARD_TEXT_FIELDS), firewall)
            if findings:
                return f"cards[{i}]: " + firewall_message(findings)
        return None

    return validate


async def success_cards(model: AnalystModel, record: dict[str, Any], *, max_cards: int = 2,
                        max_attempts: int = 3) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Evidence cards of one successful episode and the call's analysis row.

    Cards are ``success-<episode_id>-NN``; with no card, one ``success-<episode_id>-empty`` record
    that is not eligible for consolidation.

    Raises:
        StructuredOutputError: the analyst stayed invalid after *max_attempts*.
    """
    firewall = context_from_traces([record])
    result = await structured_call(model, success_messages(record, max_cards), [TOOLS["submit_success_cards"]],
                                   validate=_check_success(max_cards, firewall), max_attempts=max_attempts,
                                   what=f"success analyst for {record.get('episode_id')}")
    eid = record["episode_id"]
    base = {"schema_version": EVIDENCE_CARD_SCHEMA, "channel": "success", "episode_id": eid,
            "task_id": json_object(record.get("job")).get("task_id")}
    cards = [dict(base, card_id=f"success-{eid}-{n:02d}",
                  **{k: c[k].strip() for k in CARD_TEXT_FIELDS},
                  related_chunk_ids=list(c["related_chunk_ids"]), confidence=float(c["confidence"]),
                  eligible_for_consolidation=True)
             for n, c in enumerate(result.arguments["cards"], start=1)]
    if not cards:
        cards = [dict(base, card_id=f"success-{eid}-empty", eligible_for_consolidation=False)]
    row = {"episode_id": eid, "channel": "success", "attempts": result.attempts,
           "invalid_attempts": result.invalid_attempts, "card_ids": [c["card_id"] for c in cards]}
    return cards, row


def _check_failure(offered: Sequence[str]) -> Any:
    def validate(name: str, args: dict[str, Any]) -> str | None:
        if name in ("search", "click"):
            _, problem = canonical_action(name, args)
            return problem
        if args.get("status") not in _STATUSES:
            return f"status must be one of {list(_STATUSES)}"
        for block, keys in (("privileged_audit", AUDIT_FIELDS), ("deployable_abstraction", DEPLOYABLE_FIELDS)):
            value = args.get(block)
            if not isinstance(value, dict):
                return f"{block} must be an object"
            missing = [k for k in keys if k not in value]
            if missing:
                return f"{block} is missing {missing}"
            bad = [k for k in keys if value[k] is not None and not isinstance(value[k], str)]
            if bad:
                return f"{block}.{bad[0]} must be a string or null"
        if not isinstance(args.get("audit_action_summary"), str):
            return "audit_action_summary must be a string"
        if args["status"] != "NO_PROPOSAL":
            deploy = args["deployable_abstraction"]
            for key in _REQUIRED_FOR_PROPOSAL:
                if not (deploy.get(key) or "").strip():
                    return f"a proposal needs a non-blank deployable_abstraction.{key}"
            if args["status"] == "PROPOSE_REWRITE" and not (deploy.get("target_chunk_id") or "").strip():
                return "PROPOSE_REWRITE needs deployable_abstraction.target_chunk_id"
        return None

    return validate


def _collect_seen(ctx: FirewallContext, state: dict[str, Any]) -> None:
    # Products the audit saw are instance data too: their titles, brands and ids must not reach deployable text.
    ctx.add_trace({"reset": {"observation_state": state}})


async def failure_card(
    model: AnalystModel,
    environment: Any,
    record: dict[str, Any],
    *,
    max_failure_steps: int = 12,
    stage: str = "cold_start",
    active_chunk_ids: Sequence[str] = (),
    max_attempts: int = 3,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Audit one failed episode live and return ``(card, analysis row)``; card id ``failure-<episode_id>-01``.

    *environment* is an open ``ShopSimulatorClient``; every trial runs in its own session (lease),
    always released. *stage* is ``cold_start`` (REWRITE forced to NO_PROPOSAL) or ``online``
    (REWRITE must target one of *active_chunk_ids*).

    Raises:
        StructuredOutputError: a round stayed invalid after *max_attempts*.
        ShopSimulatorError / LeaseError: the environment failed.
    """
    eid = record["episode_id"]
    task_id = json_object(record.get("job")).get("task_id")
    gold = privileged_gold(record)
    firewall = context_from_traces([record])
    system = {"role": "system", "content": SYSTEM["failure"]}
    transcript: list[dict[str, Any]] = []
    trials: list[dict[str, Any]] = []
    grounded = 0
    attempts = 0
    invalid: list[dict[str, Any]] = []
    session = environment.session()
    try:
        reset = await session.reset(task_id)
        state = json_object(reset.get("observation_state"))
        _collect_seen(firewall, state)
        messages: list[dict[str, Any]] = [system, {"role": "user", "content": compact({
            "channel": "failure", "stage": stage, "active_chunk_ids": list(active_chunk_ids),
            "episode": compact_trace(record), "privileged_gold_audit": gold,
            "live_session": {"trial": 1, "task_instruction": reset.get("task_instruction"), "page": page_view(state)},
            "max_failure_steps": max_failure_steps})}]
        card_args: dict[str, Any] | None = None
        for round_no in range(1, max_failure_steps + 1):
            last = round_no == max_failure_steps
            tools = ([] if last else action_tools(state)) + [TOOLS["submit_failure_card"]]
            offered = [t["function"]["name"] for t in tools]
            result = await structured_call(model, messages, tools, validate=_check_failure(offered),
                                           max_attempts=max_attempts, what=f"failure audit of {eid} round {round_no}")
            attempts += result.attempts
            invalid += [dict(a, round=round_no) for a in result.invalid_attempts]
            if result.name == "submit_failure_card":
                card_args = result.arguments
                break
            action, _ = canonical_action(result.name, result.arguments)
            assert action is not None  # validated above
            step = await session.interact(action)
            feedback = json_object(step.get("action_feedback"))
            state = json_object(step.get("observation_state"))
            _collect_seen(firewall, state)
            if feedback.get("valid") is True:
                grounded += 1
            transcript.append({"round": round_no, "trial": len(trials) + 1, "action": action,
                               "valid": feedback.get("valid"), "reason": feedback.get("reason"),
                               "page_type": state.get("page_type")})
            observation: dict[str, Any] = {"action": action, "action_feedback": feedback, "page": page_view(state)}
            if step.get("done") is True:
                detail = json_object(step.get("reward_detail"))
                trials.append({"trial": len(trials) + 1, "reward": step.get("reward"),
                               "r_success": detail.get("r_success"), "reward_detail": detail,
                               "purchase": json_object(step.get("purchase")),
                               "termination_reason": step.get("termination_reason"),
                               "actions": [t["action"] for t in transcript if t["trial"] == len(trials) + 1]})
                await session.close()
                session = environment.session()
                reset = await session.reset(task_id)
                state = json_object(reset.get("observation_state"))
                _collect_seen(firewall, state)
                observation = {"action": action, "trial_finished": {k: trials[-1][k] for k in ("trial", "reward",
                                                                                                "r_success")},
                               "new_session": {"trial": len(trials) + 1, "page": page_view(state)}}
            call = {"id": result.call_id or f"audit-{round_no}", "type": "function",
                    "function": {"name": result.name, "arguments": compact(result.arguments)}}
            messages = messages + [{"role": "assistant", "content": None, "tool_calls": [call]},
                                   {"role": "tool", "tool_call_id": call["id"], "content": compact(observation)}]
    finally:
        await session.close()
    assert card_args is not None  # the last round offers only the submit tool
    firewall.add_trace({"final": {"goal": gold["goal"], "purchase": gold["purchase"]}})  # the privileged goal too
    deploy = {k: card_args["deployable_abstraction"].get(k) for k in DEPLOYABLE_FIELDS}
    deploy_text = "\n".join(str(deploy[k]) for k in DEPLOYABLE_FIELDS if deploy[k] and k != "target_chunk_id")
    findings = [f.to_dict() for f in check_text(deploy_text, firewall)]
    successes = [t for t in trials if t.get("r_success") == 1]
    status = card_args["status"]
    forced = None
    if status != "NO_PROPOSAL":
        if grounded == 0:
            forced = "no_valid_live_action"
        elif not successes:
            forced = "no_successful_counterfactual_trial"
        elif status == "PROPOSE_REWRITE" and stage == "cold_start":
            forced = "rewrite_during_cold_start"
        elif status == "PROPOSE_REWRITE" and deploy.get("target_chunk_id") not in set(active_chunk_ids):
            forced = "rewrite_target_not_active"
        elif findings:
            forced = "firewall_findings"
    card = {
        "schema_version": EVIDENCE_CARD_SCHEMA, "card_id": f"failure-{eid}-01", "channel": "failure",
        "episode_id": eid, "task_id": task_id, "stage": stage,
        "status": "NO_PROPOSAL" if forced else status, "proposed_status": status,
        "privileged_audit": {k: card_args["privileged_audit"].get(k) for k in AUDIT_FIELDS},
        "deployable_abstraction": deploy,
        "audit_action_summary": card_args.get("audit_action_summary", ""),
        "audit_transcript": transcript, "terminal_trials": trials,
        "successful_counterfactual_trials": len(successes), "grounded_live_actions": grounded,
        "firewall_findings": findings, "forced_no_proposal_reason": forced,
        "eligible_for_consolidation": (forced is None and status != "NO_PROPOSAL"),
    }
    row = {"episode_id": eid, "channel": "failure", "attempts": attempts, "invalid_attempts": invalid,
           "card_ids": [card["card_id"]], "trials": len(trials), "grounded_live_actions": grounded}
    return card, row
