"""Issue 31 acceptance 1: the whole training round in the real webserver + daemon, from one materialization.

``dagster dev`` (webserver + daemon) on the project's workspace, sensors running. One run materializes
``round_inputs`` for ``round-001``; from there nothing is clicked: the round sensor starts the scripted
trainer through Dagster Pipes, the trainer registers two sandbox-policy checkpoints of rising competence,
the registry sensor evaluates each on val (launched like any checkpoint given as weights), the progress
chart gains both points, ``round_triage`` shows the classifications, the online analysis reads exactly
the pending-analysis episodes, and the gate selects the next bank and curriculum. Chromium (when
installed) shows the round's lineage and the trainer's reported metrics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from daemon_harness import DagsterDev
from testkit.researchkit import AnalystServer, run_config
from testkit.roundkit import add_training_section
from testkit.training_sandbox import write_split_subset

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ROUND = "round-001"
REPOSITORY = {"repositoryLocationName": "shopsimrl", "repositoryName": "__repository__"}
pytestmark = pytest.mark.slow


def _gate_inputs(folder: Path, sandbox: Any) -> tuple[Path, Path]:
    """The gate's evaluation YAML (the first 16 val tasks) and its bare run, as the research tests build them."""
    from shopsimrl_core.runs.config._config import load_config
    from shopsimrl_core.runs.execution._evaluator import run_evaluation

    (folder / "gate").mkdir()
    small = write_split_subset(folder / "gate", Path(sandbox.split_file), {"val": 16})
    config = run_config(folder / "gate-val.yaml", sandbox, name="gate-bare-val", split="val", seed=20260830)
    document = yaml.safe_load(config.read_text(encoding="utf-8"))
    document["tasks"]["split_file"] = str(small)
    config.write_text(yaml.safe_dump(document), encoding="utf-8")
    bare = run_evaluation(load_config(config))
    assert bare.counts.coverage == 1.0
    return config, bare.run_dir


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None = None) -> dict[str, Any] | None:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1).records
    if not records:
        return None
    return {k: v.value for k, v in records[0].event_log_entry.asset_materialization.metadata.items()}


