"""Gate A: choose which draft chunks to keep with a paired, randomised validation run (runtime-semantics §16).

Every val episode is run once with a random half of the draft chunks (a deterministic mask per
episode and chunk, §16.2) and paired with its bare run (``_gate``). Chunks with a strictly
positive reward coefficient are kept (by the ``above_noise`` rule only those above the noise bar), at
most ``active_skill_budget`` of them, and injected in draft order (§16.3); the rule is ``_gate``'s.

Resumable: the masked run is an ordinary run directory (``output_dir``), so rerunning the gate
reruns only incomplete episodes; the assignment file is reused when identical and refused when not.

Why one module of about 500 lines: it is one protocol end to end (settings, draft checks, masks,
the assigned provider, the plan printout, the run and its decision documents); the parts shared
with the online gate already live in ``_gate`` and ``_pairing``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl_core._hashing import fingerprint
from shopsimrl_core._versions import (
    CHUNK_CONTRIBUTIONS_SCHEMA,
    GATE_A_MANIFEST_SCHEMA,
    INITIAL_DRAFT_SCHEMA,
    MASK_ASSIGNMENTS_SCHEMA,
    PAIRED_ESTIMATOR_FORMULA,
    PAIRED_ESTIMATOR_NAME,
    SKILLBANK_SCHEMA,
)
from shopsimrl_core.documents._skills import InitialDraft, MaskAssignments, SkillBank
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

__all__ = [
    "GateAConfig",
    "AssignedSkillBank",
    "build_assignments",
    "select_chunks",
    "run_gate_a",
    "plan_gate_a",
]

MASK_PROBABILITY = 0.5
_THRESHOLD = 1 << 63  # int(0.5 · 2⁶⁴)
SELECTED_BANK_VERSION = "cold-start-gate-a-selected-v2"


def build_assignments(
    jobs: Sequence[Any], chunk_ids: Sequence[str], *, mask_seed: int, draft_sha256: str
) -> dict[str, Any]:
    """The ``shopsimrl-chunk-mask-assignments-v1`` document for *jobs* (``EpisodeJob`` objects).

    Deterministic: ``assignment_sha256`` depends only on the seed, the draft and the jobs.
    """
    assignments = []
    for job in jobs:
        mask = [
            1 if mask_draw(mask_seed, job.split, job.task_id, job.sample_id, c) < _THRESHOLD else 0 for c in chunk_ids
        ]
        assignments.append(
            {
                "episode_id": job.episode_id,
                "task_id": job.task_id,
                "sample_id": job.sample_id,
                "seed": job.seed,
                "split": job.split,
                "mask": mask,
                "included_chunk_ids": [c for c, bit in zip(chunk_ids, mask) if bit],
            }
        )
    core = {
        "mask_seed": mask_seed,
        "mask_probability": MASK_PROBABILITY,
        "draft_sha256": draft_sha256,
        "chunk_ids": list(chunk_ids),
        "assignments": assignments,
    }
    return {
        "schema_version": MASK_ASSIGNMENTS_SCHEMA,
        "created_at": _now(),
        **core,
        "assignment_sha256": fingerprint(core),
    }


class AssignedSkillBank(_AssignedSkills):
    """A ``SkillProvider`` that injects each episode's pre-assigned chunks (runtime-semantics §11.4).

    Looks up ``(split, task_id, sample_id)`` in the assignment file, runs the ordinary selection
    on the bank and keeps the assigned ids in bank order.

    Raises (from ``select``):
        SkillError: an episode missing from the assignments, or an assigned chunk that is disabled
            or out of scope for the task.
    """

    def __init__(self, bank: SkillBank | dict[str, Any], assignments: dict[str, Any]) -> None:
        from shopsimrl_core.episode._skillbank import JsonSkillBank

        self._bank = JsonSkillBank(bank)
        self._lookup: dict[tuple[str, int, int], list[str]] = {}
        for row in assignments["assignments"]:
            ids = row["included_chunk_ids"]
            if len(set(ids)) != len(ids) or set(ids) - set(assignments["chunk_ids"]):
                raise _gate_error(f"assignment {row['episode_id']}: duplicate or unknown chunk ids {ids}")
            self._lookup[(row["split"], row["task_id"], row["sample_id"])] = list(ids)
        self._identity = {
            "provider": "assigned_json_skillbank",
            "bank": self._bank.identity,
            "assignment": {
                "schema_version": assignments["schema_version"],
                "mask_seed": assignments["mask_seed"],
                "mask_probability": assignments["mask_probability"],
                "draft_sha256": assignments["draft_sha256"],
                "assignment_sha256": assignments["assignment_sha256"],
                "episodes": len(assignments["assignments"]),
            },
        }

    _kind = "mask"

    def select(self, context: dict[str, Any]) -> list[dict[str, Any]]:
        """The assigned chunks of this episode, in bank order."""
        key, wanted = self._assigned(context)
        selected = [s for s in self._bank.select(context) if s["skill_id"] in wanted]
        missing = set(wanted) - {s["skill_id"] for s in selected}
        if missing:
            raise _gate_error(f"assigned chunks {sorted(missing)} are disabled or out of scope for task {key[1]}")
        return selected


def select_chunks(
    coefficients: dict[str, float],
    draft_order: Sequence[str],
    budget: int,
    *,
    within_noise: dict[str, bool] | None = None,
) -> dict[str, Any]:
    """Rank by ``(−β, chunk_id)``, keep the gates' K rule (``_gate.top_k``), inject in draft order (§16.3).

    With *within_noise* (the ``above_noise`` rule) a positive chunk marked there is not eligible and
    gets the status ``within_noise``; ranks stay those of §16.3.
    """
    ranked = sorted(draft_order, key=lambda c: (-coefficients[c], c))
    rank = {c: i for i, c in enumerate(ranked, start=1)}
    noisy = within_noise or {}
    chosen = set(top_k(ranked, coefficients, budget, noisy))

    def status(c: str) -> str:
        if c in chosen:
            return "selected"
        if coefficients[c] <= 0:
            return "non_positive"
        return "within_noise" if noisy.get(c, False) else "budget_excluded"

    return {"rank": rank, "status": {c: status(c) for c in draft_order},
            "selected": [c for c in draft_order if c in chosen]}


# --------------------------------------------------------------------------- the gate


@dataclass
class GateAConfig:
    """Gate A settings (runtime-semantics §16.1 keys; ``bootstrap_*`` are this project's additions)."""

    output_dir: Path
    experiment_config: Path
    bare_run_dir: Path
    draft_path: Path
    draft_skillbank_path: Path | None = None
    mask_seed: int = 20260901
    mask_probability: float = 0.5
    active_skill_budget: int | None = None
    bootstrap_samples: int = 1000
    bootstrap_seed: int = 20260901
    confidence_level: float = 0.95
    name: str = "trace2skill-gate-a"
    selection_rule: str = "published"
    """``published`` (§16.3) or ``above_noise`` (see ``_gate.SELECTION_RULES``)."""


def _check_draft(draft: dict[str, Any], bank: SkillBank, source: Path) -> list[str]:
    if draft.get("schema_version") != INITIAL_DRAFT_SCHEMA:
        raise _gate_error(f"{source}: schema_version must be {INITIAL_DRAFT_SCHEMA}", code="gate-input")
    chunks = draft.get("chunks") or []
    if not 1 <= len(chunks) <= 16:
        raise _gate_error(f"{source}: a draft needs 1-16 chunks (got {len(chunks)})", code="gate-input")
    ids = [c.get("chunk_id") for c in chunks]
    if len(set(ids)) != len(ids) or not all(isinstance(i, str) and i for i in ids):
        raise _gate_error(f"{source}: chunk ids must be unique and non-empty", code="gate-input")
    if [c.get("order") for c in chunks] != list(range(1, len(chunks) + 1)):
        raise _gate_error(f"{source}: chunk order must run 1..{len(chunks)} without gaps", code="gate-input")
    bank_ids = [s.skill_id for s in bank.skills]
    if bank_ids != ids or not all((s.metadata or {}).get("draft_only") is True for s in bank.skills):
        raise _gate_error(
            f"{source}: draft SkillBank ids must equal the draft chunk ids in order, all draft_only", code="gate-input"
        )
    return ids


@dataclass
class _PreparedGateA:
    out: Path
    config: Any
    plan: Any
    draft: dict[str, Any]
    draft_path: Path
    bank: SkillBank
    bank_path: Path
    chunk_ids: list[str]
    budget: int
    draft_sha: str
    baseline: BareBaseline
    assignments: dict[str, Any]


def _prepare_gate_a(settings: GateAConfig) -> _PreparedGateA:
    # Everything before the first rollout: config, draft, preflight, assignments, design check.
    from shopsimrl_core.episode._skillbank import load_skillbank
    from shopsimrl_core.runs.planning._plan import build_plan

    out = Path(settings.output_dir)
    if settings.mask_probability != MASK_PROBABILITY:
        raise _gate_error(f"gate_a.mask_probability must be 0.5 (got {settings.mask_probability})", code="gate-config")
    require_selection_rule(settings.selection_rule, "gate_a.selection_rule")
    config = load_gate_config(settings.experiment_config, out)
    draft_path = Path(settings.draft_path)
    draft = _load_json(draft_path, "initial skill draft", InitialDraft)
    bank_path = Path(settings.draft_skillbank_path or draft_path.parent / "initial_skillbank.json")
    bank = load_skillbank(bank_path)
    chunk_ids = _check_draft(draft, bank, draft_path)
    budget = (
        settings.active_skill_budget if settings.active_skill_budget is not None else draft.get("active_skill_budget")
    )
    if settings.active_skill_budget is not None and draft.get("active_skill_budget") not in (
        None,
        settings.active_skill_budget,
    ):
        raise _gate_error(
            "gate_a.active_skill_budget differs from the draft's; set them equal or leave the gate's null",
            code="gate-config",
        )
    if not isinstance(budget, int) or not 1 <= budget <= len(chunk_ids):
        raise _gate_error(f"active_skill_budget must be 1..{len(chunk_ids)} (got {budget})", code="gate-config")
    draft_sha = fingerprint(draft)
    plan = build_plan(config)
    baseline = preflight_bare_run(settings.bare_run_dir, plan.semantic, send_seed=config.model.send_seed)
    fresh = build_assignments(plan.jobs, chunk_ids, mask_seed=settings.mask_seed, draft_sha256=draft_sha)
    assignments = resume_assignments(out / "mask_assignments.json", fresh, "draft, seed or job list", MaskAssignments)
    return _PreparedGateA(
        out, config, plan, draft, draft_path, bank, bank_path, chunk_ids, budget, draft_sha, baseline, assignments
    )


def _gate_a_block(p: _PreparedGateA, settings: GateAConfig) -> dict[str, Any]:
    semantic_baseline = {k: v for k, v in p.baseline.digest.items() if k != "run_dir"}
    return {
        "trace2skill_gate": {
            "estimator": PAIRED_ESTIMATOR_NAME,
            "bare_baseline": semantic_baseline,
            "gate": "A",
            "draft_sha256": p.draft_sha,
            "assignment_sha256": p.assignments["assignment_sha256"],
            "mask_seed": settings.mask_seed,
            "mask_probability": MASK_PROBABILITY,
            "active_skill_budget": p.budget,
        }
    }


def plan_gate_a(settings: GateAConfig) -> dict[str, Any]:
    """What ``gate-a-plan`` prints (runtime-semantics §16.4): no rollout, but the bare run is read and checked.

    Raises:
        SkillError: as :func:`run_gate_a` before its first rollout.
    """
    p = _prepare_gate_a(settings)
    semantic = {
        **p.plan.semantic,
        "skills": AssignedSkillBank(p.bank, p.assignments).identity,
        **_gate_a_block(p, settings),
    }
    counts = {c: sum(1 for a in p.assignments["assignments"] if c in a["included_chunk_ids"]) for c in p.chunk_ids}
    return {
        "gate": "A",
        "estimator": PAIRED_ESTIMATOR_NAME,
        "bare_baseline": p.baseline.digest,
        "output_dir": str(p.out),
        "draft_path": str(p.draft_path),
        "draft_sha256": p.draft_sha,
        "chunks": len(p.chunk_ids),
        "active_skill_budget": p.budget,
        "tasks": len(p.plan.jobs),
        "split": "val",
        "persona": p.plan.persona,
        "mask_seed": settings.mask_seed,
        "mask_probability": MASK_PROBABILITY,
        "assignment_sha256": p.assignments["assignment_sha256"],
        "included_counts": counts,
        "design_matrix": "full_rank",
        "semantic_plan_fingerprint": fingerprint(semantic),
        "model": p.plan.model_identity,
    }


def run_gate_a(settings: GateAConfig, *, runner: Runner | None = None, **run_kwargs: Any) -> GateAResult:
    """Run (or resume) Gate A and write its outputs into ``settings.output_dir``.

    Order: config checks → draft checks → bare preflight (§14.2) → assignments → zero fit of the
    design → masked run → pairing → OLS per metric + bootstrap → selection → outputs. The status is
    ``incomplete`` (and no contributions or bank are written) when the masked run is not complete.

    Raises:
        SkillError: a failed check (config, draft, preflight, design rank, pairing), with the
            spec's message.
        ConfigError / FingerprintMismatch / RunLockedError: from the evaluator.
    """
    p = _prepare_gate_a(settings)
    provider = AssignedSkillBank(p.bank, p.assignments)
    result = run_masked(p.out, p.config, p.assignments, provider, _gate_a_block(p, settings), runner, run_kwargs)
    manifest: dict[str, Any] = {
        "schema_version": GATE_A_MANIFEST_SCHEMA,
        "created_at": _now(),
        "status": "incomplete",
        "config": {
            "name": settings.name,
            "output_dir": str(p.out),
            "experiment_config": str(settings.experiment_config),
            "bare_run_dir": str(settings.bare_run_dir),
            "draft_path": str(p.draft_path),
            "draft_skillbank_path": str(p.bank_path),
            "mask_seed": settings.mask_seed,
            "mask_probability": MASK_PROBABILITY,
            "active_skill_budget": p.budget,
            "bootstrap_samples": settings.bootstrap_samples,
            "bootstrap_seed": settings.bootstrap_seed,
            "confidence_level": settings.confidence_level,
        },
        "protocol": {
            "split": "val",
            "masked_rollouts_per_task": 1,
            "reused_bare_rollouts_per_task": 1,
            "mask_probability": MASK_PROBABILITY,
            "mask_seed": settings.mask_seed,
            "estimator": PAIRED_ESTIMATOR_NAME,
            "formula": PAIRED_ESTIMATOR_FORMULA,
            "selection": SELECTION_RULES[settings.selection_rule],
        },
        "input": {
            "draft_sha256": p.draft_sha,
            "assignment_sha256": p.assignments["assignment_sha256"],
            "task_ids": sorted({a["task_id"] for a in p.assignments["assignments"]}),
            "model": p.plan.model_identity,
            "environment": {"base_url": p.config.environment.base_url, "persona": p.plan.persona},
            "bare_baseline": p.baseline.digest,
        },
        "summary": run_summary(result),
        "output": {},
    }
    design = PairedDesign(
        p.assignments, p.chunk_ids, settings.bootstrap_samples, settings.bootstrap_seed, settings.confidence_level
    )
    return finish_gate(
        p.out,
        "gate_a_manifest.json",
        manifest,
        result,
        p.baseline,
        design,
        lambda rows, estimates, treated: _decide(p, settings, rows, estimates, treated),
    )


def _decide(
    p: _PreparedGateA,
    settings: GateAConfig,
    rows: list[dict[str, Any]],
    estimates: dict[str, dict[str, Any]],
    treated: dict[str, dict[str, Any]],
) -> GateDecision:
    # Gate A's selection (§16.3) and the documents that record it.
    from shopsimrl_core.skills._bank import build_skillbank

    chunk_ids, assignment_sha = p.chunk_ids, p.assignments["assignment_sha256"]
    coefficients = estimates["reward"]["coefficients"]
    intervals = estimates["reward"].get("confidence_intervals", {})
    noise = noise_exclusions(estimates["reward"], settings.selection_rule, "gate_a.selection_rule")
    selection = select_chunks(coefficients, chunk_ids, p.budget, within_noise=noise)
    by_id = {c["chunk_id"]: c for c in p.draft["chunks"]}
    aux = [m for m in estimates if m != "reward"]
    contributions = [
        {
            "chunk_id": cid,
            "draft_order": by_id[cid]["order"],
            "title": by_id[cid].get("title"),
            "coefficient": coefficients[cid],
            "rank": selection["rank"][cid],
            "status": selection["status"][cid],
            "auxiliary_coefficients": {m: estimates[m]["coefficients"][cid] for m in aux},
            "confidence_interval": intervals.get(cid),
            **_noise_fields(estimates["reward"], cid),
        }
        for cid in chunk_ids
    ]
    estimator = {
        "name": PAIRED_ESTIMATOR_NAME,
        "formula": PAIRED_ESTIMATOR_FORMULA,
        "fit_intercept": False,
        "baseline": "same_task_bare_validation",
        "primary_outcome": "reward",
        "selection_rule": SELECTION_RULES[settings.selection_rule],
        "numerical_zero_tolerance": 1e-12,
    }
    contrib_doc = {
        "schema_version": CHUNK_CONTRIBUTIONS_SCHEMA,
        "created_at": _now(),
        "estimator": estimator,
        "draft_sha256": p.draft_sha,
        "assignment_sha256": assignment_sha,
        "mask_seed": settings.mask_seed,
        "mask_probability": MASK_PROBABILITY,
        "observations": len(rows),
        "active_skill_budget": p.budget,
        "selected_count": len(selection["selected"]),
        "selected_chunk_ids": selection["selected"],
        "estimates": estimates,
        "contributions": contributions,
        "observations_table": rows,
        "bare_baseline": p.baseline.digest,
    }
    bank_by_id = {s.skill_id: s for s in p.bank.skills}
    selected_records = []
    for cid in selection["selected"]:
        meta = {k: v for k, v in (bank_by_id[cid].metadata or {}).items() if k != "draft_only"}
        meta.update(
            {
                "validation_result": "selected",
                "estimated_effect": coefficients[cid],
                "contribution_rank": selection["rank"][cid],
                "draft_order": by_id[cid]["order"],
                "confidence_interval": intervals.get(cid),
            }
        )
        selected_records.append(
            {
                "skill_id": cid,
                "version": "active-1",
                "enabled": True,
                "content": bank_by_id[cid].content,
                "metadata": meta,
            }
        )
    title = p.draft.get("skill_title") or "skills"
    semantic_baseline = {k: v for k, v in p.baseline.digest.items() if k != "run_dir"}
    selected_bank = build_skillbank(
        selected_records,
        bank_version=SELECTED_BANK_VERSION,
        metadata={
            "skill_title": title,
            "gate_status": {"gate_a": "passed", "gate_b": "not_run"},
            "draft_sha256": p.draft_sha,
            "assignment_sha256": assignment_sha,
            "active_skill_budget": p.budget,
            "selected_count": len(selection["selected"]),
            "selected_chunk_ids": selection["selected"],
            "injection_order": "canonical_draft_order",
            "estimator": estimator,
            "bare_baseline": semantic_baseline,
        },
    )
    if selected_bank["schema_version"] != SKILLBANK_SCHEMA:  # build_skillbank owns the version; guard the contract
        raise _gate_error(f"selected bank has schema {selected_bank['schema_version']!r}, expected {SKILLBANK_SCHEMA}")
    body = (
        "\n\n".join(bank_by_id[c].content for c in selection["selected"])
        or "_Gate A found no strictly positive chunks._"
    )
    markdown = f"# {title}\n\n> Active cold-start skill frozen by Gate A. Gate B is evaluation-only.\n\n{body}\n"
    ledger = [
        {
            "candidate_id": cid,
            "operation": "ADD",
            "stage": "cold_start",
            "chunk_id": cid,
            "source_label": by_id[cid].get("source_label"),
            "validation_result": selection["status"][cid],
            "estimated_effect": coefficients[cid],
            "contribution_rank": selection["rank"][cid],
            "validation_assignment_sha256": assignment_sha,
            "validation_estimator": PAIRED_ESTIMATOR_NAME,
            "bare_validation_observations_sha256": p.baseline.digest["observations_sha256"],
        }
        for cid in chunk_ids
    ]
    envs: dict[str, Any] = {}
    for rec in treated.values():
        for key in ("model", "environment", "prompt", "runtime"):
            obj = (rec.get("provenance") or {}).get(key)
            envs.setdefault(fingerprint(obj), obj)
    return GateDecision(
        selected=selection["selected"],
        contributions=contrib_doc,
        bank=selected_bank,
        markdown=markdown,
        ledger=ledger,
        selected_key="selected_chunk_ids",
        extra_files={"contributions.csv": _contributions_csv(contributions, aux)},
        manifest_input={"observed_provenance": [envs[k] for k in sorted(envs)]},
    )


def _contributions_csv(contributions: list[dict[str, Any]], aux: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        ["chunk_id", "draft_order", "title", "coefficient_reward"]
        + [f"coefficient_{m}" for m in aux]
        + ["rank", "status"]
    )
    for c in contributions:
        writer.writerow(
            [c["chunk_id"], c["draft_order"], c["title"], repr(c["coefficient"])]
            + [repr(c["auxiliary_coefficients"][m]) for m in aux]
            + [c["rank"], c["status"]]
        )
    return buffer.getvalue()
