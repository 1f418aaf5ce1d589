"""Typed models of every on-disk document, with their versions (runtime-semantics §1.3).

Each document is a pydantic model that validates a decoded JSON value once, at the boundary where
the file is read (``Model.parse(value, source)``, a one-line ``DocumentError`` naming the file and
field), and writes back in the field order its format fixes (``model.to_json()``). Unknown keys
are kept, so additive formats round-trip byte for byte. ``DOCUMENTS`` maps each ``schema_version``
to its model; ``docs/schemas/`` holds the JSON Schemas generated from them
(``scripts/generate_schemas.py``).
"""

from __future__ import annotations

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "Document": "_base",
    "DocumentError": "_base",
    "CheckpointComparison": "_runs",
    "EvalSummary": "_runs",
    "RunManifest": "_runs",
    "StepRecord": "_runs",
    "TraceRecord": "_runs",
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
    "DOCUMENTS": "_registry",
    "document_for": "_registry",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
