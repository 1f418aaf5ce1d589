"""Lines of the append-only logs beside the runs: ``invocations.jsonl`` and the test-access ledger.

Each line is one document with its own ``schema_version`` (runtime-semantics §22): a run directory's
``invocations.jsonl`` gets a line per ``shopsimrl run`` / rollout that opened it, and the project-level
``test-access.jsonl`` a line per opted-in run on a guarded split (docs/runs.md, "Test-split guard").
The run store and the ledger write them (``shopsimrl_core.runs``); these models read them.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from shopsimrl_core._versions import INVOCATION_SCHEMA, TEST_ACCESS_LEDGER_SCHEMA
from shopsimrl_core.documents._base import Bool, Document, Int, Str

__all__ = ["InvocationRecord", "TestAccessEntry"]


class InvocationRecord(Document):
    """One line of a run directory's ``invocations.jsonl`` (``shopsimrl-invocation-v1``)."""

    SCHEMA: ClassVar[str] = INVOCATION_SCHEMA
    KIND: ClassVar[str] = "invocation record"

    schema_version: Literal["shopsimrl-invocation-v1"]
    invocation_id: Str
    started_at: Str
    pid: Int
    host: Str
    mode: Literal["new", "resume"]
    plan_fingerprint: Str
    execution: dict[str, Any]
    """The execution settings of this invocation (not fingerprinted: they may change on resume)."""
    max_attempts: Int | None
    archived_previous: Str | None
    """Where a run directory of another plan was moved before this one started."""
    lock_takeover: dict[str, Any] | None
    """The stale lock holder this invocation took over from."""
    test_access: dict[str, Any] | None
    """The test opt-in record on a guarded split."""


class TestAccessEntry(Document):
    """One line of the project-level ``test-access.jsonl`` (``shopsimrl-test-access-v1``, §22.6)."""

    __test__ = False  # a document model, not a pytest test class

    SCHEMA: ClassVar[str] = TEST_ACCESS_LEDGER_SCHEMA
    KIND: ClassVar[str] = "test-access ledger entry"

    schema_version: Literal["shopsimrl-test-access-v1"]
    at: Str
    plan_fingerprint: Str
    split: dict[str, Any]
    """The split identity (name, version, hash, role, size)."""
    checkpoint: Str
    """What reruns are keyed by: the checkpoint id, else the model id."""
    checkpoint_id: Str | None
    model_id: Str
    skills: dict[str, Any]
    run_dir: Str
    invocation_id: Str
    opt_in_source: Str | None
    resumed: Bool
