"""Run tags the pipeline reads. Tags are set per launch, never in a config file.

- ``shopsimrl/suite``: which evaluation suite a run evaluates (each ``evaluate_<suite>`` job sets
  it; a plain "Materialize" from the asset graph uses the settings' ``default_suite``).
- ``shopsimrl/allow-test-split: "true"``: the per-launch opt-in a guarded (test-role) split needs
  (runtime spec §22.6). It is recorded in the run manifest and the test-access ledger.
- ``shopsimrl/allow-test-rerun: "true"``: the second acknowledgement for a new test run of a
  checkpoint that already has one.
"""

from __future__ import annotations

__all__ = ["SUITE_TAG", "ALLOW_TEST_SPLIT_TAG", "ALLOW_TEST_RERUN_TAG", "TRIGGER_TAG", "is_true"]

SUITE_TAG = "shopsimrl/suite"
ALLOW_TEST_SPLIT_TAG = "shopsimrl/allow-test-split"
ALLOW_TEST_RERUN_TAG = "shopsimrl/allow-test-rerun"
TRIGGER_TAG = "shopsimrl/trigger"


def is_true(value: str | None) -> bool:
    """A tag value counts as yes only when it is literally ``true`` (case-insensitive)."""
    return value is not None and value.strip().lower() == "true"
