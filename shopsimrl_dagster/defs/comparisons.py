"""``<suite>/checkpoint_comparison[ckpt]``: the core's paired comparison with the checkpoint's baseline.

The baseline is ``comparison.baseline`` of the settings (``previous``: the registered checkpoint
before this one). A checkpoint without a baseline (the first one) is materialized with the verdict
"no baseline: …" and no comparison document; while the baseline has no summary of the suite yet the
asset yields nothing (the progress sensor requests it later). The verdict leads the metadata, rounded,
as text; the raw floats follow. The blocking ``no_regression_vs_best`` check comes from ``selection.py``.
"""

from collections.abc import Iterator
from typing import Any

import dagster as dg

import shopsimrl_core as core

from ..registry import previous_checkpoint
from ..report import comparison_verdict, delta_text, metadata_float
from .failures import as_failure
from .optional import optional_asset
from .resources import CheckpointRegistry, EvaluationSuites, RunStorage
from .selection import REGRESSION_CHECK, regression_check_result

__all__ = ["build_checkpoint_comparison", "NO_BASELINE"]

NO_BASELINE = "no baseline"
"""How ``verdict`` of a checkpoint without a baseline (the first one) begins."""
_HEADLINE = (("reward", "reward"), ("r_success", "success"))
"""The compared metrics whose verdict heads the page, with their labels."""


def _delta_display(values: Any) -> str:
    """``+0.183 [+0.092, +0.283] (MDE 0.137, detected)`` for one ``paired.metrics`` entry (``n/a`` without one)."""
    if values is None:
        return "n/a"
    low, high = values.confidence_interval or (None, None)
    return delta_text(
        values.mean_difference, low, high, values.minimum_detectable_difference, values.within_noise
    )


def _no_baseline(
    context: dg.AssetExecutionContext, suite: str, current: str, setting: str, key: dg.AssetKey
) -> dg.MaterializeResult:
    """The materialization of a checkpoint that has nothing to be compared with (its verdict says why)."""
    why = (
        f"{current} is the first registered checkpoint on {suite}: nothing earlier to compare with"
        if setting == "previous"
        else f"{current} is the comparison baseline itself (comparison.baseline)"
    )
    context.log.info(f"checkpoint_comparison of {current} on {suite}: {NO_BASELINE} ({why})")
    return dg.MaterializeResult(
        asset_key=key,
        metadata={"verdict": f"{NO_BASELINE}: {why}", "suite": suite, "baseline": dg.MetadataValue.null()},
    )


