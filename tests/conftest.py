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
