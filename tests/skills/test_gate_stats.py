"""The gate's estimates beyond the legacy coefficients: correctly rounded means, the sign-flip noise bar."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from shopsimrl_core.documents import ChunkContributions
from shopsimrl_core.skills._gate import estimate


def _rows(n_tasks: int, repeats: int, chunks: int, effects: list[float], seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for task in range(n_tasks):
        task_level = rng.gauss(0.0, 0.15)
        for sample in range(repeats):
            mask = [int(rng.random() < 0.5) for _ in range(chunks)]
            bare = rng.choice([0.1, 0.2, 0.3, 0.7, 1 / 3, 0.6])
            delta = sum(m * e for m, e in zip(mask, effects)) + task_level + rng.gauss(0.0, 0.3)
            rows.append({
                "task_id": task, "sample_id": sample, "mask": mask,
                "reward": bare + delta, "bare_reward": bare, "delta_reward": delta,
                "reward_detail": {}, "bare_reward_detail": {}, "delta_reward_detail": {},
            })
    return rows


def test_estimate_means_are_correctly_rounded() -> None:
    rows = _rows(40, 2, 3, [0.0, 0.0, 0.0], seed=5)
    out = estimate(rows, ["a", "b", "c"], bootstrap_samples=0)["reward"]
    masked, bare, deltas = ([r[k] for r in rows] for k in ("reward", "bare_reward", "delta_reward"))
    assert out["masked_mean"] == math.fsum(masked) / 80 and out["bare_mean"] == math.fsum(bare) / 80
    assert out["delta_mean"] == math.fsum(deltas) / 80
    assert (sum(masked) / 80, sum(bare) / 80, sum(deltas) / 80) != (
        out["masked_mean"], out["bare_mean"], out["delta_mean"])


def _null_gate(rng: np.random.Generator, tasks: int, repeats: int, chunks: int) -> tuple[list, list]:
    """Masks and paired deltas of a gate where no chunk does anything: treated and bare are two draws
    of the same task's success probability."""
    p_task = rng.beta(0.6, 0.7, size=tasks)
    design, deltas = [], []
    for t in range(tasks):
        for _ in range(repeats):
            design.append(rng.integers(0, 2, size=chunks).tolist())
            deltas.append(float(rng.random() < p_task[t]) - float(rng.random() < p_task[t]))
    return design, deltas


def test_noise_bar_matches_a_brute_force_numpy_refit() -> None:
    from shopsimrl_core.analysis._ols import fit_no_intercept_ols, metric_seed, sign_flip_noise_bar

    rng = np.random.default_rng(1)
    design, deltas = _null_gate(rng, 60, 2, 5)  # n = 120: 546 replicates per draw block, 1,200 = 3 blocks
    beta = fit_no_intercept_ols(design, deltas)
    out = sign_flip_noise_bar(design, deltas, beta, metric="reward", samples=1200)
    x, d = np.asarray(design, dtype=float), np.asarray(deltas)
    signs = np.random.default_rng(metric_seed(20260901, "sign_flip:reward")).integers(0, 2, size=(1200, 120)) * 2 - 1
    maxima = np.array([np.abs(np.linalg.lstsq(x, s * d, rcond=None)[0]).max() for s in signs])
    assert out["noise_bar"] == pytest.approx(float(np.percentile(maxima, 95)), abs=1e-12)
    assert out["median_max_abs"] == pytest.approx(float(np.median(maxima)), abs=1e-12)
    expected_p = [(1 + int((maxima >= abs(b) - 1e-12).sum())) / 1201 for b in beta]
    assert out["adjusted_p_values"] == pytest.approx(expected_p)
    assert out["method"] == "sign_flip_max_abs_coefficient" and out["quantile"] == 0.95


def test_on_null_chunks_the_above_noise_rule_keeps_its_nominal_share_and_published_does_not() -> None:
    # 200 simulated gates of 8 no-effect chunks (40 tasks × 2 repeats): the published rule selects
    # about half the null chunks (β > 0, budget 8); above_noise selects any in at most ~5 % of gates.
    from shopsimrl_core.analysis._ols import fit_no_intercept_ols, sign_flip_noise_bar
    from shopsimrl_core.skills._gate_a import select_chunks

    rng = np.random.default_rng(23)
    chunks = [f"c{i}" for i in range(8)]
    gates_with_any = published_selected = 0
    for g in range(200):
        design, deltas = _null_gate(rng, 40, 2, 8)
        beta = fit_no_intercept_ols(design, deltas)
        noise = sign_flip_noise_bar(design, deltas, beta, metric=f"sim-{g}", samples=400)
        coefficients = dict(zip(chunks, beta))
        within = {c: abs(b) <= noise["noise_bar"] for c, b in coefficients.items()}
        published_selected += len(select_chunks(coefficients, chunks, 8)["selected"])
        gates_with_any += bool(select_chunks(coefficients, chunks, 8, within_noise=within)["selected"])
    assert 0.4 <= published_selected / (200 * 8) <= 0.6
    assert gates_with_any / 200 <= 0.08  # family-wise; measured 0.02 (a two-sided bar used one-sided), published 0.51


