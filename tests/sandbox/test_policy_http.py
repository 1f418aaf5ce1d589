"""The baseline policy over real loopback HTTP (uvicorn in a thread), with the real environment app."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from shopsim_sandbox.app import build_env_app
from shopsim_sandbox.catalog import example_catalog
from shopsim_sandbox.faults import FaultConfig
from shopsim_sandbox.policy import SERVED_MODEL, build_policy_app, measure_success, tools_for_state


class _ServerThread:
    """uvicorn serving ``app`` on a free loopback port in a daemon thread."""

    def __init__(self, app: Any) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                   lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str]]:
    with _ServerThread(build_env_app(example_catalog(), slots=4)) as env_url, \
            _ServerThread(build_policy_app(seed=0, lapses=False)) as policy_url:
        yield env_url, policy_url + "/v1"


def test_models_over_http(servers: tuple[str, str]) -> None:
    _env, policy = servers
    data = httpx.get(policy + "/models").json()
    assert data["data"][0]["id"] == SERVED_MODEL


def test_streaming_over_http(servers: tuple[str, str]) -> None:
    _env, policy = servers
    body = {
        "model": SERVED_MODEL,
        "stream": True,
        "stream_options": {"include_usage": True},
        "seed": 1,
        "messages": [
            {"role": "user", "content": "购物任务：\n买一副耳机\n\n页面：搜索首页\n\n页面能力：\n- 支持商品搜索\n"}
        ],
        "tools": tools_for_state({"search_available": True, "actions": []}),
        "tool_choice": "auto",
    }
    lines: list[str] = []
    with httpx.stream("POST", policy + "/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    payloads = [json.loads(line[6:]) for line in lines[:-1]]
    arguments = "".join(
        f.get("function", {}).get("arguments", "")
        for p in payloads
        for c in p["choices"]
        for f in c["delta"].get("tool_calls") or []
    )
    assert json.loads(arguments) == {"query": "耳机"}
    assert payloads[-1]["usage"]["total_tokens"] > 0


def test_example_tasks_over_http(servers: tuple[str, str]) -> None:
    env, policy = servers
    stats = asyncio.run(measure_success(env, policy, [5000, 5001, 5002], persona=False, concurrency=3))
    assert stats == {"episodes": 3, "successes": 3, "success_rate": 1.0, "mean_reward": 1.0, "purchases": 3}
    # Slots are all free again afterwards.
    assert httpx.get(env + "/healthz").json()["free_slots"] == 4


def test_injected_429_over_http() -> None:
    with _ServerThread(build_policy_app(faults=FaultConfig(rate_429=1.0))) as url:
        response = httpx.post(
            url + "/v1/chat/completions", json={"model": SERVED_MODEL, "messages": [{"role": "user", "content": "x"}]}
        )
    assert response.status_code == 429 and response.json()["code"] == 429


def test_measuring_cli_plays_a_split_and_refuses_bad_split_files(tmp_path, sandbox, capsys) -> None:
    """``python -m shopsim_sandbox.policy``: one JSON summary line for a split; a bad split file is one
    line naming the file, exit 2."""
    from shopsim_sandbox.policy.__main__ import main

    task_ids = json.loads(Path(sandbox.split_file).read_text(encoding="utf-8"))["splits"]["val"]["task_ids"][:2]
    split = tmp_path / "two.json"
    split.write_text(json.dumps({"splits": {"val": {"task_ids": task_ids}}}), encoding="utf-8")
    assert main(["--env-url", sandbox.env_url, "--policy-url", sandbox.policy_url, "--split-file", str(split)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 2 and 0 <= summary["successes"] <= 2
    for bad, expected in ((tmp_path / "missing.json", "cannot read the split file"),
                          (split, "no splits.test.task_ids")):
        with pytest.raises(SystemExit) as info:
            main(["--env-url", sandbox.env_url, "--policy-url", sandbox.policy_url, "--split-file", str(bad),
                  "--split", "test"])
        assert info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith(f"python -m shopsim_sandbox.policy: error: {bad}: ") and expected in err
