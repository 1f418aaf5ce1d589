"""Exports of traces for training: redacted trace records and SFT records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "export_sft": "_records",
    "export_traces": "_records",
    "redact_record": "_records",
    "export_slime_tasks": "_training",
    "export_training_sft": "_training",
}

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core.export._records import export_sft as export_sft
    from shopsimrl_core.export._records import export_traces as export_traces
    from shopsimrl_core.export._records import redact_record as redact_record
    from shopsimrl_core.export._training import export_slime_tasks as export_slime_tasks
    from shopsimrl_core.export._training import export_training_sft as export_training_sft

_getattr, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr
