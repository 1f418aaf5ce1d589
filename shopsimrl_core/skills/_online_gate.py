"""The online gate: paired validation of ADD and REWRITE proposals against the active bank.

The contract is runtime-semantics §17.

It reuses the pairing and estimator of ``_gate`` on a candidate pool: each current chunk is a slot
showing absent, its old version or one rewrite (mutually exclusive), each ``ADD`` a singleton slot;
rewrite winners keep their target's id in the next active bank. The winners then go through the
gates' K rule and selection rules (``_gate.top_k``, ``SELECTION_RULES``), the same code as Gate A's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl_core._hashing import fingerprint
from shopsimrl_core._versions import (
    ONLINE_ASSIGNMENTS_SCHEMA,
    ONLINE_CONTRIBUTIONS_SCHEMA,
    ONLINE_GATE_MANIFEST_SCHEMA,
    PAIRED_ESTIMATOR_FORMULA,
    PAIRED_ESTIMATOR_NAME,
)
from shopsimrl_core.documents._skills import CandidatePool, OnlineAssignments
from shopsimrl_core.skills._gate import (
    SELECTION_RULES,
    BareBaseline,
    GateAResult,
    GateDecision,
    PairedDesign,
    Runner,
    _AssignedSkills,
    _noise_fields,
    _now,
    finish_gate,
    load_gate_config,
    mask_draw,
    noise_exclusions,
    preflight_bare_run,
    require_selection_rule,
    resume_assignments,
    run_masked,
    run_summary,
    top_k,
)
from shopsimrl_core.skills._pairing import _gate_error, _load_json
from shopsimrl_core.skills._pool import build_candidate_pool, online_slots, validate_pool

__all__ = [
    "OnlineGateConfig",
    "OnlineAssignedSkills",
    "build_candidate_pool",
    "validate_pool",
    "online_slots",
    "build_online_assignments",
    "select_online",
    "run_online_gate",
]


def build_online_assignments(jobs: Sequence[Any], pool: dict[str, Any], *, mask_seed: int) -> dict[str, Any]:
    """The ``shopsimrl-online-skill-assignments-v1`` document: one uniform state per slot and episode.

    A state is absent or exactly one version, drawn as
    ``u64_be(SHA-256(...:{slot_id})[0:8]) mod (versions + 1)``.
    """
    slots = online_slots(pool)
    columns = [v for slot in slots for v in slot["versions"]]
    assignments = []
    for job in jobs:
        states: dict[str, str | None] = {}
        included: list[str] = []
        for slot in slots:
            k = mask_draw(mask_seed, job.split, job.task_id, job.sample_id, slot["slot_id"]) % (
                len(slot["versions"]) + 1
            )
            chosen = slot["versions"][k - 1] if k else None
            states[slot["slot_id"]] = chosen
            if chosen is not None:
                included.append(chosen)
        assignments.append(
            {
                "episode_id": job.episode_id,
                "task_id": job.task_id,
                "sample_id": job.sample_id,
                "seed": job.seed,
                "split": job.split,
                "mask": [1 if c in included else 0 for c in columns],
                "included_chunk_ids": included,
                "slot_states": states,
            }
        )
    core = {
        "mask_seed": mask_seed,
        "pool_sha256": pool["pool_sha256"],
        "columns": columns,
        "slots": slots,
        "assignments": assignments,
    }
    return {
        "schema_version": ONLINE_ASSIGNMENTS_SCHEMA,
        "created_at": _now(),
        **core,
        "assignment_sha256": fingerprint(core),
    }


class OnlineAssignedSkills(_AssignedSkills):
    """``SkillProvider`` for the online gate: each episode's chosen versions, in slot order (§11.4)."""

    def __init__(self, pool: dict[str, Any], assignments: dict[str, Any]) -> None:
        from shopsimrl_core.documents._skills import SkillRecord

        self._records = {s["skill_id"]: SkillRecord.model_validate(s) for s in pool["current_skills"]}
        for c in pool["candidates"]:
            self._records[c["candidate_id"]] = SkillRecord(
                skill_id=c["candidate_id"],
                version=c.get("version", "candidate"),
                content=c["content"],
                metadata=dict(c.get("metadata") or {}),
            )
        self._lookup = {
            (a["split"], a["task_id"], a["sample_id"]): list(a["included_chunk_ids"])
            for a in assignments["assignments"]
        }
        self._identity = {
            "provider": "assigned_json_skillbank",
            "bank": {
                "provider": "online_intervention_bank",
                "pool_sha256": pool["pool_sha256"],
                "skill_ids": list(assignments["columns"]),
            },
            "assignment": {
                "schema_version": assignments["schema_version"],
                "pool_sha256": pool["pool_sha256"],
                "assignment_sha256": assignments["assignment_sha256"],
                "mask_seed": assignments["mask_seed"],
            },
        }

    _kind = "online"

    def select(self, context: dict[str, Any]) -> list[dict[str, Any]]:
        """The chosen versions of this episode (runtime-semantics §11.1 records, ``selection_scope: global``)."""
        from shopsimrl_core.episode._skillbank import skill_record

        _, chosen = self._assigned(context)
        return [skill_record(self._records[i], "global") for i in chosen]


