"""The env server's benchmark knobs: the opt-in `server-timing` header (absent by default, present on
every response with `--server-timing`) and `--loop`; the contract's answers are byte-identical either way."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from shopsim_sandbox.testing import SandboxServer

_TIMING = re.compile(r"app;dur=\d+\.\d{3}")
_QUERIES = ["白色洗地机", "降噪耳机 预算不超过500元", "保温杯 500ml", "zzzz", "洗地机"]


@pytest.fixture(scope="module")
def timed_server() -> Iterator[SandboxServer]:
    """The example catalog (like `example_server`) with `--server-timing`, on the stdlib asyncio loop."""
    with SandboxServer(slots=8, policy=False, catalog_path="example", server_timing=True, loop="asyncio") as server:
        yield server


def _session(base_url: str) -> list[httpx.Response]:
    """Reset, search each query (and go back), click a result, release: every raw response in order."""
    out = []
    with httpx.Client(base_url=base_url, timeout=30.0, trust_env=False) as client:
        out.append(client.get("/healthz"))
        reset = client.post("/api/shop_agent", json={"action": "reset", "idx": 42})
        out.append(reset)
        lease = {"env_idx": reset.json()["result"]["env_idx"], "lease_id": reset.json()["result"]["lease_id"]}
        for query in _QUERIES:
            found = client.post("/api/shop_agent", json={"action": "interact", **lease, "response": f"search[{query}]"})
            out.append(found)
            asins = [a for a in found.json()["result"]["observation_state"]["actions"] if a[:1].isdigit()]
            if asins:
                out.append(client.post("/api/shop_agent",
                                       json={"action": "interact", **lease, "response": f"click[{asins[0]}]"}))
                out.append(client.post("/api/shop_agent",
                                       json={"action": "interact", **lease, "response": "click[back to search]"}))
            else:
                out.append(client.post("/api/shop_agent",
                                       json={"action": "interact", **lease, "response": "click[back to search]"}))
        out.append(client.post("/api/shop_agent", json={"action": "release_one", **lease}))
    return out


def _without_lease(response: httpx.Response) -> bytes:
    result = response.json().get("result", {})
    lease = result.get("lease_id") if isinstance(result, dict) else None
    return response.content.replace(lease.encode(), b"<lease>") if lease else response.content


def test_server_timing_header_is_absent_by_default(example_server: SandboxServer) -> None:
    responses = _session(example_server.env_url)
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    assert all("server-timing" not in r.headers for r in responses)


def test_server_timing_header_is_present_when_enabled(timed_server: SandboxServer) -> None:
    responses = _session(timed_server.env_url)
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    for response in responses:
        assert _TIMING.fullmatch(response.headers.get("server-timing", "")), response.headers


def test_server_timing_leaves_the_answers_byte_identical(example_server: SandboxServer,
                                                          timed_server: SandboxServer) -> None:
    plain, timed = _session(example_server.env_url), _session(timed_server.env_url)
    assert [_without_lease(r) for r in plain] == [_without_lease(r) for r in timed]
    for a, b in zip(plain, timed):
        assert sorted(set(a.headers) - {"server-timing"}) == sorted(set(b.headers) - {"server-timing"})


def test_loop_choice_is_honoured(example_server: SandboxServer, timed_server: SandboxServer) -> None:
    pytest.importorskip("uvloop")
    assert ", uvloop loop," in example_server.log_text()  # auto = uvloop when installed
    assert ", asyncio loop," in timed_server.log_text()