def test_a_real_effect_clears_the_noise_bar() -> None:
    from shopsimrl_core.analysis._ols import fit_no_intercept_ols, sign_flip_noise_bar

    rng = np.random.default_rng(5)
    design, deltas = _null_gate(rng, 100, 2, 4)
    deltas = [d + 0.35 * row[0] for d, row in zip(deltas, design)]
    beta = fit_no_intercept_ols(design, deltas)
    noise = sign_flip_noise_bar(design, deltas, beta, metric="reward", samples=500)
    assert beta[0] > noise["noise_bar"] and noise["adjusted_p_values"][0] < 0.01
    assert all(abs(b) <= noise["noise_bar"] for b in beta[1:])


def test_estimate_reports_the_noise_bar_for_reward() -> None:
    rows = _rows(40, 2, 3, [0.0, 0.0, 0.0], seed=9)
    out = estimate(rows, ["a", "b", "c"], bootstrap_samples=0, noise_samples=300)["reward"]
    bar = out["noise_bar"]["noise_bar"]
    assert out["within_noise"] == {c: abs(b) <= bar for c, b in out["coefficients"].items()}
    assert set(out["adjusted_p_values"]) == {"a", "b", "c"} and "adjusted_p_values" not in out["noise_bar"]
    assert "noise_bar" not in estimate(rows, ["a", "b", "c"], bootstrap_samples=0, noise_samples=0)["reward"]


def test_gate_a_records_the_rule_and_marks_noise_level_chunks(tmp_path) -> None:
    import json

    from testkit.gatekit import EffectRunner, gate_setup

    from shopsimrl_core.skills._gate_a import GateAConfig, run_gate_a

    bare_cfg, bare_run, draft_path = gate_setup(tmp_path)
    runner = EffectRunner({"chunk-000000000000": 0.3, "chunk-000000000001": -0.2, "chunk-000000000002": 0.05})
    for rule, name in (("published", "strictly_positive_top_k"), ("above_noise", "above_noise_bar_top_k")):
        result = run_gate_a(
            GateAConfig(output_dir=tmp_path / rule, experiment_config=bare_cfg, bare_run_dir=bare_run,
                        draft_path=draft_path, bootstrap_samples=50, selection_rule=rule),
            runner=runner,
        )
        doc = result.contributions
        assert isinstance(doc, ChunkContributions)
        assert doc.estimator["selection_rule"] == name
        rows = {c.chunk_id: c for c in doc.contributions}
        noise_bar = doc.estimates["reward"].noise_bar
        assert noise_bar is not None
        for c in rows.values():
            assert c.within_noise is (abs(c.coefficient) <= noise_bar.noise_bar)
            assert c.adjusted_p_value is not None and 0 < c.adjusted_p_value <= 1
        expected = [c for c, row in rows.items() if row.coefficient > 0 and (rule == "published" or
                                                                            not row.within_noise)]
        assert result.selected_chunk_ids == expected
        if rule == "above_noise":  # the +0.05 chunk is below the bar (≈ 0.20 on 20 noiseless pairs)
            assert result.selected_chunk_ids == ["chunk-000000000000"]
            assert rows["chunk-000000000002"].status == "within_noise"
        else:
            assert result.selected_chunk_ids == ["chunk-000000000000", "chunk-000000000002"]
        bank = json.loads(result.selected_skillbank_path.read_text())
        assert bank["metadata"]["estimator"]["selection_rule"] == name


def test_gate_a_refuses_an_unknown_rule(tmp_path) -> None:
    from testkit.gatekit import EffectRunner, gate_setup

    from shopsimrl_core._errors import SkillError
    from shopsimrl_core.skills._gate_a import GateAConfig, run_gate_a

    bare_cfg, bare_run, draft_path = gate_setup(tmp_path)
    with pytest.raises(SkillError, match="selection_rule must be one of published, above_noise"):
        run_gate_a(GateAConfig(output_dir=tmp_path / "g", experiment_config=bare_cfg, bare_run_dir=bare_run,
                               draft_path=draft_path, selection_rule="best"), runner=EffectRunner({}))
