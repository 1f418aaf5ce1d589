"""The frozen skill curriculum of a training round (``shopsimrl-skill-curriculum-v1``, runtime-semantics §19.2).

Built once from the round's selected SkillBank (the online gate's output, whose records carry
``metadata.estimated_effect``) and then frozen: its ``state_id`` is the fingerprint of its core
fields, and every rollout group's skill assignment is a pure function of ``(seed, state_id,
group_key)``, so the same state always assigns the same chunks to the same group.

- The core is ``{round_id, seed, skill_free_probability, chunks, source}``, as in the published
  rounds: ``schema_version`` and ``created_at`` stand beside it, unhashed, so a published document's
  ``state_id`` is reproduced from its selected SkillBank and parameters
  (tests/skills/test_published_curriculum.py) whenever it was written.

- ``ρ_c = clip(ρ_min + (ρ_max − ρ_min) · effect_c / scale, ρ_min, ρ_max)``; ``scale`` is the largest
  active effect (``scale_source: largest_active_contribution``, the published name) unless
  ``contribution_scale`` is given (``given``; mapping ``clipped_linear_positive_contribution``). The
  top chunk's ρ is therefore ``0.2 + 0.7 · 1.0 = 0.8999999999999999``, as published.
- A group is skill-free when ``draw("skill-free") < q``; otherwise chunk *c* is included when
  ``draw("chunk:<c>") < ρ_c``, with ``draw(x) = u64_be(SHA-256("{seed}:{state_id}:{group_key}:{x}")[0:8]) / 2⁶⁴``.
  Modes: ``skill_free``, ``assisted`` (≥ 1 chunk) and ``assisted_empty`` (no chunk drawn).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from shopsimrl_core._clock import utc_now
from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import fingerprint, write_json_atomic

__all__ = [
    "CURRICULUM_SCHEMA",
    "CurriculumSkills",
    "build_curriculum",
    "curriculum_core",
    "assign_group",
    "write_curriculum",
]

CURRICULUM_SCHEMA = "shopsimrl-skill-curriculum-v1"
_MAPPING = "clipped_linear_positive_contribution"
_CORE_KEYS = ("round_id", "seed", "skill_free_probability", "chunks", "source")


def _effect(record: dict[str, Any]) -> float:
    value = (record.get("metadata") or {}).get("estimated_effect")
    if isinstance(value, dict):  # some banks store the estimate block, not the number
        value = value.get("reward", value.get("coefficient"))
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def build_curriculum(
    bank: dict[str, Any],
    *,
    round_id: str,
    skillbank_path: str | Path | None = None,
    seed: int = 20260901,
    skill_free_probability: float = 0.2,
    rho_min: float = 0.2,
    rho_max: float = 0.9,
    contribution_scale: float | None = None,
    created_at: str | None = None,
) -> dict[str, Any]:
    """The frozen curriculum state of *bank*'s enabled chunks (document order).

    *skillbank_path* is recorded as given (``str`` of it, never resolved), so a published round's
    document, whose ``source.skillbank_path`` names the publisher's file, is rebuilt by passing that
    text. *created_at* (default now) is the one key that differs between two builds of the same
    inputs; it is not hashed.

    Raises:
        SkillError (``curriculum-invalid``): q or ρ bounds outside [0, 1], ρ_min > ρ_max, a
            non-positive scale, or a bank with no enabled chunk.
    """
    if not 0.0 <= skill_free_probability <= 1.0 or not 0.0 <= rho_min <= rho_max <= 1.0:
        raise SkillError(
            f"curriculum: need 0 <= q <= 1 and 0 <= rho_min <= rho_max <= 1 (q={skill_free_probability}, "
            f"rho=[{rho_min}, {rho_max}])",
            code="curriculum-invalid",
        )
    active = [s for s in bank.get("skills", []) if s.get("enabled") is not False]
    if not active:
        raise SkillError(
            "curriculum: the selected bank has no enabled chunk; nothing to schedule", code="curriculum-invalid"
        )
    effects = [_effect(s) for s in active]
    if contribution_scale is None:
        scale, source = max(effects), "largest_active_contribution"  # the published documents' name
    else:
        scale, source = float(contribution_scale), "given"
    if scale <= 0:
        raise SkillError(
            f"curriculum: contribution scale must be > 0, got {scale} (no chunk has a positive "
            "effect; pass contribution_scale)",
            code="curriculum-invalid",
        )
    chunks = []
    for record, effect in zip(active, effects):
        rho = min(rho_max, max(rho_min, rho_min + (rho_max - rho_min) * effect / scale))
        # Only the skill fields and the two curriculum numbers: every key is hashed into state_id, so
        # a key the published documents lack (e.g. content_sha256) would change every state_id.
        chunks.append(
            {
                "skill_id": record["skill_id"],
                "version": str(record.get("version", "1")),
                "content": record["content"],
                "metadata": dict(record.get("metadata") or {}),
                "contribution": effect,
                "inclusion_probability": rho,
            }
        )
    # The hashed core: exactly the published one (schema_version and created_at are outside it).
    core = {
        "round_id": round_id,
        "seed": seed,
        "skill_free_probability": skill_free_probability,
        "chunks": chunks,
        "source": {
            "skillbank_path": str(skillbank_path) if skillbank_path is not None else None,
            "skillbank_sha256": fingerprint(bank),
            "probability_mapping": {
                "name": _MAPPING,
                "rho_min": rho_min,
                "rho_max": rho_max,
                "contribution_scale": scale,
                "scale_source": source,
            },
        },
    }
    # The published key order: schema_version, created_at, the core, state_id.
    return {
        "schema_version": CURRICULUM_SCHEMA,
        "created_at": created_at if created_at is not None else utc_now(),
        **core,
        "state_id": fingerprint(core),
    }


def curriculum_core(state: dict[str, Any]) -> dict[str, Any]:
    """The keys of a curriculum document that ``state_id`` fingerprints, in document order."""
    return {key: state[key] for key in _CORE_KEYS if key in state}


def _draw(state: dict[str, Any], group_key: str, what: str) -> float:
    text = f"{state['seed']}:{state['state_id']}:{group_key}:{what}"
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2**64


def assign_group(state: dict[str, Any], group_key: str) -> dict[str, Any]:
    """``{mode, included_chunk_ids}`` of one rollout group (all samples of a prompt share it)."""
    if _draw(state, group_key, "skill-free") < state["skill_free_probability"]:
        return {"mode": "skill_free", "included_chunk_ids": []}
    included = [
        c["skill_id"]
        for c in state["chunks"]
        if _draw(state, group_key, f"chunk:{c['skill_id']}") < c["inclusion_probability"]
    ]
    return {"mode": "assisted" if included else "assisted_empty", "included_chunk_ids": included}


def write_curriculum(state: dict[str, Any], path: str | Path) -> Path:
    """Write the state as a pretty JSON document, atomically."""
    return write_json_atomic(path, state)


class CurriculumSkills:
    """The skill provider of one rollout group: the curriculum chunks its assignment includes, in curriculum order.

    Every episode of the group gets the same records (the group never mixes skill masks); the identity names the
    state and the included chunks, so a trace says which skills its prompt carried.
    """

    def __init__(self, state: dict[str, Any] | None, included_chunk_ids: list[str], *, mode: str = "assisted") -> None:
        chunks = (state or {}).get("chunks", [])
        known = {c["skill_id"] for c in chunks}
        unknown = [c for c in included_chunk_ids if c not in known]
        if unknown:
            raise SkillError(f"curriculum: chunk(s) {', '.join(unknown)} are not in state "
                             f"{(state or {}).get('state_id')!r}", code="curriculum-invalid")
        wanted = set(included_chunk_ids)
        self._records = [_chunk_record(c) for c in chunks if c["skill_id"] in wanted]
        self._identity = {"provider": "skill_curriculum", "state_id": (state or {}).get("state_id"), "mode": mode,
                          "included_chunk_ids": [r["skill_id"] for r in self._records]}

    @property
    def identity(self) -> dict[str, Any]:
        """``{provider: skill_curriculum, state_id, mode, included_chunk_ids}``."""
        return dict(self._identity)

    def select(self, context: dict[str, Any]) -> list[dict[str, Any]]:
        """The group's chunk records (§11.1 form), the same for every episode of the group."""
        return [dict(r, metadata=dict(r["metadata"])) for r in self._records]


def _chunk_record(chunk: dict[str, Any]) -> dict[str, Any]:
    metadata = dict(chunk.get("metadata") or {})
    metadata["selection_scope"] = "global"
    return {"skill_id": chunk["skill_id"], "content": chunk["content"], "version": str(chunk.get("version", "1")),
            "metadata": metadata, "content_sha256": fingerprint(chunk["content"])}
