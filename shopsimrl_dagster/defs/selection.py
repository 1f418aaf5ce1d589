"""Which checkpoint to keep: ``<suite>/best_checkpoint`` and the regression check on each comparison.

Both come from the core (``shopsimrl_core.best_checkpoint`` / ``regression_against_best``: paired
task-level comparisons, docs/statistics.md); this module only turns their answers into an asset, a
blocking check and metadata.

- ``<suite>/best_checkpoint`` (unpartitioned, refreshed with the suite's progress): the registered
  checkpoint with the highest mean reward on the suite, its intervals, the runner-up, and whether the
  paired comparison tells the two apart.
- ``no_regression_vs_best`` (blocking, on ``<suite>/checkpoint_comparison``): fails when the checkpoint is
  worse than the best earlier checkpoint by more than its paired interval (the whole interval of
  new − best below zero).
"""


from collections.abc import Iterator
from typing import Any

import dagster as dg

import shopsimrl_core as core
from shopsimrl_core.documents import CheckpointComparison
from shopsimrl_core.documents._runs import SummaryInterval

from ..registry import Checkpoint
from ..report import metadata_float, rounded
from ..settings import ComparisonSettings
from .optional import optional_asset
from .resources import CheckpointRegistry, EvaluationSuites, RunStorage

__all__ = ["REGRESSION_CHECK", "regression_check_result", "build_best_checkpoint_asset"]

REGRESSION_CHECK = (
    "no_regression_vs_best",
    "Blocking: fails when this checkpoint is worse than the best earlier checkpoint of the suite by more than "
    "its paired interval (the whole task-level bootstrap interval of this minus best lies below zero).",
)


def _runs(run_storage: RunStorage, suite: str, checkpoints: list[Checkpoint]) -> list[core.CheckpointRun]:
    return [
        core.CheckpointRun(c.checkpoint_id, c.step, run_storage.run_dir(suite, c.checkpoint_id)) for c in checkpoints
    ]


def _fmt_ci(ci: Any) -> str:
    return f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "–"


def _bounds(ci: SummaryInterval | None) -> tuple[float | None, float | None]:
    """The (low, high) of a summary interval, (None, None) without one."""
    return (None, None) if ci is None else (ci.low, ci.high)


def _interval_text(ci: SummaryInterval | None) -> str:
    # A summary's interval, or None when it could not be computed.
    if ci is None or ci.low is None or ci.high is None:
        return "–"
    return f"[{ci.low:.3f}, {ci.high:.3f}]"


def regression_check_result(
    *,
    asset_key: dg.AssetKey,
    suite: str,
    current: Checkpoint,
    checkpoints: list[Checkpoint],
    run_storage: RunStorage,
    options: ComparisonSettings,
    comparison_with: tuple[str, CheckpointComparison] | None,
) -> dg.AssetCheckResult:
    """The ``no_regression_vs_best`` result of *current*: compared with the best checkpoint of a lower step.

    Its description and metadata name *current* (the check's page lists every checkpoint's results).
    """
    earlier = [c for c in checkpoints if c.step < current.step and c.checkpoint_id != current.checkpoint_id]
    found = core.regression_against_best(
        _runs(run_storage, suite, earlier),
        core.CheckpointRun(current.checkpoint_id, current.step, run_storage.run_dir(suite, current.checkpoint_id)),
        comparison_with=comparison_with,
        bootstrap_samples=options.bootstrap_samples,
        bootstrap_seed=options.bootstrap_seed,
        confidence_level=options.confidence_level,
    )
    if found is None:  # the baseline had a summary, so this happens only with a fixed, later baseline
        return dg.AssetCheckResult(
            asset_key=asset_key,
            check_name=REGRESSION_CHECK[0],
            passed=True,
            description=f"{current.checkpoint_id}: no earlier checkpoint with a summary on this suite, nothing to "
            "regress from",
            metadata={"checkpoint": current.checkpoint_id},
        )
    best = found.best
    text = (
        f"Δ reward vs best earlier checkpoint {best.checkpoint_id} (step {best.step}): "
        f"{found.delta:+.3f} {_fmt_ci(found.confidence_interval)}"
    )
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=REGRESSION_CHECK[0],
        passed=not found.regressed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=f"{current.checkpoint_id}: " + ("regressed: " if found.regressed else "no regression: ") + text,
        metadata={
            "checkpoint": current.checkpoint_id,
            "best_earlier": best.checkpoint_id,
            "best_earlier_reward": float(best.reward_mean or 0.0),  # ranked runs have a reward mean
            "delta_reward": float(found.delta),
            "delta_reward_ci": dg.MetadataValue.null()
            if found.confidence_interval is None
            else dg.MetadataValue.json(found.confidence_interval),
            "mde_reward": dg.MetadataValue.null()
            if found.minimum_detectable_difference is None
            else float(found.minimum_detectable_difference),
        },
    )


