"""One "nothing to do" mechanism: an asset with nothing to do yields nothing, through ``optional_asset`` only.

``shopsimrl_dagster/defs/optional.py`` says why that one (a skippable one-asset ``multi_asset``) and not
``@dg.asset(output_required=False)``: with checks declared, the latter fails its step when it yields nothing.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.defs.research import AnalystEndpoint, build_research_assets
from shopsimrl_dagster.defs.resources import resources_from_settings
from shopsimrl_dagster.defs.skills import build_skill_assets
from shopsimrl_dagster.settings import PipelineSettings

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_no_asset_is_declared_with_output_required_false() -> None:
    package = REPO_ROOT / "shopsimrl_dagster"
    declared = [
        f"{path.relative_to(REPO_ROOT)}:{number}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "optional.py"  # its docstring names the mechanism it replaces
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "output_required" in line
    ]
    assert declared == [], "use defs/optional.py's optional_asset for an asset that may have nothing to do"


def test_every_skippable_asset_is_an_optional_asset(offline_settings: PipelineSettings) -> None:
    # optional_asset builds a subsettable one-asset multi_asset with blocking checks; @asset(output_required=False)
    # would show up as a skippable spec on a non-subsettable definition.
    repo = build_definitions(offline_settings).get_repository_def()
    skippable = {}
    for assets in repo.assets_defs_by_key.values():
        for key, spec in assets.specs_by_key.items():
            if spec.skippable:
                skippable[key.to_user_string()] = assets
    assert {"judge_verdicts", "round_selected_bank", "round_curriculum", "skillbank_snapshot"} <= set(skippable)
    for name, assets in skippable.items():
        assert assets.can_subset and len(assets.keys) == 1, name
        assert all(spec.blocking for spec in assets.check_specs), name


def _materialize(settings: PipelineSettings, names: list[str], partition: str) -> dg.ExecuteInProcessResult:
    built = {
        key.to_user_string(): a
        for a in build_skill_assets(settings) + build_research_assets(settings)
        for key in a.keys
    }
    assets = [built[name] for name in names]
    resources = {**resources_from_settings(settings), "analyst": AnalystEndpoint(section="{}")}
    instance = dg.DagsterInstance.ephemeral()
    partitions = {a.partitions_def.name for a in assets if isinstance(a.partitions_def, dg.DynamicPartitionsDefinition)}
    for name in partitions:
        instance.add_dynamic_partitions(name, [partition])
    # round_curriculum's inputs are run config; nothing reads them when there is no selected bank.
    round_config = {
        k: "unused"
        for k in ("active_skillbank", "candidates", "experiment_config", "bare_run_dir", "proposal_checkpoint")
    }
    config = {"ops": {"round_curriculum": {"config": round_config}}} if "round_curriculum" in names else None
    return dg.materialize(assets, partition_key=partition, instance=instance, resources=resources, run_config=config)


@pytest.mark.parametrize(
    ("names", "partition"),
    [
        (["round_selected_bank", "round_curriculum"], "round-empty"),  # research: no gate ran for the round
        (["judge_verdicts"], "ckpt-none"),  # research: no val run to judge
        (["skillbank_snapshot"], "ckpt-none"),  # skills, with a blocking check: Gate A selected nothing
    ],
)
def test_an_asset_with_nothing_to_do_succeeds_without_a_materialization_or_a_verdict(
    offline_settings: PipelineSettings, names: list[str], partition: str
) -> None:
    result = _materialize(offline_settings, names, partition)
    assert result.success
    assert result.get_asset_materialization_events() == []
    assert result.get_asset_check_evaluations() == []
    # Nothing was written for the skipped work either.
    assert not (Path(offline_settings.runs_root) / "rounds" / partition).exists()
