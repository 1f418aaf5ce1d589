"""``<suite>/eval_summary[ckpt]``: the core's ``summary.json`` of one run, shown as it is.

Headline numbers with their intervals (labelled by the interval's own method), the per-category
table and chart, and a link to the run's episodes in the trace viewer; nothing is recomputed here (a
one-repeat summary's category rows get their intervals from the core's ``category_intervals``).
"""

from pathlib import Path
from typing import Any

import dagster as dg

import shopsimrl_core as core
from shopsimrl_core.documents import EvalSummary
from shopsimrl_core.documents._runs import SummaryBreakdowns

from ..charts import inline_chart, write_category_chart
from ..report import (
    category_table,
    design_text,
    interval_note,
    mapping_table,
    metadata_float,
    rounded,
)
from .failures import as_failure
from .partitions import checkpoints
from .resources import EvaluationSuites, RunStorage
from .run_files import read_document, viewer_run_url

__all__ = ["build_eval_summary"]


def _cached_chart(path: Path, drawn: dict[str, Any], draw: Any) -> str:
    """The chart of *drawn* (exactly the inputs *draw* plots) as base64, reused when unchanged.

    ``<path>.sha256`` names the fingerprint of *drawn*. A resumed partition whose numbers did not
    change then skips matplotlib (its import and drawing were most of ``eval_summary``'s time);
    any change of what is plotted redraws. Fingerprinting the plotted inputs rather than the whole
    summary matters: the summary's ``created_at`` changes on every rewrite.
    """
    import base64

    stamp = path.with_name(path.name + ".sha256")
    digest = core.fingerprint(drawn)
    try:
        if stamp.read_text(encoding="ascii").strip() == digest:
            return base64.b64encode(path.read_bytes()).decode("ascii")
    except OSError:
        pass
    chart = draw()
    core.write_text_atomic(stamp, digest + "\n")
    return chart


def _summary_metadata(
    summary: EvalSummary, suite_name: str, run_dir: Path, chart_b64: str, chart_path: Path, viewer_url: str,
    inline: Any = None,
) -> dict[str, Any]:
    counts, primary, behavior = summary.counts, summary.primary, summary.behavior
    success_ci, reward_ci, design = primary.success_ci, primary.reward_ci, primary.sampling_design
    reward_low, reward_high = (None, None) if reward_ci is None else (reward_ci.low, reward_ci.high)
    success_low, success_high = (None, None) if success_ci is None else (success_ci.low, success_ci.high)
    reward, success = primary.reward_mean, primary.success_rate
    components = summary.reward_components
    metadata: dict[str, Any] = {
        "suite": suite_name,
        # Rounded text for reading first, labelled by the interval's own method (task-resampled with
        # repeats), then the raw floats (the UI plots these across partitions).
        "reward_display": rounded(reward, reward_low, reward_high, interval_note(reward_ci, design, "reward")),
        "success_display": rounded(success, success_low, success_high, interval_note(success_ci, design, "success")),
        # The chart drawn in place (served by the viewer, pinned by its hash); the embedded one is a click away.
        "chart": dg.MetadataValue.null() if inline is None else inline,
        # Raw floats (the UI plots these across partitions) beside rounded text for reading.
        "reward": metadata_float(reward),
        "reward_ci_low": metadata_float(reward_low),
        "reward_ci_high": metadata_float(reward_high),
        "reward_sem": metadata_float(primary.reward_sem),
        "success_rate": metadata_float(success),
        "success_ci_low": metadata_float(success_low),
        "success_ci_high": metadata_float(success_high),
        "reward_components": dg.MetadataValue.table(*mapping_table(components, "component", "mean")),
        "steps_mean": metadata_float(behavior.steps_mean),
        "protocol_error_rate": float(behavior.protocol_error_rate or 0.0),
        "invalid_action_rate": float(behavior.invalid_action_rate or 0.0),
        "termination_reasons": dg.MetadataValue.table(
            *mapping_table(behavior.termination_reasons, "reason", "episodes")
        ),
        "per_category": dg.MetadataValue.table(*category_table(summary)),
        "chart_png": dg.MetadataValue.md(f"![success and reward by category](data:image/png;base64,{chart_b64})"),
        "chart_path": dg.MetadataValue.path(str(chart_path)),
        "coverage": float(counts.coverage),
        "episodes_completed": counts.completed,
        "episodes": dg.MetadataValue.url(viewer_url),
        "summary_path": dg.MetadataValue.path(str(run_dir / "summary.json")),
    }
    if design is not None:
        # Repeats: tasks are the sampling unit (docs/statistics.md); the core's design, as published.
        effects = design.design_effect
        metadata.update(
            {
                "sampling_design": design_text(summary),
                "tasks": design.tasks,
                "design_effect_reward": metadata_float(effects.get("reward")),
                "design_effect_success": metadata_float(effects.get("success")),
                "reward_sem_task_cluster": metadata_float(design.reward_sem),
                "sampling_design_detail": dg.MetadataValue.json(design.to_json()),
            }
        )
    for name, value in sorted(components.items()):
        if isinstance(value, (int, float)):
            metadata[f"component_{name}"] = float(value)
    return metadata


