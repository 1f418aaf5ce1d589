"""The document models read the published formats and write run outputs back byte for byte."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from shopsimrl_core import DocumentError, EvalSummary, RunManifest, TraceRecord, document_for
from shopsimrl_core._hashing import dumps_pretty
from shopsimrl_core.documents import DOCUMENTS, SkillBank
from shopsimrl_core.documents._runs import SelectedSkill

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "docs" / "reference" / "runtime-semantics.md"


def _section_json(number: str) -> list[Any]:
    """The JSON code blocks of one section of runtime-semantics.md (the published examples)."""
    text = RUNTIME.read_text(encoding="utf-8")
    match = re.search(rf"^#+ {re.escape(number)} .*?$(.*?)(?=^#+ )", text, re.M | re.S)
    assert match, number
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", match.group(1), re.S)]


def _same_with_order(a: Any, b: Any) -> bool:
    # json.dumps without sort_keys compares values and every object's key order
    return json.dumps(a, ensure_ascii=False) == json.dumps(b, ensure_ascii=False)


@pytest.mark.parametrize(("section", "model"), [
    ("6.2", RunManifest), ("12.3", TraceRecord), ("12.4", TraceRecord), ("13.2", EvalSummary), ("11.2", SkillBank),
])
def test_published_examples_parse_and_round_trip(section: str, model: type) -> None:
    examples = _section_json(section)
    assert examples, f"runtime-semantics §{section} has no JSON example"
    for example in examples:
        parsed = model.parse(example, f"runtime-semantics §{section}")
        assert _same_with_order(parsed.to_json(), example)
        assert type(document_for(example)) is model


def test_published_skill_record_parses() -> None:
    (example,) = _section_json("11.1")
    assert _same_with_order(SelectedSkill.model_validate(example).to_json(), example)


def test_summary_identities_of_the_published_example() -> None:
    # runtime-semantics §13.3, read through the typed model
    (example,) = _section_json("13.2")
    s = EvalSummary.parse(example)
    b = s.behavior
    assert b.model_steps == round(s.counts.completed * b.steps_mean)
    assert b.total_actions == b.model_steps - b.protocol_errors - b.policy_failures
    assert b.policy_failures == b.termination_reasons["generation_length"]
    assert sum(b.termination_reasons.values()) == s.counts.completed
    assert s.primary.reward_mean == s.reward_components["r_strict"]


def test_numbers_keep_their_json_type() -> None:
    (example,) = _section_json("13.2")
    doc = EvalSummary.parse(example).to_json()
    assert doc["counts"]["coverage"] == 1.0 and isinstance(doc["counts"]["coverage"], float)
    assert isinstance(doc["counts"]["requested"], int)
    bad = json.loads(json.dumps(example))
    bad["counts"]["completed"] = True  # a bool is not a count
    with pytest.raises(DocumentError, match=r"counts\.completed"):
        EvalSummary.parse(bad, "summary.json")


def test_errors_are_one_line_naming_file_field_and_version() -> None:
    with pytest.raises(DocumentError) as info:
        TraceRecord.parse({"schema_version": "shopsimrl-episode-v3"}, "run/traces.jsonl:4")
    assert str(info.value) == ("run/traces.jsonl:4: trace record: schema_version is 'shopsimrl-episode-v3'; "
                               "this reader accepts 'shopsimrl-episode-v4' (write it with the matching shopsimrl "
                               "version)")
    (record,) = _section_json("12.4")
    record["job"]["task_id"] = "19"
    with pytest.raises(DocumentError) as info:
        TraceRecord.parse(record, "t.jsonl:1")
    assert str(info.value).startswith("t.jsonl:1: trace record: job.task_id: ") and "\n" not in str(info.value)
    with pytest.raises(DocumentError, match="is not a known document"):
        document_for({"schema_version": "nope"})


def test_every_document_declares_schema_version_first() -> None:
    for version, model in DOCUMENTS.items():
        assert next(iter(model.model_fields)) == "schema_version", version
        assert model.SCHEMA == version


def test_a_sandbox_run_round_trips_byte_for_byte(tmp_path: Path, sandbox: Any) -> None:
    """Every trace line, the manifest and the summary of a real run are re-written identically."""
    from shopsimrl_core import load_config, run_evaluation
    from shopsimrl_core.adapters._json import dumps_line

    data = {"experiment": {"name": "docs", "output_dir": str(tmp_path), "seed": 20260830, "concurrency": 4},
            "tasks": {"split_file": str(sandbox.split_file), "split": "val", "sample_size": 4},
            "environment": {"base_url": sandbox.env_url, "timeout": 30},
            "model": {"name": sandbox.served_model, "base_url": sandbox.policy_url, "api_key_env": None,
                      "checkpoint_id": "sandbox", "max_retries": 3, "retry_backoff_seconds": 0.05}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    run_evaluation(load_config(tmp_path / "c.yaml"))
    run = tmp_path / "docs"
    lines = (run / "traces.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) >= 4
    for number, line in enumerate(lines, start=1):
        record = TraceRecord.parse(json.loads(line), f"traces.jsonl:{number}")
        assert dumps_line(record.to_json()).decode("utf-8") == line  # the store's own line encoder
    for name, model in (("manifest.json", RunManifest), ("summary.json", EvalSummary)):
        text = (run / name).read_text(encoding="utf-8")
        assert dumps_pretty(model.parse(json.loads(text), name).to_json()) == text


# Files of the Dagster layer that had no schema_version before: a file written then, as it was written.
_BEFORE_SCHEMA_VERSION: dict[str, dict[str, Any]] = {
    "shopsimrl-suite-progress-v1": {"suite": "val", "points": [{
        "checkpoint_id": "c-1", "step": 1, "episodes": 60, "reward": 0.4, "reward_low": 0.3, "reward_high": 0.55,
        "success_rate": 0.38, "success_low": 0.27, "success_high": 0.51, "tasks": None,
        "design": "60 episodes, 1 per task", "reward_interval": "percentile_bootstrap 95%",
        "success_interval": "Wilson 95%, n=60", "vs_previous": None}]},
    "shopsimrl-best-checkpoint-v1": {
        "metric": "reward",
        "best": {"checkpoint_id": "c-1", "step": 1, "reward_mean": 0.4, "reward_ci": None, "success_rate": 0.38,
                 "success_ci": None},
        "runner_up": None, "difference": None, "distinguishable": None, "ranking": []},
    "shopsimrl-skillbank-pointer-v1": {"checkpoint_id": "c-1", "path": "/runs/skillbanks/skillbank-ab.json",
                                       "bank_sha256": "ab", "bank_version": "cold-start-gate-a-selected-v2",
                                       "skill_ids": ["chunk-1"]},
    "shopsimrl-checkpoint-entry-v1": {"checkpoint_id": "grpo-4b-step-000400", "step": 400,
                                      "served_model": "grpo-4b-step400", "endpoint": "http://gpu-3:30000/v1"},
}


@pytest.mark.parametrize("version", sorted(_BEFORE_SCHEMA_VERSION))
def test_dagster_files_without_schema_version_still_parse(version: str) -> None:
    model, before = DOCUMENTS[version], _BEFORE_SCHEMA_VERSION[version]
    # Read as it was written, written back unchanged (schema_version is not invented on a re-write).
    assert _same_with_order(model.parse(before, "old.json").to_json(), before)
    # Written now: schema_version first, then the same keys in the same order.
    now = model.parse({"schema_version": version, **before}).to_json()
    assert list(now) == ["schema_version", *before] and type(document_for(now)) is model
    with pytest.raises(DocumentError, match=rf"^new\.json: .*schema_version is '{version[:-1]}9'"):
        model.parse({"schema_version": version[:-1] + "9", **before}, "new.json")


def test_a_job_plan_always_names_its_version() -> None:
    from shopsimrl_core.documents import SuiteJobPlan

    plan = {"schema_version": "shopsimrl-suite-job-plan-v1", "suite": "val",
            "split": {"name": "val", "split_version": None, "task_ids_sha256": "53ee", "role": "val", "task_count": 2},
            "guarded": False, "seed": 20260830, "sample_size": None, "repeats": 1, "episodes": 1,
            "jobs_fingerprint": "6a6e", "jobs": [{"task_id": 6, "sample_id": 0, "seed": 3350035682, "split": "val"}]}
    assert _same_with_order(SuiteJobPlan.parse(plan).to_json(), plan)
    with pytest.raises(DocumentError, match=r"^_plans/val\.json: suite job plan: schema_version: required field"):
        SuiteJobPlan.parse({k: v for k, v in plan.items() if k != "schema_version"}, "_plans/val.json")
    with pytest.raises(DocumentError, match=r"jobs\.0\.task_id"):
        SuiteJobPlan.parse({**plan, "jobs": [{**plan["jobs"][0], "task_id": "6"}]}, "_plans/val.json")


def test_the_schemas_readme_names_every_document() -> None:
    readme = (REPO / "docs" / "schemas" / "README.md").read_text(encoding="utf-8")
    missing = [v for v in DOCUMENTS if f"`{v}.schema.json`" not in readme]
    assert missing == [], f"docs/schemas/README.md has no row for {missing}"
