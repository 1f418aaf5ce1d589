"""The policy server's vLLM stand-ins (issue 32): ``--load-time`` and the runtime LoRA endpoints, over a real
``python -m shopsim_sandbox.policy serve`` process on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from shopsim_sandbox.policy.adapter import write_adapter


@contextmanager
def _serving(tmp_path: Path, *flags: str, runtime: bool = True) -> Iterator[str]:
    ready = tmp_path / f"ready-{time.monotonic_ns()}.json"
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ALLOW_RUNTIME_LORA_UPDATING"}
    if runtime:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    process = subprocess.Popen(
        [sys.executable, "-m", "shopsim_sandbox.policy", "serve", "--port", "0", "--served-model-name", "base",
         "--ready-file", str(ready), *flags],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        while not ready.exists():
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.02)
        yield f"http://127.0.0.1:{json.loads(ready.read_text())['port']}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def _ask(root: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 50}
    return httpx.post(f"{root}/v1/chat/completions", json=body, timeout=30, trust_env=False)


def test_adapters_load_at_runtime_within_the_rank_limit_and_unload(tmp_path: Path) -> None:
    small = write_adapter(tmp_path / "small", rank=8, lapses={"impatient": 1.0})
    big = write_adapter(tmp_path / "big", rank=32, lapses={"impatient": 1.0})
    with _serving(tmp_path, "--enable-lora", "--max-lora-rank", "16") as root:
        load = f"{root}/v1/load_lora_adapter"
        refused = httpx.post(load, json={"lora_name": "big", "lora_path": str(big)}, timeout=30)
        assert refused.status_code == 400 and "greater than max_lora_rank 16" in refused.text
        assert httpx.post(load, json={"lora_name": "ckpt", "lora_path": str(small)}, timeout=30).status_code == 200
        again = httpx.post(load, json={"lora_name": "ckpt", "lora_path": str(small)}, timeout=30)
        assert again.status_code == 400 and "already been loaded" in again.text
        models = httpx.get(f"{root}/v1/models", timeout=30).json()["data"]
        assert [(m["id"], m["parent"]) for m in models] == [("base", None), ("ckpt", "base")]
        assert _ask(root, "ckpt").status_code == 200 and _ask(root, "base").status_code == 200
        unload = f"{root}/v1/unload_lora_adapter"
        assert httpx.post(unload, json={"lora_name": "ckpt"}, timeout=30).status_code == 200
        assert httpx.post(unload, json={"lora_name": "ckpt"}, timeout=30).status_code == 404
        assert _ask(root, "ckpt").status_code == 404


@pytest.mark.parametrize("flags, runtime", [(("--enable-lora",), False), ((), True)])
def test_without_the_switch_or_enable_lora_there_are_no_runtime_endpoints(
    tmp_path: Path, flags: tuple[str, ...], runtime: bool
) -> None:
    with _serving(tmp_path, *flags, runtime=runtime) as root:
        answer = httpx.post(f"{root}/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": "/x"}, timeout=30)
        assert answer.status_code == 404


def test_load_time_delays_listening_and_a_negative_one_is_refused(tmp_path: Path) -> None:
    started = time.monotonic()
    with _serving(tmp_path, "--load-time", "1.5"):
        assert time.monotonic() - started >= 1.5  # nothing listens before the load is over
    bad = subprocess.run(
        [sys.executable, "-m", "shopsim_sandbox.policy", "serve", "--load-time", "-1"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--load-time: must be >= 0" in bad.stderr
