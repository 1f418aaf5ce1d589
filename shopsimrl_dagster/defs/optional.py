"""The one way an asset says "nothing to do": a one-asset ``multi_asset`` whose spec is ``skippable``.

An ``@asset`` is materialized whenever its function returns, so an asset with nothing to do (no
baseline run yet, no cold-start draft, no summary to chart) would show a materialization — and
passed checks — for work that did not happen. ``optional_asset`` builds a ``multi_asset`` whose
single spec is ``skippable``: its function yields a ``MaterializeResult`` (and its check results)
only when it did the work, and otherwise logs why and yields nothing — no materialization, no check
verdict.

Why this and not ``@dg.asset(output_required=False)``, the other public way: with checks declared
(``check_specs``), such an asset that yields nothing fails its step in Dagster 1.13
(``DagsterStepOutputNotFoundError``: every check output is required), so it would serve only the
assets without checks, and the location would need two mechanisms. Every asset of ``defs/`` that may
have nothing to do uses this decorator (tests/dagster/test_defs.py checks that no asset is declared
with ``output_required=False``).
"""

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg

from .checks import check_spec
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
    partitions_def: dg.PartitionsDefinition | None = checkpoints,
    retry_policy: dg.RetryPolicy | None = None,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """The decorator of the optional asset *key*, computed by the op *name*.

    The decorated function yields ``MaterializeResult(asset_key=key, …)`` (with its check results)
    when it did the work and nothing otherwise. *checks* are ``(check name, description)`` pairs,
    every one blocking (a failed check stops the downstream assets). The asset is partitioned by
    *partitions_def* (by checkpoint unless told otherwise; None: unpartitioned).
    """
    return dg.multi_asset(
        name=name,
        specs=[
            dg.AssetSpec(key, deps=list(deps), group_name=group, kinds=kinds, skippable=True, description=description)
        ],
        # Partitioned like the asset, so each check result names its partition (the checkpoint) in the UI.
        check_specs=[check_spec(check, key, text, partitions_def) for check, text in checks],
        partitions_def=partitions_def,
        can_subset=True,
        retry_policy=retry_policy,
    )
