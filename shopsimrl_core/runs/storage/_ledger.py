"""The project-level test-access ledger (runtime-semantics §22.6).

Promise: ``TestAccessLedger`` is an append-only JSONL file with one fsynced line per run on a
guarded (test) split; ``prior_runs`` finds earlier runs of the same checkpoint and skills identity,
not counting a resume of the very same run directory and plan. ``check_test_access`` is the guard
built on it: a guarded split needs the per-invocation opt-in, and a rerun of the same checkpoint
and skills needs its own acknowledgement; it only reads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shopsimrl_core._errors import TestSplitGuardError
from shopsimrl_core._versions import TEST_ACCESS_LEDGER_SCHEMA
from shopsimrl_core.runs.storage._jsonl import _append_jsonl, _read_jsonl

if TYPE_CHECKING:
    from shopsimrl_core.runs.planning._plan import EvalPlan

__all__ = ["TestAccessLedger", "check_test_access"]


class TestAccessLedger:
    """Project-level append-only record of every run on a guarded (test) split (§22.6)."""

    __test__ = False  # not a pytest test class

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def entries(self) -> list[dict[str, Any]]:
        """Every ledger line that parses, in order."""
        return list(_read_jsonl(self.path))

    def prior_runs(
        self, *, checkpoint: str, skills: dict[str, Any], run_dir: str, plan_fingerprint: str
    ) -> list[dict[str, Any]]:
        """Earlier test runs of the same ``(checkpoint, skills identity)`` that are not this very run.

        Resuming the same directory with the same fingerprint is not a rerun.
        """
        out = []
        for entry in self.entries():
            if entry.get("checkpoint") != checkpoint or entry.get("skills") != skills:
                continue
            if entry.get("run_dir") == run_dir and entry.get("plan_fingerprint") == plan_fingerprint:
                continue
            out.append(entry)
        return out

    def append(self, entry: dict[str, Any]) -> None:
        """Append one access record (fsynced)."""
        _append_jsonl(self.path, {"schema_version": TEST_ACCESS_LEDGER_SCHEMA, **entry})


def _ledger_key(plan: EvalPlan) -> str:
    return plan.config.model.checkpoint_id or plan.config.model_id


def check_test_access(plan: EvalPlan, *, allow_test_split: bool, allow_test_rerun: bool = False) -> None:
    """Refuse a guarded split without the per-invocation opt-in (§22.6). Reads only; writes nothing.

    Raises:
        TestSplitGuardError: code ``test-split-not-opted-in`` (no ``--allow-test-split``) or
            ``test-split-rerun`` (this checkpoint and skills already ran on the test split
            elsewhere; needs ``--allow-test-rerun``).
    """
    if not plan.guarded:
        return
    label = plan.config.source_label
    if not allow_test_split:
        raise TestSplitGuardError(
            f"{label}: tasks.split: {plan.split.name!r} is a guarded test split (role {plan.split.role!r}); "
            "final test numbers must not drive selection — pass --allow-test-split on the command line "
            "(it cannot be set in YAML)",
            code="test-split-not-opted-in",
        )
    ledger = TestAccessLedger(plan.config.test_access_ledger_path)
    prior = ledger.prior_runs(
        checkpoint=_ledger_key(plan),
        skills=plan.skills.identity,
        run_dir=str(plan.run_dir),
        plan_fingerprint=plan.fingerprint,
    )
    if prior and not allow_test_rerun:
        last = prior[-1]
        raise TestSplitGuardError(
            f"{label}: checkpoint {_ledger_key(plan)!r} with these skills already ran on the test split "
            f"({len(prior)} earlier run(s), last {last.get('at')} in {last.get('run_dir')}); "
            "pass --allow-test-rerun to run it again",
            code="test-split-rerun",
        )