def select_online(
    coefficients: dict[str, float],
    pool: dict[str, Any],
    slots: Sequence[dict[str, Any]],
    budget: int,
    *,
    within_noise: dict[str, bool] | None = None,
) -> dict[str, Any]:
    """Selection with ADD and REWRITE (runtime-semantics §17.3): rewrite winners, then the gates' K rule.

    Rewrite winners are the family argmax of β (old version on ties) under every rule. Among the
    survivors the K rule is ``_gate.top_k``: β > 0 strictly, top *budget*; with *within_noise* (the
    ``above_noise`` rule) a survivor marked there is not eligible, and a candidate so left out gets the
    status ``within_noise`` (a current chunk left out is ``retired``, as under ``published``). Returns
    ``{"status", "rank", "winners", "selected" (ordered by (order, logical id)), "logical", "order"}``
    keyed by intervention id.
    """
    candidates = {c["candidate_id"]: c for c in pool["candidates"]}
    current_ids = [s["skill_id"] for s in pool["current_skills"]]
    logical: dict[str, str] = {}
    order: dict[str, int] = {}
    for position, sid in enumerate(current_ids, start=1):
        logical[sid], order[sid] = sid, position
    adds = sorted(c for c in candidates if candidates[c]["operation"] == "ADD")
    for cid, c in candidates.items():
        if c["operation"] == "REWRITE":
            logical[cid], order[cid] = c["target_chunk_id"], order[c["target_chunk_id"]]
    for offset, cid in enumerate(adds, start=1):
        logical[cid], order[cid] = cid, len(current_ids) + offset
    status: dict[str, str] = {}
    winners: dict[str, str] = {}
    survivors: list[str] = []
    for slot in slots:
        versions = slot["versions"]
        if len(versions) == 1:
            survivors.append(versions[0])
            continue
        winner = max(versions, key=lambda v: (coefficients[v], v == slot["old_version_id"], -versions.index(v)))
        winners[slot["slot_id"]] = winner
        survivors.append(winner)
        for v in versions:
            if v != winner:
                status[v] = "rewrite_loser"
    ranked = sorted(survivors, key=lambda v: (-coefficients[v], v))
    rank = {v: i for i, v in enumerate(ranked, start=1)}
    noisy = within_noise or {}
    chosen = top_k(ranked, coefficients, budget, noisy)
    for v in survivors:
        if v in chosen:
            status[v] = "selected"
        elif v in current_ids:
            status[v] = "retired"
        elif coefficients[v] <= 0:
            status[v] = "non_positive"
        else:
            status[v] = "within_noise" if noisy.get(v, False) else "budget_excluded"
    selected = sorted(chosen, key=lambda v: (order[v], logical[v]))
    return {
        "status": status,
        "rank": rank,
        "winners": winners,
        "selected": selected,
        "logical": logical,
        "order": order,
    }


@dataclass
class OnlineGateConfig:
    """Online gate settings (runtime-semantics §17.1; ``bootstrap_*`` are this project's additions)."""

    output_dir: Path
    experiment_config: Path
    bare_run_dir: Path
    candidate_pool_path: Path
    mask_seed: int = 20260901
    active_skill_budget: int = 10
    bootstrap_samples: int = 1000
    bootstrap_seed: int = 20260901
    confidence_level: float = 0.95
    name: str = "trace2skill-online-gate"
    selection_rule: str = "published"
    """``published`` (§17.3) or ``above_noise``: Gate A's rules (``_gate.SELECTION_RULES``), after the rewrite step."""


