"""Blocking checks on ``rollout_traces``, emitted by the asset itself (no extra step per check).

A failed check stops ``eval_summary`` and everything below it for that partition, so a broken or
incomplete rollout never produces headline numbers. The verdicts come from the core's trace audit
(``shopsimrl_core.audit_traces``), the run manifest and the job plan; this module only maps them to
``AssetCheckResult``s.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import dagster as dg

import shopsimrl_core as core

__all__ = [
    "COVERAGE",
    "TRACES_VALID",
    "PLAN_MATCHES",
    "NO_GOAL_LEAK",
    "TEST_OPT_IN",
    "check_spec",
    "rollout_check_specs",
    "rollout_check_results",
    "check_result",
]

COVERAGE = "coverage_complete"
TRACES_VALID = "trace_lines_valid"
PLAN_MATCHES = "plan_matches_job_plan"
NO_GOAL_LEAK = "no_private_goal_in_prompts"
TEST_OPT_IN = "test_split_opt_in_recorded"

_ROLLOUT_CHECKS = (
    (COVERAGE, "Every planned episode has a completed latest record (coverage == 1.0)."),
    (TRACES_VALID, "Every JSON line of traces.jsonl has the shopsimrl-episode-v4 shape."),
    (
        PLAN_MATCHES,
        "The run manifest's jobs are exactly the job_plan of the suite, and its plan_fingerprint is "
        "the fingerprint of its plan.",
    ),
    (
        NO_GOAL_LEAK,
        "No private-goal text (hidden persona reasoning, the full instruction of a persona task, the "
        "goal object) appears in any model-visible message.",
    ),
    (
        TEST_OPT_IN,
        "A run on a guarded (test-role) split carries its opt-in record in the manifest (test_access) "
        "and in the test-access ledger.",
    ),
)


def check_spec(
    name: str, asset_key: dg.AssetKey, description: str, partitions_def: dg.PartitionsDefinition | None
) -> dg.AssetCheckSpec:
    """A blocking check of *asset_key*, partitioned like the asset (*partitions_def*).

    A partitioned check's results record their partition, so the check's page names the checkpoint of
    each result ("Partition —" and one zig-zag over all checkpoints without it). Dagster 1.13 marks
    ``AssetCheckSpec(partitions_def=…)`` as preview; its warning is silenced here on purpose, in this
    one place (tests/dagster/test_verdicts.py checks that results carry their partition).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetCheckSpec(
            name, asset=asset_key, blocking=True, description=description, partitions_def=partitions_def
        )


def rollout_check_specs(
    asset_key: dg.AssetKey, partitions_def: dg.PartitionsDefinition | None = None
) -> list[dg.AssetCheckSpec]:
    """The five blocking checks of one suite's ``rollout_traces`` asset, partitioned like it (:func:`check_spec`)."""
    return [check_spec(name, asset_key, text, partitions_def) for name, text in _ROLLOUT_CHECKS]


def check_result(
    name: str, passed: bool, description: str, *, asset_key: dg.AssetKey | None = None, **metadata: Any
) -> dg.AssetCheckResult:
    """A blocking (ERROR-severity) check verdict with its description and metadata."""
    return dg.AssetCheckResult(
        check_name=name,
        asset_key=asset_key,
        passed=passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=description,
        metadata=metadata,
    )


def _plan_verdict(manifest: dict[str, Any] | None, job_plan: dict[str, Any] | None) -> tuple[bool, str, dict[str, Any]]:
    if manifest is None:
        return False, "the run directory has no manifest.json", {}
    if job_plan is None:
        return False, "no job_plan file for this suite; materialize job_plan first", {}
    plan = manifest.get("plan") or {}
    stored = manifest.get("plan_fingerprint")
    recomputed = core.fingerprint(plan)
    jobs_fp = core.fingerprint(plan.get("jobs") or [])
    expected = job_plan.get("jobs_fingerprint")
    meta = {"plan_fingerprint": str(stored), "jobs_fingerprint": jobs_fp, "job_plan_fingerprint": str(expected)}
    if stored != recomputed:
        return (
            False,
            f"manifest plan_fingerprint {stored} is not the fingerprint of its plan ({recomputed}); the manifest "
            f"was edited",
            meta,
        )
    if jobs_fp != expected:
        return (
            False,
            f"run jobs fingerprint {jobs_fp} differs from job_plan {expected}; the suite changed since the run "
            f"started — use a new suite name",
            meta,
        )
    return True, "manifest jobs equal the suite's job_plan", meta


def _opt_in_verdict(
    guarded: bool, ledger_path: Path, run_dir: Path, manifest: dict[str, Any] | None
) -> tuple[bool, str]:
    if not guarded:
        return True, "split is not guarded; no opt-in needed"
    access = (manifest or {}).get("test_access")
    if not isinstance(access, dict) or access.get("opted_in") is not True:
        return False, f"guarded split run whose manifest has no test_access opt-in record ({run_dir / 'manifest.json'})"
    fingerprint = (manifest or {}).get("plan_fingerprint")
    here = run_dir.resolve()
    for entry in core.TestAccessLedger(ledger_path).entries():
        if entry.get("plan_fingerprint") == fingerprint and Path(str(entry.get("run_dir", ""))).resolve() == here:
            return (
                True,
                f"opt-in by {access.get('source')} recorded in the manifest and in {ledger_path.name} at "
                f"{entry.get('at')}",
            )
    return False, f"guarded split run without an opt-in record for {run_dir} in {ledger_path}"


def rollout_check_results(
    *,
    asset_key: dg.AssetKey,
    coverage: float | None,
    audit: core.TraceAudit,
    manifest: dict[str, Any] | None,
    job_plan: dict[str, Any] | None,
    guarded: bool,
    ledger_path: Path,
    run_dir: Path,
) -> list[dg.AssetCheckResult]:
    """The five blocking verdicts of one rollout, in ``rollout_check_specs`` order."""

    def check(name: str, passed: bool, description: str, **metadata: Any) -> dg.AssetCheckResult:
        return check_result(name, passed, description, asset_key=asset_key, **metadata)

    results = [
        check(COVERAGE, coverage == 1.0, f"coverage {coverage}", coverage=float(coverage or 0.0)),
        check(
            TRACES_VALID,
            audit.invalid_count == 0,
            "all trace lines validate" if audit.invalid_count == 0 else "; ".join(audit.invalid[:3]),
            lines=audit.lines,
            invalid_lines=audit.invalid_count,
            torn_lines=audit.torn_lines,
            first_problems=dg.MetadataValue.json(audit.invalid),
        ),
    ]
    passed, text, meta = _plan_verdict(manifest, job_plan)
    results.append(check(PLAN_MATCHES, passed, text, **meta))
    results.append(
        check(
            NO_GOAL_LEAK,
            not audit.leaks,
            "no private-goal text in model-visible messages" if not audit.leaks else "; ".join(audit.leaks[:3]),
            leaks=len(audit.leaks),
            first_leaks=dg.MetadataValue.json(audit.leaks[:20]),
        )
    )
    passed, text = _opt_in_verdict(guarded, ledger_path, run_dir, manifest)
    results.append(check(TEST_OPT_IN, passed, text, guarded=guarded))
    return results
