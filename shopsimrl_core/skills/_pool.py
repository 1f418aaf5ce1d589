"""The online gate's candidate pool: built from the active bank and candidates, checked, slotted.

The contract is runtime-semantics §17.1–§17.2.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import fingerprint
from shopsimrl_core._versions import CANDIDATE_POOL_SCHEMA
from shopsimrl_core.documents._skills import SkillBank
from shopsimrl_core.skills._pairing import _gate_error

__all__ = ["ONLINE_POOL_MAX_DEFAULT", "build_candidate_pool", "validate_pool", "online_slots"]


def _now() -> str:
    return datetime.now(UTC).isoformat()


ONLINE_POOL_MAX_DEFAULT = 6


def build_candidate_pool(
    active_bank: SkillBank | dict[str, Any],
    candidates: dict[str, Any],
    *,
    round_id: str,
    proposal_checkpoint: str,
    max_candidates: int = ONLINE_POOL_MAX_DEFAULT,
) -> dict[str, Any]:
    """A ``shopsimrl-skill-candidate-pool-v1`` pool from the active bank and a candidates document.

    Accepted candidates become ``REWRITE`` of the active chunk mined from the same failure label
    (``metadata.source_label``) and ``ADD`` otherwise; candidates whose content is already active
    are skipped. At most *max_candidates*, in candidates-document order; ids ``cand-001`` ….
    *active_bank* is the model ``load_skillbank`` returns or a parsed bank object.

    Raises:
        ConfigError: *active_bank* breaks a §11.2 rule.
    """
    from shopsimrl_core.episode._skillbank import as_skillbank, bank_sha256

    bank = as_skillbank(active_bank, "active SkillBank")
    current = [s for s in bank.skills if s.enabled is not False]
    current_skills: list[dict[str, Any]] = [{"skill_id": s.skill_id, "version": str(s.version), "content": s.content,
                       "metadata": dict(s.metadata or {})} for s in current]
    by_label = {}
    for s in current_skills:
        label = s["metadata"].get("source_label")
        if label and label not in by_label:
            by_label[label] = s["skill_id"]
    active_contents = {s["content"] for s in current_skills}
    pool_candidates: list[dict[str, Any]] = []
    for cand in candidates.get("candidates", []):
        if cand.get("status") != "accepted" or cand["content"] in active_contents:
            continue
        if len(pool_candidates) >= max_candidates:
            break
        target = by_label.get(cand.get("source_label"))
        pool_candidates.append({
            "candidate_id": f"cand-{len(pool_candidates) + 1:03d}",
            "operation": "REWRITE" if target else "ADD",
            "target_chunk_id": target,
            "content": cand["content"],
            "version": "candidate",
            "metadata": {"source_label": cand.get("source_label"), "source_candidate_id": cand.get("candidate_id"),
                         "evidence_cluster_ids": cand.get("evidence_cluster_ids", [])},
        })
    core = {"schema_version": CANDIDATE_POOL_SCHEMA, "round_id": round_id, "proposal_checkpoint": proposal_checkpoint,
            "current_skillbank_sha256": bank_sha256(bank), "current_skills": current_skills,
            "candidates": pool_candidates}
    return {**core, "created_at": _now(), "pool_sha256": fingerprint(core)}


def validate_pool(pool: dict[str, Any], source: str = "<pool>") -> None:
    """Pool validation of runtime-semantics §17.1.

    Raises:
        SkillError (``pool-invalid``): the first violated rule.
    """
    def bad(message: str) -> SkillError:
        return _gate_error(f"{source}: {message}", code="pool-invalid")

    core = {k: v for k, v in pool.items() if k not in ("created_at", "pool_sha256")}
    if pool.get("pool_sha256") != fingerprint(core):
        raise bad("pool_sha256 does not match the pool's contents")
    ids = [s.get("skill_id") for s in pool.get("current_skills", [])]
    if len(set(ids)) != len(ids) or not all(isinstance(s.get("content"), str) and s["content"].strip()
                                              for s in pool.get("current_skills", [])):
        raise bad("current_skills ids must be unique with non-blank content")
    cids = [c.get("candidate_id") for c in pool.get("candidates", [])]
    if len(set(cids)) != len(cids) or set(cids) & set(ids):
        raise bad("candidate ids must be unique and differ from active ids")
    for c in pool.get("candidates", []):
        if (
            c.get("operation") not in ("ADD", "REWRITE")
            or not isinstance(c.get("content"), str)
            or not c["content"].strip()
        ):
            raise bad(f"candidate {c.get('candidate_id')}: operation must be ADD or REWRITE with non-blank content")
        if c["operation"] == "ADD" and c.get("target_chunk_id"):
            raise bad(f"candidate {c['candidate_id']}: ADD must have no target")
        if c["operation"] == "REWRITE" and c.get("target_chunk_id") not in ids:
            raise bad(f"candidate {c['candidate_id']}: REWRITE must target an active chunk id")


def online_slots(pool: dict[str, Any]) -> list[dict[str, Any]]:
    """Slots of runtime-semantics §17.2, in order.

    Each current chunk (old version, then its rewrites by candidate id), then each ADD candidate as
    a singleton slot, in candidate-id order.
    """
    rewrites: dict[str, list[str]] = {}
    adds: list[str] = []
    for c in sorted(pool["candidates"], key=lambda c: c["candidate_id"]):
        if c["operation"] == "REWRITE":
            rewrites.setdefault(c["target_chunk_id"], []).append(c["candidate_id"])
        else:
            adds.append(c["candidate_id"])
    slots = [
        {
            "slot_id": s["skill_id"],
            "old_version_id": s["skill_id"],
            "versions": [s["skill_id"]] + rewrites.get(s["skill_id"], []),
        }
        for s in pool["current_skills"]
    ]
    slots += [{"slot_id": cid, "old_version_id": None, "versions": [cid]} for cid in adds]
    return slots
