"""May a run of this plan use this run directory? New, resume, or a refusal naming why (runtime-semantics §22.1).

The manifest is the run's own record of what it is. It is written once and never rewritten, so a
manifest whose plan does not hash to its ``plan_fingerprint`` was edited by hand — a ``max_steps`` raised
from 30 to 99, a zeroed fingerprint — and resuming it would mix attempts of two plans under one name.
Such a directory is refused (issue 24); so is one of another plan, one holding exported records, and
any content when resume is off.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from shopsimrl_core._errors import ConfigError, FingerprintMismatch, TraceFormatError
from shopsimrl_core._hashing import fingerprint

__all__ = ["RunFolder", "check_resumable"]


class RunFolder(Protocol):
    """What the check reads of a run directory; ``RunStore`` is one.

    A protocol rather than ``RunStore`` itself: ``RunStore.check_resumable`` calls into this module, which
    therefore does not import the store back (tests/core/test_import_cycles.py).
    """

    @property
    def run_dir(self) -> Path:
        """The run directory."""

    @property
    def manifest_path(self) -> Path:
        """Its ``manifest.json``."""

    @property
    def traces_path(self) -> Path:
        """Its ``traces.jsonl``."""

    def has_content(self) -> bool:
        """Whether it holds a manifest or at least one trace byte."""

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when there is none."""


def check_resumable(store: RunFolder, plan: dict[str, Any], plan_fingerprint: str, *, resume: bool) -> str:
    """Decide, without writing, how a run of *plan* (fingerprint *plan_fingerprint*) may use the directory of *store*.

    Returns ``"new"`` (nothing there yet) or ``"resume"`` (an existing manifest of the same semantic
    plan whose plan still hashes to its fingerprint; legacy manifests are accepted via the semantic
    projection, §22.1).

    Raises:
        ConfigError: code ``resume-disabled`` — content exists and *resume* is false (§22.2).
        TraceFormatError: code ``export-not-resumable`` — ``traces.jsonl`` holds an exported
            (redacted) record (§22.7).
        FingerprintMismatch: the directory belongs to another semantic plan (the message names what
            changed), or its manifest was edited by hand (the message names the edited fields when it
            can tell them).
    """
    from shopsimrl_core.runs.planning._plan import FINGERPRINT_SCHEME, plan_differences
    from shopsimrl_core.runs.planning._plan_hash import same_plan

    if not store.has_content():
        return "new"
    if not resume:
        raise ConfigError(
            f"{store.run_dir}: run directory already holds a run and resume is false; "
            "pass --resume to continue it, --overwrite to archive it and start fresh, or choose another "
            "experiment.name",
            code="resume-disabled",
        )
    _refuse_exported_records(store)
    manifest = store.read_manifest()
    if manifest is None:
        raise FingerprintMismatch(
            f"{store.run_dir}: traces.jsonl exists but manifest.json does not, so its plan cannot be checked; "
            "move the traces away or use another experiment.name",
            code="fingerprint-mismatch",
        )
    stored_plan = manifest["plan"]
    stored = manifest.get("plan_fingerprint")
    if manifest.get("fingerprint_scheme") == FINGERPRINT_SCHEME:
        if stored == plan_fingerprint and same_plan(stored_plan, plan):
            # The stored plan is this plan, value for value and type for type, so it hashes to
            # plan_fingerprint, which is what it claims: not edited, and no second hash of a million jobs.
            return "resume"
        hashed = fingerprint(stored_plan)
        if hashed != stored:
            raise _edited(store, stored, hashed, plan, plan_fingerprint, plan_differences)
        if stored == plan_fingerprint:
            return "resume"
    elif stored != fingerprint(stored_plan):
        raise FingerprintMismatch(
            f"{store.manifest_path}: legacy manifest is inconsistent (plan_fingerprint does not match its plan); "
            "it was edited by hand — restore it or use another experiment.name",
            code="fingerprint-mismatch",
        )
    changes = plan_differences(stored_plan, plan)
    if not changes:
        return "resume"
    raise FingerprintMismatch(
        f"{store.run_dir}: existing run manifest belongs to a different semantic plan; changed: "
        f"{', '.join(changes)}; "
        "use another experiment.name or model.id, or --overwrite to archive the old run",
        code="fingerprint-mismatch",
        changes=changes,
    )


def _edited(
    store: RunFolder, stored: Any, hashed: str, plan: dict[str, Any], plan_fingerprint: str, differences: Any
) -> FingerprintMismatch:
    """The refusal of a manifest whose plan does not hash to its ``plan_fingerprint``, naming what it can."""
    if stored == plan_fingerprint:
        # this run's plan is the one the manifest was created with: the differences are the edits
        edits = differences(plan, dict(store.read_manifest() or {}).get("plan") or {})
        what = f"its plan was changed after the run was created (edited: {', '.join(edits)})"
    elif hashed == plan_fingerprint:
        shown = stored[:16] + "…" if isinstance(stored, str) and len(stored) > 16 else repr(stored)
        what = f"its plan_fingerprint was changed (it holds {shown}, not the hash of its plan)"
    else:
        what = "its plan does not hash to its plan_fingerprint"
    return FingerprintMismatch(
        f"{store.manifest_path}: edited by hand — {what}; a run's manifest is written once and never changes: "
        "restore it from a backup, or use another experiment.name (--overwrite archives this run)",
        code="fingerprint-mismatch",
    )


def _refuse_exported_records(store: RunFolder) -> None:
    # Exports carry a ``redaction`` block and are never resume input (§22.7): appending raw
    # attempts to redacted ones would mix private and shared records in one file. The run
    # index flags such lines, so only the offending line itself is read (and nothing written).
    from shopsimrl_core.runs.storage._small_index import open_small_index

    small = open_small_index(store.run_dir)
    if small is not None:
        exported = small.first_exported
    else:
        from shopsimrl_core.runs.storage._index import open_run_index

        exported = open_run_index(store.run_dir, persist=False).first_exported()
    if exported is not None:
        number, offset, length = exported
        with open(store.traces_path, "rb") as handle:
            handle.seek(offset)
            value = json.loads(handle.read(length))
        if isinstance(value, dict) and "redaction" in value:
            profile = (value["redaction"] or {}).get("profile") if isinstance(value["redaction"], dict) else None
            raise TraceFormatError(
                f"{store.traces_path}:{number}: holds an exported (redacted, profile {profile!r}) record, which "
                "is not "
                "resume input; resume from the raw run directory, or move this file away and start a new run",
                code="export-not-resumable",
                line=number,
            )
