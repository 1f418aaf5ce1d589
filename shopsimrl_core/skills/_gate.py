"""What both paired gates share: masks, estimation, run plumbing and the one finishing path.

The contract is runtime-semantics §14–§15; reading and pairing the traces is ``_pairing``.

A gate runs every val episode twice: bare (reused from an existing bare run after the §14.2
pairing checks) and with a per-episode assignment of skill chunks. The per-episode differences
are regressed on the assignment masks without an intercept (§15, ``analysis._ols``). Gate A
(``_gate_a``) masks a cold-start draft; the online gate (``_online_gate``) tests ADD and REWRITE
proposals against the active bank. Both end in :func:`finish_gate`, which pairs, estimates, lets
the gate decide, and writes ``contributions.json``, the selected SkillBank, ``selected_skill.md``,
``proposal_ledger.jsonl`` and the gate manifest in one order.

This project adds task-level bootstrap intervals for every coefficient (reported, never used to
select) and the sign-flip noise bar; both gates choose with the same selection rules
(:data:`SELECTION_RULES`: ``published``, the default that reproduces published rounds, or
``above_noise``) through the one K rule, :func:`top_k`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shopsimrl_core._hashing import fingerprint, write_json_atomic, write_text_atomic
from shopsimrl_core.analysis._ols import (
    bootstrap_coefficients,
    check_design,
    fit_no_intercept_ols,
    sign_flip_noise_bar,
)
from shopsimrl_core.documents._base import Document
from shopsimrl_core.documents._registry import document_for
from shopsimrl_core.documents._runs import EvalSummary
from shopsimrl_core.documents._skills import ChunkContributions, OnlineContributions
from shopsimrl_core.skills._pairing import (
    BareBaseline,
    _gate_error,
    _load_json,
    pair_observations,
    preflight_bare_run,
    read_validation_traces,
    trace_outcomes,
)

__all__ = [
    "GateAResult",
    "GateDecision",
    "SELECTION_RULES",
    "require_selection_rule",
    "noise_exclusions",
    "top_k",
    "PairedDesign",
    "Runner",
    "gate_config_problems",
    "mask_draw",
    "estimate",
    "load_gate_config",
    "resume_assignments",
    "run_masked",
    "run_summary",
    "finish_gate",
    # re-exported from _pairing (the gates and the conformance tests import them from here)
    "BareBaseline",
    "read_validation_traces",
    "trace_outcomes",
    "preflight_bare_run",
    "pair_observations",
]


def _now() -> str:
    return datetime.now(UTC).isoformat()


# --------------------------------------------------------------------------- masks


def mask_draw(mask_seed: int, split: str, task_id: int, sample_id: int, chunk_id: str) -> int:
    """``u64_be(SHA-256(UTF-8 "{seed}:{split}:{task}:{sample}:{chunk}")[0:8])`` (runtime-semantics §16.2)."""
    text = f"{mask_seed}:{split}:{task_id}:{sample_id}:{chunk_id}"
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")



class _AssignedSkills:
    """What both gate providers share: a JSON-safe identity copy and the per-episode assignment lookup."""

    _identity: dict[str, Any]
    _lookup: dict[tuple[Any, ...], list[str]]
    _kind: str

    @property
    def identity(self) -> dict[str, Any]:
        copy: dict[str, Any] = json.loads(json.dumps(self._identity))
        return copy

    def _assigned(self, context: dict[str, Any]) -> tuple[tuple[Any, ...], list[str]]:
        key = (context.get("split"), context.get("task_id"), context.get("sample_id"))
        if key not in self._lookup:
            raise _gate_error(
                f"no {self._kind} assignment for episode {key}; rebuild mask_assignments.json for this plan"
            )
        return key, self._lookup[key]


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
    noise_samples: int = 1000,
    noise_quantile: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """Per metric: coefficients (§15), observation means and task-bootstrap intervals (additive).

    The means are correctly rounded (``math.fsum``), as the published ones are. For the primary
    outcome (``reward``) and *noise_samples* > 0 the estimate also carries the sign-flip
    ``noise_bar`` (the *noise_quantile* of the largest |β| under no effect), ``within_noise`` per
    chunk (``|β| ≤ noise_bar``) and the max-T ``adjusted_p_values`` (``analysis._ols.sign_flip_noise_bar``);
    they are reported, and used to select only by the ``above_noise`` selection rule.
    """
    design = [r["mask"] for r in rows]
    groups = [r["task_id"] for r in rows]
    out: dict[str, dict[str, Any]] = {}
    for metric, deltas in _metric_deltas(rows).items():
        beta = fit_no_intercept_ols(design, deltas)
        masked = [r["reward"] if metric == "reward" else r["reward_detail"][metric] for r in rows]
        bare = [r["bare_reward"] if metric == "reward" else r["bare_reward_detail"][metric] for r in rows]
        boot = (
            bootstrap_coefficients(
                design,
                deltas,
                groups,
                metric=metric,
                samples=bootstrap_samples,
                seed=bootstrap_seed,
                level=confidence_level,
            )
            if bootstrap_samples > 0
            else None
        )
        out[metric] = {
            "intercept": 0.0,
            "coefficients": dict(zip(chunk_ids, beta)),
            "observations": len(rows),
            "masked_mean": math.fsum(masked) / len(masked),
            "bare_mean": math.fsum(bare) / len(bare),
            "delta_mean": math.fsum(deltas) / len(deltas),
        }
        if boot is not None:
            out[metric]["confidence_intervals"] = dict(zip(chunk_ids, boot["intervals"]))
            out[metric]["bootstrap"] = {k: v for k, v in boot.items() if k != "intervals"}
        if metric == "reward" and noise_samples > 0:
            noise = sign_flip_noise_bar(
                design, deltas, beta, metric=metric, samples=noise_samples, seed=bootstrap_seed,
                quantile=noise_quantile,
            )
            bar = noise["noise_bar"]
            out[metric]["noise_bar"] = {k: v for k, v in noise.items() if k != "adjusted_p_values"}
            out[metric]["within_noise"] = {c: abs(b) <= bar for c, b in zip(chunk_ids, beta)}
            out[metric]["adjusted_p_values"] = dict(zip(chunk_ids, noise["adjusted_p_values"]))
    return out


SELECTION_RULES: dict[str, str] = {
    "published": "strictly_positive_top_k",
    "above_noise": "above_noise_bar_top_k",
}
"""Both gates' selection rules → the K rule they record (Gate A as ``estimator.selection_rule``, the
online gate after its rewrite step). ``published`` (§16.3, §17.3, the default) reproduces published
rounds; ``above_noise`` also keeps out coefficients within the sign-flip noise bar, which holds the chance
of selecting any no-effect column at most 5 % (docs/statistics.md)."""


def require_selection_rule(rule: str, setting: str) -> None:
    """Refuse a selection rule that is not a key of :data:`SELECTION_RULES`; *setting* names the option.

    Raises:
        SkillError (``gate-config``): an unknown rule, named with the valid ones.
    """
    if rule not in SELECTION_RULES:
        raise _gate_error(f"{setting} must be one of {', '.join(SELECTION_RULES)} (got {rule!r})", code="gate-config")


def noise_exclusions(reward: Mapping[str, Any], rule: str, setting: str) -> dict[str, bool] | None:
    """What *rule* keeps out as noise: None for ``published``, the estimate's ``within_noise`` for ``above_noise``.

    *reward* is the gate's ``estimates["reward"]``; *setting* names the option for the error.

    Raises:
        SkillError (``gate-config``): ``above_noise`` without a noise bar in the estimate.
    """
    if rule != "above_noise":
        return None
    within = reward.get("within_noise")
    if within is None:
        raise _gate_error(f"{setting} above_noise needs the noise bar; run with noise samples > 0", code="gate-config")
    return dict(within)


def top_k(
    ranked: Sequence[str],
    coefficients: Mapping[str, float],
    budget: int,
    within_noise: Mapping[str, bool] | None = None,
) -> list[str]:
    """The gates' K rule (§16.3, §17.3): the first *budget* of *ranked* with β > 0 strictly, noise marks left out.

    *ranked* is best first; ids *within_noise* marks (the ``above_noise`` rule passes the estimate's
    ``within_noise``) are not eligible. The one implementation both gates select with, so a rule can
    never differ between them.
    """
    noisy = within_noise or {}
    return [c for c in ranked if coefficients[c] > 0 and not noisy.get(c, False)][:budget]


def _noise_fields(reward: dict[str, Any], column: str) -> dict[str, Any]:
    """A contribution row's additive ``within_noise`` / ``adjusted_p_value`` (absent without a noise bar)."""
    if "within_noise" not in reward:
        return {}
    return {"within_noise": reward["within_noise"][column], "adjusted_p_value": reward["adjusted_p_values"][column]}


