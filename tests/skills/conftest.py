import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


@pytest.fixture(scope="session")
def stub(tmp_path_factory):
    """A real OpenAI-compatible analyst stub (testkit/analyst_stub.py) under uvicorn on loopback: (base_url, log)."""
    log = tmp_path_factory.mktemp("stub") / "requests.jsonl"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tests = Path(__file__).resolve().parents[1]
    env = dict(os.environ, STUB_LOG=str(log), PYTHONPATH=str(tests))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "testkit.analyst_stub:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        cwd=str(tests),
    )
    base = f"http://127.0.0.1:{port}/v1"
    for _ in range(200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    try:
        yield base, log
    finally:
        proc.terminate()
        proc.wait(timeout=10)
