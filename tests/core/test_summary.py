"""Summary v2: legacy definitions, the §13.3 identities on synthetic traces, additive extensions."""

from __future__ import annotations

import json
import math
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
    summary = build_summary(records, requested=len(records))
    s = summary.to_json()
    c, b, p, rc = summary.counts, summary.behavior, summary.primary, summary.reward_components
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
    assert summary.reward_components_sem is not None and set(summary.reward_components_sem) == set(rc)
    assert summary.reward_components_sem["r_strict"] == p.reward_sem
    assert summary.schema_version == "shopsimrl-eval-summary-v2"
    assert (c.completed, c.failed, c.trace_files, c.scored) == (60, 2, 62, 60)
    assert b.steps_mean is not None and b.model_steps == pytest.approx(c.completed * b.steps_mean)
    assert b.total_actions == b.model_steps - b.protocol_errors - b.policy_failures
    assert b.policy_failures == b.termination_reasons["generation_length"]
    assert sum(b.termination_reasons.values()) == c.completed
    assert p.reward_mean == rc["r_strict"] and p.success_rate == rc["r_success"]
    assert list(s["behavior"]) == [
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
    assert list(rc) == sorted(rc) and list(b.termination_reasons) == sorted(b.termination_reasons)
    assert summary.errors == {"ModelRequestError": 1, "unknown": 1}
    assert c.coverage == 60 / 62


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
    assert s.counts.to_json() == {
        "requested": 4, "trace_files": 3, "completed": 3, "failed": 0, "scored": 3, "coverage": 0.75}
    assert s.primary.reward_mean == 0.5
    assert s.primary.reward_sem == pytest.approx(0.5 / 3**0.5)
    assert s.primary.success_rate == 1 / 3
    b = s.behavior
    assert (b.model_steps, b.protocol_errors, b.policy_failures, b.total_actions, b.invalid_actions) == (6, 1, 1, 4, 1)
    assert b.invalid_action_rate == 0.25  # pooled over actions; empty feedback is not invalid
    assert b.steps_mean == 2.0
    assert s.cost.to_json() == {
        "duration_ms_mean": 1000.0,
        "tokens": {"completion_tokens": 5, "prompt_tokens": 21, "reasoning_tokens": 5, "total_tokens": 26},
    }


def test_reasoning_tokens_only_when_seen_and_empty_run() -> None:
    s = build_summary(
        [record(1, steps=[step(usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})])], requested=1
    )
    assert "reasoning_tokens" not in s.cost.tokens
    empty = build_summary([], requested=0)
    assert empty.counts.coverage == 0.0 and empty.primary.reward_mean is None
    assert empty.behavior.protocol_error_rate is None and empty.behavior.steps_mean is None


def test_legacy_waves_failed_episode_gives_null_reward() -> None:
    s = build_summary([record(19, status="failed")], requested=1)
    assert s.counts.failed == 1 and s.primary.reward_mean is None and s.primary.reward_sem is None


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
    assert summary.counts.coverage == 1.0 and summary.counts.unplanned_episodes == 2
    assert summary.counts.trace_files == 2 and summary.counts.requested == 2
    assert json.loads(store.summary_path.read_text(encoding="utf-8"))["counts"] == summary.counts.to_json()
    # legacy behaviour without a manifest
    legacy = RunStore(tmp_path / "legacy")
    for task in (1, 2, 3):
        legacy.append(record(task))
    s = summarize_run(legacy.run_dir, requested=2, write=False)
    assert s.counts.coverage == 1.5 and "unplanned_episodes" not in s.counts.to_json()


