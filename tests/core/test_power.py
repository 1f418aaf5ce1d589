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


def _trinomial(n: int, p10: float, p01: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every outcome of *n* paired 0/1 tasks: counts of d = +1 (*up*), d = −1 (*down*), and its probability."""
    up, down = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    same = n - up - down
    ok = same >= 0
    log_choose = np.vectorize(math.lgamma)
    log_p = (
        math.lgamma(n + 1) - log_choose(up + 1) - log_choose(down + 1) - log_choose(np.where(ok, same, 0) + 1)
        + up * math.log(p01) + down * math.log(p10) + np.where(ok, same, 0) * math.log(1 - p10 - p01)
    )
    return up[ok], down[ok], np.exp(log_p[ok])


def exact_power_of_the_paired_difference_test(n: int, p10: float, p01: float, z: float = 1.959963984540054) -> float:
    """P(|mean d| / (sd(d, ddof=1)/√n) > z) over all outcomes: the test the comparison's interval makes."""
    up, down, prob = _trinomial(n, p10, p01)
    mean = (up - down) / n
    var = (up + down - n * mean**2) / (n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        reject = (var > 0) & (np.abs(mean) > z * np.sqrt(var / n))
    return float(prob[reject].sum())


def exact_power_of_mcnemars_test(n: int, p10: float, p01: float, z: float = 1.959963984540054) -> float:
    """P(|b − c| / √(b + c) > z) over all outcomes: McNemar's (asymptotic) test."""
    up, down, prob = _trinomial(n, p10, p01)
    with np.errstate(divide="ignore", invalid="ignore"):
        reject = (up + down > 0) & (np.abs(up - down) > z * np.sqrt(up + down))
    return float(prob[reject].sum())


def test_the_paired_sample_size_is_the_normal_approximation_not_mcnemars() -> None:
    """Issue 33: the old test restated the code's own formula. Checked here against what does not share it:
    the exact power of the paired-difference test, by enumerating every outcome of n tasks (no formula, no
    sampling), and Connor (1987)'s McNemar sample size, a different formula on the same inputs."""
    p10, p01 = 0.15, 0.25  # discordant shares: B fails where A succeeds, and the reverse
    delta, psi = p01 - p10, p01 + p10
    n = required_tasks(delta, psi - delta**2)
    assert n == 307
    # the design has its nominal power for the test the comparison runs (exactly: 79.97 %) ...
    assert exact_power_of_the_paired_difference_test(n, p10, p01) == pytest.approx(0.80, abs=0.002)
    assert exact_power_of_the_paired_difference_test(n - 10, p10, p01) < 0.795
    # ... but it is not McNemar's sample size: Connor's formula asks for 312, and McNemar's test is short
    # of 80 % at 307 (it needs 311 exactly), so the method must not be called McNemar's
    za, zb = 1.959963984540054, 0.8416212335729143
    connor = math.ceil((za * math.sqrt(psi) + zb * math.sqrt(psi - delta**2)) ** 2 / delta**2)
    assert connor == 312
    assert exact_power_of_mcnemars_test(n, p10, p01) < 0.797
    assert exact_power_of_mcnemars_test(connor, p10, p01) >= 0.80
    with pytest.raises(ValueError):
        required_tasks(0.0, 0.1)
    assert required_tasks(0.1, 0.0) == 1


def test_the_method_is_named_as_it_is() -> None:
    import shopsimrl_core.analysis._power as power_module

    doc = (power_module.__doc__ or "") + (required_tasks.__doc__ or "")
    assert "normal_paired_difference" in doc and "not** McNemar" in doc
    text = (Path(__file__).resolve().parents[2] / "docs" / "statistics.md").read_text(encoding="utf-8")
    assert "is **not** McNemar's sample size" in text and "312" in text


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
