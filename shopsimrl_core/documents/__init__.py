"""Typed models of every on-disk document, with their versions (runtime-semantics §1.3).

Each document is a pydantic model that validates a decoded JSON value once, at the boundary where
the file is read (``Model.parse(value, source)``, a one-line ``DocumentError`` naming the file and
field), and writes back in the field order its format fixes (``model.to_json()``). Unknown keys
are kept, so additive formats round-trip byte for byte. ``DOCUMENTS`` maps each ``schema_version``
to its model; ``docs/schemas/`` holds the JSON Schemas generated from them
(``scripts/generate_schemas.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "Document": "_base",
    "DocumentError": "_base",
    "CategoryRow": "_runs",
    "CheckpointComparison": "_comparisons",
    "EvalSummary": "_runs",
    "RunManifest": "_runs",
    "StepRecord": "_runs",
    "SummaryInterval": "_runs",
    "TraceRecord": "_runs",
    "InvocationRecord": "_ledgers",
    "TestAccessEntry": "_ledgers",
    "BestCheckpoint": "_pipeline",
    "CheckpointEntry": "_pipeline",
    "SkillBankPointer": "_pipeline",
    "SuiteJobPlan": "_pipeline",
    "SuiteProgress": "_pipeline",
    "CandidatePool": "_skills",
    "ChunkContributions": "_skills",
    "GateAManifest": "_skills",
    "InitialDraft": "_skills",
    "MaskAssignments": "_skills",
    "OnlineAssignments": "_skills",
    "OnlineContributions": "_skills",
    "OnlineGateManifest": "_skills",
    "SkillBank": "_skills",
    "SkillCandidates": "_skills",
    "GroupTriage": "_training",
    "TokenSampleLine": "_training",
    "TrainingBlock": "_training",
    "DOCUMENTS": "_registry",
    "document_for": "_registry",
}

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core.documents._base import Document as Document
    from shopsimrl_core.documents._base import DocumentError as DocumentError
    from shopsimrl_core.documents._comparisons import CheckpointComparison as CheckpointComparison
    from shopsimrl_core.documents._ledgers import InvocationRecord as InvocationRecord
    from shopsimrl_core.documents._ledgers import TestAccessEntry as TestAccessEntry
    from shopsimrl_core.documents._pipeline import BestCheckpoint as BestCheckpoint
    from shopsimrl_core.documents._pipeline import CheckpointEntry as CheckpointEntry
    from shopsimrl_core.documents._pipeline import SkillBankPointer as SkillBankPointer
    from shopsimrl_core.documents._pipeline import SuiteJobPlan as SuiteJobPlan
    from shopsimrl_core.documents._pipeline import SuiteProgress as SuiteProgress
    from shopsimrl_core.documents._registry import DOCUMENTS as DOCUMENTS
    from shopsimrl_core.documents._registry import document_for as document_for
    from shopsimrl_core.documents._runs import CategoryRow as CategoryRow
    from shopsimrl_core.documents._runs import EvalSummary as EvalSummary
    from shopsimrl_core.documents._runs import RunManifest as RunManifest
    from shopsimrl_core.documents._runs import StepRecord as StepRecord
    from shopsimrl_core.documents._runs import SummaryInterval as SummaryInterval
    from shopsimrl_core.documents._runs import TraceRecord as TraceRecord
    from shopsimrl_core.documents._skills import CandidatePool as CandidatePool
    from shopsimrl_core.documents._skills import ChunkContributions as ChunkContributions
    from shopsimrl_core.documents._skills import GateAManifest as GateAManifest
    from shopsimrl_core.documents._skills import InitialDraft as InitialDraft
    from shopsimrl_core.documents._skills import MaskAssignments as MaskAssignments
    from shopsimrl_core.documents._skills import OnlineAssignments as OnlineAssignments
    from shopsimrl_core.documents._skills import OnlineContributions as OnlineContributions
    from shopsimrl_core.documents._skills import OnlineGateManifest as OnlineGateManifest
    from shopsimrl_core.documents._skills import SkillBank as SkillBank
    from shopsimrl_core.documents._skills import SkillCandidates as SkillCandidates
    from shopsimrl_core.documents._training import GroupTriage as GroupTriage
    from shopsimrl_core.documents._training import TokenSampleLine as TokenSampleLine
    from shopsimrl_core.documents._training import TrainingBlock as TrainingBlock

_getattr, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr
