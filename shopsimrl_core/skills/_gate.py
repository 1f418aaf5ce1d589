"""Gate A: choose which draft chunks to keep with a paired, randomised validation run (spec §14–§16).

Every val episode is run twice: once bare (reused from an existing bare run after the §14.2
pairing checks) and once with a random half of the draft chunks (a deterministic mask per
episode and chunk, §16.2). The per-episode differences are regressed on the masks without an
intercept (§15, ``_ols``); chunks with a strictly positive reward coefficient are kept, at most
``active_skill_budget`` of them, and injected in draft order (§16.3).

This project adds task-level bootstrap intervals for every coefficient (reported, never used to
select, so the selection rule stays the legacy one).

Resumable: the masked run is an ordinary run directory (``output_dir``), so rerunning the gate
reruns only incomplete episodes; the assignment file is reused when identical and refused when not.

The online gate (spec §17) reuses the same pairing and estimator on a candidate pool of ``ADD`` and
``REWRITE`` proposals against the active bank: each current chunk is a slot showing absent, its old
version or one rewrite (mutually exclusive), each ``ADD`` a singleton slot; rewrite winners keep
their target's id in the next active bank.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import fingerprint, write_json_atomic
from shopsimrl_core.episode._trace import is_complete
from shopsimrl_core.analysis._ols import bootstrap_coefficients, check_design, fit_no_intercept_ols
from shopsimrl_core._versions import (
    CHUNK_CONTRIBUTIONS_SCHEMA,
    GATE_A_MANIFEST_SCHEMA,
    INITIAL_DRAFT_SCHEMA,
    MASK_ASSIGNMENTS_SCHEMA,
    PAIRED_ESTIMATOR_FORMULA,
    PAIRED_ESTIMATOR_NAME,
    SKILLBANK_SCHEMA,
)

__all__ = [
    "GateAConfig",
    "GateAResult",
    "gate_config_problems",
    "AssignedSkillBank",
    "mask_draw",
    "build_assignments",
    "read_validation_traces",
    "trace_outcomes",
    "preflight_bare_run",
    "pair_observations",
    "select_chunks",
    "run_gate_a",
    "plan_gate_a",
    "build_candidate_pool",
    "validate_pool",
    "online_slots",
    "build_online_assignments",
    "OnlineAssignedSkills",
    "select_online",
    "OnlineGateConfig",
    "run_online_gate",
]

MASK_PROBABILITY = 0.5
_THRESHOLD = 1 << 63  # int(0.5 · 2⁶⁴)
SELECTED_BANK_VERSION = "cold-start-gate-a-selected-v2"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _gate_error(message: str, code: str = "gate-error", **context: Any) -> SkillError:
    return SkillError(message, code=code, **context)


# --------------------------------------------------------------------------- masks


def mask_draw(mask_seed: int, split: str, task_id: int, sample_id: int, chunk_id: str) -> int:
    """``u64_be(SHA-256(UTF-8 "{seed}:{split}:{task}:{sample}:{chunk}")[0:8])`` (spec §16.2)."""
    text = f"{mask_seed}:{split}:{task_id}:{sample_id}:{chunk_id}"
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def build_assignments(
    jobs: Sequence[Any], chunk_ids: Sequence[str], *, mask_seed: int, draft_sha256: str
) -> dict[str, Any]:
    """The ``shopsimrl-chunk-mask-assignments-v1`` document for *jobs* (``EpisodeJob`` objects).

    Deterministic: ``assignment_sha256`` depends only on the seed, the draft and the jobs.
    """
    assignments = []
    for job in jobs:
        mask = [1 if mask_draw(mask_seed, job.split, job.task_id, job.sample_id, c) < _THRESHOLD else 0 for c in chunk_ids]
        assignments.append({"episode_id": job.episode_id, "task_id": job.task_id, "sample_id": job.sample_id,
                            "seed": job.seed, "split": job.split, "mask": mask,
                            "included_chunk_ids": [c for c, bit in zip(chunk_ids, mask) if bit]})
    core = {"mask_seed": mask_seed, "mask_probability": MASK_PROBABILITY, "draft_sha256": draft_sha256,
            "chunk_ids": list(chunk_ids), "assignments": assignments}
    return {"schema_version": MASK_ASSIGNMENTS_SCHEMA, "created_at": _now(), **core,
            "assignment_sha256": fingerprint(core)}


class _AssignedSkills:
    """What both gate providers share: a JSON-safe identity copy and the per-episode assignment lookup."""

    _identity: dict[str, Any]
    _lookup: dict[tuple[Any, ...], list[str]]
    _kind: str

    @property
    def identity(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._identity))

    def _assigned(self, context: dict[str, Any]) -> tuple[tuple[Any, ...], list[str]]:
        key = (context.get("split"), context.get("task_id"), context.get("sample_id"))
        if key not in self._lookup:
            raise _gate_error(f"no {self._kind} assignment for episode {key}; rebuild mask_assignments.json for this plan")
        return key, self._lookup[key]


class AssignedSkillBank(_AssignedSkills):
    """A ``SkillProvider`` that injects each episode's pre-assigned chunks (spec §11.4).

    Looks up ``(split, task_id, sample_id)`` in the assignment file, runs the ordinary selection
    on the bank and keeps the assigned ids in bank order.

    Raises (from ``select``):
        SkillError: an episode missing from the assignments, or an assigned chunk that is disabled
            or out of scope for the task.
    """

    def __init__(self, bank: dict[str, Any], assignments: dict[str, Any]) -> None:
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
            "assignment": {"schema_version": assignments["schema_version"], "mask_seed": assignments["mask_seed"],
                           "mask_probability": assignments["mask_probability"],
                           "draft_sha256": assignments["draft_sha256"],
                           "assignment_sha256": assignments["assignment_sha256"],
                           "episodes": len(assignments["assignments"])},
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


# --------------------------------------------------------------------------- validation traces


def read_validation_traces(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read a traces file under the strict rules of spec §14.3; return the completed record per episode.

    Raises:
        SkillError: an unparsable line, a record without ``episode_id``, a second completed record
            (``duplicate completed validation trace``) or any record after a completed one
            (``validation attempt follows a completed trace``).
    """
    completed: dict[str, dict[str, Any]] = {}
    seen_failed: set[str] = set()
    p = Path(path)
    if not p.is_file():
        raise _gate_error(f"{p}: validation traces not found", code="gate-missing-traces")
    with open(p, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise _gate_error(f"{p}:{number}: validation trace line does not parse ({exc})") from exc
            if not isinstance(record, dict):
                raise _gate_error(f"{p}:{number}: validation trace line is not an object")
            eid = record.get("episode_id")
            if not isinstance(eid, str) or not eid:
                raise _gate_error(f"{p}:{number}: validation trace has no episode_id")
            if "redaction" in record:
                raise _gate_error(f"{p}:{number}: exported (redacted) traces are not validation input; "
                                  "use the raw run directory")
            if eid in completed:
                if is_complete(record):
                    raise _gate_error(f"{p}:{number}: duplicate completed validation trace for {eid}")
                raise _gate_error(f"{p}:{number}: validation attempt follows a completed trace for {eid}")
            if is_complete(record):
                completed[eid] = record
            else:
                seen_failed.add(eid)
    return completed


def trace_outcomes(record: dict[str, Any]) -> dict[str, float]:
    """``{"reward": final.reward, r_*: …}`` of a complete trace (spec §14.4).

    Raises:
        SkillError: incomplete trace, missing ``r_strict``/``r_success``, a non-finite or boolean
            value, or ``|reward − r_strict| > 1e-12``.
    """
    eid = record.get("episode_id")
    if not is_complete(record):
        raise _gate_error(f"{eid}: validation trace is not complete")
    final = record["final"]
    detail = final.get("reward_detail") if isinstance(final.get("reward_detail"), dict) else {}
    if "r_strict" not in detail or "r_success" not in detail:
        raise _gate_error(f"{eid}: reward_detail lacks r_strict or r_success")
    out = {"reward": final.get("reward")}
    out.update({k: v for k, v in detail.items() if k.startswith("r_")})
    for key, value in out.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _gate_error(f"{eid}: outcome {key} must be a finite number (got {value!r})")
    if abs(out["reward"] - out["r_strict"]) > 1e-12:
        raise _gate_error(f"{eid}: reward {out['reward']} differs from r_strict {out['r_strict']}")
    return {k: float(v) for k, v in out.items()}


def _without(d: Any, *keys: str) -> Any:
    return {k: v for k, v in d.items() if k not in keys} if isinstance(d, dict) else d


def _job_key(job: dict[str, Any], with_seed: bool) -> tuple[Any, ...]:
    base = (job.get("split"), job.get("task_id"), job.get("sample_id"))
    return base + (job.get("seed"),) if with_seed else base


@dataclass
class BareBaseline:
    """A checked bare run: its traces by episode id and the digest of spec §14.5."""

    run_dir: Path
    traces: dict[str, dict[str, Any]]
    digest: dict[str, Any]


def preflight_bare_run(bare_run_dir: str | Path, gate_plan: dict[str, Any], *, send_seed: bool) -> BareBaseline:
    """Run the preflight checks of spec §14.2 against a bare validation run, in order.

    Raises:
        SkillError (``gate-preflight``): the first failed check, with the spec's message
            (e.g. ``bare validation manifest fingerprint mismatch``).
    """
    run = Path(bare_run_dir)
    manifest_path = run / "manifest.json"
    if not manifest_path.is_file():
        raise _gate_error(f"{manifest_path}: bare validation manifest not found; run the bare val suite first",
                          code="gate-preflight")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    plan = manifest.get("plan") or {}
    if manifest.get("plan_fingerprint") != fingerprint(plan):
        raise _gate_error("bare validation manifest fingerprint mismatch", code="gate-preflight")
    if plan.get("skills") != {"provider": "none"}:
        raise _gate_error(f"bare validation run has skills {plan.get('skills')}; it must be skill-free",
                          code="gate-preflight")
    compared = {
        "model": lambda p: _without(p.get("model"), "transport"),
        "prompt": lambda p: p.get("prompt"),
        "runtime": lambda p: _without(p.get("runtime"), "concurrency"),
        "environment": lambda p: p.get("environment"),
        "task_split": lambda p: _without(p.get("task_split"), "source_path"),
    }
    for name, view in compared.items():
        if view(plan) != view(gate_plan):
            raise _gate_error(f"bare validation plan differs from the gate plan on {name}", code="gate-preflight")
    bare_keys = [_job_key(j, send_seed) for j in plan.get("jobs") or []]
    gate_keys = [_job_key(j, send_seed) for j in gate_plan.get("jobs") or []]
    label = "split/task/sample/seed" if send_seed else "split/task/sample"
    if len(set(bare_keys)) != len(bare_keys) or set(bare_keys) != set(gate_keys):
        raise _gate_error(f"bare validation job coverage mismatch ({label})", code="gate-preflight")
    traces = read_validation_traces(run / "traces.jsonl")
    trace_keys = {_job_key(r.get("job") or {}, send_seed) for r in traces.values()}
    if trace_keys != set(bare_keys) or len(traces) != len(bare_keys):
        raise _gate_error(f"bare validation traces do not cover the planned jobs ({label}): "
                          f"{len(traces)} complete traces for {len(bare_keys)} jobs", code="gate-preflight")
    env_signatures = set()
    outcome_keys = set()
    for eid, record in sorted(traces.items()):
        job = record.get("job") or {}
        from shopsimrl_core.runs._jobs import episode_id as _eid

        if eid != _eid(job.get("task_id"), job.get("sample_id")):
            raise _gate_error(f"{eid}: episode_id does not match its job", code="gate-preflight")
        prov = record.get("provenance") or {}
        if record.get("selected_skills") != [] or prov.get("skills") != {"provider": "none"}:
            raise _gate_error(f"{eid}: bare validation trace carries skills", code="gate-preflight")
        for key in ("model", "environment", "prompt", "runtime", "skills"):
            if not isinstance(prov.get(key), dict) or not prov[key]:
                raise _gate_error(f"{eid}: bare validation trace lacks provenance.{key}", code="gate-preflight")
        if _without(prov["model"], "transport") != _without(plan.get("model"), "transport"):
            raise _gate_error(f"{eid}: bare trace model provenance differs from the bare plan", code="gate-preflight")
        if prov["prompt"] != plan.get("prompt") or _without(prov["runtime"], "concurrency") != _without(plan.get("runtime"), "concurrency"):
            raise _gate_error(f"{eid}: bare trace prompt/runtime provenance differs from the bare plan", code="gate-preflight")
        plan_env = plan.get("environment") or {}
        if {k: prov["environment"].get(k) for k in plan_env} != plan_env:
            raise _gate_error(f"{eid}: bare trace environment provenance differs from the bare plan", code="gate-preflight")
        outcome_keys.add(tuple(sorted(trace_outcomes(record))))
        env_signatures.add(json.dumps(prov["environment"], sort_keys=True))
    if len(outcome_keys) > 1:
        raise _gate_error("bare validation traces have different outcome key sets", code="gate-preflight")
    if len(env_signatures) > 1:
        raise _gate_error("bare validation mixes environment versions", code="gate-preflight")
    ordered = [traces[e] for e in sorted(traces)]
    outcomes = [trace_outcomes(r) for r in ordered]
    means = {k: sum(o[k] for o in outcomes) / len(outcomes) for k in sorted(outcomes[0])} if outcomes else {}
    digest = {
        "run_dir": str(run.resolve()),
        "plan_fingerprint": manifest.get("plan_fingerprint"),
        "observations_sha256": fingerprint([{"episode_id": r["episode_id"], "job": r["job"], "provenance": r["provenance"],
                                             "selected_skills": r["selected_skills"], "final": r["final"]} for r in ordered]),
        "observations": len(ordered),
        "checkpoint_id": (plan.get("model") or {}).get("checkpoint_id"),
        "mean_outcomes": means,
    }
    return BareBaseline(run_dir=run, traces=traces, digest=digest)


def pair_observations(
    assignments: dict[str, Any], treated: dict[str, dict[str, Any]], bare: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Observation rows of spec §14.4, in assignment order.

    Raises:
        SkillError (``gate-pairing``): key sets differ, a provenance or chunk-list mismatch,
            a non-val job, or different outcome keys.
    """
    ids = [a["episode_id"] for a in assignments["assignments"]]
    if len(set(ids)) != len(ids) or set(ids) != set(treated) or set(ids) != set(bare):
        raise _gate_error(
            f"paired episodes differ: {len(ids)} assigned, {len(treated)} treated, {len(bare)} bare complete traces",
            code="gate-pairing")
    rows = []
    signature = None
    for a in assignments["assignments"]:
        eid = a["episode_id"]
        t, b = treated[eid], bare[eid]
        tp, bp = t.get("provenance") or {}, b.get("provenance") or {}
        if bp.get("skills") != {"provider": "none"} or b.get("selected_skills"):
            raise _gate_error(f"{eid}: the bare trace is not bare", code="gate-pairing")
        sig_t = (_without(tp.get("model"), "transport"), tp.get("environment"), tp.get("prompt"), tp.get("runtime"))
        sig_b = (_without(bp.get("model"), "transport"), bp.get("environment"), bp.get("prompt"), bp.get("runtime"))
        if sig_t != sig_b:
            raise _gate_error(f"{eid}: treated and bare provenance differ (model/environment/prompt/runtime)",
                              code="gate-pairing")
        if signature is None:
            signature = sig_t
        elif sig_t != signature:
            raise _gate_error(f"{eid}: provenance differs from the other pairs", code="gate-pairing")
        for rec in (t, b):
            job = rec.get("job") or {}
            if job.get("split") != "val" or (job.get("task_id"), job.get("sample_id")) != (a["task_id"], a["sample_id"]):
                raise _gate_error(f"{eid}: job does not match the val assignment", code="gate-pairing")
        got = [s.get("skill_id") for s in t.get("selected_skills") or []]
        if got != a["included_chunk_ids"]:
            raise _gate_error(f"{eid}: injected chunks {got} differ from the assignment {a['included_chunk_ids']}",
                              code="gate-pairing")
        to, bo = trace_outcomes(t), trace_outcomes(b)
        if set(to) != set(bo):
            raise _gate_error(f"{eid}: outcome keys differ between treated and bare", code="gate-pairing")
        rd = {k: v for k, v in sorted(to.items()) if k != "reward"}
        brd = {k: v for k, v in sorted(bo.items()) if k != "reward"}
        rows.append({"episode_id": eid, "split": "val", "task_id": a["task_id"], "sample_id": a["sample_id"],
                     "mask": list(a["mask"]), "included_chunk_ids": list(a["included_chunk_ids"]),
                     "reward": to["reward"], "bare_reward": bo["reward"], "delta_reward": to["reward"] - bo["reward"],
                     "reward_detail": rd, "bare_reward_detail": brd,
                     "delta_reward_detail": {k: rd[k] - brd[k] for k in rd}})
    return rows


# --------------------------------------------------------------------------- estimation and selection


def _metric_deltas(rows: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    out = {"reward": [r["delta_reward"] for r in rows]}
    for key in rows[0]["delta_reward_detail"] if rows else []:
        out[key] = [r["delta_reward_detail"][key] for r in rows]
    return out


def estimate(
    rows: Sequence[dict[str, Any]],
    chunk_ids: Sequence[str],
    *,
    bootstrap_samples: int = 1000,
    bootstrap_seed: int = 20260901,
    confidence_level: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """Per metric: coefficients (§15), observation means and task-bootstrap intervals (additive)."""
    design = [r["mask"] for r in rows]
    groups = [r["task_id"] for r in rows]
    out: dict[str, dict[str, Any]] = {}
    for metric, deltas in _metric_deltas(rows).items():
        beta = fit_no_intercept_ols(design, deltas)
        masked = [r["reward"] if metric == "reward" else r["reward_detail"][metric] for r in rows]
        bare = [r["bare_reward"] if metric == "reward" else r["bare_reward_detail"][metric] for r in rows]
        boot = bootstrap_coefficients(design, deltas, groups, metric=metric, samples=bootstrap_samples,
                                      seed=bootstrap_seed, level=confidence_level) if bootstrap_samples > 0 else None
        out[metric] = {
            "intercept": 0.0,
            "coefficients": dict(zip(chunk_ids, beta)),
            "observations": len(rows),
            "masked_mean": sum(masked) / len(masked),
            "bare_mean": sum(bare) / len(bare),
            "delta_mean": sum(deltas) / len(deltas),
        }
        if boot is not None:
            out[metric]["confidence_intervals"] = dict(zip(chunk_ids, boot["intervals"]))
            out[metric]["bootstrap"] = {k: v for k, v in boot.items() if k != "intervals"}
    return out


def select_chunks(coefficients: dict[str, float], draft_order: Sequence[str], budget: int) -> dict[str, Any]:
    """Rank by ``(−β, chunk_id)``, keep β > 0 strictly, top *budget*, inject in draft order (§16.3)."""
    ranked = sorted(draft_order, key=lambda c: (-coefficients[c], c))
    rank = {c: i for i, c in enumerate(ranked, start=1)}
    positive = [c for c in ranked if coefficients[c] > 0]
    chosen = set(positive[:budget])
    status = {c: ("selected" if c in chosen else "budget_excluded" if coefficients[c] > 0 else "non_positive")
              for c in draft_order}
    return {"rank": rank, "status": status, "selected": [c for c in draft_order if c in chosen]}


# --------------------------------------------------------------------------- the gate


@dataclass
class GateAConfig:
    """Gate A settings (spec §16.1 keys; ``bootstrap_*`` are this project's additions)."""

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


@dataclass
class GateAResult:
    """What the gate wrote and decided."""

    status: str
    output_dir: Path
    selected_chunk_ids: list[str] = field(default_factory=list)
    contributions: dict[str, Any] | None = None
    selected_skillbank_path: Path | None = None
    manifest_path: Path | None = None
    masked_run: Any = None


Runner = Callable[..., Any]
"""``(config, *, skill_provider, plan_blocks) -> RunResult`` — ``run_evaluation`` by default."""


def _load_json(path: Path, what: str) -> dict[str, Any]:
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _gate_error(f"{path}: cannot read {what} ({exc})", code="gate-input") from exc
    if not isinstance(value, dict):
        raise _gate_error(f"{path}: {what} must be a JSON object", code="gate-input")
    return value


def _check_draft(draft: dict[str, Any], bank: dict[str, Any], source: Path) -> list[str]:
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
    bank_ids = [s.get("skill_id") for s in bank.get("skills") or []]
    if bank_ids != ids or not all((s.get("metadata") or {}).get("draft_only") is True for s in bank["skills"]):
        raise _gate_error(f"{source}: draft SkillBank ids must equal the draft chunk ids in order, all draft_only",
                          code="gate-input")
    return ids


@dataclass
class _PreparedGateA:
    out: Path
    config: Any
    plan: Any
    draft: dict[str, Any]
    draft_path: Path
    bank: dict[str, Any]
    bank_path: Path
    chunk_ids: list[str]
    budget: int
    draft_sha: str
    baseline: BareBaseline
    assignments: dict[str, Any]
    assignment_path: Path


def gate_config_problems(config: Any) -> list[str]:
    """What stops *config* (an ``EvalConfig``) from being a paired-validation config (spec §14.1).

    A gate and its bare run both need ``split: val``, ``repeats: 1``, ``sample_size: null`` and
    ``skills.path: null``. Returns one ``field is X (must be Y)`` phrase per violation; empty when
    the config qualifies.
    """
    tasks = config.tasks
    problems = []
    if tasks.split != "val":
        problems.append(f"tasks.split is {tasks.split!r} (must be 'val')")
    if tasks.repeats != 1:
        problems.append(f"tasks.repeats is {tasks.repeats} (must be 1)")
    if tasks.sample_size is not None:
        problems.append(f"tasks.sample_size is {tasks.sample_size} (must be null: the full val split)")
    if config.skills.path is not None:
        problems.append("skills.path is set (must be null: the gate owns skill injection)")
    return problems


def _require_gate_config(config: Any, source: Any) -> None:
    if gate_config_problems(config):
        raise _gate_error(f"{source}: a gate config needs split val, repeats 1, sample_size null "
                          "and skills.path null (the gate owns skill injection)", code="gate-config")


def _prepare_gate_a(settings: GateAConfig) -> _PreparedGateA:
    # Everything before the first rollout: config, draft, preflight, assignments, design check.
    from shopsimrl_core.runs._config import load_config
    from shopsimrl_core.runs._plan import build_plan
    from shopsimrl_core.episode._skillbank import load_skillbank

    out = Path(settings.output_dir)
    if settings.mask_probability != MASK_PROBABILITY:
        raise _gate_error(f"gate_a.mask_probability must be 0.5 (got {settings.mask_probability})", code="gate-config")
    config = load_config(settings.experiment_config)
    _require_gate_config(config, settings.experiment_config)
    config = config.model_copy(update={"experiment": config.experiment.model_copy(
        update={"name": out.name, "output_dir": str(out.parent)})})
    draft_path = Path(settings.draft_path)
    draft = _load_json(draft_path, "initial skill draft")
    bank_path = Path(settings.draft_skillbank_path or draft_path.parent / "initial_skillbank.json")
    bank = load_skillbank(bank_path)
    chunk_ids = _check_draft(draft, bank, draft_path)
    budget = settings.active_skill_budget if settings.active_skill_budget is not None else draft.get("active_skill_budget")
    if settings.active_skill_budget is not None and draft.get("active_skill_budget") not in (None, settings.active_skill_budget):
        raise _gate_error("gate_a.active_skill_budget differs from the draft's; set them equal or leave the gate's null",
                          code="gate-config")
    if not isinstance(budget, int) or not 1 <= budget <= len(chunk_ids):
        raise _gate_error(f"active_skill_budget must be 1..{len(chunk_ids)} (got {budget})", code="gate-config")
    draft_sha = fingerprint(draft)
    plan = build_plan(config)
    baseline = preflight_bare_run(settings.bare_run_dir, plan.semantic, send_seed=config.model.send_seed)
    assignments = build_assignments(plan.jobs, chunk_ids, mask_seed=settings.mask_seed, draft_sha256=draft_sha)
    assignment_path = out / "mask_assignments.json"
    if assignment_path.exists():
        existing = _load_json(assignment_path, "mask assignments")
        if existing.get("assignment_sha256") != assignments["assignment_sha256"]:
            raise _gate_error(f"{assignment_path}: belongs to another draft, seed or job list; "
                              "use a new gate output_dir", code="gate-resume-mismatch")
        assignments = existing
    check_design([a["mask"] for a in assignments["assignments"]])
    return _PreparedGateA(out, config, plan, draft, draft_path, bank, bank_path, chunk_ids, budget, draft_sha, baseline,
                          assignments, assignment_path)


def _gate_a_block(p: _PreparedGateA, settings: GateAConfig) -> dict[str, Any]:
    semantic_baseline = {k: v for k, v in p.baseline.digest.items() if k != "run_dir"}
    return {"trace2skill_gate": {"estimator": PAIRED_ESTIMATOR_NAME, "bare_baseline": semantic_baseline, "gate": "A",
                                 "draft_sha256": p.draft_sha, "assignment_sha256": p.assignments["assignment_sha256"],
                                 "mask_seed": settings.mask_seed, "mask_probability": MASK_PROBABILITY,
                                 "active_skill_budget": p.budget}}


def plan_gate_a(settings: GateAConfig) -> dict[str, Any]:
    """What ``gate-a-plan`` prints (spec §16.4): no rollout, but the bare run is read and checked.

    Raises:
        SkillError: as :func:`run_gate_a` before its first rollout.
    """
    from shopsimrl_core._hashing import fingerprint as _fp

    p = _prepare_gate_a(settings)
    semantic = {**p.plan.semantic, "skills": AssignedSkillBank(p.bank, p.assignments).identity, **_gate_a_block(p, settings)}
    counts = {c: sum(1 for a in p.assignments["assignments"] if c in a["included_chunk_ids"]) for c in p.chunk_ids}
    return {"gate": "A", "estimator": PAIRED_ESTIMATOR_NAME, "bare_baseline": p.baseline.digest,
            "output_dir": str(p.out), "draft_path": str(p.draft_path), "draft_sha256": p.draft_sha,
            "chunks": len(p.chunk_ids), "active_skill_budget": p.budget, "tasks": len(p.plan.jobs),
            "split": "val", "persona": p.plan.persona, "mask_seed": settings.mask_seed,
            "mask_probability": MASK_PROBABILITY, "assignment_sha256": p.assignments["assignment_sha256"],
            "included_counts": counts, "design_matrix": "full_rank", "semantic_plan_fingerprint": _fp(semantic),
            "model": p.plan.model_identity}


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
    out, config, plan, draft, draft_path, bank, bank_path = p.out, p.config, p.plan, p.draft, p.draft_path, p.bank, p.bank_path
    chunk_ids, budget, draft_sha, baseline, assignments = p.chunk_ids, p.budget, p.draft_sha, p.baseline, p.assignments
    assignment_path = p.assignment_path
    out.mkdir(parents=True, exist_ok=True)
    if not assignment_path.exists():
        write_json_atomic(assignment_path, assignments)

    provider = AssignedSkillBank(bank, assignments)
    semantic_baseline = {k: v for k, v in baseline.digest.items() if k != "run_dir"}
    block = _gate_a_block(p, settings)
    if runner is None:
        from shopsimrl_core.runs._evaluator import run_evaluation as runner  # type: ignore[no-redef]
    result = runner(config, skill_provider=provider, plan_blocks=block, **run_kwargs)
    counts = result.summary.get("counts", {}) if hasattr(result, "summary") else {}
    gate_manifest: dict[str, Any] = {
        "schema_version": GATE_A_MANIFEST_SCHEMA, "created_at": _now(), "status": "incomplete",
        "config": {"name": settings.name, "output_dir": str(out), "experiment_config": str(settings.experiment_config),
                   "bare_run_dir": str(settings.bare_run_dir), "draft_path": str(draft_path),
                   "draft_skillbank_path": str(bank_path), "mask_seed": settings.mask_seed,
                   "mask_probability": MASK_PROBABILITY, "active_skill_budget": budget,
                   "bootstrap_samples": settings.bootstrap_samples, "bootstrap_seed": settings.bootstrap_seed,
                   "confidence_level": settings.confidence_level},
        "protocol": {"split": "val", "masked_rollouts_per_task": 1, "reused_bare_rollouts_per_task": 1,
                     "mask_probability": MASK_PROBABILITY, "mask_seed": settings.mask_seed,
                     "estimator": PAIRED_ESTIMATOR_NAME, "formula": PAIRED_ESTIMATOR_FORMULA,
                     "selection": "strictly_positive_top_k"},
        "input": {"draft_sha256": draft_sha, "assignment_sha256": assignments["assignment_sha256"],
                  "task_ids": sorted({a["task_id"] for a in assignments["assignments"]}),
                  "model": plan.model_identity,
                  "environment": {"base_url": config.environment.base_url, "persona": plan.persona},
                  "bare_baseline": baseline.digest},
        "summary": result.summary if hasattr(result, "summary") else {},
        "output": {},
    }
    manifest_path = out / "gate_a_manifest.json"
    if counts.get("failed") or counts.get("coverage") != 1.0:
        write_json_atomic(manifest_path, gate_manifest)
        return GateAResult(status="incomplete", output_dir=out, manifest_path=manifest_path, masked_run=result)

    treated = read_validation_traces(out / "traces.jsonl")
    rows = pair_observations(assignments, treated, baseline.traces)
    estimates = estimate(rows, chunk_ids, bootstrap_samples=settings.bootstrap_samples,
                         bootstrap_seed=settings.bootstrap_seed, confidence_level=settings.confidence_level)
    coefficients = estimates["reward"]["coefficients"]
    selection = select_chunks(coefficients, chunk_ids, budget)
    by_id = {c["chunk_id"]: c for c in draft["chunks"]}
    aux = [m for m in estimates if m != "reward"]
    contributions = []
    for cid in chunk_ids:
        contributions.append({
            "chunk_id": cid, "draft_order": by_id[cid]["order"], "title": by_id[cid].get("title"),
            "coefficient": coefficients[cid], "rank": selection["rank"][cid], "status": selection["status"][cid],
            "auxiliary_coefficients": {m: estimates[m]["coefficients"][cid] for m in aux},
            "confidence_interval": estimates["reward"].get("confidence_intervals", {}).get(cid),
        })
    estimator = {"name": PAIRED_ESTIMATOR_NAME, "formula": PAIRED_ESTIMATOR_FORMULA, "fit_intercept": False,
                 "baseline": "same_task_bare_validation", "primary_outcome": "reward",
                 "selection_rule": "strictly_positive_top_k", "numerical_zero_tolerance": 1e-12}
    contrib_doc = {
        "schema_version": CHUNK_CONTRIBUTIONS_SCHEMA, "created_at": _now(), "estimator": estimator,
        "draft_sha256": draft_sha, "assignment_sha256": assignments["assignment_sha256"],
        "mask_seed": settings.mask_seed, "mask_probability": MASK_PROBABILITY, "observations": len(rows),
        "active_skill_budget": budget, "selected_count": len(selection["selected"]),
        "selected_chunk_ids": selection["selected"], "estimates": estimates, "contributions": contributions,
        "observations_table": rows, "bare_baseline": baseline.digest,
    }
    write_json_atomic(out / "contributions.json", contrib_doc)
    _write_contributions_csv(out / "contributions.csv", contributions, aux)

    from shopsimrl_core.skills._bank import build_skillbank

    bank_by_id = {s["skill_id"]: s for s in bank["skills"]}
    selected_records = []
    for cid in selection["selected"]:
        meta = {k: v for k, v in (bank_by_id[cid].get("metadata") or {}).items() if k != "draft_only"}
        meta.update({"validation_result": "selected", "estimated_effect": coefficients[cid],
                     "contribution_rank": selection["rank"][cid], "draft_order": by_id[cid]["order"],
                     "confidence_interval": estimates["reward"].get("confidence_intervals", {}).get(cid)})
        selected_records.append({"skill_id": cid, "version": "active-1", "enabled": True,
                                 "content": bank_by_id[cid]["content"], "metadata": meta})
    title = draft.get("skill_title") or "skills"
    selected_bank = build_skillbank(selected_records, bank_version=SELECTED_BANK_VERSION, metadata={
        "skill_title": title, "gate_status": {"gate_a": "passed", "gate_b": "not_run"}, "draft_sha256": draft_sha,
        "assignment_sha256": assignments["assignment_sha256"], "active_skill_budget": budget,
        "selected_count": len(selection["selected"]), "selected_chunk_ids": selection["selected"],
        "injection_order": "canonical_draft_order", "estimator": estimator, "bare_baseline": semantic_baseline})
    assert selected_bank["schema_version"] == SKILLBANK_SCHEMA
    bank_out = write_json_atomic(out / "selected_skillbank.json", selected_bank)
    body = "\n\n".join(bank_by_id[c]["content"] for c in selection["selected"]) or "_Gate A found no strictly positive chunks._"
    md = f"# {title}\n\n> Active cold-start skill frozen by Gate A. Gate B is evaluation-only.\n\n{body}\n"
    (out / ".selected_skill.md.tmp").write_text(md, encoding="utf-8")
    (out / ".selected_skill.md.tmp").replace(out / "selected_skill.md")
    ledger = io.StringIO()
    for cid in chunk_ids:
        ledger.write(json.dumps({"candidate_id": cid, "operation": "ADD", "stage": "cold_start", "chunk_id": cid,
                                 "source_label": by_id[cid].get("source_label"),
                                 "validation_result": selection["status"][cid], "estimated_effect": coefficients[cid],
                                 "contribution_rank": selection["rank"][cid],
                                 "validation_assignment_sha256": assignments["assignment_sha256"],
                                 "validation_estimator": PAIRED_ESTIMATOR_NAME,
                                 "bare_validation_observations_sha256": baseline.digest["observations_sha256"]},
                                ensure_ascii=False) + "\n")
    (out / ".proposal_ledger.jsonl.tmp").write_text(ledger.getvalue(), encoding="utf-8")
    (out / ".proposal_ledger.jsonl.tmp").replace(out / "proposal_ledger.jsonl")
    envs = {}
    for rec in treated.values():
        for key in ("model", "environment", "prompt", "runtime"):
            obj = (rec.get("provenance") or {}).get(key)
            envs.setdefault(fingerprint(obj), obj)
    gate_manifest["input"]["observed_provenance"] = [envs[k] for k in sorted(envs)]
    gate_manifest["status"] = "complete"
    gate_manifest["output"] = {"contributions_sha256": fingerprint(contrib_doc),
                               "selected_skillbank_sha256": fingerprint(selected_bank),
                               "selected_chunk_ids": selection["selected"]}
    write_json_atomic(manifest_path, gate_manifest)
    return GateAResult(status="complete", output_dir=out, selected_chunk_ids=selection["selected"],
                       contributions=contrib_doc, selected_skillbank_path=bank_out, manifest_path=manifest_path,
                       masked_run=result)


def _write_contributions_csv(path: Path, contributions: list[dict[str, Any]], aux: list[str]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["chunk_id", "draft_order", "title", "coefficient_reward"] + [f"coefficient_{m}" for m in aux]
                    + ["rank", "status"])
    for c in contributions:
        writer.writerow([c["chunk_id"], c["draft_order"], c["title"], repr(c["coefficient"])]
                        + [repr(c["auxiliary_coefficients"][m]) for m in aux] + [c["rank"], c["status"]])
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(buffer.getvalue(), encoding="utf-8")
    tmp.replace(path)


# =========================================================================== online gate (spec §17)

ONLINE_POOL_MAX_DEFAULT = 6


def build_candidate_pool(
    active_bank: dict[str, Any],
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
    """
    from shopsimrl_core._versions import CANDIDATE_POOL_SCHEMA

    current = [s for s in active_bank.get("skills", []) if s.get("enabled") is not False]
    current_skills = [{"skill_id": s["skill_id"], "version": str(s.get("version", "1")), "content": s["content"],
                       "metadata": dict(s.get("metadata") or {})} for s in current]
    by_label = {}
    for s in current_skills:
        label = s["metadata"].get("source_label")
        if label and label not in by_label:
            by_label[label] = s["skill_id"]
    active_contents = {s["content"] for s in current_skills}
    pool_candidates = []
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
            "current_skillbank_sha256": fingerprint(active_bank), "current_skills": current_skills,
            "candidates": pool_candidates}
    return {**core, "created_at": _now(), "pool_sha256": fingerprint(core)}


def validate_pool(pool: dict[str, Any], source: str = "<pool>") -> None:
    """Pool validation of spec §17.1.

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
        if c.get("operation") not in ("ADD", "REWRITE") or not isinstance(c.get("content"), str) or not c["content"].strip():
            raise bad(f"candidate {c.get('candidate_id')}: operation must be ADD or REWRITE with non-blank content")
        if c["operation"] == "ADD" and c.get("target_chunk_id"):
            raise bad(f"candidate {c['candidate_id']}: ADD must have no target")
        if c["operation"] == "REWRITE" and c.get("target_chunk_id") not in ids:
            raise bad(f"candidate {c['candidate_id']}: REWRITE must target an active chunk id")


def online_slots(pool: dict[str, Any]) -> list[dict[str, Any]]:
    """Slots of spec §17.2: each current chunk (old version, then its rewrites by candidate id),
    then each ADD candidate as a singleton slot, in candidate-id order."""
    rewrites: dict[str, list[str]] = {}
    adds: list[str] = []
    for c in sorted(pool["candidates"], key=lambda c: c["candidate_id"]):
        if c["operation"] == "REWRITE":
            rewrites.setdefault(c["target_chunk_id"], []).append(c["candidate_id"])
        else:
            adds.append(c["candidate_id"])
    slots = [{"slot_id": s["skill_id"], "old_version_id": s["skill_id"], "versions": [s["skill_id"]] + rewrites.get(s["skill_id"], [])}
             for s in pool["current_skills"]]
    slots += [{"slot_id": cid, "old_version_id": None, "versions": [cid]} for cid in adds]
    return slots


def build_online_assignments(jobs: Sequence[Any], pool: dict[str, Any], *, mask_seed: int) -> dict[str, Any]:
    """The ``shopsimrl-online-skill-assignments-v1`` document: one uniform state per slot and episode
    (absent or exactly one version), drawn as ``u64_be(SHA-256(...:{slot_id})[0:8]) mod (versions + 1)``."""
    from shopsimrl_core._versions import ONLINE_ASSIGNMENTS_SCHEMA

    slots = online_slots(pool)
    columns = [v for slot in slots for v in slot["versions"]]
    assignments = []
    for job in jobs:
        states: dict[str, str | None] = {}
        included: list[str] = []
        for slot in slots:
            k = mask_draw(mask_seed, job.split, job.task_id, job.sample_id, slot["slot_id"]) % (len(slot["versions"]) + 1)
            chosen = slot["versions"][k - 1] if k else None
            states[slot["slot_id"]] = chosen
            if chosen is not None:
                included.append(chosen)
        assignments.append({"episode_id": job.episode_id, "task_id": job.task_id, "sample_id": job.sample_id,
                            "seed": job.seed, "split": job.split, "mask": [1 if c in included else 0 for c in columns],
                            "included_chunk_ids": included, "slot_states": states})
    core = {"mask_seed": mask_seed, "pool_sha256": pool["pool_sha256"], "columns": columns, "slots": slots,
            "assignments": assignments}
    return {"schema_version": ONLINE_ASSIGNMENTS_SCHEMA, "created_at": _now(), **core,
            "assignment_sha256": fingerprint(core)}


class OnlineAssignedSkills(_AssignedSkills):
    """``SkillProvider`` for the online gate: each episode's chosen versions, in slot order (§11.4)."""

    def __init__(self, pool: dict[str, Any], assignments: dict[str, Any]) -> None:
        self._records = {s["skill_id"]: s for s in pool["current_skills"]}
        for c in pool["candidates"]:
            self._records[c["candidate_id"]] = {"skill_id": c["candidate_id"], "version": c.get("version", "candidate"),
                                                "content": c["content"], "metadata": dict(c.get("metadata") or {})}
        self._lookup = {(a["split"], a["task_id"], a["sample_id"]): list(a["included_chunk_ids"])
                        for a in assignments["assignments"]}
        self._identity = {
            "provider": "assigned_json_skillbank",
            "bank": {"provider": "online_intervention_bank", "pool_sha256": pool["pool_sha256"],
                     "skill_ids": list(assignments["columns"])},
            "assignment": {"schema_version": assignments["schema_version"], "pool_sha256": pool["pool_sha256"],
                           "assignment_sha256": assignments["assignment_sha256"], "mask_seed": assignments["mask_seed"]},
        }

    _kind = "online"

    def select(self, context: dict[str, Any]) -> list[dict[str, Any]]:
        """The chosen versions of this episode (spec §11.1 records, ``selection_scope: global``)."""
        from shopsimrl_core.episode._skillbank import skill_record

        _, chosen = self._assigned(context)
        return [skill_record(self._records[i], "global") for i in chosen]


def select_online(
    coefficients: dict[str, float], pool: dict[str, Any], slots: Sequence[dict[str, Any]], budget: int
) -> dict[str, Any]:
    """Selection with ADD and REWRITE (spec §17.3): rewrite winners, then strictly positive top K.

    Returns ``{"status", "rank", "winners", "selected" (ordered by (order, logical id)), "logical",
    "order"}`` keyed by intervention id.
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
    chosen = [v for v in ranked if coefficients[v] > 0][:budget]
    for v in survivors:
        if v in chosen:
            status[v] = "selected"
        elif v in current_ids:
            status[v] = "retired"
        else:
            status[v] = "non_positive" if coefficients[v] <= 0 else "budget_excluded"
    selected = sorted(chosen, key=lambda v: (order[v], logical[v]))
    return {"status": status, "rank": rank, "winners": winners, "selected": selected, "logical": logical, "order": order}


@dataclass
class OnlineGateConfig:
    """Online gate settings (spec §17.1; ``bootstrap_*`` are this project's additions)."""

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


def run_online_gate(settings: OnlineGateConfig, *, runner: Runner | None = None, **run_kwargs: Any) -> GateAResult:
    """Run (or resume) the online validation gate of spec §17 and write its outputs.

    Same paired design as Gate A, with rewrite slots (absent / old / one rewrite, mutually
    exclusive). Writes ``mask_assignments.json``, the masked run, ``contributions.json``,
    ``proposal_ledger.jsonl``, ``selected_skillbank.json`` (``online-<round>-selected-v1``),
    ``selected_skill.md`` and ``online_gate_manifest.json``.

    Raises:
        SkillError: pool, config, preflight, design or pairing problems (spec messages).
    """
    from shopsimrl_core.runs._config import load_config
    from shopsimrl_core.runs._plan import build_plan
    from shopsimrl_core._versions import ONLINE_CONTRIBUTIONS_SCHEMA, ONLINE_GATE_MANIFEST_SCHEMA

    out = Path(settings.output_dir)
    config = load_config(settings.experiment_config)
    _require_gate_config(config, settings.experiment_config)
    if not config.model.checkpoint_id:
        raise _gate_error(f"{settings.experiment_config}: the online gate requires model.checkpoint_id", code="gate-config")
    if settings.active_skill_budget < 1:
        raise _gate_error("online_gate.active_skill_budget must be >= 1", code="gate-config")
    config = config.model_copy(update={"experiment": config.experiment.model_copy(
        update={"name": out.name, "output_dir": str(out.parent)})})
    pool = _load_json(Path(settings.candidate_pool_path), "candidate pool")
    validate_pool(pool, str(settings.candidate_pool_path))
    plan = build_plan(config)
    baseline = preflight_bare_run(settings.bare_run_dir, plan.semantic, send_seed=config.model.send_seed)
    assignments = build_online_assignments(plan.jobs, pool, mask_seed=settings.mask_seed)
    assignment_path = out / "mask_assignments.json"
    if assignment_path.exists():
        existing = _load_json(assignment_path, "mask assignments")
        if existing.get("assignment_sha256") != assignments["assignment_sha256"]:
            raise _gate_error(f"{assignment_path}: belongs to another pool, seed or job list; use a new gate output_dir",
                              code="gate-resume-mismatch")
        assignments = existing
    check_design([a["mask"] for a in assignments["assignments"]])
    out.mkdir(parents=True, exist_ok=True)
    if not assignment_path.exists():
        write_json_atomic(assignment_path, assignments)
    semantic_baseline = {k: v for k, v in baseline.digest.items() if k != "run_dir"}
    block = {"online_validation_gate": {"estimator": PAIRED_ESTIMATOR_NAME, "bare_baseline": semantic_baseline,
                                        "pool_sha256": pool["pool_sha256"],
                                        "assignment_sha256": assignments["assignment_sha256"],
                                        "active_skill_budget": settings.active_skill_budget,
                                        "rewrite_treatment": "mutually_exclusive_absent_old_new"}}
    if runner is None:
        from shopsimrl_core.runs._evaluator import run_evaluation as runner  # type: ignore[no-redef]
    result = runner(config, skill_provider=OnlineAssignedSkills(pool, assignments), plan_blocks=block, **run_kwargs)
    counts = result.summary.get("counts", {})
    manifest: dict[str, Any] = {
        "schema_version": ONLINE_GATE_MANIFEST_SCHEMA, "created_at": _now(), "status": "incomplete",
        "config": {"name": settings.name, "output_dir": str(out), "experiment_config": str(settings.experiment_config),
                   "bare_run_dir": str(settings.bare_run_dir), "candidate_pool_path": str(settings.candidate_pool_path),
                   "mask_seed": settings.mask_seed, "active_skill_budget": settings.active_skill_budget},
        "protocol": {"split": "val", "masking": "uniform_absent_or_one_version_per_logical_slot",
                     "rewrite_treatment": "mutually_exclusive_absent_old_new",
                     "selection": "replacement_winner_then_strictly_positive_top_k",
                     "estimator": PAIRED_ESTIMATOR_NAME, "formula": PAIRED_ESTIMATOR_FORMULA},
        "input": {"pool_sha256": pool["pool_sha256"], "assignment_sha256": assignments["assignment_sha256"],
                  "round_id": pool.get("round_id"), "proposal_checkpoint": pool.get("proposal_checkpoint"),
                  "evaluation_checkpoint": config.model.checkpoint_id, "bare_baseline": baseline.digest},
        "summary": result.summary, "output": {},
    }
    manifest_path = out / "online_gate_manifest.json"
    if counts.get("failed") or counts.get("coverage") != 1.0:
        write_json_atomic(manifest_path, manifest)
        return GateAResult(status="incomplete", output_dir=out, manifest_path=manifest_path, masked_run=result)

    treated = read_validation_traces(out / "traces.jsonl")
    rows = pair_observations(assignments, treated, baseline.traces)
    for row, a in zip(rows, assignments["assignments"]):
        row["slot_states"] = a["slot_states"]
    columns = assignments["columns"]
    estimates = estimate(rows, columns, bootstrap_samples=settings.bootstrap_samples,
                         bootstrap_seed=settings.bootstrap_seed, confidence_level=settings.confidence_level)
    coefficients = estimates["reward"]["coefficients"]
    choice = select_online(coefficients, pool, assignments["slots"], settings.active_skill_budget)
    candidates = {c["candidate_id"]: c for c in pool["candidates"]}
    current = {s["skill_id"]: s for s in pool["current_skills"]}
    aux = [m for m in estimates if m != "reward"]
    contributions = []
    for v in columns:
        contributions.append({
            "intervention_id": v, "kind": "current" if v in current else "candidate",
            "logical_chunk_id": choice["logical"][v],
            "operation": "KEEP" if v in current else candidates[v]["operation"], "order": choice["order"][v],
            "coefficient": coefficients[v], "rank": choice["rank"].get(v), "status": choice["status"][v],
            "auxiliary_coefficients": {m: estimates[m]["coefficients"][v] for m in aux},
            "confidence_interval": estimates["reward"].get("confidence_intervals", {}).get(v),
        })
    estimator = {"name": PAIRED_ESTIMATOR_NAME, "formula": PAIRED_ESTIMATOR_FORMULA, "fit_intercept": False,
                 "baseline": "same_task_bare_validation", "primary_outcome": "reward",
                 "rewrite_rule": "mutually_exclusive_family_argmax_old_on_tie",
                 "selection_rule": "rewrite_winners_then_strictly_positive_top_k", "numerical_zero_tolerance": 1e-12}
    contrib_doc = {
        "schema_version": ONLINE_CONTRIBUTIONS_SCHEMA, "created_at": _now(), "estimator": estimator,
        "pool_sha256": pool["pool_sha256"], "assignment_sha256": assignments["assignment_sha256"],
        "observations": len(rows), "active_skill_budget": settings.active_skill_budget,
        "selected_intervention_ids": choice["selected"], "selected_count": len(choice["selected"]),
        "replacement_winners": choice["winners"], "estimates": estimates, "contributions": contributions,
        "observations_table": rows, "bare_baseline": baseline.digest,
    }
    write_json_atomic(out / "contributions.json", contrib_doc)

    from shopsimrl_core.skills._bank import build_skillbank

    records = []
    for v in choice["selected"]:
        source = current[v] if v in current else candidates[v]
        meta = dict(source.get("metadata") or {})
        meta.update({"validation_result": "selected", "estimated_effect": coefficients[v],
                     "contribution_rank": choice["rank"][v], "selected_intervention_id": v,
                     "confidence_interval": estimates["reward"].get("confidence_intervals", {}).get(v)})
        records.append({"skill_id": choice["logical"][v],
                        "version": str(source.get("version", "1" if v in current else "candidate")),
                        "enabled": True, "content": source["content"], "metadata": meta})
    round_id = pool.get("round_id") or "round"
    bank = build_skillbank(records, bank_version=f"online-{round_id}-selected-v1", metadata={
        "round_id": round_id, "proposal_checkpoint": pool.get("proposal_checkpoint"), "pool_sha256": pool["pool_sha256"],
        "assignment_sha256": assignments["assignment_sha256"], "active_skill_budget": settings.active_skill_budget,
        "selected_count": len(choice["selected"]), "selected_intervention_ids": choice["selected"],
        "estimator": estimator, "bare_baseline": semantic_baseline})
    bank_out = write_json_atomic(out / "selected_skillbank.json", bank)
    body = "\n\n".join(r["content"] for r in records) or "_The online gate found no strictly positive chunks._"
    md = f"# Online skills {round_id}\n\n> Active bank selected by the online gate.\n\n{body}\n"
    (out / ".selected_skill.md.tmp").write_text(md, encoding="utf-8")
    (out / ".selected_skill.md.tmp").replace(out / "selected_skill.md")
    ledger = io.StringIO()
    for c in pool["candidates"]:
        v = c["candidate_id"]
        ledger.write(json.dumps({
            "candidate_id": v, "operation": c["operation"], "target_chunk_id": c.get("target_chunk_id"),
            "failure_mechanism": (c.get("metadata") or {}).get("source_label"), "stage": "online",
            "proposal_checkpoint": pool.get("proposal_checkpoint"), "evaluation_checkpoint": config.model.checkpoint_id,
            "validation_estimator": PAIRED_ESTIMATOR_NAME,
            "bare_validation_observations_sha256": baseline.digest["observations_sha256"], "intervention_id": v,
            "validation_result": choice["status"][v], "estimated_effect": coefficients[v],
            "contribution_rank": choice["rank"].get(v), "pool_sha256": pool["pool_sha256"],
            "assignment_sha256": assignments["assignment_sha256"], "content": c["content"]}, ensure_ascii=False) + "\n")
    (out / ".proposal_ledger.jsonl.tmp").write_text(ledger.getvalue(), encoding="utf-8")
    (out / ".proposal_ledger.jsonl.tmp").replace(out / "proposal_ledger.jsonl")
    manifest["status"] = "complete"
    manifest["output"] = {"contributions_sha256": fingerprint(contrib_doc), "selected_skillbank_sha256": fingerprint(bank),
                          "selected_intervention_ids": choice["selected"]}
    write_json_atomic(manifest_path, manifest)
    return GateAResult(status="complete", output_dir=out, selected_chunk_ids=choice["selected"],
                       contributions=contrib_doc, selected_skillbank_path=bank_out, manifest_path=manifest_path,
                       masked_run=result)
