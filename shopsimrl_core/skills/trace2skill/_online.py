"""Online failure analysis of a training round (runtime-semantics §17.1 ``online_analysis``).

The round's FAILED train episodes are audited live with the same failure analyst as the cold start
(stage ``online``: a REWRITE must target an active chunk), and the eligible proposals become the
candidates document the round's pool is built from.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
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

__all__ = ["run_online_failure_analysis", "pending_analysis_episodes"]


def pending_analysis_episodes(training_dir: str | Path) -> list[str]:
    """The episodes a training round's triage marked "full-skill failure pending analysis", in group order.

    Reads ``<training_dir>/triage/*.json`` (``shopsimrl-grpo-triage-v1``, the training session's documents):
    the failures that even the full skill text could not fix are the online analysis's input set.

    Raises:
        SkillError (``trace2skill-input``): no triage folder, or a document that does not parse.
    """
    from shopsimrl_core.documents._base import DocumentError
    from shopsimrl_core.documents._training import GroupTriage

    folder = Path(training_dir) / "triage"
    if not folder.is_dir():
        raise SkillError(f"{folder}: no triage documents; point at a training round's out_dir",
                         code="trace2skill-input")
    episodes: list[str] = []
    for path in sorted(folder.glob("*.json")):
        try:
            triage = GroupTriage.parse(json.loads(path.read_text(encoding="utf-8")), str(path))
        except (ValueError, DocumentError) as exc:
            raise SkillError(f"{path}: not a triage document ({str(exc).splitlines()[0]})",
                             code="trace2skill-input") from None
        episodes.extend(triage.pending_analysis_episode_ids)
    return episodes


def run_online_failure_analysis(cfg: Trace2SkillConfig, active_bank: dict[str, Any], *, round_id: str,
                                proposal_checkpoint: str, max_candidates: int = 6,
                                episode_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """Audit a training round's FAILED train episodes live and turn the proposals into candidates.

    *episode_ids* restricts the audit to those episodes — a round's "full-skill failure pending analysis"
    episodes (:func:`pending_analysis_episodes`), so the next candidates come from what training could not
    learn; the document records them under ``input_episode_ids``.

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
    if episode_ids is not None:
        records = load_train_traces(cfg.traces, None, only=episode_ids)
    else:
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
                **({"input_episode_ids": list(episode_ids)} if episode_ids is not None else {}),
                "eligible_cards": sum(1 for c in cards if c["eligible_for_consolidation"]),
                "proposals": [{k: p[k] for k in ("chunk_id", "operation", "target_chunk_id", "failure_mechanism",
                                                 "source_card_ids", "content")} for p in proposals],
                "candidates_path": str(candidates_path)}
    write_json_atomic(out / "online_failure_analysis.json", document)
    return document