def test_extensions_pass_at_k_ci_and_categories() -> None:
    records = []
    outcomes = {1: [1, 1, 1], 2: [1, 0, 0], 3: [0, 0, 0]}
    for task, results in outcomes.items():
        for sample, ok in enumerate(results):
            records.append(record(task, sample, reward=1.0 if ok else 0.0, category="围巾" if task < 3 else "鞋"))
    s = build_summary(records, requested=9)
    p = s.primary
    assert p.pass_at_k is not None and p.pass_hat_k is not None
    assert p.pass_at_k["1"] == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert p.pass_at_k["3"] == pytest.approx(2 / 3)
    assert p.pass_hat_k["3"] == pytest.approx(1 / 3)
    # three samples per task: the intervals resample tasks (test_sampling_design_* below)
    success_ci, reward_ci = p.success_ci, p.reward_ci
    assert success_ci is not None and reward_ci is not None and p.reward_mean is not None
    assert success_ci.method == "wilson_design_effect"
    assert success_ci.low is not None and success_ci.high is not None and success_ci.low < 4 / 9 < success_ci.high
    assert reward_ci.method == "task_cluster_percentile_bootstrap"
    assert reward_ci.low is not None and reward_ci.high is not None
    assert reward_ci.low <= p.reward_mean <= reward_ci.high
    assert s.breakdowns is not None
    shoes = s.breakdowns.category["鞋"]
    assert (shoes.episodes, shoes.reward_mean, shoes.success_rate) == (3, 0.0, 0.0)
    assert shoes.tasks == 1 and shoes.small_n is True
    assert s.breakdowns.category["围巾"].episodes == 6
    assert build_summary(records[:3:3], requested=1).primary.pass_at_k is None


def test_summary_is_deterministic() -> None:
    records = _synthetic(40, seed=3)
    a = build_summary(records, requested=42, created_at="t")
    b = build_summary(list(reversed(records)), requested=42, created_at="t")
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())


