"""Planning and the semantic fingerprint: job vectors, persona resolution, accept/refuse on resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from testkit.core_runkit import PERSONA_SPLITS, small_splits, write_config

from shopsimrl_core import ConfigError, FingerprintMismatch, RunStore, build_plan, fingerprint, load_config
from shopsimrl_core.runs.planning._plan import plan_differences, semantic_projection


def _plan(tmp_path: Path, **overrides):
    return build_plan(load_config(write_config(tmp_path, overrides=overrides)))


def test_val_plan_on_frozen_split(tmp_path: Path) -> None:
    plan = build_plan(load_config(write_config(tmp_path, split_file=PERSONA_SPLITS, split="val")))
    assert len(plan.jobs) == 400 and not plan.guarded and plan.persona is True
    first = plan.jobs[0]
    assert (first.task_id, first.sample_id, first.seed, first.episode_id) == (
        19,
        0,
        2694671387,
        "task-000019__sample-000",
    )
    assert plan.semantic["task_ids_sha256"] == "103c72fd5da76870d2406420a8d7eab0c616780cb6fb8ac27875b5424dae872e"
    assert plan.semantic["task_split"] == {
        "name": "val",
        "split_version": "shopsimrl-persona-splits-v1",
        "persona": True,
        "task_count": 400,
    }
    assert "transport" not in plan.semantic["model"] and "transport" in plan.model_identity
    assert plan.semantic["runtime"] == {"max_steps": 30, "action_protocol": plan.prompt.action_protocol}
    assert list(plan.semantic) == [
        "pipeline_version",
        "experiment",
        "model_id",
        "model",
        "task_split",
        "task_ids_sha256",
        "jobs",
        "environment",
        "runtime",
        "prompt",
        "skills",
    ]
    assert plan.fingerprint == fingerprint(plan.semantic)


def test_repeats_give_sample_vectors(tmp_path: Path) -> None:
    plan = build_plan(
        load_config(write_config(tmp_path, split_file=PERSONA_SPLITS, overrides={"tasks": {"repeats": 2}}))
    )
    assert [(j.task_id, j.sample_id, j.seed) for j in plan.jobs[:2]] == [(19, 0, 2694671387), (19, 1, 831922249)]
    assert plan.jobs[1].episode_id == "task-000019__sample-001" and len(plan.jobs) == 800


def test_sampling_vector_and_sample_size_limit(tmp_path: Path) -> None:
    small_splits(tmp_path)
    plan = _plan(tmp_path, tasks={"sample_size": 3})
    assert len(plan.jobs) == 3
    with pytest.raises(ConfigError, match=r"tasks\.sample_size: must be <= 5, the size of split 'val' \(got 6\)"):
        _plan(tmp_path, tasks={"sample_size": 6})


def test_persona_resolution(tmp_path: Path) -> None:
    small_splits(tmp_path)
    with pytest.raises(ConfigError, match=r"environment\.persona: false contradicts split 'val'"):
        _plan(tmp_path, environment={"persona": False})
    with pytest.raises(ConfigError, match=r"environment\.persona: null and split 'legacy_range' declares no persona"):
        _plan(tmp_path, tasks={"split": "legacy_range"})
    assert _plan(tmp_path, tasks={"split": "legacy_range"}, environment={"persona": False}).persona is False


def test_unknown_split_names_available(tmp_path: Path) -> None:
    small_splits(tmp_path)
    with pytest.raises(ConfigError, match="available splits: legacy_range, test, train, val"):
        _plan(tmp_path, tasks={"split": "dev"})


# ---------------------------------------------------------------- fingerprint accept / refuse


@pytest.mark.parametrize(
    "overrides",
    [
        {"experiment": {"concurrency": 32}},
        {
            "model": {
                "timeout": 5.0,
                "max_retries": 2,
                "retry_backoff_seconds": 0.1,
                "stream": True,
                "trust_env": False,
                "max_connections": 4,
            }
        },
        {"environment": {"timeout": 3.0, "max_connections": 2}},
        {"experiment": {"max_episode_retries": 5, "max_total_attempts": 9}},
    ],
)
def test_execution_changes_keep_fingerprint(tmp_path: Path, overrides: dict) -> None:
    small_splits(tmp_path)
    assert _plan(tmp_path, **overrides).fingerprint == _plan(tmp_path).fingerprint


def test_moved_checkout_keeps_fingerprint(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    small_splits(one)
    write_config(one)
    shutil.copytree(one, two)
    assert (
        build_plan(load_config(one / "eval.yaml")).fingerprint == build_plan(load_config(two / "eval.yaml")).fingerprint
    )


@pytest.mark.parametrize(
    ("overrides", "changed"),
    [
        ({"model": {"name": "other"}}, "model.model ('served' -> 'other')"),
        ({"model": {"temperature": 0.7}}, "model.sampling.temperature (0.0 -> 0.7)"),
        ({"model": {"extra_body": {"enable_thinking": True}}}, "model.sampling.extra_body.enable_thinking (added)"),
        ({"model": {"checkpoint_id": "ckpt-2"}}, "model.checkpoint_id (added)"),
        ({"prompt": {"system_prompt": "另一个提示"}}, "prompt.system_prompt_sha256"),
        ({"runtime": {"max_steps": 10}}, "runtime.max_steps (30 -> 10)"),
        ({"tasks": {"repeats": 2}}, "jobs (5 jobs before, 10 now)"),
        ({"experiment": {"seed": 1}}, "jobs"),
        ({"environment": {"base_url": "http://other:1"}}, "environment.base_url"),
    ],
)
def test_semantic_changes_refused_naming_the_change(tmp_path: Path, overrides: dict, changed: str) -> None:
    small_splits(tmp_path)
    original = _plan(tmp_path)
    store = RunStore(tmp_path / "run")
    store.write_manifest(original.semantic, original.fingerprint, original.execution)
    changed_plan = _plan(tmp_path, **overrides)
    assert changed_plan.fingerprint != original.fingerprint
    with pytest.raises(FingerprintMismatch, match="belongs to a different semantic plan") as info:
        store.check_resumable(changed_plan.semantic, changed_plan.fingerprint, resume=True)
    assert changed in str(info.value)
    assert (
        store.check_resumable(
            _plan(tmp_path, experiment={"concurrency": 7}).semantic, original.fingerprint, resume=True
        )
        == "resume"
    )


def test_skills_change_refused(tmp_path: Path) -> None:
    small_splits(tmp_path)
    (tmp_path / "bank.json").write_text(
        json.dumps({"bank_version": "b1", "skills": [{"skill_id": "s1", "content": "先核对规格。"}]}), encoding="utf-8"
    )
    bare = _plan(tmp_path)
    equipped = _plan(tmp_path, skills={"path": "bank.json"})
    assert equipped.semantic["skills"]["provider"] == "json_skillbank"
    assert any(d.startswith("skills.") for d in plan_differences(bare.semantic, equipped.semantic))


def test_split_change_refused(tmp_path: Path) -> None:
    small_splits(tmp_path)
    val = _plan(tmp_path)
    other = _plan(tmp_path, tasks={"split": "train"})
    diffs = plan_differences(val.semantic, other.semantic)
    assert "task_split.name ('val' -> 'train')" in diffs and "task_ids_sha256" in " ".join(diffs)


def _legacy_manifest(plan_semantic: dict) -> dict:
    legacy = json.loads(json.dumps(plan_semantic))
    legacy.pop("task_ids_sha256")
    legacy["model"]["transport"] = {"timeout_seconds": 180.0, "max_retries": 3, "retry_backoff_seconds": 1.0}
    legacy["model"] = {k: legacy["model"][k] for k in ("provider", "model", "base_url", "transport", "sampling")}
    legacy["runtime"]["concurrency"] = 32
    legacy["task_split"] = {
        "name": "val",
        "source_path": "/old/checkout/splits.json",
        **{k: v for k, v in legacy["task_split"].items() if k != "name"},
    }
    return {
        "schema_version": "shopsimrl-run-manifest-v1",
        "created_at": "2026-09-07T12:40:11.503114+00:00",
        "plan_fingerprint": fingerprint(legacy),
        "plan": legacy,
    }


def test_legacy_manifest_resumes_via_projection_and_is_not_rewritten(tmp_path: Path) -> None:
    small_splits(tmp_path)
    plan = _plan(tmp_path)
    store = RunStore(tmp_path / "legacy-run")
    store.run_dir.mkdir()
    manifest = _legacy_manifest(plan.semantic)
    text = json.dumps(manifest, indent=2)
    store.manifest_path.write_text(text, encoding="utf-8")
    assert semantic_projection(manifest["plan"], keep_task_ids_sha256=False) == semantic_projection(
        plan.semantic, keep_task_ids_sha256=False
    )
    assert store.check_resumable(plan.semantic, plan.fingerprint, resume=True) == "resume"
    assert store.manifest_path.read_text(encoding="utf-8") == text
    # an inconsistent legacy manifest (edited plan) is refused
    manifest["plan"]["runtime"]["max_steps"] = 31
    store.manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(FingerprintMismatch, match="legacy manifest is inconsistent"):
        store.check_resumable(plan.semantic, plan.fingerprint, resume=True)
