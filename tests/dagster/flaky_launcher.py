"""A run launcher for tests: the project's launcher, except that its first ``failures`` launches raise.

Named in a test instance's ``dagster.yaml`` (``module: flaky_launcher``, with this folder on PYTHONPATH).
The count lives in a file of the instance folder, so every process launching runs shares it.
"""

from __future__ import annotations

from typing import Any

from shopsimrl_dagster.instance import LocalProcessRunLauncher


class FlakyLaunchRunLauncher(LocalProcessRunLauncher):
    """``LocalProcessRunLauncher`` whose first ``failures`` launches fail like an unanswered code server."""

    def __init__(self, inst_data: Any = None, failures: int = 1) -> None:
        super().__init__(inst_data=inst_data)
        self.failures = failures

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        from dagster import Field

        return {"failures": Field(int, default_value=1)}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> FlakyLaunchRunLauncher:
        return cls(inst_data=inst_data, failures=int(config_value.get("failures", 1)))

    def launch_run(self, context: Any) -> None:
        from pathlib import Path

        counter = Path(self._instance.root_directory) / "flaky-launches"
        done = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(done + 1))
        if done < self.failures:
            raise RuntimeError(f"injected launch failure {done + 1} of {self.failures} (flaky_launcher.py)")
        super().launch_run(context)