def run_online_gate(settings: OnlineGateConfig, *, runner: Runner | None = None, **run_kwargs: Any) -> GateAResult:
    """Run (or resume) the online validation gate of runtime-semantics §17 and write its outputs.

    Same paired design as Gate A, with rewrite slots (absent / old / one rewrite, mutually
    exclusive). Writes ``mask_assignments.json``, the masked run, ``contributions.json``,
    ``proposal_ledger.jsonl``, ``selected_skillbank.json`` (``online-<round>-selected-v1``),
    ``selected_skill.md`` and ``online_gate_manifest.json``.

    Raises:
        SkillError: pool, config, preflight, design or pairing problems (spec messages).
    """
    from shopsimrl_core.runs.planning._plan import build_plan

    out = Path(settings.output_dir)
    config = load_gate_config(settings.experiment_config, out)
    if not config.model.checkpoint_id:
        raise _gate_error(
            f"{settings.experiment_config}: the online gate requires model.checkpoint_id", code="gate-config"
        )
    if settings.active_skill_budget < 1:
        raise _gate_error("online_gate.active_skill_budget must be >= 1", code="gate-config")
    require_selection_rule(settings.selection_rule, "online_gate.selection_rule")
    pool = _load_json(Path(settings.candidate_pool_path), "candidate pool", CandidatePool)
    validate_pool(pool, str(settings.candidate_pool_path))
    plan = build_plan(config)
    baseline = preflight_bare_run(settings.bare_run_dir, plan.semantic, send_seed=config.model.send_seed)
    fresh = build_online_assignments(plan.jobs, pool, mask_seed=settings.mask_seed)
    assignments = resume_assignments(out / "mask_assignments.json", fresh, "pool, seed or job list", OnlineAssignments)
    semantic_baseline = {k: v for k, v in baseline.digest.items() if k != "run_dir"}
    block = {
        "online_validation_gate": {
            "estimator": PAIRED_ESTIMATOR_NAME,
            "bare_baseline": semantic_baseline,
            "pool_sha256": pool["pool_sha256"],
            "assignment_sha256": assignments["assignment_sha256"],
            "active_skill_budget": settings.active_skill_budget,
            "rewrite_treatment": "mutually_exclusive_absent_old_new",
        }
    }
    result = run_masked(out, config, assignments, OnlineAssignedSkills(pool, assignments), block, runner, run_kwargs)
    manifest: dict[str, Any] = {
        "schema_version": ONLINE_GATE_MANIFEST_SCHEMA,
        "created_at": _now(),
        "status": "incomplete",
        "config": {
            "name": settings.name,
            "output_dir": str(out),
            "experiment_config": str(settings.experiment_config),
            "bare_run_dir": str(settings.bare_run_dir),
            "candidate_pool_path": str(settings.candidate_pool_path),
            "mask_seed": settings.mask_seed,
            "active_skill_budget": settings.active_skill_budget,
        },
        "protocol": {
            "split": "val",
            "masking": "uniform_absent_or_one_version_per_logical_slot",
            "rewrite_treatment": "mutually_exclusive_absent_old_new",
            "selection": f"replacement_winner_then_{SELECTION_RULES[settings.selection_rule]}",
            "estimator": PAIRED_ESTIMATOR_NAME,
            "formula": PAIRED_ESTIMATOR_FORMULA,
        },
        "input": {
            "pool_sha256": pool["pool_sha256"],
            "assignment_sha256": assignments["assignment_sha256"],
            "round_id": pool.get("round_id"),
            "proposal_checkpoint": pool.get("proposal_checkpoint"),
            "evaluation_checkpoint": config.model.checkpoint_id,
            "bare_baseline": baseline.digest,
        },
        "summary": run_summary(result),
        "output": {},
    }
    design = PairedDesign(
        assignments,
        list(assignments["columns"]),
        settings.bootstrap_samples,
        settings.bootstrap_seed,
        settings.confidence_level,
        row_extra=lambda a: {"slot_states": a["slot_states"]},
    )
    return finish_gate(
        out,
        "online_gate_manifest.json",
        manifest,
        result,
        baseline,
        design,
        lambda rows, estimates, _treated: _decide(settings, pool, assignments, baseline, config, rows, estimates),
    )


