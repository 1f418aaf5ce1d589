import json

import pytest
from testkit.tracegen import make_trace, write_traces

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.export._records import export_sft, export_traces, redact_record

REASON = "SENTINEL-REASONING-7f3a"
GOAL = "SENTINEL-GOAL-91bc"
PERSONA = "SENTINEL-PERSONA-c0de"


def _record(**kw):
    rec = make_trace(3, reasoning=REASON, persona={"风格偏好": PERSONA, "预算偏好": "中等"},
                     goal_extra={"instruction_text": GOAL + " 米白色羊毛围巾"}, **kw)
    return rec


MANIFEST = {
    "schema_version": "shopsimrl-run-manifest-v1", "created_at": "2026-10-02T08:15:03.120000+00:00",
    "plan_fingerprint": "fp-1",
    "plan": {"pipeline_version": "shopsimrl-v0.4", "experiment": "exp", "model_id": "m", "model": {},
             "task_split": {"name": "train"}, "jobs": [], "environment": {}, "runtime": {}, "prompt": {},
             "skills": {"provider": "none"}},
}


def _run(tmp_path, records, manifest=MANIFEST):
    run = tmp_path / "run"
    write_traces(run / "traces.jsonl", records)
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_sft_export_refuses_a_malformed_manifest_in_one_line_and_writes_nothing(tmp_path):
    run = _run(tmp_path, [_record()], manifest={"plan_fingerprint": 7, "plan": {}})
    out = tmp_path / "sft.jsonl"
    with pytest.raises(ConfigError) as info:
        export_sft([run], out)
    message = str(info.value)
    assert message.splitlines() == [message]
    assert message.startswith(f"{run / 'manifest.json'}: run manifest: schema_version: required field is missing")
    assert not out.exists() and list(tmp_path.glob(".sft.jsonl.*")) == []


def test_sentinels_are_present_in_raw_traces():
    text = json.dumps(_record(protocol_error_at=2), ensure_ascii=False)
    assert REASON in text and GOAL in text and PERSONA in text


@pytest.mark.parametrize("profile,gone,kept", [
    ("no_reasoning", [REASON], [GOAL, PERSONA]),
    ("no_private_goal", [GOAL], [REASON, PERSONA]),
    ("no_persona", [PERSONA], [REASON]),
    ("public", [REASON, GOAL, PERSONA], []),
    ("full", [], [REASON, GOAL, PERSONA]),
])
def test_redaction_profiles_remove_exactly_their_sentinels(tmp_path, profile, gone, kept):
    run = _run(tmp_path, [_record(protocol_error_at=2), _record(outcome="generation_length")])
    out = tmp_path / f"{profile}.jsonl"
    result = export_traces(run, out, profile=profile)
    text = out.read_text(encoding="utf-8")
    assert result.records == 1  # latest record per episode
    for s in gone:
        assert s not in text, (profile, s)
    for s in kept:
        assert s in text, (profile, s)
    rec = json.loads(text.splitlines()[0])
    assert rec["schema_version"] == "shopsimrl-episode-v4"
    assert rec["redaction"]["profile"] == profile


def test_no_persona_strips_system_message_section_only():
    rec = redact_record(_record(), "no_persona")
    system = rec["conversation"][0]["content"]
    assert system == "你是购物助手。"
    assert rec["reset"]["user_persona"] == {}
    assert rec["final"]["goal"]["user_persona"] == {}
    assert set(rec["redaction"]["removed"]) == {"reset.user_persona", "conversation[system].persona_section",
                                                "goal.user_persona"}


def test_export_refuses_traces_jsonl_name_and_unknown_profile(tmp_path):
    run = _run(tmp_path, [_record()])
    with pytest.raises(ConfigError, match="must not be named traces.jsonl"):
        export_traces(run, tmp_path / "x" / "traces.jsonl")
    with pytest.raises(ConfigError, match="valid profiles: full, no_reasoning"):
        export_traces(run, tmp_path / "o.jsonl", profile="secret")
    assert not (tmp_path / "o.jsonl").exists()


def test_sft_export_filters_and_omits_goal(tmp_path):
    recs = [_record(), make_trace(4, outcome="wrong_option"), make_trace(5, protocol_error_at=2),
            make_trace(6, outcome="generation_length"), make_trace(7, split="test")]
    run = _run(tmp_path, recs)
    out = tmp_path / "sft.jsonl"
    res = export_sft([run], out)
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["episode_id"] for r in lines] == ["task-000003__sample-000"]
    assert res.skipped == 4
    sft = lines[0]
    assert sft["schema_version"] == "shopsimrl-sft-v1" and sft["plan_fingerprint"] == "fp-1"
    assert sft["metadata"]["r_success"] == 1
    assistants = [m for m in sft["messages"] if m["role"] == "assistant"]
    assert len(assistants) == len(sft["tools_per_turn"]) == 4
    assert all(m["tool_calls"] for m in assistants)
    text = out.read_text(encoding="utf-8")
    assert GOAL not in text and REASON not in text
    export_sft([run], out, with_reasoning=True, allow_protocol_errors=True)
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 2 and REASON in out.read_text(encoding="utf-8")
    with_pe = [r for r in lines if r["episode_id"] == "task-000005__sample-000"][0]
    assistants = [m for m in with_pe["messages"] if m["role"] == "assistant"]
    assert len(assistants) == len(with_pe["tools_per_turn"]) == 5


def test_exports_are_refused_as_skill_or_gate_input(tmp_path):
    from shopsimrl_core._errors import SkillError
    from shopsimrl_core.analysis._labels import label_run
    from shopsimrl_core.skills._candidates import mine_candidates
    from shopsimrl_core.skills._gate import read_validation_traces
    run = _run(tmp_path, [make_trace(t, outcome="wrong_option") for t in range(3)])
    fake = tmp_path / "fake_run"
    export_traces(run, fake / "public.jsonl", profile="public")
    (fake / "public.jsonl").rename(fake / "traces.jsonl")  # someone renames an export into a run directory
    label_run(fake)
    with pytest.raises(SkillError, match="exported \\(redacted\\) traces") as info:
        mine_candidates(fake / "labels.parquet", fake / "traces.jsonl", tmp_path / "c.json")
    assert info.value.code == "redacted-evidence"
    with pytest.raises(SkillError, match="not validation input"):
        read_validation_traces(fake / "traces.jsonl")
