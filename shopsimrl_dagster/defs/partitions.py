"""Checkpoint partitions: one partition per registered model checkpoint (keyed by checkpoint id).

Keys are added by the registry sensor (or ``python -m shopsimrl_dagster.demo``); the checkpoint
registry folder is the source of truth, the partition set follows it.
"""

from __future__ import annotations

import dagster as dg

__all__ = ["CHECKPOINTS", "checkpoints"]

CHECKPOINTS = "checkpoints"
"""Name of the dynamic partitions definition (what the instance stores the keys under)."""
checkpoints = dg.DynamicPartitionsDefinition(name=CHECKPOINTS)
