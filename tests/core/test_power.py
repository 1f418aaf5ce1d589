"""Power and sample size (analysis/_power.py, the comparison's power keys, `shopsimrl power`)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from testkit.core_runkit import record

from shopsimrl_core import RunStore, compare_runs
from shopsimrl_core.analysis._power import (
    detection_z,
    minimum_detectable_difference,
    required_tasks,
    variance_components,
)
from shopsimrl_core.cli._main import main


def test_detection_z_is_the_sum_of_the_two_normal_quantiles() -> None:
    assert detection_z() == pytest.approx(1.959963984540054 + 0.8416212335729143, abs=1e-12)
    with pytest.raises(ValueError):
        detection_z(alpha=0.0)


def test_the_issue_23_published_test_case() -> None:
    # 400 tasks × 1, effect +2.75 pp at z = 1.22: sd_d = 0.0275·√400/1.22; the MDE is ≈ 6.3 pp.
    sd = 0.0275 * 20 / 1.22
    assert minimum_detectable_difference(sd * sd, 400) == pytest.approx(0.0632, abs=5e-4)
    assert minimum_detectable_difference(None, 400) is None and minimum_detectable_difference(0.1, 0) is None


def test_paired_proportion_sample_size_matches_the_textbook_formula() -> None:
    # Paired 0/1 outcomes with discordant shares p10 = 0.15 (B fails, A succeeds) and p01 = 0.25:
    # δ = 0.10, ψ = 0.40, σ_d² = ψ − δ². Normal-approximation paired formula, written out here, and
    # Connor (1987)'s McNemar formula n = (z_a·√ψ + z_b·√(ψ − δ²))² / δ², which differs only in the
    # variance under the null: both within 2 %.
    p10, p01 = 0.15, 0.25
    delta, psi = p01 - p10, p01 + p10
    za, zb = 1.959963984540054, 0.8416212335729143
    textbook = math.ceil((za + zb) ** 2 * (psi - delta**2) / delta**2)
    connor = (za * math.sqrt(psi) + zb * math.sqrt(psi - delta**2)) ** 2 / delta**2
    n = required_tasks(delta, psi - delta**2)
    assert n == textbook == 307
    assert abs(n - connor) / connor < 0.02
    with pytest.raises(ValueError):
        required_tasks(0.0, 0.1)
    assert required_tasks(0.1, 0.0) == 1


def test_the_required_design_has_its_nominal_power_in_simulation() -> None:
    # Monte Carlo: at the computed n, a two-sided z test on the paired mean difference rejects ≈ 80 %.
    p10, p01 = 0.15, 0.25
    n = required_tasks(p01 - p10, (p01 + p10) - (p01 - p10) ** 2)
    rng = np.random.default_rng(23)
    d = rng.choice([-1.0, 1.0, 0.0], p=[p10, p01, 1 - p10 - p01], size=(4000, n))
    z = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    power = float((np.abs(z) > 1.959963984540054).mean())
    assert 0.77 <= power <= 0.83


def test_variance_components_match_a_numpy_anova() -> None:
    rng = np.random.default_rng(4)
    k, m = 50, 4
    task_effect = rng.normal(0, 0.3, size=k)
    y = task_effect[:, None] + rng.normal(0, 0.5, size=(k, m))
    c = variance_components(y.ravel().tolist(), np.repeat(np.arange(k), m).tolist())
    assert c is not None and c.tasks == k and c.repeats == pytest.approx(m)
    within = float(((y - y.mean(axis=1, keepdims=True)) ** 2).sum() / (k * m - k))
    assert c.within == pytest.approx(within, rel=1e-12)
    assert c.between == pytest.approx(max(0.0, y.mean(axis=1).var(ddof=1) - within / m), rel=1e-12)
    # the task-level variance at the observed repeats is the variance of the task means
    assert c.task_variance(m) == pytest.approx(y.mean(axis=1).var(ddof=1), rel=1e-12)
    one = variance_components([0.1, 0.5, 0.9], [1, 2, 3])
    assert one is not None and one.within is None and one.between == pytest.approx(statistics.variance([0.1, 0.5, 0.9]))
    assert one.task_variance(8) == one.between  # without a within part, repeats are assumed not to help
    assert variance_components([1.0, 2.0], [1, 1]) is None


def test_unequal_repeats_use_searles_n0() -> None:
    values = [0.0, 1.0, 1.0, 0.5, 0.2, 0.9, 0.4]
    tasks = [1, 1, 1, 2, 2, 3, 3]
    c = variance_components(values, tasks)
    sizes = np.array([3, 2, 2])
    n0 = (7 - (sizes**2).sum() / 7) / 2
    assert c is not None and c.repeats == pytest.approx(n0)


def _run(folder: Path, rewards: dict[tuple[int, int], float]) -> Path:
    store = RunStore(folder)
    jobs = [{"task_id": t, "sample_id": s, "seed": 1, "split": "val"} for t, s in sorted(rewards)]
    plan = {"task_split": {"name": "val"}, "jobs": jobs, "model": {"model": "m", "sampling": {}}, "environment": {},
            "runtime": {}, "prompt": {}, "skills": {"provider": "none"}}
    store.write_manifest(plan, "f", {})
    for (task, sample), reward in rewards.items():
        store.append(record(task, sample, reward=reward))
    return folder


def _pair(tmp_path: Path, tasks: int, repeats: int, shift: float, seed: int = 1) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)
    p = rng.beta(0.7, 0.7, size=tasks)
    ra, rb = {}, {}
    for t in range(tasks):
        for s in range(repeats):
            ra[(t, s)] = float(rng.random() < p[t])
            rb[(t, s)] = float(rng.random() < min(1.0, p[t] + shift))
    return _run(tmp_path / "a", ra), _run(tmp_path / "b", rb)


def test_every_comparison_reports_its_detectable_difference(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, 40, 1, 0.0)
    result = compare_runs(a, b, bootstrap_samples=500)
    m = result.paired.metrics["reward"]
    diffs = []
    for t in range(40):
        ea = json.loads((a / "traces.jsonl").read_text().splitlines()[t])["final"]["reward"]
        eb = json.loads((b / "traces.jsonl").read_text().splitlines()[t])["final"]["reward"]
        diffs.append(eb - ea)
    assert m.sd_difference == pytest.approx(statistics.stdev(diffs), rel=1e-12)
    assert m.minimum_detectable_difference == pytest.approx(2.8015852 * statistics.stdev(diffs) / math.sqrt(40))
    assert m.confidence_interval is not None
    lo, hi = m.confidence_interval
    assert m.within_noise is (lo <= 0.0 <= hi)
    assert "variance_components" not in m.to_json()
    power = result.paired.power
    assert power is not None and power["alpha"] == 0.05 and power["power"] == 0.8
    assert power["method"] == "normal_paired_difference"


def test_repeats_give_variance_components(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, 30, 4, 0.1)
    m = compare_runs(a, b, bootstrap_samples=200).paired.metrics["r_success"]
    vc = m.variance_components
    assert vc is not None and vc.within_task is not None and m.sd_difference is not None
    assert vc.repeats == pytest.approx(4.0) and vc.within_task > 0
    # between + within/4 is the variance of the task-level differences the sd is taken from (floored at 0)
    expected = max(0.0, m.sd_difference ** 2 - vc.within_task / 4)
    assert vc.between_task == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_power_cli_from_a_comparison_and_from_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _pair(tmp_path, 30, 4, 0.1)
    comparison = tmp_path / "comparison.json"
    assert main(["compare", str(a), str(b), "--bootstrap-samples", "200", "--output", str(comparison)]) == 0
    capsys.readouterr()
    assert main(["power", str(comparison), "--metric", "r_success", "--detect", "0.05", "--repeats", "1",
                 "--repeats", "4", "--tasks", "100"]) == 0
    out = json.loads(capsys.readouterr().out)
    doc = json.loads(comparison.read_text())["paired"]["metrics"]["r_success"]
    vc = doc["variance_components"]
    assert out["kind"] == "comparison" and out["basis"] == "paired_differences"
    assert out["observed"]["minimum_detectable_difference"] == pytest.approx(doc["minimum_detectable_difference"])
    need = {row["repeats"]: row["tasks"] for row in out["detect"]["designs"]}
    z = 1.959963984540054 + 0.8416212335729143
    for r in (1, 4):
        assert need[r] == math.ceil(z**2 * (vc["between_task"] + vc["within_task"] / r) / 0.05**2)
    assert need[4] <= need[1]
    assert [d["repeats"] for d in out["design"]] == [1, 4] and out["design"][0]["tasks"] == 100

    assert main(["power", str(a), "--metric", "r_success", "--detect", "0.1"]) == 0
    run_out = json.loads(capsys.readouterr().out)
    assert run_out["kind"] == "run" and run_out["basis"] == "one_run_independent_checkpoints"
    assert run_out["observed"]["tasks"] == 30 and run_out["observed"]["repeats"] == pytest.approx(4.0)


def test_power_cli_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _pair(tmp_path, 10, 1, 0.0)
    old = compare_runs(a, b, bootstrap_samples=50).to_json()
    for metric in old["paired"]["metrics"].values():
        for key in ("sd_difference", "minimum_detectable_difference", "within_noise"):
            metric.pop(key)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    assert main(["power", str(path), "--detect", "0.05"]) == 2
    assert "error[power-no-variance]" in capsys.readouterr().err
    assert main(["power", str(a), "--metric", "r_nothing", "--detect", "0.05"]) == 2
    assert "error[power-unknown-metric]" in capsys.readouterr().err
    assert main(["power", str(tmp_path / "missing")]) == 2
    assert "error[run-dir-missing]" in capsys.readouterr().err