def _repeated(tasks: int, repeats: int, seed: int) -> list[dict]:
    """Tasks of varying difficulty, each played *repeats* times (the demo's train shape is 32 × 4)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p_task = rng.beta(0.6, 0.7, size=tasks)
    out = []
    for task in range(tasks):
        for sample in range(repeats):
            ok = bool(rng.random() < p_task[task])
            reward = 1.0 if ok else float(rng.choice([0.0, 0.25, 0.5]))
            out.append(record(task, sample, reward=reward, category=("围巾", "鞋", "帽")[task % 3]))
    return out


def test_sampling_design_with_repeats_resamples_tasks_and_says_so() -> None:
    from shopsimrl_core.analysis._stats import bootstrap_mean_ci, wilson_interval

    records = _repeated(32, 4, seed=4)
    s = build_summary(records, requested=128, created_at="t")
    p = s.primary
    design, success_ci, reward_ci = p.sampling_design, p.success_ci, p.reward_ci
    assert design is not None and success_ci is not None and reward_ci is not None
    assert list(p.to_json())[-1] == "sampling_design"
    assert (design.unit, design.tasks, design.episodes, design.repeats_min, design.repeats_max) == (
        "task", 32, 128, 4, 4)
    assert design.ci_method == {"reward": "task_cluster_percentile_bootstrap", "success": "wilson_design_effect"}
    deff_success, deff_reward = design.design_effect["success"], design.design_effect["reward"]
    assert deff_success is not None and deff_reward is not None and deff_success > 1.5 and deff_reward > 1.5
    assert success_ci.tasks == 32 and success_ci.n == 128
    assert success_ci.design_effect == deff_success
    # wider than the episode-level intervals the summary printed before
    rewards = [r["final"]["reward"] for r in sorted(records, key=lambda r: r["episode_id"])]
    old_reward = bootstrap_mean_ci(rewards, metric="reward", samples=2000)
    assert p.success_rate is not None
    old_success = wilson_interval(int(128 * p.success_rate), 128)
    assert old_reward is not None and old_success is not None
    assert reward_ci.low is not None and reward_ci.high is not None
    assert success_ci.low is not None and success_ci.high is not None
    assert reward_ci.high - reward_ci.low > 1.2 * (old_reward["high"] - old_reward["low"])
    assert success_ci.high - success_ci.low > 1.2 * (old_success[1] - old_success[0])
    # the task-level SEM is the SD of the task means over √k (equal repeats)
    import statistics

    task_means = [statistics.fmean(rewards[4 * t: 4 * t + 4]) for t in range(32)]
    assert design.reward_sem == pytest.approx(statistics.stdev(task_means) / 32**0.5, rel=1e-12)
    # categories follow the same design and flag their small task counts
    assert s.breakdowns is not None
    for row in s.breakdowns.category.values():
        assert row.success_ci is not None and row.success_ci.method == "wilson_design_effect"
        assert row.reward_ci is not None and row.reward_ci.method == "task_cluster_percentile_bootstrap"
        assert row.tasks in (10, 11) and row.small_n is False
        assert row.reward_ci.low is not None and row.reward_ci.high is not None and row.reward_mean is not None
        assert row.reward_ci.low <= row.reward_mean <= row.reward_ci.high


def test_one_repeat_rows_keep_the_published_keys_and_get_intervals_where_shown(tmp_path: Path) -> None:
    from shopsimrl_core import category_intervals
    from shopsimrl_core.analysis._stats import bootstrap_mean_ci
    from shopsimrl_core.runs import open_run_index

    s = build_summary(_synthetic(30, seed=5), requested=32, created_at="t")
    p = s.primary.to_json()
    assert list(p) == ["reward_mean", "reward_sem", "success_rate", "success_ci", "reward_ci"]
    assert list(p["success_ci"]) == ["method", "confidence_level", "n", "low", "high"]
    assert s.primary.reward_ci is not None and s.primary.reward_ci.method == "percentile_bootstrap"
    assert "tasks" not in p["reward_ci"]
    store = RunStore(tmp_path / "run")
    for t in range(15):
        store.append(record(t, reward=(0.0, 0.5, 1.0)[t % 3], category="鞋" if t < 12 else "帽"))
    one = summarize_run(store.run_dir)
    published = ["episodes", "reward_mean", "success_rate"]
    assert {name: list(row) for name, row in one.to_json()["breakdowns"]["category"].items()} == {"帽": published,
                                                                                                  "鞋": published}
    rows = category_intervals(one, store.run_dir)
    from_index = category_intervals(one, open_run_index(store.run_dir, persist=False))
    assert list(rows) == ["帽", "鞋"] and _rows_json(rows) == _rows_json(from_index)
    assert rows["鞋"].small_n is False and rows["帽"].small_n is True and rows["帽"].tasks == 3
    hat_success = rows["帽"].success_ci
    assert hat_success is not None and hat_success.method == "wilson" and hat_success.n == 3
    # the code and seeds a summary with repeats publishes its rows with, on these episodes
    shoes = [(0.0, 0.5, 1.0)[t % 3] for t in range(12)]
    shoes_reward = rows["鞋"].reward_ci
    assert shoes_reward is not None
    assert shoes_reward.to_json() == bootstrap_mean_ci(shoes, metric="reward:category:鞋", samples=2000)
    assert shoes_reward.method == "percentile_bootstrap"
    assert json.loads(store.summary_path.read_text(encoding="utf-8")) == one.to_json()  # nothing written back
    # traces that changed after the summary: a row whose numbers moved gets no interval of other episodes
    store.append(record(20, reward=1.0, category="帽"))
    stale = category_intervals(one, store.run_dir)
    assert list(stale["帽"].to_json()) == published and stale["鞋"].to_json() == rows["鞋"].to_json()


def _rows_json(rows: dict) -> dict:
    return {name: row.to_json() for name, row in rows.items()}


def test_rows_that_carry_their_intervals_are_returned_as_they_are(tmp_path: Path) -> None:
    from shopsimrl_core import category_intervals

    s = build_summary(_repeated(9, 3, seed=1), requested=27)
    assert s.breakdowns is not None
    assert _rows_json(category_intervals(s, tmp_path / "no-such-run")) == _rows_json(s.breakdowns.category)
    no_rows = build_summary([record(1)], requested=1)
    assert no_rows.breakdowns is None and category_intervals(no_rows, tmp_path / "no-such-run") == {}


def _synthetic_with_categories() -> list[dict]:
    """_synthetic()'s 62 records with categories (CJK and ASCII; every 13th episode without one)."""
    names = ["围巾", "鞋", "帽", "bags & co"]
    out = _synthetic()
    for rec in out:
        task = rec["job"]["task_id"]
        if rec["status"] == "completed" and task % 13:
            rec["final"]["goal"]["category"] = names[task % 7 % 4]
    return out