def build_best_checkpoint_asset(name: str, group: str, summary_key: dg.AssetKey) -> dg.AssetsDefinition:
    """``<name>/best_checkpoint``: the best registered checkpoint on suite *name* and whether it stands out."""
    key = dg.AssetKey([name, "best_checkpoint"])

    @optional_asset(
        key,
        name=f"{name}_best_checkpoint",
        deps=[summary_key],
        group=group,
        kinds={"json"},
        description=f"The registered checkpoint with the highest mean reward on suite {name!r}, its intervals, the "
        "runner-up and whether the paired task-level comparison tells them apart. Not materialized while no "
        "checkpoint has a summary.",
        partitions_def=None,
    )
    def best_checkpoint(
        context: dg.AssetExecutionContext,
        run_storage: RunStorage,
        checkpoint_registry: CheckpointRegistry,
        evaluation_suites: EvaluationSuites,
    ) -> Iterator[dg.MaterializeResult]:
        options = evaluation_suites.settings().comparison
        try:
            found = core.best_checkpoint(
                _runs(run_storage, name, checkpoint_registry.checkpoints()),
                bootstrap_samples=options.bootstrap_samples,
                bootstrap_seed=options.bootstrap_seed,
                confidence_level=options.confidence_level,
            )
        except core.ShopSimRLError as exc:
            raise dg.Failure(description=exc.one_line(), allow_retries=False) from None
        if found is None:
            context.log.info(f"best_checkpoint not materialized: no checkpoint has a {name} summary yet")
            return
        out = run_storage.progress_dir(name) / "best_checkpoint.json"
        core.write_json_atomic(out, found.to_json())
        best, runner_up, difference = found.best, found.runner_up, found.difference
        verdict = (
            "only one evaluated checkpoint"
            if runner_up is None or difference is None
            else (
                f"{'distinguishable' if found.distinguishable else 'not distinguishable'} from "
                f"{runner_up.checkpoint_id}: Δ reward {difference.mean_difference:+.3f} "
                f"{_fmt_ci(difference.confidence_interval)}"
            )
        )
        rows = [
            dg.TableRecord(
                {
                    "rank": rank,
                    "checkpoint": row.checkpoint_id,
                    "step": row.step,
                    "reward": round(float(row.reward_mean or 0.0), 4),  # ranked runs have a reward mean
                    "reward_interval": _interval_text(row.reward_ci),
                    "success": None if row.success_rate is None else round(float(row.success_rate), 4),
                }
            )
            for rank, row in enumerate(found.ranking, start=1)
        ]
        schema = dg.TableSchema(
            columns=[
                dg.TableColumn("rank", "int"),
                dg.TableColumn("checkpoint", "string"),
                dg.TableColumn("step", "int"),
                dg.TableColumn("reward", "float"),
                dg.TableColumn("reward_interval", "string", description="the run's own 95% interval"),
                dg.TableColumn("success", "float"),
            ]
        )
        reward_ci, success_ci = best.reward_ci, best.success_ci
        reward_text = rounded(best.reward_mean, *_bounds(reward_ci))
        success_text = rounded(best.success_rate, *_bounds(success_ci))
        yield dg.MaterializeResult(
            asset_key=key,
            metadata={
                # The verdict first, rounded, as text; the ranking; the raw floats (the Plots tab) last.
                "verdict": f"best: {best.checkpoint_id} (step {best.step}), reward {reward_text}, success "
                f"{success_text}; {verdict}",
                "ranking": dg.MetadataValue.table(rows, schema=schema),
                "suite": name,
                "best_checkpoint": best.checkpoint_id,
                "best_step": best.step,
                "runner_up": runner_up.checkpoint_id if runner_up is not None else dg.MetadataValue.null(),
                "distinguishable": dg.MetadataValue.null()
                if found.distinguishable is None
                else bool(found.distinguishable),
                "best_reward": float(best.reward_mean or 0.0),
                "best_reward_ci_low": metadata_float(_bounds(reward_ci)[0]),
                "best_reward_ci_high": metadata_float(_bounds(reward_ci)[1]),
                "best_success_rate": dg.MetadataValue.null()
                if best.success_rate is None
                else float(best.success_rate),
                "best_success_ci_low": metadata_float(_bounds(success_ci)[0]),
                "best_success_ci_high": metadata_float(_bounds(success_ci)[1]),
                "path": dg.MetadataValue.path(str(out)),
            },
        )

    return best_checkpoint
