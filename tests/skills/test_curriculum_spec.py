"""The curriculum follows the published shopsimrl-skill-curriculum-v1 documents (runtime-semantics §19.2)."""

from __future__ import annotations

import pytest

from shopsimrl_core._hashing import fingerprint
from shopsimrl_core.skills._curriculum import build_curriculum

SCALE = 0.0749709  # the published round-000 scale, to the digits §19.2 gives
PUBLISHED_RHO = (0.4733805357, 0.2001840055, 0.8999999999)


def _bank() -> dict:
    # Effects that give the published ρ under ρ = 0.2 + 0.7·effect/scale, the largest being the scale.
    effects = [(rho - 0.2) / 0.7 * SCALE for rho in PUBLISHED_RHO[:2]] + [SCALE]
    return {"schema_version": "shopsimrl-skillbank-v1", "skills": [
        {"skill_id": f"chunk-{i}", "version": "active-1", "enabled": True, "content": f"技能 {i}",
         "metadata": {"estimated_effect": e}} for i, e in enumerate(effects)]}


def test_the_published_round_000_vector() -> None:
    state = build_curriculum(_bank(), round_id="round-000")
    assert state["skill_free_probability"] == 0.2
    mapping = state["source"]["probability_mapping"]
    assert mapping == {"name": "clipped_linear_positive_contribution", "rho_min": 0.2, "rho_max": 0.9,
                       "contribution_scale": SCALE, "scale_source": "largest_active_contribution"}
    rhos = [c["inclusion_probability"] for c in state["chunks"]]
    assert rhos[:2] == pytest.approx(PUBLISHED_RHO[:2], abs=1e-10)
    assert rhos[2] == 0.8999999999999999  # 0.2 + 0.7·1.0 in floats, as published ("0.8999999999…")
    assert str(rhos[2]).startswith("0.8999999999")


def test_chunks_hold_only_published_keys_and_the_state_id_hashes_the_core() -> None:
    state = build_curriculum(_bank(), round_id="round-000")
    assert list(state["chunks"][0]) == ["skill_id", "version", "content", "metadata", "contribution",
                                        "inclusion_probability"]
    # The published core: schema_version and created_at stand outside what state_id hashes.
    unhashed = ("schema_version", "created_at", "state_id")
    assert state["state_id"] == fingerprint({k: v for k, v in state.items() if k not in unhashed})
    assert build_curriculum(_bank(), round_id="round-000", created_at="2026-09-03T13:37:16.601797+00:00")[
        "state_id"] == state["state_id"]
    given = build_curriculum(_bank(), round_id="round-000", contribution_scale=0.1)
    assert given["source"]["probability_mapping"]["scale_source"] == "given"
    assert given["state_id"] != state["state_id"]
