"""Online failure analysis of a training round (runtime-semantics §17.1 ``online_analysis``).

The round's FAILED train episodes are audited live with the same failure analyst as the cold start
(stage ``online``: a REWRITE must target an active chunk), and the eligible proposals become the
candidates document the round's pool is built from.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import fingerprint, json_object, sha256_file, write_json_atomic
from shopsimrl_core.skills.trace2skill._pipeline import (
    Trace2SkillConfig,
    _analyse,
    _identity,
    _now,
    _write_jsonl,
    load_train_traces,
    write_candidates,
)
from shopsimrl_core.skills.trace2skill._prompts import ONLINE_FAILURE_ANALYSIS_SCHEMA

__all__ = ["run_online_failure_analysis"]


def run_online_failure_analysis(cfg: Trace2SkillConfig, active_bank: dict[str, Any], *, round_id: str,
                                proposal_checkpoint: str, max_candidates: int = 6) -> dict[str, Any]:
    """Audit a training round's FAILED train episodes live and turn the proposals into candidates.

    Writes ``online_failure_analysis.json`` (``shopsimrl-online-failure-analysis-v1``), the cards,
    and ``trace2skill_candidates.json``, which ``build_candidate_pool`` turns into the round's pool:
    a ``PROPOSE_REWRITE`` of an active chunk carries that chunk's ``source_label`` so the pool
    builder makes it a REWRITE of it. Returns the analysis document.

    Raises:
        SkillError: bad input traces or settings; analyses that failed (rerun to retry them).
    """
    problems = cfg.problems()
    if problems:
        raise SkillError("online analysis: " + "; ".join(problems), code="trace2skill-config")
    out = Path(cfg.output_dir)
    records = load_train_traces(cfg.traces, cfg.expected_trajectories)
    active = [s for s in active_bank.get("skills", []) if s.get("enabled") is not False]
    active_ids = [s["skill_id"] for s in active]
    cards, errors = asyncio.run(_analyse(cfg, out, records, stage="online", active_chunk_ids=active_ids,
                                         channels=("failure",)))
    _write_jsonl(out / "evidence_cards.jsonl", cards)
    if errors:
        raise SkillError(f"online analysis: {len(errors)} audits failed (see {out / 'analysis_errors.jsonl'}); "
                         "rerun to retry them", code="trace2skill-analysis-errors")
    labels_by_id = {s["skill_id"]: json_object(s.get("metadata")).get("source_label") or f"chunk:{s['skill_id']}"
                    for s in active}
    proposals: list[dict[str, Any]] = []
    seen: set[str] = set()
    for card in cards:
        if not card["eligible_for_consolidation"]:
            continue
        deploy = card["deployable_abstraction"]
        content = deploy["proposed_content"].strip()
        if content in seen:
            continue
        seen.add(content)
        target = deploy.get("target_chunk_id") if card["status"] == "PROPOSE_REWRITE" else None
        proposals.append({"chunk_id": f"proposal-{len(proposals) + 1:03d}", "content": content,
                          "source_episode_ids": [card["episode_id"]], "source_card_ids": [card["card_id"]],
                          "evidence_cluster_ids": [], "operation": "REWRITE" if target else "ADD",
                          "target_chunk_id": target, "failure_mechanism": deploy.get("failure_mechanism"),
                          "label": labels_by_id.get(target) if target else None})
    proposals = proposals[:max_candidates]
    identity = _identity(cfg)
    candidates_path = write_candidates(out / "trace2skill_candidates.json", proposals, identity,
                                       {"traces_path": str(cfg.traces), "traces_sha256": sha256_file(cfg.traces)},
                                       labels=[p["label"] for p in proposals])
    document = {"schema_version": ONLINE_FAILURE_ANALYSIS_SCHEMA, "created_at": _now(), "round_id": round_id,
                "proposal_checkpoint": proposal_checkpoint, "current_skillbank_sha256": fingerprint(active_bank),
                "identity": identity, "failures_audited": len(cards),
                "eligible_cards": sum(1 for c in cards if c["eligible_for_consolidation"]),
                "proposals": [{k: p[k] for k in ("chunk_id", "operation", "target_chunk_id", "failure_mechanism",
                                                 "source_card_ids", "content")} for p in proposals],
                "candidates_path": str(candidates_path)}
    write_json_atomic(out / "online_failure_analysis.json", document)
    return document