def test_one_repeat_summary_file_is_the_published_bytes(tmp_path: Path) -> None:
    # Pinned with the summary code before task-level intervals existed (commit a83f026): its
    # summarize_run wrote PRE_ISSUE_23 for these traces, category rows included. Since then only
    # counts.endpoint_faults (issue 24, additive) joined the file; nothing else may change a byte.
    import hashlib

    from shopsimrl_core._hashing import dumps_pretty

    pre_issue_23 = "8be3dd8d2c7d345634d66c744c03070b7dc9c22b0c78cb595c0d5a86c9867b4c"
    store = RunStore(tmp_path / "run")
    for rec in _synthetic_with_categories():
        store.append(rec)
    summarize_run(store.run_dir, requested=62, created_at="2026-01-01T00:00:00+00:00")
    data = store.summary_path.read_bytes()
    doc = json.loads(data)
    assert set(doc["breakdowns"]["category"]) == {"围巾", "鞋", "帽", "bags & co"}
    assert doc["primary"]["reward_ci"]["low"] == 0.20833333333333334
    assert doc["primary"]["success_ci"]["high"] == 0.2803161316361453
    assert data.count(b'    "endpoint_faults": 0,\n') == 1
    assert hashlib.sha256(data.replace(b'    "endpoint_faults": 0,\n', b"")).hexdigest() == pre_issue_23
    # build_summary (no endpoint-fault count given) is a83f026's document as it was
    built = build_summary(_synthetic_with_categories(), requested=62, created_at="2026-01-01T00:00:00+00:00")
    assert hashlib.sha256(dumps_pretty(built.to_json()).encode()).hexdigest() == (
        "7c219f16ff9042d91a288306d60800b095f75965edf2f368b05c3511a2952a34"
    )


def test_summaries_with_and_without_repeats_round_trip_through_the_document_model() -> None:
    from shopsimrl_core import EvalSummary

    for s in (build_summary(_repeated(9, 3, seed=1), requested=27), build_summary(_synthetic(), requested=62)):
        assert isinstance(s, EvalSummary)
        parsed = EvalSummary.parse(json.loads(json.dumps(s.to_json())), "summary")
        assert json.dumps(parsed.to_json()) == json.dumps(s.to_json())
    design = build_summary(_repeated(9, 3, seed=1), requested=27).primary.sampling_design
    assert design is not None and design.tasks == 9 and design.unit == "task"


def _published_example() -> dict:
    """The §13.2 reference summary of docs/reference/runtime-semantics.md: the published format."""
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "runtime-semantics.md").read_text(
        encoding="utf-8")
    section = re.search(r"^### 13\.2 .*?$(.*?)(?=^#+ )", text, re.M | re.S)
    assert section
    (block,) = re.findall(r"```json\n(.*?)```", section.group(1), re.S)
    return json.loads(block)