def _decide(
    settings: OnlineGateConfig,
    pool: dict[str, Any],
    assignments: dict[str, Any],
    baseline: BareBaseline,
    config: Any,
    rows: list[dict[str, Any]],
    estimates: dict[str, dict[str, Any]],
) -> GateDecision:
    # The online selection (§17.3) and the documents that record it.
    from shopsimrl_core.skills._bank import build_skillbank

    columns = assignments["columns"]
    assignment_sha = assignments["assignment_sha256"]
    coefficients = estimates["reward"]["coefficients"]
    intervals = estimates["reward"].get("confidence_intervals", {})
    noise = noise_exclusions(estimates["reward"], settings.selection_rule, "online_gate.selection_rule")
    choice = select_online(coefficients, pool, assignments["slots"], settings.active_skill_budget, within_noise=noise)
    candidates = {c["candidate_id"]: c for c in pool["candidates"]}
    current = {s["skill_id"]: s for s in pool["current_skills"]}
    aux = [m for m in estimates if m != "reward"]
    contributions = [
        {
            "intervention_id": v,
            "kind": "current" if v in current else "candidate",
            "logical_chunk_id": choice["logical"][v],
            "operation": "KEEP" if v in current else candidates[v]["operation"],
            "order": choice["order"][v],
            "coefficient": coefficients[v],
            "rank": choice["rank"].get(v),
            "status": choice["status"][v],
            "auxiliary_coefficients": {m: estimates[m]["coefficients"][v] for m in aux},
            "confidence_interval": intervals.get(v),
            **_noise_fields(estimates["reward"], v),
        }
        for v in columns
    ]
    estimator = {
        "name": PAIRED_ESTIMATOR_NAME,
        "formula": PAIRED_ESTIMATOR_FORMULA,
        "fit_intercept": False,
        "baseline": "same_task_bare_validation",
        "primary_outcome": "reward",
        "rewrite_rule": "mutually_exclusive_family_argmax_old_on_tie",
        "selection_rule": f"rewrite_winners_then_{SELECTION_RULES[settings.selection_rule]}",
        "numerical_zero_tolerance": 1e-12,
    }
    contrib_doc = {
        "schema_version": ONLINE_CONTRIBUTIONS_SCHEMA,
        "created_at": _now(),
        "estimator": estimator,
        "pool_sha256": pool["pool_sha256"],
        "assignment_sha256": assignment_sha,
        "observations": len(rows),
        "active_skill_budget": settings.active_skill_budget,
        "selected_intervention_ids": choice["selected"],
        "selected_count": len(choice["selected"]),
        "replacement_winners": choice["winners"],
        "estimates": estimates,
        "contributions": contributions,
        "observations_table": rows,
        "bare_baseline": baseline.digest,
    }
    records = []
    for v in choice["selected"]:
        source = current[v] if v in current else candidates[v]
        meta = dict(source.get("metadata") or {})
        meta.update(
            {
                "validation_result": "selected",
                "estimated_effect": coefficients[v],
                "contribution_rank": choice["rank"][v],
                "selected_intervention_id": v,
                "confidence_interval": intervals.get(v),
            }
        )
        records.append(
            {
                "skill_id": choice["logical"][v],
                "version": str(source.get("version", "1" if v in current else "candidate")),
                "enabled": True,
                "content": source["content"],
                "metadata": meta,
            }
        )
    round_id = pool.get("round_id") or "round"
    semantic_baseline = {k: v for k, v in baseline.digest.items() if k != "run_dir"}
    bank = build_skillbank(
        records,
        bank_version=f"online-{round_id}-selected-v1",
        metadata={
            "round_id": round_id,
            "proposal_checkpoint": pool.get("proposal_checkpoint"),
            "pool_sha256": pool["pool_sha256"],
            "assignment_sha256": assignment_sha,
            "active_skill_budget": settings.active_skill_budget,
            "selected_count": len(choice["selected"]),
            "selected_intervention_ids": choice["selected"],
            "estimator": estimator,
            "bare_baseline": semantic_baseline,
        },
    )
    body = "\n\n".join(r["content"] for r in records) or "_The online gate found no strictly positive chunks._"
    markdown = f"# Online skills {round_id}\n\n> Active bank selected by the online gate.\n\n{body}\n"
    ledger = [
        {
            "candidate_id": c["candidate_id"],
            "operation": c["operation"],
            "target_chunk_id": c.get("target_chunk_id"),
            "failure_mechanism": (c.get("metadata") or {}).get("source_label"),
            "stage": "online",
            "proposal_checkpoint": pool.get("proposal_checkpoint"),
            "evaluation_checkpoint": config.model.checkpoint_id,
            "validation_estimator": PAIRED_ESTIMATOR_NAME,
            "bare_validation_observations_sha256": baseline.digest["observations_sha256"],
            "intervention_id": c["candidate_id"],
            "validation_result": choice["status"][c["candidate_id"]],
            "estimated_effect": coefficients[c["candidate_id"]],
            "contribution_rank": choice["rank"].get(c["candidate_id"]),
            "pool_sha256": pool["pool_sha256"],
            "assignment_sha256": assignment_sha,
            "content": c["content"],
        }
        for c in pool["candidates"]
    ]
    return GateDecision(
        selected=choice["selected"],
        contributions=contrib_doc,
        bank=bank,
        markdown=markdown,
        ledger=ledger,
        selected_key="selected_intervention_ids",
    )
