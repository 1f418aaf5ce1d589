"""The one exception tree of shopsimrl_core.

    ShopSimRLError
    ├── ConfigError              bad YAML / split / SkillBank input; message names file, key path and fix
    │   └── TestSplitGuardError  `run` on a test-role split without the per-invocation opt-in
    ├── FingerprintMismatch      run directory belongs to another semantic plan
    ├── RunLockedError           another live process holds the run directory
    ├── TraceFormatError         a trace / summary / manifest record of an unknown or broken shape
    ├── ShopSimulatorError       environment answered with an error (HTTP status or result.error)
    │   └── LeaseError           409: the lease is gone; the episode must be abandoned
    ├── InferenceError           model endpoint failed after the retry budget
    │   └── ProtocolError        the response violated the protocol (carries a stable `code`)
    └── SkillError               firewall / SkillBank / gate problems

Every error carries a stable ``code`` (see docs/errors.md, one section per code) so that scripts
and the Dagster layer can react without parsing prose.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ShopSimRLError",
    "ConfigError",
    "TestSplitGuardError",
    "FingerprintMismatch",
    "RunLockedError",
    "TraceFormatError",
    "ShopSimulatorError",
    "LeaseError",
    "InferenceError",
    "ProtocolError",
    "SkillError",
]


class ShopSimRLError(Exception):
    """Base of every error raised on purpose by shopsimrl_core."""

    code: str = "shopsimrl-error"

    def __init__(self, message: str, *, code: str | None = None, **context: Any) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)

    def one_line(self) -> str:
        """The message folded onto one line, as the CLI prints it."""
        return " ".join(str(self).split("\n")).strip()


class ConfigError(ShopSimRLError):
    code = "config-invalid"


class TestSplitGuardError(ConfigError):
    __test__ = False  # not a pytest test class
    code = "test-split-not-opted-in"


class FingerprintMismatch(ShopSimRLError):
    code = "fingerprint-mismatch"


class RunLockedError(ShopSimRLError):
    code = "run-locked"


class TraceFormatError(ShopSimRLError):
    code = "trace-format"


class ShopSimulatorError(ShopSimRLError):
    code = "environment-error"


class LeaseError(ShopSimulatorError):
    code = "lease-lost"


class InferenceError(ShopSimRLError):
    code = "inference-error"


class ProtocolError(InferenceError):
    code = "protocol-error"


class SkillError(ShopSimRLError):
    code = "skill-error"
