"""One training round, end to end: candidate pool → online gate → selected bank → frozen curriculum.

The steps are the core's public ones (``build_candidate_pool``, ``run_online_gate``,
``snapshot_skillbank``, ``build_curriculum``); this module only chains them and names the files
inside the round's directory, so the Dagster round assets and a script produce the same outputs:

    <round_dir>/candidate_pool.json
    <round_dir>/online_gate/…            (the online gate's outputs, runtime-semantics §17.4)
    <round_dir>/skillbank-<sha256>.json  (immutable snapshot of the selected bank)
    <round_dir>/curriculum.json          (shopsimrl-skill-curriculum-v1)

Reproducible: the pool hash, the mask assignments, the selection and the curriculum state are pure
functions of the inputs (active bank, candidates, val traces, seeds), so the same inputs give the
same ``bank_sha256`` and ``state_id``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import write_json_atomic

__all__ = ["RoundConfig", "RoundResult", "build_round_pool", "run_round_gate", "freeze_round_bank",
           "freeze_round_curriculum", "run_training_round"]


@dataclass
class RoundConfig:
    """Inputs of one round (defaults are the spec's: ``mask_seed`` 20260901, budget 10, ≤ 6 candidates)."""

    round_id: str
    round_dir: Path
    active_skillbank_path: Path
    candidates_path: Path
    experiment_config: Path
    bare_run_dir: Path
    proposal_checkpoint: str
    max_candidates: int = 6
    mask_seed: int = 20260901
    active_skill_budget: int = 10
    bootstrap_samples: int = 1000
    selection_rule: str = "published"
    """The online gate's selection rule: ``published`` or ``above_noise`` (docs/statistics.md)."""
    curriculum: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``build_curriculum`` (``seed``, ``skill_free_probability``, ``rho_min`` …)."""


@dataclass
class RoundResult:
    """What the round wrote."""

    status: str
    pool_path: Path
    pool_sha256: str
    gate: Any
    skillbank_path: Path | None = None
    bank_sha256: str | None = None
    curriculum_path: Path | None = None
    state_id: str | None = None


def _read(path: Path, what: str) -> dict[str, Any]:
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SkillError(f"{path}: cannot read the {what} ({exc}); materialize it first", code="round-input") from exc
    if not isinstance(value, dict):
        raise SkillError(f"{path}: the {what} is not a JSON object", code="round-input")
    return value


def build_round_pool(cfg: RoundConfig) -> tuple[Path, dict[str, Any]]:
    """Write ``candidate_pool.json`` from the active bank and the round's candidates; return it."""
    from shopsimrl_core.skills import build_candidate_pool

    pool = build_candidate_pool(_read(cfg.active_skillbank_path, "active SkillBank"),
                                _read(cfg.candidates_path, "candidates document"), round_id=cfg.round_id,
                                proposal_checkpoint=cfg.proposal_checkpoint, max_candidates=cfg.max_candidates)
    path = Path(cfg.round_dir) / "candidate_pool.json"
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        if old.get("pool_sha256") == pool["pool_sha256"]:
            return path, old  # keep the original created_at; the online gate resumes against it
    write_json_atomic(path, pool)
    return path, pool


def run_round_gate(cfg: RoundConfig, *, runner: Any = None, **run_kwargs: Any) -> RoundResult:
    """Write the round's pool and run (or resume) its online gate under ``<round_dir>/online_gate``.

    Raises:
        SkillError: unreadable inputs, pool or gate problems (the gate's own messages).
    """
    from shopsimrl_core.skills import OnlineGateConfig, run_online_gate

    round_dir = Path(cfg.round_dir)
    pool_path, pool = build_round_pool(cfg)
    gate = run_online_gate(OnlineGateConfig(output_dir=round_dir / "online_gate",
                                            experiment_config=cfg.experiment_config,
                                            bare_run_dir=cfg.bare_run_dir, candidate_pool_path=pool_path,
                                            mask_seed=cfg.mask_seed, active_skill_budget=cfg.active_skill_budget,
                                            bootstrap_samples=cfg.bootstrap_samples,
                                            selection_rule=cfg.selection_rule), runner=runner, **run_kwargs)
    return RoundResult(gate.status, pool_path, pool["pool_sha256"], gate)


def freeze_round_bank(round_dir: str | Path) -> Any:
    """Snapshot the gate's ``selected_skillbank.json`` as ``<round_dir>/skillbank-<sha256>.json``.

    Returns the ``SkillBankSnapshot``, or None when the gate is not complete or selected nothing.
    """
    from shopsimrl_core.skills import snapshot_skillbank

    gate_dir = Path(round_dir) / "online_gate"
    manifest = gate_dir / "online_gate_manifest.json"
    selected = gate_dir / "selected_skillbank.json"
    if not manifest.is_file() or not selected.is_file():
        return None
    if _read(manifest, "online gate manifest").get("status") != "complete":
        return None
    bank = _read(selected, "selected SkillBank")
    if not bank.get("skills"):
        return None
    return snapshot_skillbank(bank, round_dir)


def freeze_round_curriculum(round_dir: str | Path, round_id: str, snapshot_path: str | Path,
                            **curriculum: Any) -> tuple[Path, dict[str, Any]]:
    """Build the frozen curriculum of a snapshot and write ``<round_dir>/curriculum.json``.

    ``source.skillbank_path`` is the snapshot's file name only: the name is the hash, so the state
    id does not depend on where the round ran.

    Raises:
        SkillError: ``curriculum-invalid`` settings, or an unreadable snapshot.
    """
    from shopsimrl_core.skills._curriculum import build_curriculum, write_curriculum

    snapshot = Path(snapshot_path)
    state = build_curriculum(_read(snapshot, "SkillBank snapshot"), round_id=round_id,
                             skillbank_path=snapshot.name, **curriculum)
    return write_curriculum(state, Path(round_dir) / "curriculum.json"), state


def run_training_round(cfg: RoundConfig, *, runner: Any = None, **run_kwargs: Any) -> RoundResult:
    """Run (or resume) one round: pool and gate, then the snapshot and curriculum when the gate selected chunks.

    Raises:
        SkillError: unreadable inputs, pool, gate or curriculum problems.
    """
    result = run_round_gate(cfg, runner=runner, **run_kwargs)
    snap = freeze_round_bank(cfg.round_dir)
    if snap is None:
        return result
    result.skillbank_path, result.bank_sha256 = snap.path, snap.bank_sha256
    result.curriculum_path, state = freeze_round_curriculum(cfg.round_dir, cfg.round_id, snap.path, **cfg.curriculum)
    result.state_id = state["state_id"]
    return result
