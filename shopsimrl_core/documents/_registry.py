"""Which model reads which ``schema_version``."""

from __future__ import annotations

from typing import Any

from shopsimrl_core.documents._base import Document, DocumentError
from shopsimrl_core.documents._comparisons import CheckpointComparison
from shopsimrl_core.documents._ledgers import InvocationRecord, TestAccessEntry
from shopsimrl_core.documents._pipeline import (
    BestCheckpoint,
    CheckpointEntry,
    SkillBankPointer,
    SuiteJobPlan,
    SuiteProgress,
)
from shopsimrl_core.documents._runs import EvalSummary, RunManifest, TraceRecord
from shopsimrl_core.documents._skills import (
    CandidatePool,
    ChunkContributions,
    GateAManifest,
    InitialDraft,
    MaskAssignments,
    OnlineAssignments,
    OnlineContributions,
    OnlineGateManifest,
    SkillBank,
    SkillCandidates,
)
from shopsimrl_core.documents._training import GroupTriage, TokenSampleLine

__all__ = ["DOCUMENTS", "document_for"]

DOCUMENTS: dict[str, type[Document]] = {
    model.SCHEMA: model
    for model in (
        TraceRecord, RunManifest, EvalSummary, CheckpointComparison, SkillBank, SkillCandidates, InitialDraft,
        CandidatePool, MaskAssignments, OnlineAssignments, ChunkContributions, OnlineContributions, GateAManifest,
        OnlineGateManifest, InvocationRecord, TestAccessEntry, SuiteJobPlan, SuiteProgress, BestCheckpoint,
        SkillBankPointer, CheckpointEntry, TokenSampleLine, GroupTriage,
    )
}
"""``schema_version`` → the model of that document."""


def document_for(value: Any, source: str = "<memory>") -> Document:
    """Parse *value* with the model its ``schema_version`` names.

    Raises:
        DocumentError: no ``schema_version``, an unknown one, or a field that does not validate.
    """
    version = value.get("schema_version") if isinstance(value, dict) else None
    model = DOCUMENTS.get(version) if isinstance(version, str) else None
    if model is None:
        raise DocumentError(f"{source}: schema_version {version!r} is not a known document; "
                            f"known: {', '.join(sorted(DOCUMENTS))}", code="document-invalid")
    return model.parse(value, source)
