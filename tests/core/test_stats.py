"""Statistics: §20 seed vector, bootstrap intervals, Wilson, pass@k, and the paired checkpoint comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from testkit.core_runkit import record

from shopsimrl_core import CheckpointComparison, ConfigError, RunStore, compare_runs
from shopsimrl_core.analysis._stats import (
    bootstrap_mean_ci,
    metric_seed,
    paired_bootstrap_ci,
    pass_at_k,
    pass_hat_k,
    percentile_interpolated,
    wilson_interval,
)


def test_metric_seed_vector() -> None:
    assert metric_seed(20260901, "reward") == 12374293446495297266


@pytest.mark.parametrize("rng", ["numpy", "cpython"])
def test_equal_differences_give_degenerate_interval(rng: str) -> None:
    assert paired_bootstrap_ci([0.25] * 30, metric="reward", samples=200, rng=rng) == (0.25, 0.25)


def test_cpython_bootstrap_reproduces_reference_loop() -> None:
    import random

    diffs = [0.0, 1.0, 0.5, -0.5, 0.25]
    rng = random.Random(metric_seed(20260901, "reward"))
    means = sorted(sum(diffs[rng.randrange(5)] for _ in range(5)) / 5 for _ in range(50))
    expected = (percentile_interpolated(means, 0.025), percentile_interpolated(means, 0.975))
    assert paired_bootstrap_ci(diffs, metric="reward", samples=50, rng="cpython") == expected


def test_bootstrap_ci_is_reproducible_and_brackets_mean() -> None:
    values = [0.0, 1.0] * 50
    a = bootstrap_mean_ci(values, metric="reward", samples=500)
    assert a == bootstrap_mean_ci(values, metric="reward", samples=500)
    assert a["low"] < 0.5 < a["high"] and a["rng"] == "numpy"
    assert bootstrap_mean_ci([], metric="reward") is None


@pytest.mark.parametrize("n", [1, 7, 1025, 4099])
def test_numpy_bootstrap_does_not_depend_on_the_draw_block(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    # The block only bounds memory: drawing in many small blocks (odd sizes included) must give
    # exactly the means of one draw of everything, so intervals published before stay bit for bit.
    import numpy as np

    from shopsimrl_core.analysis import _stats

    values = np.random.default_rng(n).random(n).tolist()
    monkeypatch.setattr(_stats, "_MAX_DRAW_BLOCK", 10**9)
    whole = _stats._bootstrap_means(values, 300, metric_seed(20260901, "reward"), "numpy")
    monkeypatch.setattr(_stats, "_MAX_DRAW_BLOCK", 3 * n + n // 2)  # 3 rows per block, 300 = 100 blocks
    blocked = _stats._bootstrap_means(values, 300, metric_seed(20260901, "reward"), "numpy")
    assert blocked == whole


def test_wilson_interval_known_values() -> None:
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.27753, abs=1e-5)
    low, high = wilson_interval(5, 10)
    assert (low, high) == (pytest.approx(0.23659, abs=1e-5), pytest.approx(0.76341, abs=1e-5))
    assert wilson_interval(0, 0) is None


def test_pass_at_k_and_pass_hat_k() -> None:
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3) and pass_at_k(3, 1, 3) == 1.0 and pass_at_k(3, 0, 2) == 0.0
    assert pass_hat_k(3, 2, 2) == pytest.approx(1 / 3) and pass_hat_k(3, 3, 3) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def _run(folder: Path, rewards: dict[int, float], *, temperature: float = 0.0) -> Path:
    store = RunStore(folder)
    jobs = [{"task_id": t, "sample_id": 0, "seed": 1, "split": "val"} for t in sorted(rewards)]
    plan = {
        "task_split": {"name": "val"},
        "jobs": jobs,
        "model": {"model": "m", "sampling": {"temperature": temperature}},
        "environment": {},
        "runtime": {},
        "prompt": {},
        "skills": {"provider": "none"},
    }
    store.write_manifest(plan, "f", {})
    for task, reward in rewards.items():
        store.append(record(task, reward=reward))
    return folder


def test_compare_runs_paired_deltas_and_flips(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", {1: 1.0, 2: 0.0, 3: 0.5, 4: 1.0})
    b = _run(tmp_path / "b", {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.0})
    result = compare_runs(a, b, bootstrap_samples=300)
    assert isinstance(result, CheckpointComparison)
    assert result.alignment.status == "matched" and result.paired.pairs == 4
    reward = result.paired.metrics["reward"]
    assert reward.a_mean == 0.625 and reward.b_mean == 0.75 and reward.mean_difference == 0.125
    # the interval is the task-level paired bootstrap of the per-task differences, task order
    assert reward.confidence_interval == list(
        paired_bootstrap_ci([0.0, 1.0, 0.5, -1.0], metric="reward", samples=300)
    )
    flips = result.paired.flips
    assert flips is not None and (flips.gained, flips.lost, flips.both_success, flips.both_failure, flips.net) == (
        2, 1, 1, 0, 1)
    assert result.paired.bootstrap["seed_derivation"] == "u64_be(sha256('{seed}:{metric}')[0:8])"
    # the document as written parses with its model again and keeps its key order
    written = json.loads(json.dumps(result.to_json()))
    assert list(written) == ["schema_version", "created_at", "runs", "models", "alignment", "paired"]
    assert list(written["paired"]["flips"]) == ["gained", "lost", "both_success", "both_failure", "net"]
    assert json.dumps(CheckpointComparison.parse(written, "comparison").to_json()) == json.dumps(written)


def test_compare_runs_refuses_misaligned_plans(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", {1: 1.0})
    b = _run(tmp_path / "b", {1: 1.0}, temperature=0.6)
    with pytest.raises(ConfigError, match=r"not comparable; differing: model\.sampling\.temperature"):
        compare_runs(a, b)
    assert compare_runs(a, b, strict=False, bootstrap_samples=10).alignment.status == "mismatched"


def test_compare_means_are_correctly_rounded(tmp_path: Path) -> None:
    # Rewards whose plain left-to-right sum rounds differently from the exact sum: the published
    # means are math.fsum(...)/n, so ours must be too (issue 23: 36/36 bit-equal).
    import math
    import random

    rng = random.Random(23)
    ra = {t: rng.choice([0.1, 0.2, 0.3, 0.7, 1 / 3, 0.6]) for t in range(1, 41)}
    rb = {t: rng.choice([0.1, 0.2, 0.3, 0.7, 1 / 3, 0.6]) for t in range(1, 41)}
    a, b = _run(tmp_path / "a", ra), _run(tmp_path / "b", rb)
    reward = compare_runs(a, b, bootstrap_samples=10).paired.metrics["reward"]
    va, vb = [ra[t] for t in sorted(ra)], [rb[t] for t in sorted(rb)]
    diffs = [y - x for x, y in zip(va, vb)]
    assert reward.a_mean == math.fsum(va) / 40 and reward.b_mean == math.fsum(vb) / 40
    assert reward.mean_difference == math.fsum(diffs) / 40
    # the fixture does tell the two apart (else this test could not fail)
    assert (sum(va) / 40, sum(vb) / 40, sum(diffs) / 40) != (math.fsum(va) / 40, math.fsum(vb) / 40,
                                                             math.fsum(diffs) / 40)
