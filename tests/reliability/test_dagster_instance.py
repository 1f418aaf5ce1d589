"""The shipped Dagster instance is sized for a loaded machine (issue 24): a run whose launch the code server
did not answer in time is retried by the queue instead of failed (a sensor's run key is spent otherwise), and
a slow code server gets minutes to start. The settings are checked against the installed Dagster's schema by
loading the instance the way `make demo` / `make ui` prepare it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

from shopsimrl_dagster.instance import prepare_dagster_home

TEMPLATE = Path(__file__).resolve().parents[2] / "configs" / "pipeline" / "dagster.yaml"


def test_the_instance_retries_user_code_failures_and_waits_for_slow_code_servers(tmp_path: Path) -> None:
    home = prepare_dagster_home(tmp_path / "home")
    instance = dg.DagsterInstance.from_config(str(home))  # an unknown or mistyped key raises here
    try:
        queue = instance.run_coordinator.get_run_queue_config()
        assert queue.max_user_code_failure_retries == 3
        assert queue.user_code_failure_retry_delay == 30
        assert instance.code_server_process_startup_timeout == 600
        assert instance.code_server_reload_timeout == 600
        # the per-endpoint queue is unchanged (tests/dagster/test_defs.py pins it with the GPU pool)
        assert dict(queue.tag_concurrency_limits[0]) == {
            "key": "shopsimrl/endpoint", "value": {"applyLimitPerUniqueValue": True}, "limit": 1,
        }
        assert type(instance.run_coordinator).__name__ == "EndpointQueuedRunCoordinator"
    finally:
        instance.dispose()


def test_every_top_level_key_is_one_the_installed_dagster_knows() -> None:
    from dagster._core.instance.config import dagster_instance_config_schema

    keys = set(yaml.safe_load(TEMPLATE.read_text(encoding="utf-8")))
    assert keys <= set(dagster_instance_config_schema()), keys - set(dagster_instance_config_schema())
