"""Real runs for the viewer tests: two checkpoints' val runs made by the core against the session
sandbox (loopback HTTP, baseline policy), labelled, under one runs root; plus a viewer server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml


def _config(folder: Path, sandbox: Any, checkpoint: str, max_steps: int) -> Path:
    data = {
        "experiment": {
            "name": checkpoint,
            "output_dir": str(folder / "runs" / "val"),
            "seed": 20260830,
            "concurrency": 4,
        },
        "tasks": {"split_file": str(sandbox.split_file), "split": "val", "sample_size": 8},
        "environment": {"base_url": sandbox.env_url, "timeout": 30},
        "model": {
            "name": sandbox.served_model,
            "base_url": sandbox.policy_url,
            "api_key_env": None,
            "checkpoint_id": checkpoint,
            "max_retries": 3,
            "retry_backoff_seconds": 0.05,
        },
        # The second checkpoint gets fewer steps, so some tasks it loses show up in the comparison.
        "runtime": {"max_steps": max_steps},
    }
    path = folder / f"{checkpoint}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def val_runs(tmp_path_factory: pytest.TempPathFactory, sandbox: Any) -> Path:
    """``<root>/val/ckpt-a`` and ``<root>/val/ckpt-b``: real 8-episode val runs, each with labels.parquet."""
    from shopsimrl_core import label_run
    from shopsimrl_core.runs.config._config import load_config
    from shopsimrl_core.runs.execution._evaluator import run_evaluation

    folder = tmp_path_factory.mktemp("viewer-runs")
    for checkpoint, max_steps in (("ckpt-a", 30), ("ckpt-b", 3)):
        run_evaluation(load_config(_config(folder, sandbox, checkpoint, max_steps)))
        label_run(folder / "runs" / "val" / checkpoint)
    return folder / "runs"


class ViewerServer:
    """``shopsimrl view`` served by uvicorn in a thread on an ephemeral loopback port."""

    def __init__(self, roots: list[Path]) -> None:
        import uvicorn

        from shopsimrl_core.viewer import create_app

        # The socket is bound here and handed to uvicorn: no window in which another test takes the port.
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._socket.getsockname()[1])
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app([str(r) for r in roots]), log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    def __enter__(self) -> ViewerServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert self._thread.is_alive() and time.monotonic() < deadline, "viewer did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()


@pytest.fixture
def viewer_for() -> Iterator[Any]:
    """``viewer_for(roots) -> ViewerServer`` (started; stopped at teardown)."""
    started: list[ViewerServer] = []

    def start(roots: list[Path]) -> ViewerServer:
        server = ViewerServer(roots).__enter__()
        started.append(server)
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)
