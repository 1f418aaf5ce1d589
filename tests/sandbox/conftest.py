"""Fixtures of the sandbox conformance suite: real servers over loopback on purpose-built catalogs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from shopsim_sandbox.catalog import EXAMPLE_CATALOG_PATH
from shopsim_sandbox.testing import SandboxServer

from .edge_catalog import edge_records
from .shop import Shop

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def example_server() -> Iterator[SandboxServer]:
    """The spec's four-product example catalog (§19.1), 8 slots, no policy; owned by one test module."""
    with SandboxServer(slots=8, policy=False, catalog_path="example") as server:
        yield server


@pytest.fixture(scope="module")
def example_shop(example_server: SandboxServer) -> Iterator[Shop]:
    shop = Shop(example_server.env_url)
    yield shop
    shop.close()


@pytest.fixture(scope="module")
def edge_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxServer]:
    """The example catalog plus edge-case records (many values, `=` labels, price vectors, …), 4 slots."""
    records = json.loads(EXAMPLE_CATALOG_PATH.read_text(encoding="utf-8")) + edge_records()
    path = tmp_path_factory.mktemp("edge") / "catalog.json"
    path.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    with SandboxServer(slots=4, policy=False, catalog_path=path) as server:
        yield server


@pytest.fixture(scope="module")
def edge_shop(edge_server: SandboxServer) -> Iterator[Shop]:
    shop = Shop(edge_server.env_url)
    yield shop
    shop.close()
