import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

# tracegen lives next to the tests; make it importable without a package __init__.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def stub(tmp_path_factory):
    """A real OpenAI-compatible analyst stub (analyst_stub.py) served by uvicorn on loopback: (base_url, log)."""
    log = tmp_path_factory.mktemp("stub") / "requests.jsonl"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, STUB_LOG=str(log), PYTHONPATH=str(Path(__file__).parent))
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "analyst_stub:app", "--host", "127.0.0.1", "--port",
                             str(port), "--log-level", "warning"], env=env, cwd=str(Path(__file__).parent))
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