def build_checkpoint_comparison(
    name: str, *, comparison_key: dg.AssetKey, summary_key: dg.AssetKey, group: str, described: str
) -> dg.AssetsDefinition:
    """``<name>/checkpoint_comparison``, partitioned by checkpoint, with the blocking regression check."""

    @optional_asset(
        comparison_key,
        name=f"{name}_checkpoint_comparison",
        deps=[summary_key],
        group=group,
        kinds={"json"},
        description=f"Paired per-task bootstrap of one checkpoint against its baseline on {described} (settings "
        "comparison.baseline). Not materialized when there is no baseline run.",
        checks=[REGRESSION_CHECK],
    )
    def checkpoint_comparison(
        context: dg.AssetExecutionContext,
        run_storage: RunStorage,
        checkpoint_registry: CheckpointRegistry,
        evaluation_suites: EvaluationSuites,
    ) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
        settings = evaluation_suites.settings()
        current = context.partition_key
        options = settings.comparison
        if options.baseline == "previous":
            previous = previous_checkpoint(checkpoint_registry.checkpoints(), current)
            baseline = previous.checkpoint_id if previous else None
        else:
            baseline = options.baseline if options.baseline != current else None
        if baseline is None:
            # The first checkpoint (or the fixed baseline itself): a state, not a pending computation. It
            # is materialized as such, so it is not Missing forever nor picked up by "failed and missing"
            # backfills; no comparison document is written.
            yield _no_baseline(context, name, current, options.baseline, comparison_key)
            # The regression check still runs: against the best checkpoint of a lower step, if any has a summary.
            registered = checkpoint_registry.checkpoints()
            yield regression_check_result(
                asset_key=comparison_key,
                suite=name,
                current=next(c for c in registered if c.checkpoint_id == current),
                checkpoints=registered,
                run_storage=run_storage,
                options=options,
                comparison_with=None,
            )
            return
        baseline_dir = run_storage.run_dir(name, baseline)
        if not (baseline_dir / "summary.json").exists():
            # Not yet: the progress sensor requests it once the baseline has its summary (a backfill).
            context.log.info(
                f"checkpoint_comparison of {current} on {name} waits for its baseline: {baseline} has no {name} "
                "summary yet; the progress sensor requests it when it has (so no comparison and no "
                f"{REGRESSION_CHECK[0]} result in this run)"
            )
            return
        run_dir = run_storage.run_dir(name, current)
        assert baseline is not None  # baseline_dir exists only for a baseline
        with as_failure():
            comparison = core.compare_runs(
                baseline_dir,
                run_dir,
                bootstrap_samples=options.bootstrap_samples,
                bootstrap_seed=options.bootstrap_seed,
                confidence_level=options.confidence_level,
            )
        out = run_dir / f"comparison_vs_{baseline}.json"
        core.write_json_atomic(out, comparison.to_json())
        paired = comparison.paired
        rows = []
        # The verdict first, rounded, as text (the lines the demo prints); the raw floats follow for the Plots tab.
        displays = {label: _delta_display(paired.metrics.get(metric)) for metric, label in _HEADLINE}
        metadata: dict[str, Any] = {
            "verdict": f"vs {baseline}: " + "; ".join(f"Δ {label} {text}" for label, text in displays.items()),
            "reward_delta_display": displays["reward"],
            "success_delta_display": displays["success"],
            "suite": name,
            "baseline": baseline,
            "pairs": paired.pairs,
        }
        for metric, values in sorted(paired.metrics.items()):
            ci = values.confidence_interval
            mde, sd, noise = values.minimum_detectable_difference, values.sd_difference, values.within_noise
            rows.append(
                dg.TableRecord(
                    {
                        "metric": metric,
                        "baseline": round(float(values.a_mean), 4),
                        "this": round(float(values.b_mean), 4),
                        "delta": round(float(values.mean_difference), 4),
                        "interval": f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "–",
                        "mde": None if mde is None else round(float(mde), 4),
                        "sd_difference": None if sd is None else round(float(sd), 4),
                        "verdict": comparison_verdict(values),
                    }
                )
            )
            if metric in ("reward", "r_success", "protocol_error_rate", "steps"):
                metadata[f"delta_{metric}"] = float(values.mean_difference)
                if ci:
                    metadata[f"delta_{metric}_ci_low"] = float(ci[0])
                    metadata[f"delta_{metric}_ci_high"] = float(ci[1])
            if metric in ("reward", "r_success"):
                # The core's power fields (docs/statistics.md): how large a difference this design detects.
                metadata[f"mde_{metric}"] = metadata_float(mde)
                metadata[f"sd_difference_{metric}"] = metadata_float(sd)
                metadata[f"within_noise_{metric}"] = dg.MetadataValue.null() if noise is None else bool(noise)
                metadata[f"verdict_{metric}"] = comparison_verdict(values)
        flips = paired.flips
        schema = dg.TableSchema(
            columns=[
                dg.TableColumn("metric", "string"),
                dg.TableColumn("baseline", "float"),
                dg.TableColumn("this", "float"),
                dg.TableColumn("delta", "float"),
                dg.TableColumn("interval", "string", description="paired task-level bootstrap interval of delta"),
                dg.TableColumn(
                    "mde", "float", description="minimum detectable difference (80% power, alpha 0.05, paired tasks)"
                ),
                dg.TableColumn("sd_difference", "float", description="SD of the task-level differences"),
                dg.TableColumn("verdict", "string", description="within noise (interval covers 0) or detected"),
            ]
        )
        metadata.update(
            {
                "power": dg.MetadataValue.json(paired.power) if paired.power else dg.MetadataValue.null(),
                "deltas": dg.MetadataValue.table(rows, schema=schema),
                "flips_gained": 0 if flips is None else flips.gained,
                "flips_lost": 0 if flips is None else flips.lost,
                "flips": dg.MetadataValue.json({} if flips is None else flips.to_json()),
                "comparison_path": dg.MetadataValue.path(str(out)),
                "compare_in_viewer": dg.MetadataValue.url(
                    f"{settings.viewer.base_url.rstrip('/')}/compare?a={run_storage.run_rel(name, baseline)}"
                    f"&b={run_storage.run_rel(name, current)}"
                ),
            }
        )
        yield dg.MaterializeResult(asset_key=comparison_key, metadata=metadata)
        registered = checkpoint_registry.checkpoints()
        yield regression_check_result(
            asset_key=comparison_key,
            suite=name,
            current=next(c for c in registered if c.checkpoint_id == current),
            checkpoints=registered,
            run_storage=run_storage,
            options=options,
            comparison_with=(baseline, comparison),
        )

    return checkpoint_comparison
