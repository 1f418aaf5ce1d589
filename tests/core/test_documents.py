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
