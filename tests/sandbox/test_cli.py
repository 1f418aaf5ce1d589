"""`shopsim-sandbox serve` as a real subprocess: env-var defaults, one-line errors, env fault flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from shopsim_sandbox.faults import FaultConfig
from shopsim_sandbox.testing import SandboxServer


def test_serve_honours_shopsim_env_vars(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    env = {**os.environ, "SHOPSIM_PORT": "0", "SHOPSIM_ENV_SLOTS": "3"}
    process = subprocess.Popen([sys.executable, "-m", "shopsim_sandbox.cli", "serve", "--catalog", "example",
                                "--no-policy", "--ready-file", str(ready)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        port = json.loads(ready.read_text())["env_port"]
        assert port not in (0, 5700)
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", trust_env=False).json()
        assert health["environment_slots"] == 3 and health["tasks"] == 4
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_bad_env_var_is_a_one_line_error() -> None:
    env = {**os.environ, "SHOPSIM_ENV_SLOTS": "many"}
    done = subprocess.run([sys.executable, "-m", "shopsim_sandbox.cli", "serve", "--no-policy"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and "SHOPSIM_ENV_SLOTS" in done.stderr


def test_env_fault_injection_answers_before_any_work() -> None:
    with SandboxServer(catalog_path="example", slots=2, policy=False,
                       env_faults=FaultConfig(rate_503=1.0)) as server:
        response = httpx.post(server.env_url + "/api/shop_agent", json={"action": "reset", "idx": 42},
                              trust_env=False)
        assert response.status_code == 503 and "error" in response.json()["result"]
        health = httpx.get(server.env_url + "/healthz", trust_env=False).json()
        assert health["free_slots"] == 2  # the injected failure took no slot
