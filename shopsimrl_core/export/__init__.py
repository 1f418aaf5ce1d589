"""Exports of traces for training: redacted trace records and SFT records."""

from __future__ import annotations

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "export_sft": "_records",
    "export_traces": "_records",
    "redact_record": "_records",
    "export_slime_tasks": "_training",
    "export_training_sft": "_training",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
