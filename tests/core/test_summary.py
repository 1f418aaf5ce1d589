"""Summary v2: legacy definitions, the §13.3 identities on synthetic traces, additive extensions."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from testkit.core_runkit import record, step

from shopsimrl_core import RunStore, build_summary, summarize_run


def _synthetic(n: int = 60, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for task in range(n):
        steps = []
        for _ in range(rng.randint(1, 6)):
            kind = rng.random()
            usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
            if kind < 0.1:
                steps.append(step(protocol_error=True, usage=usage))
            else:
                steps.append(step(valid=rng.random() > 0.2, usage=usage))
        reason = "purchase"
        reward = rng.choice([0.0, 0.25, 0.5, 1.0])
        if task % 9 == 0:
            steps.append(step(policy_failure=True))
            reason, reward = "generation_length", 0.0
        elif task % 11 == 0:
            reason, reward = "action_limit", 0.0
        out.append(record(task, reward=reward, reason=reason, steps=steps, duration_ms=1000.0 + task))
    out.append(record(1000, status="failed", error_type="ModelRequestError"))
    out.append(record(1001, status="failed", error_type=None))
    return out


def test_identities_hold_on_synthetic_traces() -> None:
    records = _synthetic()
    s = build_summary(records, requested=len(records))
    c, b, p, rc = s["counts"], s["behavior"], s["primary"], s["reward_components"]
    assert list(s) == [
        "schema_version",
        "created_at",
        "counts",
        "primary",
        "reward_components",
        "behavior",
        "cost",
        "errors",
        "reward_components_sem",
    ]
    assert set(s["reward_components_sem"]) == set(s["reward_components"])
    assert s["reward_components_sem"]["r_strict"] == s["primary"]["reward_sem"]
    assert s["schema_version"] == "shopsimrl-eval-summary-v2"
    assert (c["completed"], c["failed"], c["trace_files"], c["scored"]) == (60, 2, 62, 60)
    assert b["model_steps"] == pytest.approx(c["completed"] * b["steps_mean"])
    assert b["total_actions"] == b["model_steps"] - b["protocol_errors"] - b["policy_failures"]
    assert b["policy_failures"] == b["termination_reasons"]["generation_length"]
    assert sum(b["termination_reasons"].values()) == c["completed"]
    assert p["reward_mean"] == rc["r_strict"] and p["success_rate"] == rc["r_success"]
    assert list(b) == [
        "steps_mean",
        "model_steps",
        "protocol_errors",
        "protocol_error_rate",
        "policy_failures",
        "policy_failure_rate",
        "invalid_action_rate",
        "invalid_actions",
        "total_actions",
        "termination_reasons",
    ]
    assert list(rc) == sorted(rc) and list(b["termination_reasons"]) == sorted(b["termination_reasons"])
    assert s["errors"] == {"ModelRequestError": 1, "unknown": 1}
    assert c["coverage"] == 60 / 62


def test_exact_values_on_a_small_run() -> None:
    records = [
        record(
            1,
            reward=1.0,
            steps=[
                step(valid=False, usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}),
                step(
                    usage={
                        "prompt_tokens": 11,
                        "completion_tokens": 3,
                        "total_tokens": 14,
                        "completion_tokens_details": {"reasoning_tokens": 5},
                    }
                ),
            ],
        ),
        record(2, reward=0.5, steps=[step(protocol_error=True), step(valid=None), step(valid=True)], duration_ms=None),
        record(3, reward=0.0, reason="generation_length", steps=[step(policy_failure=True)]),
    ]
    s = build_summary(records, requested=4, created_at="2026-01-01T00:00:00+00:00")
    assert s["counts"] == {"requested": 4, "trace_files": 3, "completed": 3, "failed": 0, "scored": 3, "coverage": 0.75}
    assert s["primary"]["reward_mean"] == 0.5
    assert s["primary"]["reward_sem"] == pytest.approx(0.5 / 3**0.5)
    assert s["primary"]["success_rate"] == 1 / 3
    b = s["behavior"]
    assert (b["model_steps"], b["protocol_errors"], b["policy_failures"], b["total_actions"], b["invalid_actions"]) == (
        6,
        1,
        1,
        4,
        1,
    )
    assert b["invalid_action_rate"] == 0.25  # pooled over actions; empty feedback is not invalid
    assert b["steps_mean"] == 2.0
    assert s["cost"] == {
        "duration_ms_mean": 1000.0,
        "tokens": {"completion_tokens": 5, "prompt_tokens": 21, "reasoning_tokens": 5, "total_tokens": 26},
    }


def test_reasoning_tokens_only_when_seen_and_empty_run() -> None:
    s = build_summary(
        [record(1, steps=[step(usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})])], requested=1
    )
    assert "reasoning_tokens" not in s["cost"]["tokens"]
    empty = build_summary([], requested=0)
    assert empty["counts"]["coverage"] == 0.0 and empty["primary"]["reward_mean"] is None
    assert empty["behavior"]["protocol_error_rate"] is None and empty["behavior"]["steps_mean"] is None


def test_legacy_waves_failed_episode_gives_null_reward() -> None:
    s = build_summary([record(19, status="failed")], requested=1)
    assert s["counts"]["failed"] == 1 and s["primary"]["reward_mean"] is None and s["primary"]["reward_sem"] is None


def test_coverage_never_exceeds_one_with_unplanned_ids(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.write_manifest(
        {
            "jobs": [
                {"task_id": 1, "sample_id": 0, "seed": 1, "split": "val"},
                {"task_id": 2, "sample_id": 0, "seed": 1, "split": "val"},
            ]
        },
        "f",
        {},
    )
    for task in (1, 2, 3, 4):
        store.append(record(task))
    summary = summarize_run(tmp_path)
    assert summary["counts"]["coverage"] == 1.0 and summary["counts"]["unplanned_episodes"] == 2
    assert summary["counts"]["trace_files"] == 2 and summary["counts"]["requested"] == 2
    assert json.loads(store.summary_path.read_text(encoding="utf-8"))["counts"] == summary["counts"]
    # legacy behaviour without a manifest
    legacy = RunStore(tmp_path / "legacy")
    for task in (1, 2, 3):
        legacy.append(record(task))
    s = summarize_run(legacy.run_dir, requested=2, write=False)
    assert s["counts"]["coverage"] == 1.5 and "unplanned_episodes" not in s["counts"]


def test_extensions_pass_at_k_ci_and_categories() -> None:
    records = []
    outcomes = {1: [1, 1, 1], 2: [1, 0, 0], 3: [0, 0, 0]}
    for task, results in outcomes.items():
        for sample, ok in enumerate(results):
            records.append(record(task, sample, reward=1.0 if ok else 0.0, category="围巾" if task < 3 else "鞋"))
    s = build_summary(records, requested=9)
    p = s["primary"]
    assert p["pass_at_k"]["1"] == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert p["pass_at_k"]["3"] == pytest.approx(2 / 3)
    assert p["pass_hat_k"]["3"] == pytest.approx(1 / 3)
    assert p["success_ci"]["method"] == "wilson" and p["success_ci"]["low"] < 4 / 9 < p["success_ci"]["high"]
    assert p["reward_ci"]["low"] <= p["reward_mean"] <= p["reward_ci"]["high"]
    assert s["breakdowns"]["category"]["鞋"] == {"episodes": 3, "reward_mean": 0.0, "success_rate": 0.0}
    assert s["breakdowns"]["category"]["围巾"]["episodes"] == 6
    assert "pass_at_k" not in build_summary(records[:3:3], requested=1)["primary"]


def test_summary_is_deterministic() -> None:
    records = _synthetic(40, seed=3)
    a = build_summary(records, requested=42, created_at="t")
    b = build_summary(list(reversed(records)), requested=42, created_at="t")
    assert a == b