def test_one_materialization_of_round_inputs_runs_the_whole_round_in_the_daemon(
        tmp_path: Path, sandbox: Any, settings_writer: Any, analyst: AnalystServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from testkit.wandb_offline import offline_run

    from shopsimrl_core.skills.trace2skill._online import pending_analysis_episodes

    pytest.importorskip("wandb", reason="the [wandb] extra is not installed")
    monkeypatch.setenv("WANDB_MODE", "offline")  # dagster dev and its runs inherit it: nothing leaves the machine
    monkeypatch.setenv("WANDB_SILENT", "true")

    gate_config, bare_run = _gate_inputs(tmp_path, sandbox)

    def writer(folder: Path, **kwargs: Any) -> Path:
        path = settings_writer(folder, **kwargs)
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        # a checkpoint registered as weights (the trainer's) is served by a launched sandbox policy
        document["inference"]["mode"] = "launch"
        document["inference"]["launch"] = {"server": "shopsim_sandbox"}
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        add_training_section(path, sandbox, analyst_url=analyst.url, train_tasks=6,
                             gate={"experiment_config": str(gate_config), "bare_run_dir": str(bare_run),
                                   "active_skill_budget": 3},
                             wandb={"project": "shopsimrl-test", "mode": "offline", "dir": str(folder / "wandb")})
        return path

    dev = DagsterDev(tmp_path, sandbox, writer, sensor=True)
    stopped = False
    try:
        settings = dev.settings
        added = dev.gql("""mutation Add($repo: RepositorySelector!, $name: String!, $key: String!) {
                 addDynamicPartition(repositorySelector: $repo, partitionsDefName: $name, partitionKey: $key) {
                   __typename } }""", {"repo": REPOSITORY, "name": "training_rounds", "key": ROUND})
        assert added["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess", added
        # the one materialization: round_inputs of the round, as the UI's "Materialize" launches it
        launched = dev.gql("""mutation Launch($params: ExecutionParams!) { launchRun(executionParams: $params) {
                 __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""",
                           {"params": {"selector": {**REPOSITORY, "pipelineName": "__ASSET_JOB",
                                                    "assetSelection": [{"path": ["round_inputs"]}]},
                                       "executionMetadata": {"tags": [{"key": "dagster/partition",
                                                                       "value": ROUND}]},
                                       "mode": "default"}})
        assert launched["launchRun"]["__typename"] == "LaunchRunSuccess", launched
        ids = [f"{ROUND}-step-000001", f"{ROUND}-step-000002"]
        progress_key = dg.AssetKey(["val", "progress"])

        def state() -> tuple[bool, Any]:
            with dg.DagsterInstance.from_config(str(dev.home)) as instance:
                evaluated = set(instance.get_materialized_partitions(dg.AssetKey(["val", "eval_summary"])))
                progress = _latest(instance, progress_key) or {}
                curriculum = _latest(instance, dg.AssetKey("round_curriculum"), ROUND)
                report = _latest(instance, dg.AssetKey("round_wandb"), ROUND) or {}
                failed = [(r.job_name, r.run_id) for r in instance.get_runs(
                    filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))]
            assert not failed, f"failed runs: {failed}\n{dev.log_tail()}"
            done = (set(ids) <= evaluated and progress.get("checkpoints") == 2 and curriculum is not None
                    and report.get("checkpoints_evaluated") == 2
                    and "eval/val/delta_reward" in (report.get("evaluated") or {}).get(ids[1], {}))
            return done, (sorted(evaluated), progress.get("checkpoints"), curriculum is not None,
                          report.get("checkpoints_evaluated"))

        dev.wait("the round: trainer, two evaluated checkpoints, progress, triage, analysis, gate, curriculum",
                 state, stall_s=420)
        with dg.DagsterInstance.from_config(str(dev.home)) as instance:
            training = _latest(instance, dg.AssetKey("round_training"), ROUND)
            triage = _latest(instance, dg.AssetKey("round_triage"), ROUND)
            online = _latest(instance, dg.AssetKey("round_online_analysis"), ROUND)
            progress = _latest(instance, progress_key)
            bank = _latest(instance, dg.AssetKey("round_selected_bank"), ROUND)
            curriculum = _latest(instance, dg.AssetKey("round_curriculum"), ROUND)
            jobs = sorted(r.job_name for r in instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition":
                                                                                             ROUND})))
        assert training and triage and online and progress and bank and curriculum
        assert training["checkpoints"] == ids and training["steps_reported"] == 2
        assert progress["latest_checkpoint"] == ids[1] and progress["latest_step"] == 2
        # started by the sensors, not by hand: one run of round_inputs, then the trainer's and the gate's runs
        assert jobs.count("__ASSET_JOB") == 1 and "round_trainer" in jobs and "training_round" in jobs, jobs
        out_dir = settings.runs_root / "rounds" / ROUND / "training"
        pending = pending_analysis_episodes(out_dir)
        assert triage["pending_analysis"] == len(pending) > 0 and sum(triage["classifications"].values()) == 12
        document = json.loads((settings.runs_root / "rounds" / ROUND / "online_analysis" /
                               "online_failure_analysis.json").read_text(encoding="utf-8"))
        assert document["input_episode_ids"] == pending
        state_doc = json.loads((settings.runs_root / "rounds" / ROUND / "curriculum.json").read_text())
        assert state_doc["source"]["skillbank_sha256"] == bank["bank_sha256"] == curriculum["bank_sha256"]
        # W&B offline: the eval series equals the Dagster metadata, by training step; the gate's table; the files
        with dg.DagsterInstance.from_config(str(dev.home)) as instance:
            report = _latest(instance, dg.AssetKey("round_wandb"), ROUND)
            summaries = {i: _latest(instance, dg.AssetKey(["val", "eval_summary"]), i) for i in ids}
            comparison = _latest(instance, dg.AssetKey(["val", "checkpoint_comparison"]), ids[1])
        assert report is not None
        run_dir = Path(report["wandb_run_dir"]).parent
        assert run_dir.is_relative_to(tmp_path / "wandb")
        logged = offline_run(run_dir)
        series = {row["train_step"]: row for row in logged["history"] if "eval/val/reward" in row}
        for step, checkpoint_id in enumerate(ids, 1):
            assert series[step]["eval/val/reward"] == summaries[checkpoint_id]["reward"]
            assert series[step]["eval/val/success_rate"] == summaries[checkpoint_id]["success_rate"]
        # the second checkpoint's paired comparison with the first: checkpoint_comparison's delta_reward
        assert comparison is not None and series[2]["eval/val/delta_reward"] == comparison["delta_reward"]
        trainer = [row for row in logged["history"] if "train/reward" in row]
        assert [row["train_step"] for row in trainer] == [1, 2]
        assert [row["train/reward"] for row in trainer] == [s["reward"] for s in training["progress"]["steps"]]
        contributions = json.loads((settings.runs_root / "rounds" / ROUND / "online_gate" /
                                    "contributions.json").read_text(encoding="utf-8"))
        [table] = list((run_dir / "files" / "media" / "table" / "gate").glob("coefficients_*.table.json"))
        rows = json.loads(table.read_text(encoding="utf-8"))["data"]
        assert [r[0] for r in rows] == [c["intervention_id"] for c in contributions["contributions"]]
        assert ("training-round", f"round-{ROUND}") in logged["artifacts"]
        for name in ("training_progress.json", "triage_summary.json", "online_gate/contributions.json",
                     "curriculum.json"):
            saved = run_dir / "files" / ROUND / name
            assert saved.read_bytes() == (settings.runs_root / "rounds" / ROUND / name).read_bytes(), name
        assert "WANDB_API_KEY" not in (run_dir / "logs" / "debug.log").read_text(errors="replace")
        if CHROMIUM.exists():
            _browser(dev, tmp_path)
        dev.stop()  # the next round's inputs below, with no sensor to start its trainer
        stopped = True
        _next_round_reads_this_rounds_curriculum(dev, settings, bank, curriculum)
    finally:
        if not stopped:
            dev.stop()


