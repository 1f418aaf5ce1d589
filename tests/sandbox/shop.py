"""A tiny synchronous HTTP client for the contract, used by the sandbox conformance tests."""

from __future__ import annotations

from typing import Any

import httpx


class Shop:
    """Posts raw bodies to `/api/shop_agent` of a running server and returns (status, parsed body)."""

    def __init__(self, base_url: str):
        self.base_url = base_url
        self.client = httpx.Client(base_url=base_url, timeout=30.0, trust_env=False)

    def post(self, body: Any) -> tuple[int, dict]:
        response = self.client.post("/api/shop_agent", json=body)
        return response.status_code, response.json()

    def result(self, body: Any, status: int = 200) -> dict:
        code, payload = self.post(body)
        assert code == status, (code, payload)
        assert list(payload) == ["result"], payload
        return payload["result"]

    def health(self) -> dict:
        return self.client.get("/healthz").json()

    def reset(self, idx: int, **extra: Any) -> dict:
        return self.result({"action": "reset", "idx": idx, **extra})

    def step(self, episode: dict, response: Any, status: int = 200) -> dict:
        return self.result({"action": "interact", "env_idx": episode["env_idx"], "lease_id": episode["lease_id"],
                            "response": response}, status)

    def terminate(self, episode: dict, reason: Any = "action_limit", status: int = 200) -> dict:
        return self.result({"action": "terminate", "env_idx": episode["env_idx"], "lease_id": episode["lease_id"],
                            "termination_reason": reason}, status)

    def release(self, episode: dict, status: int = 200) -> dict:
        return self.result({"action": "release_one", "env_idx": episode["env_idx"],
                            "lease_id": episode["lease_id"]}, status)

    def close(self) -> None:
        self.client.close()
