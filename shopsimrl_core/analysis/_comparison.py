"""The paired checkpoint comparison of two run directories (runtime-semantics §20).

Reads both runs through ``RunStore`` (the manifest and the latest record per planned episode),
pairs complete episodes, averages metrics per task and bootstraps the task-level differences with
``_stats.paired_bootstrap_ci``. Writes nothing: the caller decides where the document goes.

Every mean is a correctly rounded sum (``math.fsum``) divided by n, so published means and
differences reproduce bit for bit whatever the summation order (issue 23).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl_core._hashing import json_list
from shopsimrl_core.analysis._power import detection_z, minimum_detectable_difference, variance_components
from shopsimrl_core.analysis._stats import paired_bootstrap_ci
from shopsimrl_core.documents._comparisons import CHECKPOINT_COMPARISON_SCHEMA, CheckpointComparison

__all__ = ["CHECKPOINT_COMPARISON_SCHEMA", "compare_runs", "paired_task_means"]

POWER = 0.8
"""The power at which every comparison reports its minimum detectable difference."""

_ALIGNED_FIELDS = ("task_split", "task_ids_sha256", "jobs", "environment", "runtime", "prompt", "skills")
INTENDED_FIELDS = ("task_split", "jobs", "environment", "runtime", "prompt", "skills", "model")
"""Plan fields a caller may name as intended differences (``model`` covers ``model.sampling``)."""


def _field_of(difference: str) -> str:
    # "skills.provider ('none' -> 'json_skillbank')" -> "skills"; task_ids_sha256 belongs to the split
    head = difference.replace("[", ".").replace(" ", ".").split(".", 1)[0]
    return "task_split" if head == "task_ids_sha256" else head


def _task_metrics(record: dict[str, Any]) -> dict[str, float]:
    final = record.get("final") or {}
    metrics: dict[str, float] = {}

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    if number(final.get("reward")):
        metrics["reward"] = float(final["reward"])
    detail = final.get("reward_detail")
    if isinstance(detail, dict):
        for key, value in detail.items():
            if key.startswith("r_") and number(value):
                metrics[key] = float(value)
    steps = json_list(record.get("steps"))
    metrics["steps"] = float(len(steps))
    n_steps = len(steps)
    proto = sum(1 for s in steps if isinstance(s, dict) and isinstance(s.get("protocol_error"), dict))
    policy = sum(1 for s in steps if isinstance(s, dict) and isinstance(s.get("policy_failure"), dict))
    actions = [s for s in steps if isinstance(s, dict) and isinstance(s.get("environment"), dict)]
    invalid = 0
    for step in actions:
        feedback = step["environment"].get("action_feedback")
        if isinstance(feedback, dict) and feedback and feedback.get("valid") is False:
            invalid += 1
    metrics["protocol_error_rate"] = proto / n_steps if n_steps else 0.0
    metrics["policy_failure_rate"] = policy / n_steps if n_steps else 0.0
    metrics["invalid_action_rate"] = invalid / len(actions) if actions else 0.0
    tokens = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "reasoning_tokens": 0}
    for step in steps:
        usage = ((step.get("model") or {}).get("usage") or {}) if isinstance(step, dict) else {}
        if not isinstance(usage, dict):
            continue
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            if isinstance(usage.get(key), int) and not isinstance(usage.get(key), bool):
                tokens[key] += usage[key]
        details = usage.get("completion_tokens_details")
        if (
            isinstance(details, dict)
            and isinstance(details.get("reasoning_tokens"), int)
            and not isinstance(details.get("reasoning_tokens"), bool)
        ):
            tokens["reasoning_tokens"] += details["reasoning_tokens"]
    metrics.update({key: float(value) for key, value in tokens.items()})
    if number(record.get("duration_ms")):
        metrics["duration_ms"] = float(record["duration_ms"])
    return metrics


def _load_side(run_dir: Path) -> tuple[dict[str, Any] | None, dict[tuple[str, int], list[dict[str, float]]], int]:
    from shopsimrl_core.runs.storage._store import RunStore, is_complete

    store = RunStore(run_dir)
    manifest = store.read_manifest()
    planned = None
    if manifest is not None and isinstance(manifest["plan"].get("jobs"), list):
        from shopsimrl_core.runs.planning._jobs import EpisodeJob

        planned = {EpisodeJob.from_dict(job).episode_id for job in manifest["plan"]["jobs"]}
    per_task: dict[tuple[str, int], list[dict[str, float]]] = {}
    episodes: dict[str, tuple[tuple[str, int], dict[str, float]]] = {}
    incomplete = 0
    for record in store.latest_records(episode_ids=planned):
        if not is_complete(record):
            incomplete += 1
            continue
        job = record.get("job") or {}
        key = (str(job.get("split")), int(job.get("task_id", -1)))
        episodes[record["episode_id"]] = (key, _task_metrics(record))
    for eid, (key, metrics) in episodes.items():
        metrics = dict(metrics)
        metrics["_episode"] = eid  # type: ignore[assignment]
        per_task.setdefault(key, []).append(metrics)
    return manifest, per_task, incomplete


def compare_runs(
    run_dir_a: str | Path,
    run_dir_b: str | Path,
    *,
    bootstrap_samples: int = 10000,
    bootstrap_seed: int = 20260901,
    confidence_level: float = 0.95,
    rng: str = "numpy",
    strict: bool = True,
    intended: tuple[str, ...] | list[str] = (),
) -> CheckpointComparison:
    """Paired comparison of two runs of the same plan on different checkpoints (B minus A).

    Returns the ``shopsimrl-checkpoint-comparison-v1`` document as its model; ``to_json()`` is what
    ``shopsimrl compare --output`` and the Dagster ``comparison_vs_<baseline>.json`` hold.

    Pairs are ``(split, task_id, sample_id)`` episodes complete on both sides; metric values are
    averaged per task over the paired samples, then the mean task-level difference gets a paired
    percentile bootstrap interval. ``flips`` counts tasks whose success (``r_success`` mean ≥ 0.5)
    changed in each direction.

    Every metric also reports its power (additive): ``sd_difference``, the
    ``minimum_detectable_difference`` at 80 % power and α = 1 − *confidence_level* (normal paired
    design, ``analysis._power``), ``within_noise`` where the interval covers 0, and with repeats the
    ``variance_components`` that let ``shopsimrl power`` plan another number of repeats.

    *intended* names plan fields (``INTENDED_FIELDS``) whose differences are the point of the
    comparison, e.g. ``("skills",)`` for a bare run against a skills run of the same plan: those are
    reported (``alignment.intended``; ``alignment.unintended_differences`` is then empty), every other
    difference still refuses.

    Raises:
        ConfigError: with *strict*, the two plans differ in split, jobs, environment, runtime,
            prompt or skills beyond *intended* (the message lists the differing fields); an
            unknown *intended* name.
    """
    from shopsimrl_core._errors import ConfigError
    from shopsimrl_core.runs.planning._plan import plan_differences

    dir_a, dir_b = Path(run_dir_a).resolve(), Path(run_dir_b).resolve()
    manifest_a, tasks_a, incomplete_a = _load_side(dir_a)
    manifest_b, tasks_b, incomplete_b = _load_side(dir_b)
    differences: list[str] = []
    if manifest_a is not None and manifest_b is not None:
        pa = {k: manifest_a["plan"].get(k) for k in _ALIGNED_FIELDS if k in manifest_a["plan"]}
        pb = {k: manifest_b["plan"].get(k) for k in _ALIGNED_FIELDS if k in manifest_b["plan"]}
        differences = plan_differences(pa, pb)
        sampling = plan_differences(
            {"sampling": (manifest_a["plan"].get("model") or {}).get("sampling")},
            {"sampling": (manifest_b["plan"].get("model") or {}).get("sampling")},
        )
        differences.extend(f"model.{d}" for d in sampling)
    unknown = sorted(set(intended) - set(INTENDED_FIELDS))
    if unknown:
        raise ConfigError(f"intended differences {unknown} are not plan fields; use {', '.join(INTENDED_FIELDS)}",
                          code="usage")
    unintended = [d for d in differences if _field_of(d) not in set(intended)]
    if unintended and strict:
        raise ConfigError(
            f"{dir_a} vs {dir_b}: runs are not comparable; differing: {', '.join(unintended)}; "
            "compare runs of the same split, jobs, environment, runtime, prompt, skills and sampling, "
            "or name the intended difference (--intended skills for bare vs skills)",
            code="comparison-misaligned",
        )

    # Pair at episode level, then average per task.
    pairs_by_task: dict[tuple[str, int], list[tuple[dict[str, float], dict[str, float]]]] = {}
    paired_episodes = 0
    for key in sorted(set(tasks_a) & set(tasks_b)):
        by_eid_b = {m["_episode"]: m for m in tasks_b[key]}
        for ma in tasks_a[key]:
            mb = by_eid_b.get(ma["_episode"])
            if mb is not None:
                pairs_by_task.setdefault(key, []).append((ma, mb))
                paired_episodes += 1
    task_keys = sorted(pairs_by_task)
    metric_names: list[str] | None = None
    for key in task_keys:
        for ma, mb in pairs_by_task[key]:
            names = {k for k in ma if k != "_episode"} & {k for k in mb if k != "_episode"}
            metric_names = sorted(names if metric_names is None else set(metric_names) & names)
    metric_names = metric_names or []

    metrics_out: dict[str, Any] = {}
    repeated = paired_episodes > len(task_keys)
    alpha = round(1 - confidence_level, 12)  # 0.05, not 0.050000000000000044
    for metric in metric_names:
        a_vals, b_vals, diffs = [], [], []
        episode_diffs: list[float] = []
        episode_tasks: list[tuple[str, int]] = []
        for key in task_keys:
            pairs = pairs_by_task[key]
            if repeated:
                episode_diffs.extend(p[1][metric] - p[0][metric] for p in pairs)
                episode_tasks.extend(key for _ in pairs)
            a_mean = math.fsum(p[0][metric] for p in pairs) / len(pairs)
            b_mean = math.fsum(p[1][metric] for p in pairs) / len(pairs)
            a_vals.append(a_mean)
            b_vals.append(b_mean)
            diffs.append(b_mean - a_mean)
        n = len(diffs)
        a_overall, b_overall, mean_difference = paired_task_means(a_vals, b_vals)
        ci = paired_bootstrap_ci(
            diffs,
            metric=metric,
            seed=bootstrap_seed,
            samples=bootstrap_samples,
            confidence_level=confidence_level,
            rng=rng,
        )
        metrics_out[metric] = {
            "a_mean": a_overall,
            "b_mean": b_overall,
            "mean_difference": mean_difference,
            "confidence_interval": list(ci) if ci else None,
            "pairs": n,
        }
        metrics_out[metric].update(_power_fields(diffs, ci, alpha, episode_diffs, episode_tasks))

    flips = None
    if "r_success" in metric_names:
        gained = lost = both = neither = 0
        for key in task_keys:
            pairs = pairs_by_task[key]
            sa = math.fsum(p[0]["r_success"] for p in pairs) / len(pairs) >= 0.5
            sb = math.fsum(p[1]["r_success"] for p in pairs) / len(pairs) >= 0.5
            gained += (not sa) and sb
            lost += sa and not sb
            both += sa and sb
            neither += (not sa) and not sb
        flips = {"gained": gained, "lost": lost, "both_success": both, "both_failure": neither, "net": gained - lost}

    def _model(manifest: dict[str, Any] | None) -> dict[str, Any]:
        if manifest is None:
            return {}
        plan = manifest["plan"]
        model = plan.get("model") or {}
        return {
            "model_id": plan.get("model_id"),
            "checkpoint_id": model.get("checkpoint_id"),
            "plan_fingerprint": manifest.get("plan_fingerprint"),
        }

    from shopsimrl_core.runs.storage._store import utc_now

    # Built in the format's key order; the model keeps exactly these keys (to_json).
    return CheckpointComparison.model_validate({
        "schema_version": CHECKPOINT_COMPARISON_SCHEMA,
        "created_at": utc_now(),
        "runs": {"a": str(dir_a), "b": str(dir_b)},
        "models": {"a": _model(manifest_a), "b": _model(manifest_b)},
        "alignment": {
            "status": "matched" if not differences else "mismatched",
            "checked_fields": list(_ALIGNED_FIELDS) + ["model.sampling"],
            "differences": differences,
            "paired_tasks": len(task_keys),
            "paired_episodes": paired_episodes,
            "incomplete": {"a": incomplete_a, "b": incomplete_b},
            "unpaired_tasks": {
                "a": len(set(tasks_a) - set(pairs_by_task)),
                "b": len(set(tasks_b) - set(pairs_by_task)),
            },
            # additive (kept by the document model after its declared fields): what the caller allowed
            "intended": sorted(set(intended)),
            "unintended_differences": unintended,
        },
        "paired": {
            "pairs": len(task_keys),
            "difference_direction": "b_minus_a",
            "metric_aggregation": "mean_of_task_level_values",
            "bootstrap": {
                "method": "task_level_paired_percentile",
                "rng": rng,
                "samples": bootstrap_samples,
                "seed": bootstrap_seed,
                "seed_derivation": "u64_be(sha256('{seed}:{metric}')[0:8])",
                "confidence_level": confidence_level,
            },
            "metrics": metrics_out,
            "flips": flips,
            "power": {
                "method": "normal_paired_difference",
                "alpha": alpha,
                "power": POWER,
                "z": detection_z(alpha, POWER),
                "minimum_detectable_difference": "z * sd_difference / sqrt(pairs), z = z_{1-alpha/2} + z_{power}",
                "within_noise": "the confidence interval covers 0",
            },
        },
    })


def paired_task_means(a_values: Sequence[float], b_values: Sequence[float]) -> tuple[float, float, float]:
    """``(a_mean, b_mean, mean_difference)`` of task-level values paired by position (B minus A).

    The three numbers ``compare_runs`` reports for every metric: each mean is the correctly rounded
    sum (``math.fsum``) of the n values divided by n, and the difference is the mean of the
    per-task differences ``b − a`` (not ``b_mean − a_mean``, which can differ in the last bit).
    This is how the published comparisons were computed: fed the published per-task outcomes it
    reproduces their means and differences bit for bit (tests/core/test_published_numbers.py).

    Raises:
        ValueError: the two sequences differ in length, or are empty.
    """
    if len(a_values) != len(b_values) or not a_values:
        raise ValueError(
            f"paired_task_means: need two equally long non-empty sequences "
            f"(got {len(a_values)} and {len(b_values)} values)"
        )
    n = len(a_values)
    differences = [b - a for a, b in zip(a_values, b_values)]
    return math.fsum(a_values) / n, math.fsum(b_values) / n, math.fsum(differences) / n


def _power_fields(
    diffs: list[float],
    ci: tuple[float, float] | None,
    alpha: float,
    episode_diffs: list[float],
    episode_tasks: list[tuple[str, int]],
) -> dict[str, Any]:
    """Additive power keys of one metric (docs/statistics.md).

    ``sd_difference`` (n − 1) of the task-level differences, the ``minimum_detectable_difference`` at
    80 % power and level *alpha*, ``within_noise`` (the interval covers 0) and, with repeats, the
    ``variance_components`` of the episode-level differences.
    """
    import statistics

    sd = statistics.stdev(diffs) if len(diffs) >= 2 else None
    out: dict[str, Any] = {
        "sd_difference": sd,
        "minimum_detectable_difference": minimum_detectable_difference(
            None if sd is None else sd * sd, len(diffs), alpha=alpha, power=POWER
        ),
        "within_noise": None if ci is None else bool(ci[0] <= 0.0 <= ci[1]),
    }
    components = variance_components(episode_diffs, episode_tasks) if episode_diffs else None
    if components is not None:
        out["variance_components"] = {
            "between_task": components.between,
            "within_task": components.within,
            "repeats": components.repeats,
        }
    return out
