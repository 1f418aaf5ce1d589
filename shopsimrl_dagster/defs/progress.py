"""``<suite>/progress``: reward and success of every registered checkpoint on a suite, by training step.

Unpartitioned: it charts every checkpoint's summary with its interval, and beside each point the
minimum detectable difference of its comparison with the point before it (where one was written).
"""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg

import shopsimrl_core as core
from shopsimrl_core.documents import CheckpointComparison, EvalSummary, SuiteProgress
from shopsimrl_core.documents._pipeline import PointComparison

from ..charts import inline_chart, write_progress_chart
from ..report import (
    comparison_point,
    metadata_float,
    point_change,
    progress_points,
    progress_table,
    progress_verdict,
)
from .optional import optional_asset
from .resources import CheckpointRegistry, EvaluationSuites, RunStorage
from .run_files import read_document

__all__ = ["build_progress"]


def _summary(path: Path, context: dg.AssetExecutionContext) -> EvalSummary | None:
    """The checkpoint's summary, or None when it has none or one of another format (logged, left out)."""
    try:
        return read_document(path, EvalSummary)
    except core.ShopSimRLError as exc:
        context.log.warning(f"progress: {exc.one_line()}; this checkpoint is left out")
        return None


def build_progress(
    name: str, *, progress_key: dg.AssetKey, summary_key: dg.AssetKey, group: str, described: str
) -> dg.AssetsDefinition:
    """``<name>/progress`` (unpartitioned), refreshed from the suite's summaries."""

    @optional_asset(
        progress_key,
        name=f"{name}_progress",
        deps=[summary_key],
        group=group,
        kinds={"json"},
        description=f"Reward and success (95% intervals) of every checkpoint on {described}, against training step, "
        "with the minimum detectable difference of each checkpoint's comparison with the one before it. "
        "Not materialized while no checkpoint has a summary.",
        partitions_def=None,
    )
    def progress(
        context: dg.AssetExecutionContext,
        run_storage: RunStorage,
        checkpoint_registry: CheckpointRegistry,
        evaluation_suites: EvaluationSuites,
    ) -> Iterator[dg.MaterializeResult]:
        settings = evaluation_suites.settings()
        points = progress_points(
            (c.checkpoint_id, c.step, _summary(run_storage.run_dir(name, c.checkpoint_id) / "summary.json", context))
            for c in checkpoint_registry.checkpoints()
        )
        if not points:
            context.log.info(f"progress not materialized: no checkpoint has a {name} summary yet")
            return
        # The comparison of each point with the one before it, where checkpoint_comparison wrote one.
        for before, point in zip(points, points[1:]):
            path = run_storage.run_dir(name, point.checkpoint_id) / f"comparison_vs_{before.checkpoint_id}.json"
            try:
                found = read_document(path, CheckpointComparison)
            except core.ShopSimRLError as exc:
                context.log.warning(f"progress: {exc.one_line()}; its comparison is left out")
                continue
            if found is not None:
                point.vs_previous = comparison_point(before.checkpoint_id, found)
        out_dir = run_storage.progress_dir(name)
        chart = write_progress_chart(
            out_dir / "progress.png", points, f"suite {name} · reward and success by training step"
        )
        saved = out_dir / "progress.json"
        document = {"schema_version": SuiteProgress.SCHEMA, "suite": name, "points": points}
        core.write_json_atomic(saved, SuiteProgress.parse(document, str(saved)).to_json())
        latest = points[-1]
        viewer = settings.viewer.base_url.rstrip("/")
        yield dg.MaterializeResult(
            asset_key=progress_key,
            metadata={
                # The verdict first, rounded, as text; the chart drawn in place (via the viewer); then the
                # points; the raw floats (the Plots tab) and the embedded chart (a click away) last.
                "verdict": progress_verdict(latest),
                "chart": inline_chart(viewer, run_storage.root_path, out_dir / "progress.png",
                                      f"{name}: reward and success by training step"),
                "points": dg.MetadataValue.table(*progress_table(points)),
                "suite": name,
                "checkpoints": len(points),
                "latest_checkpoint": latest.checkpoint_id,
                "latest_step": latest.step,
                "latest_reward": metadata_float(latest.reward),
                "latest_success_rate": metadata_float(latest.success_rate),
                # The minimum detectable difference of the latest comparison with the point before it.
                "latest_mde_reward": metadata_float(_mde(latest.vs_previous, "reward")),
                "latest_mde_success_rate": metadata_float(_mde(latest.vs_previous, "r_success")),
                "chart_png": dg.MetadataValue.md(
                    f"![{name}: reward and success by training step](data:image/png;base64,{chart})"
                ),
                "chart_path": dg.MetadataValue.path(str(out_dir / "progress.png")),
                "runs_in_viewer": dg.MetadataValue.url(viewer + "/"),
            },
        )

    return progress


def _mde(comparison: PointComparison | None, metric: str) -> float | int | None:
    change = point_change(comparison, metric)
    return None if change is None else change.minimum_detectable_difference