def _next_round_reads_this_rounds_curriculum(dev: DagsterDev, settings: Any, bank: dict[str, Any],
                                              curriculum: dict[str, Any]) -> None:
    """round-002's inputs are round-001's selected bank and curriculum, and its preflight passes on them."""
    from shopsimrl_dagster.definitions import build_definitions

    location = build_definitions(settings)
    [inputs] = [a for a in location.assets if isinstance(a, dg.AssetsDefinition)
                and dg.AssetKey("round_inputs") in a.keys]
    with dg.DagsterInstance.from_config(str(dev.home)) as instance:
        instance.add_dynamic_partitions("training_rounds", ["round-002"])
        result = dg.materialize([inputs], partition_key="round-002", instance=instance, resources=location.resources)
    [event] = result.get_asset_materialization_events()
    meta = {k: v.value for k, v in event.materialization.metadata.items()}
    [check] = result.get_asset_check_evaluations()
    assert check.passed and meta["preflight_ok"] is True
    assert meta["state_id"] == curriculum["state_id"] and meta["bank_sha256"] == bank["bank_sha256"]
    copied = settings.runs_root / "rounds" / "round-002" / "inputs"
    assert (copied / "curriculum.json").read_bytes() == (settings.runs_root / "rounds" / ROUND /
                                                         "curriculum.json").read_bytes()


def _browser(dev: DagsterDev, folder: Path) -> None:
    """Chromium shows the round's lineage and the trainer's reported metrics (screenshots in test-output)."""
    from playwright.sync_api import sync_playwright

    out = REPO_ROOT / "test-output" / "ui" / "training-round"
    out.mkdir(parents=True, exist_ok=True)
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=args)
        try:
            page = browser.new_page(viewport={"width": 1800, "height": 1000})
            page.goto(f"{dev.url}/locations/shopsimrl/asset-groups/research", wait_until="networkidle")
            skip = page.get_by_role("button", name="Skip")
            try:
                skip.wait_for(timeout=5000)
                skip.click()
            except Exception:  # no community dialog on this visit
                pass
            # the round reads left to right: inputs → training → triage → (analysis, pool) → gate → … → curriculum
            names = ("round_inputs", "round_training", "round_triage", "round_online_gate", "round_curriculum")
            boxes = []
            for name in names:
                node = page.get_by_text(name, exact=True).first
                node.wait_for(timeout=60000)
                boxes.append(node.bounding_box())
            xs = [box["x"] for box in boxes if box is not None]
            assert len(xs) == len(names) and xs == sorted(xs), list(zip(names, xs, strict=False))
            page.screenshot(path=str(out / "round-lineage.png"), full_page=True)
            page.goto(f"{dev.url}/assets/round_training?view=partitions&partition={ROUND}", wait_until="networkidle")
            page.get_by_text("steps_reported").first.wait_for(timeout=60000)
            text = page.inner_text("body")
            for label in ("reward", "success", "frontier_share", "tokens_per_s", "checkpoints"):
                assert label in text, label
            assert f"{ROUND}-step-000002" in text
            page.screenshot(path=str(out / "round-training-metrics.png"), full_page=True)
        finally:
            browser.close()
    assert (out / "round-lineage.png").stat().st_size > 10_000
