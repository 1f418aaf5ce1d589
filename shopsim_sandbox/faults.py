"""Fault injection knobs shared by the sandbox environment server and the baseline policy.

Everything is off by default. Decisions are deterministic: a :class:`FaultInjector` derives every
draw from ``sha256(seed, key, n)`` where ``key`` names the request (for example the episode's
lease plus step, or a hash of a chat request) and ``n`` counts how often that same key was seen
before. Concurrent requests with different keys therefore do not change each other's faults, and
a retried request (same key, next ``n``) gets a fresh draw, so a 429 at rate < 1 is eventually
followed by a success exactly as with a real overloaded server.

Which fields apply where:

* both servers: ``latency_ms`` (added to every call), ``rate_429`` / ``rate_500`` / ``rate_503``
  (answer with that HTTP status instead of doing the work), ``slow_rate`` / ``slow_ms`` (an extra
  delay on a fraction of calls);
* policy only: ``malformed_rate`` with ``malformed_kinds`` (``text``: plain text instead of a tool
  call; ``two_calls``: two tool calls; ``bad_json``: arguments that are not JSON) and
  ``length_rate`` (``finish_reason: "length"`` with the output truncated to no tool call).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "MALFORMED_KINDS",
    "FaultConfig",
    "FaultDecision",
    "FaultInjector",
    "add_fault_arguments",
    "fault_config_from_args",
    "fault_config_to_argv",
]

MALFORMED_KINDS: tuple[str, ...] = ("text", "two_calls", "bad_json")
FaultTarget = Literal["env", "policy"]
_TARGETS: tuple[str, ...] = ("env", "policy")

_RATE_FIELDS = ("rate_429", "rate_500", "rate_503", "slow_rate", "malformed_rate", "length_rate")


@dataclass(frozen=True)
class FaultConfig:
    """Fault-injection settings; the default instance injects nothing.

    Rates are probabilities in [0, 1] per request; ``rate_429 + rate_500 + rate_503`` must not
    exceed 1 (one uniform draw picks at most one status). Durations are milliseconds.
    """

    latency_ms: float = 0.0
    """Added to every call (both servers)."""
    rate_429: float = 0.0
    """Fraction of calls answered with HTTP 429."""
    rate_500: float = 0.0
    """Fraction of calls answered with HTTP 500."""
    rate_503: float = 0.0
    """Fraction of calls answered with HTTP 503."""
    slow_rate: float = 0.0
    """Fraction of calls delayed by an extra ``slow_ms``."""
    slow_ms: float = 0.0
    """Extra delay of a slow call."""
    malformed_rate: float = 0.0
    """Policy only: fraction of completions that are malformed (kind drawn from ``malformed_kinds``)."""
    malformed_kinds: tuple[str, ...] = MALFORMED_KINDS
    """Policy only: the malformed-output kinds to draw from (subset of ``MALFORMED_KINDS``)."""
    length_rate: float = 0.0
    """Policy only: fraction of completions cut off with ``finish_reason: "length"`` and no tool call."""
    seed: int = 0
    """Seed of every fault draw."""

    def __post_init__(self) -> None:
        for name in ("latency_ms", "slow_ms"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ValueError(f"FaultConfig.{name}: must be a finite number >= 0 (got {value!r})")
        for name in _RATE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
                raise ValueError(f"FaultConfig.{name}: must be a rate between 0 and 1 (got {value!r})")
        status_total = self.rate_429 + self.rate_500 + self.rate_503
        if status_total > 1.0 + 1e-12:
            raise ValueError(
                f"FaultConfig.rate_429 + rate_500 + rate_503: must be <= 1 (got {status_total!r}); lower one of them"
            )
        kinds = tuple(self.malformed_kinds)
        unknown = [k for k in kinds if k not in MALFORMED_KINDS]
        if unknown or not kinds:
            raise ValueError(
                f"FaultConfig.malformed_kinds: must be a non-empty subset of {list(MALFORMED_KINDS)} (got "
                f"{list(kinds)!r})"
            )
        object.__setattr__(self, "malformed_kinds", kinds)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"FaultConfig.seed: must be an integer (got {self.seed!r})")

    @property
    def active(self) -> bool:
        """True when any knob is switched on."""
        return any(getattr(self, name) > 0 for name in (*_RATE_FIELDS, "latency_ms"))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (``malformed_kinds`` as a list)."""
        data = dataclasses.asdict(self)
        data["malformed_kinds"] = list(self.malformed_kinds)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FaultConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError`` naming them and the valid keys."""
        valid = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - valid)
        if unknown:
            raise ValueError(f"FaultConfig: unknown key(s) {unknown}; valid keys: {', '.join(sorted(valid))}")
        values = dict(data)
        if "malformed_kinds" in values:
            values["malformed_kinds"] = tuple(values["malformed_kinds"])
        return cls(**values)


@dataclass(frozen=True)
class FaultDecision:
    """What to do with one request. ``status`` is None for a normal answer."""

    status: int | None = None
    delay_ms: float = 0.0
    malformed: str | None = None
    length: bool = False


class FaultInjector:
    """Deterministic per-request fault draws for one server process (thread-safe).

    ``decide(key)`` returns the decision for the next occurrence of ``key``. Identical key
    sequences give identical decisions for the same config. Occurrence counts are kept for the
    ``max_keys`` most recently seen keys (retries follow their first attempt closely), so memory
    stays bounded in long benchmark runs.
    """

    def __init__(self, config: FaultConfig | None, *, max_keys: int = 65536) -> None:
        self.config = config or FaultConfig()
        self._seen: OrderedDict[str, int] = OrderedDict()
        self._max_keys = max_keys
        self._lock = threading.Lock()

    def _uniforms(self, key: str, n: int) -> list[float]:
        digest = hashlib.sha256(f"{self.config.seed}\x1f{key}\x1f{n}".encode()).digest()
        return [int.from_bytes(digest[i : i + 6], "big") / float(1 << 48) for i in range(0, 30, 6)]

    def decide(self, key: str) -> FaultDecision:
        """Draw the decision for the next occurrence of ``key``; all-off configs return the no-fault decision."""
        cfg = self.config
        if not cfg.active:
            return FaultDecision()
        with self._lock:
            n = self._seen.pop(key, 0)
            self._seen[key] = n + 1
            if len(self._seen) > self._max_keys:
                self._seen.popitem(last=False)
        u_status, u_slow, u_malformed, u_kind, u_length = self._uniforms(key, n)
        status: int | None = None
        if u_status < cfg.rate_429:
            status = 429
        elif u_status < cfg.rate_429 + cfg.rate_500:
            status = 500
        elif u_status < cfg.rate_429 + cfg.rate_500 + cfg.rate_503:
            status = 503
        delay = cfg.latency_ms + (cfg.slow_ms if u_slow < cfg.slow_rate else 0.0)
        malformed = None
        if u_malformed < cfg.malformed_rate:
            malformed = cfg.malformed_kinds[min(int(u_kind * len(cfg.malformed_kinds)), len(cfg.malformed_kinds) - 1)]
        length = malformed is None and u_length < cfg.length_rate
        return FaultDecision(status=status, delay_ms=delay, malformed=malformed, length=length)


# --- command line ---------------------------------------------------------------------------

_CLI_FIELDS: tuple[tuple[str, str, type, str, tuple[str, ...]], ...] = (
    # (field, flag suffix, type, help, targets)
    ("latency_ms", "latency-ms", float, "milliseconds added to every call", _TARGETS),
    ("rate_429", "fault-429-rate", float, "fraction of calls answered with HTTP 429", _TARGETS),
    ("rate_500", "fault-500-rate", float, "fraction of calls answered with HTTP 500", _TARGETS),
    ("rate_503", "fault-503-rate", float, "fraction of calls answered with HTTP 503", _TARGETS),
    ("slow_rate", "slow-rate", float, "fraction of calls delayed by --*-slow-ms", _TARGETS),
    ("slow_ms", "slow-ms", float, "extra delay in ms of a slow call", _TARGETS),
    (
        "malformed_rate",
        "malformed-rate",
        float,
        "fraction of completions that are malformed (text, two tool calls or bad JSON)",
        ("policy",),
    ),
    ("length_rate", "length-rate", float, 'fraction of completions cut off with finish_reason "length"', ("policy",)),
)


def add_fault_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the fault flags for both servers to ``parser`` (all default to off).

    Flags: ``--env-latency-ms``, ``--env-fault-{429,500,503}-rate``, ``--env-slow-rate``,
    ``--env-slow-ms``, the same with ``--policy-`` plus ``--policy-malformed-rate``,
    ``--policy-malformed-kinds`` (comma list), ``--policy-length-rate``, and ``--fault-seed``.
    Read them back with :func:`fault_config_from_args`.
    """
    group = parser.add_argument_group("fault injection (all off by default)")
    for target in _TARGETS:
        for name, suffix, typ, help_text, targets in _CLI_FIELDS:
            if target in targets:
                group.add_argument(
                    f"--{target}-{suffix}",
                    dest=f"{target}_{name}",
                    type=typ,
                    default=0.0,
                    help=f"{target}: {help_text}",
                )
    group.add_argument(
        "--policy-malformed-kinds",
        dest="policy_malformed_kinds",
        default=",".join(MALFORMED_KINDS),
        help=f"policy: comma-separated malformed kinds out of {','.join(MALFORMED_KINDS)}",
    )
    group.add_argument("--fault-seed", dest="fault_seed", type=int, default=0, help="seed of every fault draw")


