"""The published comparison means and differences, reproduced bit for bit (issue 23, acceptance 2).

``published/test_outcomes.json`` holds numbers only: the 400 published test task ids and, per run
(``base_free``, ``base_s0``, ``iter80_free``, ``iter80_st``), each task's reward and success, as the
published ``artifacts/analysis/test_task_outcomes.json`` gives them; beside them, the published
values checked here. The per-task values go through ``paired_task_means``, the function
``compare_runs`` computes every metric's ``a_mean``, ``b_mean`` and ``mean_difference`` with.

The 36 published values these outcomes determine, each compared with ``==``:

- the two paired comparisons (``eval/qwen35-4b-test-base-s0/comparison.json``: base_free vs base_s0;
  ``eval/qwen35-4b-test-iter80-st/comparison.json``: iter80_free vs iter80_st), metrics ``reward``,
  ``r_strict`` and ``r_success``, values ``bare_mean``, ``equipped_mean`` and ``mean_difference``:
  2 × 3 × 3 = 18. ``r_strict`` is fed the reward column: the published harness's reward is r_strict
  (its summaries give equal means, runtime-semantics §21.1), so the outcomes determine it too;
- ``eval/qwen35-4b-test-iter80-st/cross_checkpoint_comparison.json``: three contrasts
  (``internalization_free`` base_free → iter80_free, ``coevolution_upper`` base_free → iter80_st,
  ``pair_vs_s0_descriptive`` base_s0 → iter80_st), metrics ``reward`` and ``r_success``, values
  ``a``, ``b`` and ``diff``: 3 × 2 × 3 = 18.

The four summaries' ``reward_mean`` and ``success_rate`` (8 more, the same floats again) are checked
separately. Summing left to right instead of ``math.fsum`` gives 26/36, the count the issue's review
measured (``test_left_to_right_sums_miss_ten``); taking the difference as ``b_mean − a_mean`` gives
27/36 (docs/statistics.md). The other comparison metrics (steps, tokens, rates) need per-episode
traces, which were not published.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import reduce
from operator import add
from pathlib import Path
from typing import Any

import pytest

from shopsimrl_core.analysis._comparison import paired_task_means

FIXTURE = Path(__file__).parent / "published" / "test_outcomes.json"
Means = Callable[[Sequence[float], Sequence[float]], tuple[float, float, float]]


@pytest.fixture(scope="module")
def published() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def _column(doc: dict[str, Any], metric: str, run: str) -> list[float]:
    # reward and r_strict are the reward column, r_success the success column (0/1 as floats)
    return [float(v) for v in doc["success" if metric == "r_success" else "reward"][run]]


def _checks(doc: dict[str, Any], means: Means) -> list[tuple[str, float, float]]:
    """(label, ours, published) for the 36 values, in the documents' order."""
    out: list[tuple[str, float, float]] = []
    pub = doc["published"]
    for comparison in pub["paired_comparisons"]:
        for metric, values in comparison["metrics"].items():
            ours = means(_column(doc, metric, comparison["bare"]), _column(doc, metric, comparison["equipped"]))
            for key, mine in zip(("bare_mean", "equipped_mean", "mean_difference"), ours):
                out.append((f"{comparison['path']} {metric}.{key}", mine, values[key]))
    cross = pub["cross_checkpoint"]
    for name, contrast in cross["contrasts"].items():
        for metric in ("reward", "r_success"):
            ours = means(_column(doc, metric, contrast["a_run"]), _column(doc, metric, contrast["b_run"]))
            for key, mine in zip(("a", "b", "diff"), ours):
                out.append((f"{cross['path']} {name}.{metric}.{key}", mine, contrast[metric][key]))
    return out


def _left_to_right(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    # The plain running sum (what ``sum`` did before Python 3.12 made it compensated).
    n = len(a)
    return (reduce(add, a, 0.0) / n, reduce(add, b, 0.0) / n, reduce(add, [y - x for x, y in zip(a, b)], 0.0) / n)


def test_the_fixture_is_the_published_task_set(published: dict[str, Any]) -> None:
    ids = published["task_ids"]
    assert len(ids) == 400 and ids == sorted(set(ids))  # sorted like compare_runs' task keys
    for run in published["runs"]:
        rewards, successes = published["reward"][run], published["success"][run]
        assert len(rewards) == len(successes) == 400
        assert all(0.0 <= r <= 1.0 for r in rewards) and set(successes) <= {0, 1}
        # success is the strict outcome: a full reward and nothing less
        assert all((r == 1.0) == (s == 1) for r, s in zip(rewards, successes))


def test_the_36_published_means_and_differences_are_bit_equal(published: dict[str, Any]) -> None:
    checks = _checks(published, paired_task_means)
    assert len(checks) == 36
    wrong = [f"{label}: ours {mine!r}, published {theirs!r}" for label, mine, theirs in checks if mine != theirs]
    assert not wrong, f"{36 - len(wrong)}/36 bit-equal:\n" + "\n".join(wrong)


def test_the_published_summary_means_are_bit_equal(published: dict[str, Any]) -> None:
    for run, summary in published["published"]["summaries"].items():
        reward_mean, success_rate, _ = paired_task_means(
            _column(published, "reward", run), _column(published, "r_success", run)
        )
        assert reward_mean == summary["reward_mean"], run
        assert success_rate == summary["success_rate"], run


def test_left_to_right_sums_miss_ten(published: dict[str, Any]) -> None:
    """The fixture tells the summations apart: a plain running sum gets 26 of the 36."""
    checks = _checks(published, _left_to_right)
    assert sum(mine == theirs for _, mine, theirs in checks) == 26


def test_paired_task_means_refuses_unpaired_input() -> None:
    with pytest.raises(ValueError, match="equally long"):
        paired_task_means([1.0, 0.0], [1.0])
    with pytest.raises(ValueError, match="non-empty"):
        paired_task_means([], [])
