import itertools
import random

import pytest

from shopsimrl_core._errors import SkillError
from shopsimrl_core.analysis._ols import bootstrap_coefficients, check_design, fit_no_intercept_ols, metric_seed


def _design(n, p, seed=1):
    rng = random.Random(seed)
    return [[rng.randrange(2) for _ in range(p)] for _ in range(n)]


@pytest.mark.parametrize("metric", ["reward", "r_strict", "r_success"])
def test_recovers_known_effects_exactly(metric):
    design = [list(r) for r in itertools.product([0, 1], repeat=2)] * 5  # 20 rows, full rank
    beta_true = (0.3, -0.2)
    deltas = [beta_true[0] * a + beta_true[1] * b for a, b in design]
    beta = fit_no_intercept_ols(design, deltas)
    assert beta == pytest.approx(list(beta_true), abs=1e-15)


def test_recovers_many_coefficients_random_design():
    design = _design(200, 8, seed=7)
    truth = [0.05 * (j - 3) for j in range(8)]
    deltas = [sum(b * x for b, x in zip(truth, row)) for row in design]
    beta = fit_no_intercept_ols(design, deltas)
    assert max(abs(a - b) for a, b in zip(beta, truth)) < 1e-13
    assert beta[3] == 0.0  # |β| <= 1e-12 is set to exactly zero


def test_rank_deficient_design_refused_with_clear_error():
    design = [[1, 1, 0], [0, 0, 1], [1, 1, 1], [0, 0, 0], [1, 1, 0]]  # columns 0 and 1 identical
    with pytest.raises(SkillError, match="rank deficient; use a different mask seed") as info:
        fit_no_intercept_ols(design, [0.1] * 5)
    assert info.value.code == "rank-deficient-design"
    with pytest.raises(SkillError, match="rank deficient"):
        check_design([[0, 1], [0, 1], [0, 0]])  # column 0 never on


def test_too_few_observations_and_bad_inputs():
    with pytest.raises(SkillError, match="more observations than chunk factors"):
        fit_no_intercept_ols([[1, 0], [0, 1]], [0.0, 0.0])
    with pytest.raises(SkillError, match="finite"):
        fit_no_intercept_ols([[1], [0], [1]], [0.0, float("nan"), 1.0])
    with pytest.raises(SkillError, match="0 or 1"):
        fit_no_intercept_ols([[2], [0], [1]], [0.0, 0.0, 1.0])


def test_bootstrap_intervals_cover_truth_and_are_reproducible():
    rng = random.Random(3)
    design, deltas, groups = [], [], []
    for task in range(60):
        row = [rng.randrange(2), rng.randrange(2)]
        design.append(row)
        deltas.append(0.3 * row[0] - 0.2 * row[1] + rng.gauss(0, 0.05))
        groups.append(task)
    a = bootstrap_coefficients(design, deltas, groups, metric="reward", samples=300, seed=20260901)
    b = bootstrap_coefficients(design, deltas, groups, metric="reward", samples=300, seed=20260901)
    assert a == b
    assert a["metric_seed"] == 12374293446495297266  # spec §20 seed vector for "reward"
    (lo0, hi0), (lo1, hi1) = a["intervals"]
    assert lo0 < 0.3 < hi0 and lo1 < -0.2 < hi1
    assert hi0 - lo0 < 0.2


def test_bootstrap_equal_deltas_give_degenerate_interval():
    design = [[1], [1], [0], [1]]
    out = bootstrap_coefficients(design, [0.5, 0.5, 0.0, 0.5], [1, 2, 3, 4], metric="r_strict", samples=50)
    lo, hi = out["intervals"][0]
    assert lo == pytest.approx(0.5) and hi == pytest.approx(0.5)
    assert out["skipped_rank_deficient"] > 0 or out["valid_samples"] == 50


def test_metric_seed_vector():
    assert metric_seed(20260901, "reward") == 12374293446495297266
