"""The published gate rounds, re-decided by our gates (issue 23, acceptance 4; runtime-semantics §15–§17).

``tests/core/published/gates.json`` holds the numbers of the four published online gates
(``artifacts/round-00N/gate/contributions.json``, N = 0..3) and of the cold-start Gate A
(``artifacts/cold-start/selected_skillbank.json`` and its draft ``initial_skillbank.json``): ids,
budgets K, the reward coefficients in column order, each intervention's rank and status, the selected
set in order, the replacement winners, the three reward means, and per validation task (400, the
same ids every round, ``sample_id`` 0) the masked and the bare reward. The masks are not stored:
``build_online_assignments`` regenerates them from the published ``mask_seed``, and the refit below
only reproduces the published coefficients if it does so exactly.

What determines a published selection is the reward coefficients, the slots (current chunks, their
REWRITEs, the ADDs) and K; the tests feed exactly that to ``select_online`` / ``select_chunks``, the
functions the gates call, under the default ``published`` rule. The refit tests go one step further
back: outcomes → our masks → our OLS → the published coefficients, bit for bit, and the same
selection. ``above_noise`` shows the comparison has teeth: on these data it keeps out every
published selection (each coefficient is within the sign-flip noise bar), so it cannot pass them.

The cold-start Gate A published no contributions document: only the ten selected chunks' effects and
ranks (in the selected bank). The six unselected drafts' coefficients are unknown; the test fills
them with values that cannot reach the top ten (zero, or positive but below the smallest selected)
and checks our ranking and draft-order injection on the published ten.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from shopsimrl_core.runs import EpisodeJob
from shopsimrl_core.skills._gate import SELECTION_RULES, estimate, noise_exclusions
from shopsimrl_core.skills._gate_a import GateAConfig, select_chunks
from shopsimrl_core.skills._online_gate import (
    OnlineGateConfig,
    build_online_assignments,
    online_slots,
    select_online,
)

NUMBERS = Path(__file__).parents[1] / "core" / "published" / "gates.json"


def _numbers() -> dict[str, Any]:
    numbers: dict[str, Any] = json.loads(NUMBERS.read_text(encoding="utf-8"))
    return numbers


def _rounds() -> list[dict[str, Any]]:
    rounds: list[dict[str, Any]] = _numbers()["online_rounds"]
    return rounds


def _pool(published: dict[str, Any]) -> dict[str, Any]:
    # A candidate pool of ids only: selection and slots never read content.
    return {
        "pool_sha256": "published-numbers",
        "current_skills": [{"skill_id": s} for s in published["current_skill_ids"]],
        "candidates": [
            {"candidate_id": c, "operation": op, "target_chunk_id": target} for c, op, target in published["candidates"]
        ],
    }


def _rows(published: dict[str, Any], *, mask_seed: int | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """The published observation table rebuilt: our masks, the published outcomes, in task order."""
    numbers = _numbers()
    jobs = [EpisodeJob(t, numbers["sample_id"], t, numbers["split"]) for t in numbers["task_ids"]]
    seed = numbers["mask_seed"] if mask_seed is None else mask_seed
    assignments = build_online_assignments(jobs, _pool(published), mask_seed=seed)
    rows = [
        {
            "task_id": job.task_id,
            "mask": a["mask"],
            "reward": reward,
            "bare_reward": bare,
            "delta_reward": reward - bare,
            "reward_detail": {},
            "bare_reward_detail": {},
            "delta_reward_detail": {},
        }
        for job, a, (reward, bare) in zip(jobs, assignments["assignments"], published["outcomes"], strict=True)
    ]
    return assignments["columns"], rows


def _assert_published_selection(choice: dict[str, Any], published: dict[str, Any], slots: list[dict[str, Any]]) -> None:
    for intervention, rank, status in published["contributions"]:
        assert (intervention, choice["rank"].get(intervention), choice["status"][intervention]) == (
            intervention,
            rank,
            status,
        )
    assert choice["selected"] == published["selected_intervention_ids"]
    # The published document lists a winner for every slot; ours only for slots with rewrites.
    families = {s["slot_id"] for s in slots if len(s["versions"]) > 1}
    winners = published["replacement_winners"]
    assert choice["winners"] == {slot: w for slot, w in winners.items() if slot in families}
    assert {slot: w for slot, w in winners.items() if slot not in families} == {
        s["slot_id"]: s["slot_id"] for s in slots if s["slot_id"] not in families
    }


def test_the_gate_defaults_are_the_published_settings() -> None:
    numbers = _numbers()
    online = {f.name: f.default for f in dataclasses.fields(OnlineGateConfig)}
    gate_a = {f.name: f.default for f in dataclasses.fields(GateAConfig)}
    assert online["selection_rule"] == gate_a["selection_rule"] == "published"
    assert online["mask_seed"] == gate_a["mask_seed"] == numbers["mask_seed"]
    assert {r["active_skill_budget"] for r in numbers["online_rounds"]} == {online["active_skill_budget"]}
    assert {r["selection_rule"] for r in numbers["online_rounds"]} == {
        f"rewrite_winners_then_{SELECTION_RULES['published']}"
    }


@pytest.mark.parametrize("published", _rounds(), ids=lambda r: r["round_id"])
def test_published_coefficients_select_the_published_interventions(published: dict[str, Any]) -> None:
    pool = _pool(published)
    slots = online_slots(pool)
    coefficients = dict(published["coefficients"])
    assert [v for s in slots for v in s["versions"]] == list(coefficients)  # the published column order
    choice = select_online(coefficients, pool, slots, published["active_skill_budget"])
    _assert_published_selection(choice, published, slots)


@pytest.mark.parametrize("published", _rounds(), ids=lambda r: r["round_id"])
def test_refit_on_our_masks_gives_the_published_coefficients_bit_for_bit(published: dict[str, Any]) -> None:
    columns, rows = _rows(published)
    assert columns == [c for c, _ in published["coefficients"]]
    reward = estimate(rows, columns, bootstrap_samples=0, noise_samples=0)["reward"]
    assert reward["coefficients"] == dict(published["coefficients"])  # float ==: bit for bit
    assert (reward["masked_mean"], reward["bare_mean"], reward["delta_mean"]) == (
        published["masked_mean"],
        published["bare_mean"],
        published["delta_mean"],
    )
    # End to end: outcomes → masks → OLS → the published decision.
    pool = _pool(published)
    slots = online_slots(pool)
    choice = select_online(reward["coefficients"], pool, slots, published["active_skill_budget"])
    _assert_published_selection(choice, published, slots)


def test_another_mask_seed_does_not_reproduce_the_coefficients() -> None:
    # The refit above holds only because our masks are the published ones.
    published = _rounds()[0]
    columns, rows = _rows(published, mask_seed=_numbers()["mask_seed"] + 1)
    coefficients = estimate(rows, columns, bootstrap_samples=0, noise_samples=0)["reward"]["coefficients"]
    assert all(coefficients[c] != b for c, b in published["coefficients"])


@pytest.mark.parametrize("published", _rounds(), ids=lambda r: r["round_id"])
def test_above_noise_does_not_reproduce_the_published_selection(published: dict[str, Any]) -> None:
    columns, rows = _rows(published)
    reward = estimate(rows, columns, bootstrap_samples=0)["reward"]  # the default 1000 sign flips
    noise = noise_exclusions(reward, "above_noise", "online_gate.selection_rule")
    assert noise is not None
    pool = _pool(published)
    choice = select_online(
        reward["coefficients"], pool, online_slots(pool), published["active_skill_budget"], within_noise=noise
    )
    # The rule can only keep chunks out; here it keeps out published selections.
    assert set(choice["selected"]) < set(published["selected_intervention_ids"])
    dropped = set(published["selected_intervention_ids"]) - set(choice["selected"])
    assert all(noise[v] for v in dropped)


@pytest.mark.parametrize("fill", ["zero", "positive_below_the_tenth"])
def test_gate_a_ranks_and_injects_the_published_ten(fill: str) -> None:
    gate_a = _numbers()["gate_a"]
    effects = {c: effect for c, effect, _ in gate_a["selected"]}
    smallest = min(effects.values())
    unknown = [c for c in gate_a["draft_order"] if c not in effects]
    assert len(unknown) == len(gate_a["draft_order"]) - gate_a["active_skill_budget"]
    coefficients = {**{c: 0.0 if fill == "zero" else smallest / (2 + i) for i, c in enumerate(unknown)}, **effects}
    selection = select_chunks(coefficients, gate_a["draft_order"], gate_a["active_skill_budget"])
    assert selection["selected"] == [c for c, _, _ in gate_a["selected"]]  # draft order, as published
    assert {c: selection["rank"][c] for c in effects} == {c: rank for c, _, rank in gate_a["selected"]}
    assert {selection["status"][c] for c in effects} == {"selected"}
