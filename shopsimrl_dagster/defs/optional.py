"""Assets that may have nothing to do: one-asset ``multi_asset`` definitions with an optional output.

An ``@asset`` is materialized whenever its function returns, so an asset with nothing to do (no
baseline run yet, no cold-start draft, no summary to chart) would show a materialization — and
passed checks — for work that did not happen. A ``multi_asset`` whose single spec is
``skippable`` does not: its function yields a ``MaterializeResult`` (and its check results) only
when it did the work, and otherwise logs why and yields nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg

from .partitions import checkpoints

__all__ = ["optional_asset"]


def optional_asset(
    key: dg.AssetKey,
    *,
    name: str,
    deps: Sequence[dg.AssetKey | str],
    group: str,
    kinds: set[str],
    description: str,
    checks: Sequence[tuple[str, str]] = (),
    partitioned: bool = True,
    retry_policy: dg.RetryPolicy | None = None,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """The decorator of the optional asset *key*, computed by the op *name*.

    *checks* are ``(check name, description)`` pairs, every one blocking (a failed check stops
    the downstream assets). *partitioned* assets are partitioned by checkpoint.
    """
    return dg.multi_asset(
        name=name,
        specs=[
            dg.AssetSpec(key, deps=list(deps), group_name=group, kinds=kinds, skippable=True, description=description)
        ],
        check_specs=[
            dg.AssetCheckSpec(check, asset=key, blocking=True, description=text) for check, text in checks
        ],
        partitions_def=checkpoints if partitioned else None,
        can_subset=True,
        retry_policy=retry_policy,
    )
