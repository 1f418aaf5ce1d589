"""Every JSON document the Dagster layer writes has a model (issue 25).

The location's jobs run in process against the real sandbox — plans, two val checkpoints (so a
comparison is written), train, an opted-in test run (the test-access ledger), progress charts and the
skills lineage — and every JSON file under the runs root, and every line of every JSONL file, must
parse with the model its ``schema_version`` names (``document_for``). A file the layer starts writing
without a model fails here. The registry entries it writes are checked the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster_helpers import run_job

import shopsimrl_core as core
from shopsimrl_core._hashing import dumps_pretty
from shopsimrl_core.documents import (
    BestCheckpoint,
    CheckpointComparison,
    CheckpointEntry,
    InvocationRecord,
    SkillBankPointer,
    SuiteJobPlan,
    SuiteProgress,
    TestAccessEntry,
    document_for,
)
from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.registry import Checkpoint, read_entry, read_registry, register_checkpoint
from shopsimrl_dagster.run_tags import ALLOW_TEST_SPLIT_TAG
from shopsimrl_dagster.settings import load_pipeline_settings

# JSONL files whose lines are not documents, with the reason. Nothing else is exempt.
NOT_DOCUMENTS = {
    # The run index: derived data, rebuilt from traces.jsonl; its header line carries its own
    # ``index_schema`` (docs/runs.md, "Run index").
    "traces.index.jsonl",
    # Gate A's proposal ledger: rows of the published format (runtime-semantics §16), which has no
    # schema_version.
    "proposal_ledger.jsonl",
}

# What the Dagster layer writes itself (and through the core's run store), by model.
WRITTEN = {
    SuiteJobPlan: "_plans/val.json",
    CheckpointComparison: "val/c-2/comparison_vs_c-1.json",
    SuiteProgress: "_progress/val/progress.json",
    BestCheckpoint: "_progress/val/best_checkpoint.json",
    SkillBankPointer: "skills/c-2/snapshot.json",
    InvocationRecord: "val/c-1/invocations.jsonl",
    TestAccessEntry: "test-access.jsonl",
}


def _documents(root: Path) -> list[tuple[str, Any]]:
    """``(where, value)`` of every JSON file and every line of every JSONL file under *root*."""
    found: list[tuple[str, Any]] = []
    for path in sorted(root.rglob("*")):
        if path.suffix == ".json":
            found.append((str(path), json.loads(path.read_text(encoding="utf-8"))))
        elif path.suffix == ".jsonl" and path.name not in NOT_DOCUMENTS:
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if line.strip():
                    found.append((f"{path}:{number}", json.loads(line)))
    return found


@pytest.mark.slow
def test_every_json_document_the_layer_writes_parses_with_its_model(tmp_path: Path, settings_writer, sandbox) -> None:
    path = settings_writer(
        tmp_path,
        env_url=sandbox.env_url,
        policy_url=sandbox.policy_url,
        served_model=sandbox.served_model,
        split_file=sandbox.split_file,
        val_sample=None,  # Gate A pairs with the whole val split
    )
    settings = load_pipeline_settings(path)
    for checkpoint_id, step in (("c-1", 1), ("c-2", 2)):
        register_checkpoint(settings.checkpoint_registry, Checkpoint(checkpoint_id=checkpoint_id, step=step))
    location = build_definitions(settings)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["c-1", "c-2"])
        run_job(location, "prepare_plans", instance)
        run_job(location, "evaluate_val", instance, "c-1")
        run_job(location, "evaluate_val", instance, "c-2")
        run_job(location, "evaluate_train", instance, "c-2")
        run_job(location, "evaluate_test", instance, "c-2", tags={ALLOW_TEST_SPLIT_TAG: "true"})
        run_job(location, "progress_charts", instance)
        run_job(location, "build_skills", instance, "c-2")

    root = settings.runs_root
    documents = _documents(root) + _documents(settings.checkpoint_registry)
    seen: dict[str, int] = {}
    for where, value in documents:
        document = document_for(value, where)  # a file without a model fails here, naming it
        seen[document.SCHEMA] = seen.get(document.SCHEMA, 0) + 1
    for model, rel in WRITTEN.items():
        assert (root / rel).is_file(), rel
        assert seen.get(model.SCHEMA), f"no {model.KIND} was written"
    assert seen[CheckpointEntry.SCHEMA] == 2

    # Written through the models: the files round-trip byte for byte, schema_version first.
    for model, rel in WRITTEN.items():
        if rel.endswith(".json"):
            text = (root / rel).read_text(encoding="utf-8")
            value = json.loads(text)
            assert next(iter(value)) == "schema_version", rel
            assert dumps_pretty(model.parse(value, rel).to_json()) == text, rel

    # The files are today's apart from the additive schema_version: the same keys, in the same order.
    best = json.loads((root / "_progress" / "val" / "best_checkpoint.json").read_text(encoding="utf-8"))
    runs = [core.CheckpointRun(c, s, root / "val" / c) for c, s in (("c-1", 1), ("c-2", 2))]
    options = settings.comparison
    recomputed = core.best_checkpoint(
        runs,
        bootstrap_samples=options.bootstrap_samples,
        bootstrap_seed=options.bootstrap_seed,
        confidence_level=options.confidence_level,
    )
    assert recomputed is not None and recomputed.schema_version == BestCheckpoint.SCHEMA
    assert json.dumps(best) == json.dumps(recomputed.to_json())
    assert list(best) == ["schema_version", "metric", "best", "runner_up", "difference", "distinguishable", "ranking"]
    assert list(best["best"]) == ["checkpoint_id", "step", "reward_mean", "reward_ci", "success_rate", "success_ci"]
    assert list(best["difference"]) == [
        "mean_difference",
        "confidence_interval",
        "minimum_detectable_difference",
        "within_noise",
    ]
    progress = json.loads((root / "_progress" / "val" / "progress.json").read_text(encoding="utf-8"))
    assert list(progress) == ["schema_version", "suite", "points"] and progress["suite"] == "val"
    assert [p["checkpoint_id"] for p in progress["points"]] == ["c-1", "c-2"]
    assert progress["points"][1]["vs_previous"]["baseline"] == "c-1"
    pointer = json.loads((root / "skills" / "c-2" / "snapshot.json").read_text(encoding="utf-8"))
    assert list(pointer) == ["schema_version", "checkpoint_id", "path", "bank_sha256", "bank_version", "skill_ids"]
    assert Path(pointer["path"]).name == f"skillbank-{pointer['bank_sha256']}.json"
    entry = json.loads((settings.checkpoint_registry / "c-1.json").read_text(encoding="utf-8"))
    assert list(entry) == ["schema_version", "checkpoint_id", "step", "served_model", "endpoint", "registered_at"]


def test_registry_entries_without_or_with_another_schema_version(tmp_path: Path) -> None:
    """Hand-written entries (no schema_version) still register; another version is refused in one line."""
    folder = tmp_path / "registry"
    folder.mkdir()
    (folder / "hand.json").write_text(json.dumps({"checkpoint_id": "hand-1", "step": 7}), encoding="utf-8")
    assert read_entry(folder / "hand.json").step == 7
    (folder / "later.json").write_text(
        json.dumps({"schema_version": "shopsimrl-checkpoint-entry-v9", "checkpoint_id": "later-1", "step": 8}),
        encoding="utf-8",
    )
    problems: list[str] = []
    assert [c.checkpoint_id for c in read_registry(folder, problems=problems)] == ["hand-1"]
    (problem,) = problems
    assert problem.startswith(f"skipped {folder / 'later.json'}: schema_version: is 'shopsimrl-checkpoint-entry-v9'")
    assert "\n" not in problem