def _episode_metrics_metadata(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The core's per-episode metrics (episode/_metrics.py, from the run index): a table, and one float each."""
    shown = [row for row in rows if row["episodes"]]
    if not shown:
        return {}
    table = [
        dg.TableRecord({"metric": row["label"], "mean": row["mean"], "min": row["min"], "max": row["max"],
                        "episodes": row["episodes"]})
        for row in shown
    ]
    schema = dg.TableSchema(
        columns=[dg.TableColumn("metric", "string"), dg.TableColumn("mean", "float"), dg.TableColumn("min", "float"),
                 dg.TableColumn("max", "float"), dg.TableColumn("episodes", "int")]
    )
    metadata: dict[str, Any] = {"episode_metrics": dg.MetadataValue.table(table, schema=schema)}
    for row in shown:
        metadata[f"metric_{row['name']}"] = metadata_float(row["mean"])
    return metadata


def build_eval_summary(
    name: str, *, summary_key: dg.AssetKey, rollout_key: dg.AssetKey, group: str, described: str
) -> dg.AssetsDefinition:
    """``<name>/eval_summary``, partitioned by checkpoint, downstream of the suite's rollout traces."""

    @dg.asset(
        key=summary_key,
        group_name=group,
        deps=[rollout_key],
        partitions_def=checkpoints,
        kinds={"json"},
        description=f"The core's summary.json of one checkpoint on {described}: headline numbers with intervals, "
        "per-category table and chart, and a link to its episodes in the trace viewer.",
    )
    def eval_summary(
        context: dg.AssetExecutionContext, run_storage: RunStorage, evaluation_suites: EvaluationSuites
    ) -> dg.MaterializeResult:
        settings = evaluation_suites.settings()
        run_dir = run_storage.run_dir(name, context.partition_key)
        # The rollout's run_evaluation wrote this summary; reading it shows the core's numbers as they are.
        try:
            summary = read_document(run_dir / "summary.json", EvalSummary)
        except core.DocumentError as exc:
            context.log.warning(f"eval_summary: {exc.one_line()}; rebuilt from the run index")
            summary = None
        if summary is None:
            with as_failure():
                summary = core.summarize_run(run_dir)
        if summary.breakdowns is not None and summary.breakdowns.category:
            with as_failure():
                rows = core.category_intervals(summary, run_dir)
            # Shown with their intervals; the file keeps the published rows.
            summary = summary.model_copy(update={"breakdowns": SummaryBreakdowns(category=rows)})
        chart_path = run_dir / "summary_chart.png"
        title = f"{context.partition_key} · suite {name}"
        chart = _cached_chart(
            chart_path,
            # "chart": the drawing's version (2: interval bars and sampling units), so older PNGs are redrawn.
            {
                "chart": 2,
                "title": title,
                "category": None if summary.breakdowns is None
                else {category: row.to_json() for category, row in summary.breakdowns.category.items()},
                "clustered": summary.primary.sampling_design is not None,
            },
            lambda: write_category_chart(chart_path, summary, title),
        )
        url = viewer_run_url(settings, run_storage, name, context.partition_key)
        inline = inline_chart(settings.viewer.base_url, run_storage.root_path, chart_path,
                              "success and reward by category")
        metadata = _summary_metadata(summary, name, run_dir, chart, chart_path, url, inline)
        with as_failure():
            metadata.update(_episode_metrics_metadata(core.episode_metrics(run_dir)))
        return dg.MaterializeResult(metadata=metadata)

    return eval_summary
