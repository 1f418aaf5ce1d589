"""Session fixtures shared by every test directory: one real sandbox server over loopback HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shopsim_sandbox.testing import SandboxServer


@pytest.fixture(scope="session")
def sandbox() -> Iterator[SandboxServer]:
    """A running sandbox (default catalog, seed 0, 16 slots, baseline policy when available).

    Attributes: `env_url`, `policy_url` (`.../v1`), `split_file`, `served_model`. Shared by the whole
    session: tests must release every lease they take and must not call `release_all`.
    """
    server = SandboxServer(slots=16)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _no_stale_dagster_state_storage() -> Iterator[None]:
    """Start every test with no "current" Dagster definitions-state storage.

    Dagster keeps that storage in a context variable which ``with instance:`` blocks set and reset.
    Fixtures of different scopes tear down out of order, which can leave the variable pointing at a
    disposed instance; the next ``Definitions`` load in the process then fails with "Attempted to
    resolve undefined DagsterInstance weakref". Only matters once Dagster is imported.
    """
    import sys

    if "dagster" not in sys.modules:
        yield
        return
    try:
        from dagster._core.storage.defs_state.base import set_defs_state_storage
    except ImportError:  # a Dagster without the mechanism has nothing to reset
        yield
        return
    with set_defs_state_storage(None):
        yield
