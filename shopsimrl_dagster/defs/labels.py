"""``episode_labels[ckpt]``: outcome and behaviour labels of the checkpoint's train-suite run.

``labels.parquet`` is written next to the run's ``traces.jsonl`` by ``core.label_run``; the
blocking check ``labels_cover_every_episode`` compares the label rows with the traces' episodes.
"""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from shopsimrl_core import iter_latest_records, label_run, read_labels

from .assets import suite_asset_key
from .checks import check_result
from .failures import as_failure
from .optional import optional_asset
from .resources import RunStorage

__all__ = ["LABELS", "LABELS_COVER", "build_episode_labels"]

LABELS = dg.AssetKey("episode_labels")
LABELS_COVER = "labels_cover_every_episode"


def build_episode_labels(train_suite: str, group: str) -> dg.AssetsDefinition:
    """``episode_labels``, downstream of ``<train_suite>/eval_summary``."""
    train_summary = suite_asset_key(train_suite, "eval_summary")

    @optional_asset(
        LABELS,
        name="episode_labels",
        deps=[train_summary],
        group=group,
        kinds={"polars", "parquet"},
        description=f"Outcome and behaviour labels (with evidence step indexes) of the {train_suite!r} run of the "
        "checkpoint.",
        checks=[(LABELS_COVER, "Every episode of the labelled run has exactly one label row.")],
    )
    def episode_labels(context: dg.AssetExecutionContext, run_storage: RunStorage) -> Iterator[Any]:
        checkpoint_id = context.partition_key
        run_dir = run_storage.run_dir(train_suite, checkpoint_id)
        if not (run_dir / "traces.jsonl").is_file():
            context.log.info(
                f"episode_labels not materialized: no {train_suite!r} run for {checkpoint_id}; "
                f"run job evaluate_{train_suite} for this checkpoint first"
            )
            return
        with as_failure():
            table = label_run(run_dir)
            episode_ids = {r["episode_id"] for r in iter_latest_records(run_dir / "traces.jsonl")}
            rows = read_labels(table.path).get_column("episode_id").to_list()
        covers = len(set(rows)) == len(rows) and set(rows) == episode_ids
        distribution = table.distribution
        outcome_rows = [
            dg.TableRecord({"outcome": str(k), "episodes": int(v)}) for k, v in sorted(distribution["outcomes"].items())
        ]
        behaviour_rows = []
        for key in (
            "first_buy_incomplete_options",
            "episodes_with_loops",
            "searches_mean",
            "result_pages_mean",
            "steps_to_purchase_mean",
        ):
            value = distribution.get(key)
            behaviour_rows.append(
                dg.TableRecord({"behaviour": key, "value": None if value is None else round(float(value), 3)})
            )
        success = distribution["outcomes"].get("success", 0)
        yield dg.MaterializeResult(
            asset_key=LABELS,
            metadata={
                "suite": train_suite,
                "episodes": table.episodes,
                "labels_path": dg.MetadataValue.path(str(table.path)),
                "labels_sha256": table.sha256,
                "label_distribution": dg.MetadataValue.table(
                    outcome_rows,
                    schema=dg.TableSchema(
                        columns=[dg.TableColumn("outcome", "string"), dg.TableColumn("episodes", "int")]
                    ),
                ),
                "behaviour": dg.MetadataValue.table(
                    behaviour_rows,
                    schema=dg.TableSchema(
                        columns=[dg.TableColumn("behaviour", "string"), dg.TableColumn("value", "float")]
                    ),
                ),
                "invalid_action_reasons": dg.MetadataValue.json(distribution["invalid_action_reasons"]),
                "protocol_error_codes": dg.MetadataValue.json(distribution["protocol_error_codes"]),
                "budget_status": dg.MetadataValue.json(distribution["budget_status"]),
                "success_share": success / table.episodes if table.episodes else 0.0,
            },
            check_results=[
                check_result(
                    LABELS_COVER,
                    covers,
                    "one label row per episode"
                    if covers
                    else f"{len(rows)} label rows for {len(episode_ids)} episodes in {run_dir}",
                    asset_key=LABELS,
                    rows=len(rows),
                )
            ],
        )

    return episode_labels