def fault_config_from_args(args: argparse.Namespace, target: FaultTarget = "policy") -> FaultConfig | None:
    """Build the ``FaultConfig`` of ``target`` ("env" or "policy") from parsed flags; None when all are off.

    Raises:
        ValueError: a flag value is out of range (the message names the flag and the fix).
    """
    if target not in _TARGETS:
        raise ValueError(f"fault target must be one of {list(_TARGETS)} (got {target!r})")
    values: dict[str, Any] = {"seed": getattr(args, "fault_seed", 0)}
    for name, _suffix, _typ, _help, targets in _CLI_FIELDS:
        if target in targets:
            values[name] = getattr(args, f"{target}_{name}", 0.0)
    if target == "policy":
        raw = getattr(args, "policy_malformed_kinds", ",".join(MALFORMED_KINDS))
        values["malformed_kinds"] = tuple(k.strip() for k in str(raw).split(",") if k.strip())
    try:
        config = FaultConfig(**values)
    except ValueError as exc:
        raise ValueError(f"--{target}-* fault flags: {exc}") from None
    return config if config.active else None


def fault_config_to_argv(config: FaultConfig | None, target: FaultTarget) -> list[str]:
    """Command-line flags that reproduce ``config`` for ``target`` (for starting a server subprocess).

    ``--fault-seed`` is included only when the config sets a non-zero seed; when both targets are
    passed to one process, they must share the seed.
    """
    if config is None:
        return []
    argv: list[str] = []
    for name, suffix, _typ, _help, targets in _CLI_FIELDS:
        value = getattr(config, name)
        if target in targets and value:
            argv += [f"--{target}-{suffix}", repr(float(value))]
    if target == "policy" and config.malformed_kinds != MALFORMED_KINDS:
        argv += ["--policy-malformed-kinds", ",".join(config.malformed_kinds)]
    if config.seed:
        argv += ["--fault-seed", str(config.seed)]
    return argv
