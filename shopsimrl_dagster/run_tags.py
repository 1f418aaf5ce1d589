"""Run tags the pipeline reads or sets. The suite is never a tag: it is part of the asset key.

- ``shopsimrl/allow-test-split: "true"``: the per-launch opt-in a guarded (test-role) split needs
  (runtime-semantics §22.6). It is recorded in the run manifest and the test-access ledger; without it
  a test-suite rollout is refused before anything is written.
- ``shopsimrl/allow-test-rerun: "true"``: the second acknowledgement for a new test run of a
  checkpoint that already has one.
- ``shopsimrl/endpoint``: the inference endpoint (base URL) a run's checkpoint is served from. The
  evaluation jobs set it per partition, and the instance's run coordinator adds it to any other run
  of an asset in ``ENDPOINT_ASSET_NAMES`` (a "Materialize" from the asset graph); the run queue
  admits one run per unique value.
- ``shopsimrl/gpu-pool``: set on runs whose checkpoint gets a launched server (``inference.mode:
  launch``); the instance's run queue admits ``inference.launch`` slots' worth of such runs at once
  (``GpuPoolQueuedRunCoordinator``), so a backfill over many checkpoints never starts more servers
  than the GPU pool holds. Their ``shopsimrl/endpoint`` is ``launch:<checkpoint_id>``.
- ``shopsimrl/trigger``: what launched the run (registry-sensor, nightly, demo, progress-sensor).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "ALLOW_TEST_SPLIT_TAG",
    "ALLOW_TEST_RERUN_TAG",
    "ENDPOINT_TAG",
    "GPU_POOL_TAG",
    "GPU_POOL_VALUE",
    "TRIGGER_TAG",
    "ENDPOINT_ASSET_NAMES",
    "is_true",
    "uses_endpoint",
    "endpoint_tag_value",
]

ALLOW_TEST_SPLIT_TAG = "shopsimrl/allow-test-split"
ALLOW_TEST_RERUN_TAG = "shopsimrl/allow-test-rerun"
ENDPOINT_TAG = "shopsimrl/endpoint"
GPU_POOL_TAG = "shopsimrl/gpu-pool"
GPU_POOL_VALUE = "launch"
TRIGGER_TAG = "shopsimrl/trigger"

#: the last key component of every asset that calls a model endpoint: those that require the
#: ``inference_endpoint`` resource (a test keeps them in step), plus the two gates, whose masked val
#: rollouts call the endpoint of their experiment config (``skill_gate``: the bare val run's
#: generated config; ``round_online_gate``: the round's ``experiment_config``)
ENDPOINT_ASSET_NAMES = frozenset({"rollout_traces", "skill_candidates", "skill_gate", "round_online_gate"})


def is_true(value: str | None) -> bool:
    """A tag value counts as yes only when it is literally ``true`` (case-insensitive)."""
    return value is not None and value.strip().lower() == "true"


def endpoint_tag_value(base_url: str) -> str:
    """The endpoint tag value of *base_url*: the URL without a trailing slash, lower-cased scheme and host.

    Tag values allow ``:`` and ``/`` but are limited in length; URLs of endpoints are short.
    """
    url = base_url.strip().rstrip("/")
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url[:255]
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}://{host.lower()}{slash}{path}"[:255]


def uses_endpoint(asset_keys: Iterable[Any] | None) -> bool:
    """Whether a run of *asset_keys* (``AssetKey`` objects; None for a job without assets) calls an endpoint."""
    return any(key.path[-1] in ENDPOINT_ASSET_NAMES for key in asset_keys or ())