# --------------------------------------------------------------------------- gate plumbing


@dataclass
class GateAResult:
    """What the gate wrote and decided."""

    status: str
    output_dir: Path
    selected_chunk_ids: list[str] = field(default_factory=list)
    contributions: ChunkContributions | OnlineContributions | None = None
    """``contributions.json`` as written (Gate A's or the online gate's model); None when incomplete."""
    selected_skillbank_path: Path | None = None
    manifest_path: Path | None = None
    masked_run: Any = None


Runner = Callable[..., Any]
"""``(config, *, skill_provider, plan_blocks) -> RunResult`` — ``run_evaluation`` by default."""


def gate_config_problems(config: Any) -> list[str]:
    """What stops *config* (an ``EvalConfig``) from being a paired-validation config (runtime-semantics §14.1).

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
        raise _gate_error(
            f"{source}: a gate config needs split val, repeats 1, sample_size null "
            "and skills.path null (the gate owns skill injection)",
            code="gate-config",
        )


def load_gate_config(experiment_config: Path, out: Path) -> Any:
    """Load a gate's experiment config, check it (§14.1) and point its run directory at *out*.

    Raises:
        SkillError (``gate-config``): the config is not a paired-validation config.
    """
    from shopsimrl_core.runs.config._config import load_config

    config = load_config(experiment_config)
    _require_gate_config(config, experiment_config)
    return config.model_copy(
        update={"experiment": config.experiment.model_copy(update={"name": out.name, "output_dir": str(out.parent)})}
    )


def resume_assignments(
    path: Path, fresh: dict[str, Any], inputs: str, model: type[Document] | None = None
) -> dict[str, Any]:
    """The assignment document to use: *fresh*, or the one already at *path* when it is identical.

    *inputs* names what the assignment depends on, for the error (e.g. ``draft, seed or job list``).
    Then the design is fitted on zeros, so a rank-deficient mask fails before any rollout.

    Raises:
        SkillError (``gate-resume-mismatch``): *path* holds the assignment of other inputs.
        SkillError (``rank-deficient-design`` / ``ols-too-few-observations``): from the design check.
    """
    assignments = fresh
    if path.exists():
        existing = _load_json(path, "mask assignments", model)
        if existing.get("assignment_sha256") != fresh["assignment_sha256"]:
            raise _gate_error(
                f"{path}: belongs to another {inputs}; use a new gate output_dir", code="gate-resume-mismatch"
            )
        assignments = existing
    check_design([a["mask"] for a in assignments["assignments"]])
    return assignments


def run_masked(
    out: Path,
    config: Any,
    assignments: dict[str, Any],
    provider: Any,
    block: dict[str, Any],
    runner: Runner | None,
    run_kwargs: dict[str, Any],
) -> Any:
    """Write the assignment file (once) and run (or resume) the masked val run in *out*."""
    out.mkdir(parents=True, exist_ok=True)
    assignment_path = out / "mask_assignments.json"
    if not assignment_path.exists():
        _write_document(assignment_path, assignments)
    run = runner
    if run is None:
        from shopsimrl_core.runs.execution._evaluator import run_evaluation

        run = run_evaluation
    return run(config, skill_provider=provider, plan_blocks=block, **run_kwargs)


def run_summary(result: Any) -> dict[str, Any]:
    """The run summary of a runner's result as the JSON object a gate manifest records (``{}`` without one).

    A ``RunResult`` carries an ``EvalSummary`` (its ``to_json()``, the bytes of ``summary.json``); a
    custom runner's result may carry the plain object.
    """
    summary = getattr(result, "summary", None)
    if isinstance(summary, EvalSummary):
        return summary.to_json()
    return summary if isinstance(summary, dict) else {}


@dataclass
class GateDecision:
    """What a gate decided from the paired estimates, and the documents that record it.

    ``selected`` are the kept ids; ``selected_key`` names them in the manifest's ``output``;
    ``extra_files`` (name → text) are written after ``contributions.json``; ``manifest_input``
    is merged into the manifest's ``input`` block.
    """

    selected: list[str]
    contributions: dict[str, Any]
    bank: dict[str, Any]
    markdown: str
    ledger: list[dict[str, Any]]
    selected_key: str
    extra_files: dict[str, str] = field(default_factory=dict)
    manifest_input: dict[str, Any] = field(default_factory=dict)


Decide = Callable[[list[dict[str, Any]], dict[str, dict[str, Any]], dict[str, dict[str, Any]]], GateDecision]
"""``(rows, estimates, treated traces) -> GateDecision`` — the gate-specific part of finishing."""


@dataclass
class PairedDesign:
    """The paired design a gate estimates: assignments, columns and bootstrap settings."""

    assignments: dict[str, Any]
    columns: list[str]
    bootstrap_samples: int
    bootstrap_seed: int
    confidence_level: float
    row_extra: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def finish_gate(
    out: Path,
    manifest_name: str,
    manifest: dict[str, Any],
    result: Any,
    baseline: BareBaseline,
    design: PairedDesign,
    decide: Decide,
) -> GateAResult:
    """The finishing path of both gates, after the masked run.

    When the masked run is incomplete (failed episodes or coverage below 1) only the manifest is
    written (``status: incomplete``). Otherwise: read the treated traces (§14.3), pair them with the
    bare ones (§14.4; ``design.row_extra`` adds gate-specific columns to each row), estimate every
    metric (§15), let *decide* select, then write ``contributions.json``, the extra files,
    ``selected_skillbank.json``, ``selected_skill.md``, ``proposal_ledger.jsonl`` and finally the
    manifest with ``status: complete`` and the output digests.

    Raises:
        SkillError: pairing problems (``gate-pairing``), or from the estimator.
    """
    manifest_path = out / manifest_name
    counts = run_summary(result).get("counts", {})
    if counts.get("failed") or counts.get("coverage") != 1.0:
        _write_document(manifest_path, manifest)
        return GateAResult(status="incomplete", output_dir=out, manifest_path=manifest_path, masked_run=result)

    treated = read_validation_traces(out / "traces.jsonl")
    rows = pair_observations(design.assignments, treated, baseline.traces)
    if design.row_extra is not None:
        for row, a in zip(rows, design.assignments["assignments"]):
            row.update(design.row_extra(a))
    estimates = estimate(
        rows,
        design.columns,
        bootstrap_samples=design.bootstrap_samples,
        bootstrap_seed=design.bootstrap_seed,
        confidence_level=design.confidence_level,
    )
    decision = decide(rows, estimates, treated)
    contributions = _write_document(out / "contributions.json", decision.contributions)
    if not isinstance(contributions, (ChunkContributions, OnlineContributions)):  # the decision names the version
        raise _gate_error(f"{out / 'contributions.json'}: {contributions.KIND} is not a contributions document")
    for name, text in decision.extra_files.items():
        write_text_atomic(out / name, text)
    bank_out = out / "selected_skillbank.json"
    _write_document(bank_out, decision.bank)
    write_text_atomic(out / "selected_skill.md", decision.markdown)
    write_text_atomic(
        out / "proposal_ledger.jsonl", [json.dumps(row, ensure_ascii=False) + "\n" for row in decision.ledger]
    )
    manifest["input"].update(decision.manifest_input)
    manifest["status"] = "complete"
    manifest["output"] = {
        "contributions_sha256": fingerprint(decision.contributions),
        "selected_skillbank_sha256": fingerprint(decision.bank),
        decision.selected_key: decision.selected,
    }
    _write_document(manifest_path, manifest)
    return GateAResult(
        status="complete",
        output_dir=out,
        selected_chunk_ids=decision.selected,
        contributions=contributions,
        selected_skillbank_path=bank_out,
        manifest_path=manifest_path,
        masked_run=result,
    )


def _write_document(path: Path, document: dict[str, Any]) -> Document:
    # Every gate output goes through its typed model on the way out, so a writer bug surfaces here
    # (as a one-line DocumentError) instead of in the next reader; the bytes are the model's dump,
    # and the model is what the gate hands back.
    model = document_for(document, str(path))
    write_json_atomic(path, model.to_json())
    return model
