"""Fixtures of the research tests: the deterministic analyst endpoint (a real uvicorn subprocess on a
free loopback port) and one small train run on the real sandbox, shared by the module's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from testkit.researchkit import AnalystServer, run_config


@pytest.fixture(scope="session")
def analyst(tmp_path_factory) -> Iterator[AnalystServer]:
    server = AnalystServer(tmp_path_factory.mktemp("analyst"), seed=7, malformed_rate=0.3)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def leaky_analyst(tmp_path_factory) -> Iterator[AnalystServer]:
    """Every failure card copies the gold title into its deployable procedure."""
    server = AnalystServer(tmp_path_factory.mktemp("analyst-leaky"), seed=3, malformed_rate=0.0, leak_card_rate=1.0)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def strict_analyst(tmp_path_factory) -> Iterator[AnalystServer]:
    """Every first attempt malformed: pins the repair loop."""
    server = AnalystServer(tmp_path_factory.mktemp("analyst-strict"), seed=1, malformed_rate=1.0)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def train_run(sandbox, tmp_path_factory) -> Path:
    """A small train run of the baseline policy on the sandbox (successes and failures both)."""
    from shopsimrl_core.runs.config._config import load_config
    from shopsimrl_core.runs.execution._evaluator import run_evaluation

    tmp = tmp_path_factory.mktemp("train")
    result = run_evaluation(load_config(run_config(tmp / "train.yaml", sandbox, name="train", split="train",
                                                   sample_size=12)))
    assert result.counts.coverage == 1.0
    return result.run_dir