def test_a_one_repeat_sandbox_run_writes_the_published_format_byte_for_byte(tmp_path: Path, sandbox) -> None:
    """A real run (sandbox over loopback HTTP, one episode per task): summary.json is the §13.2 document
    with only the additive keys published before issue 23, in their places, written as §2.4 says;
    the category rows hold their three published keys, their intervals come from category_intervals."""
    import yaml

    from shopsimrl_core import EvalSummary, category_intervals, load_config, run_evaluation
    from shopsimrl_core._hashing import dumps_pretty
    from shopsimrl_core.analysis._stats import bootstrap_mean_ci, wilson_interval

    data = {"experiment": {"name": "published", "output_dir": str(tmp_path), "seed": 20260830, "concurrency": 4},
            "tasks": {"split_file": str(sandbox.split_file), "split": "val", "sample_size": 24},
            "environment": {"base_url": sandbox.env_url, "timeout": 30},
            "model": {"name": sandbox.served_model, "base_url": sandbox.policy_url, "api_key_env": None,
                      "checkpoint_id": "sandbox", "max_retries": 3, "retry_backoff_seconds": 0.05}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    run_evaluation(load_config(tmp_path / "c.yaml"))
    run = tmp_path / "published"
    text = (run / "summary.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    assert text == dumps_pretty(doc)  # UTF-8, indent 2, non-ASCII literal (runtime-semantics §2.4)

    example = _published_example()
    assert list(doc) == [*example, "reward_components_sem", "breakdowns"]
    assert list(doc["counts"]) == [*example["counts"], "endpoint_faults", "duplicate_completed",
                                   "unplanned_episodes"]
    assert list(doc["primary"]) == [*example["primary"], "success_ci", "reward_ci"]
    assert list(doc["behavior"]) == list(example["behavior"]) and list(doc["cost"]) == list(example["cost"])
    assert list(doc["reward_components"]) == sorted(doc["reward_components"])
    assert list(doc["breakdowns"]) == ["category"]

    latest: dict[str, dict] = {}
    for line in (run / "traces.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        latest[rec["episode_id"]] = rec
    done = [latest[k] for k in sorted(latest) if latest[k]["status"] == "completed"]
    assert len(done) == doc["counts"]["completed"] == 24
    assert len({r["job"]["task_id"] for r in done}) == 24  # one episode per task
    rewards = [r["final"]["reward"] for r in done]
    successes = [r["final"]["reward_detail"]["r_success"] for r in done]
    assert doc["primary"]["success_ci"] == {"method": "wilson", "confidence_level": 0.95, "n": 24,
                                            "low": wilson_interval(int(sum(successes)), 24)[0],
                                            "high": wilson_interval(int(sum(successes)), 24)[1]}
    assert doc["primary"]["reward_ci"] == bootstrap_mean_ci(rewards, metric="reward", samples=2000)

    by_category: dict[str, list[dict]] = {}
    for r in done:
        by_category.setdefault(r["final"]["goal"]["category"], []).append(r)
    rows = doc["breakdowns"]["category"]
    assert list(rows) == sorted(by_category) and len(rows) >= 2
    for name, row in rows.items():
        mine = by_category[name]
        assert list(row) == ["episodes", "reward_mean", "success_rate"]
        assert row["episodes"] == len(mine)
        assert row["reward_mean"] == pytest.approx(math.fsum(r["final"]["reward"] for r in mine) / len(mine),
                                                   rel=1e-15)
        assert row["success_rate"] == pytest.approx(
            sum(r["final"]["reward_detail"]["r_success"] for r in mine) / len(mine), rel=1e-15)

    shown = category_intervals(EvalSummary.parse(doc, "summary.json"), run)
    for name, row in shown.items():
        mine = by_category[name]
        assert (row.episodes, row.reward_mean, row.success_rate) == tuple(rows[name].values())
        assert row.tasks == len(mine) and row.small_n is (len(mine) < 10)
        assert row.success_ci is not None and row.success_ci.method == "wilson" and row.success_ci.n == len(mine)
        if len(mine) >= 2:
            assert row.reward_ci is not None
            assert row.reward_ci.to_json() == bootstrap_mean_ci([r["final"]["reward"] for r in mine],
                                                                metric=f"reward:category:{name}", samples=2000)
    assert (run / "summary.json").read_text(encoding="utf-8") == text


def test_summarize_categories_prints_the_rows_the_viewer_and_dagster_show(tmp_path: Path) -> None:
    import subprocess
    import sys

    from shopsimrl_core import EvalSummary, category_intervals

    store = RunStore(tmp_path / "run")
    for rec in _synthetic_with_categories():
        store.append(rec)
    done = subprocess.run([sys.executable, "-m", "shopsimrl_core.cli._main", "summarize", str(store.run_dir),
                           "--categories"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    summary = json.loads(store.summary_path.read_text(encoding="utf-8"))  # written as usual, published rows
    assert all(list(row) == ["episodes", "reward_mean", "success_rate"]
               for row in summary["breakdowns"]["category"].values())
    assert rows == _rows_json(category_intervals(EvalSummary.parse(summary, "summary.json"), store.run_dir))
    assert rows["bags & co"]["small_n"] is True and rows["bags & co"]["reward_ci"]["method"] == "percentile_bootstrap"
