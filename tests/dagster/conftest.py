"""Fixtures for the Dagster layer: pipeline settings pointing at a real sandbox, and helpers.

Suites are shrunk (a few episodes each) so a whole lineage runs in seconds; everything else is
the project's real configuration path (YAML file → load_pipeline_settings → resources).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from testkit.researchkit import AnalystServer

from shopsimrl_dagster.defs.resources import resources_from_settings
from shopsimrl_dagster.registry import Checkpoint, register_checkpoint
from shopsimrl_dagster.settings import PipelineSettings, load_pipeline_settings

REPO_ROOT = Path(__file__).resolve().parents[2]


def write_settings(
    folder: Path,
    *,
    env_url: str = "http://127.0.0.1:9",
    policy_url: str = "http://127.0.0.1:9/v1",
    served_model: str = "shopsim-baseline-policy",
    split_file: Path | None = None,
    val_sample: int = 8,
    **inference: Any,
) -> Path:
    """Write a pipeline settings file for tests into *folder* and return its path."""
    base = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
    base.update(
        runs_root=str(folder / "runs"),
        checkpoint_registry=str(folder / "registry"),
        split_file=str(split_file or REPO_ROOT / "configs" / "sandbox" / "persona_splits.sandbox.json"),
    )
    base["environment"]["base_url"] = env_url
    base["inference"].update(base_url=policy_url, name=served_model, **inference)
    base["suites"]["val"]["sample_size"] = val_sample
    base["suites"]["test"]["sample_size"] = 3
    base["suites"]["train"].update(sample_size=3, repeats=2)
    base["comparison"]["bootstrap_samples"] = 200
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def offline_settings(tmp_path: Path) -> PipelineSettings:
    """Settings whose servers do not exist (for sensors, schedules and definitions)."""
    return load_pipeline_settings(write_settings(tmp_path))


@pytest.fixture
def sandbox_settings(tmp_path: Path, sandbox: Any) -> PipelineSettings:
    """Settings pointing at the session sandbox, 8 val episodes per checkpoint."""
    return load_pipeline_settings(
        write_settings(
            tmp_path,
            env_url=sandbox.env_url,
            policy_url=sandbox.policy_url,
            served_model=sandbox.served_model,
            split_file=sandbox.split_file,
        )
    )


@pytest.fixture
def register() -> Callable[..., Checkpoint]:
    """``register(settings, checkpoint_id, step, **fields)`` writes a registry entry."""

    def _register(settings: PipelineSettings, checkpoint_id: str, step: int, **fields: Any) -> Checkpoint:
        entry = Checkpoint(checkpoint_id=checkpoint_id, step=step, **fields)
        register_checkpoint(settings.checkpoint_registry, entry)
        return entry

    return _register


@pytest.fixture
def settings_writer() -> Callable[..., Path]:
    """The ``write_settings`` helper, for tests that need their own servers."""
    return write_settings


@pytest.fixture
def sandbox_resources(sandbox_settings: PipelineSettings) -> dict[str, Any]:
    """The live resources of the sandbox settings (what the code location would build)."""
    return resources_from_settings(sandbox_settings)


@pytest.fixture(scope="module")
def analyst(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnalystServer]:
    """The deterministic sandbox analyst (no malformed answers), one per test module."""
    server = AnalystServer(tmp_path_factory.mktemp("analyst"), seed=7, malformed_rate=0.0)
    try:
        yield server
    finally:
        server.stop()
