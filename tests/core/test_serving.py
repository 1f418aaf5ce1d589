"""Serving checkpoints (shopsimrl_core.serving): templates, the weights identity, the GPU pool, launched servers
over real processes (readiness, logs, stop on every exit path, orphans of SIGKILLed owners) and the plan identity
that never holds the port."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from shopsimrl_core import ConfigError, ShopSimRLError
from shopsimrl_core.runs import build_plan, config_from_mapping
from shopsimrl_core.serving import (
    SERVER_TEMPLATES,
    ServerRecord,
    ServerStartError,
    acquire_devices,
    fill_command,
    group_alive,
    launched_server,
    weights_identity,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
WEIGHTS = REPO_ROOT / "configs" / "demo" / "checkpoints" / "weights"
EXE = [sys.executable, "-m", "shopsimrl_core.cli._main"]
VALUES = {
    "weights": "/w",
    "adapter": "/a",
    "host": "127.0.0.1",
    "port": "1234",
    "served_model": "m",
    "python": "/py",
    "gpus_per_server": "2",
    "gpu_layers": "-1",
    "max_lora_rank": "32",
}


def _config(tmp_path: Path, sandbox: Any, *, serve: dict[str, Any] | None = None, **sections: Any) -> Any:
    mapping: dict[str, Any] = {
        "experiment": {"name": "served", "output_dir": str(tmp_path / "runs"), "concurrency": 4},
        "tasks": {"split_file": str(sandbox.split_file), "split": "val", "sample_size": 6},
        "environment": {"base_url": sandbox.env_url},
        "model": {"name": "ckpt-100", "api_key_env": None},
        "serve": {
            "server": "shopsim_sandbox",
            "weights": str(WEIGHTS / "policy-step-000100.json"),
            "start_timeout": 60,
            **(serve or {}),
        },
    }
    for key, value in sections.items():
        mapping[key] = {**mapping.get(key, {}), **value}
    return config_from_mapping(mapping, base_dir=tmp_path)


# ----------------------------------------------------------------------------- templates


@pytest.mark.parametrize("server", sorted(SERVER_TEMPLATES))
def test_every_shipped_template_fills_every_placeholder(server: str) -> None:
    argv = fill_command(server, VALUES)
    assert not any("{" in arg for arg in argv), argv
    assert "1234" in argv and "/w" in argv
    assert "m" in argv or any(arg.endswith("m") for arg in argv)


def test_the_tool_calling_flags_each_server_needs_are_in_its_template() -> None:
    assert {"--enable-auto-tool-choice", "--tool-call-parser"} <= set(fill_command("vllm", VALUES))
    assert "--tool-call-parser" in fill_command("sglang", VALUES)
    assert "chatml-function-calling" in fill_command("llama_cpp_python", VALUES)
    assert "--jinja" in fill_command("llama_server", VALUES)


def test_a_hot_loading_server_starts_its_base_ready_for_adapters_and_others_take_theirs_at_start() -> None:
    argv = fill_command("vllm", VALUES, runtime_lora=True)
    assert argv[-3:] == ["--enable-lora", "--max-lora-rank", "32"] and "/a" not in argv
    assert fill_command("llama_server", VALUES, adapter=True)[-2:] == ["--lora", "/a"]
    with pytest.raises(ConfigError, match="serve.adapter: the shopsim_sandbox server cannot load a LoRA adapter"):
        fill_command("shopsim_sandbox", VALUES, adapter=True)


def test_a_custom_template_with_an_unknown_placeholder_names_the_key() -> None:
    assert fill_command("custom", VALUES, command=["srv", "--p={port}"], extra_args=["-x"]) == ["srv", "--p=1234", "-x"]
    with pytest.raises(ConfigError, match=r"serve.command: placeholder \{gpu\} has no value"):
        fill_command("custom", VALUES, command=["srv", "{gpu}"])


# ----------------------------------------------------------------------------- weights identity


def test_the_weights_identity_follows_content_not_location(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    big = os.urandom(3 * (1 << 20) + 17)  # larger than both sampled ends together
    (folder / "model.safetensors").write_bytes(big)
    (folder / "config.json").write_text('{"layers": 2}')
    (folder / ".partial").write_text("downloader leftovers are not weights")
    copy = tmp_path / "elsewhere" / "ckpt"
    shutil.copytree(folder, copy)
    (copy / ".partial").write_text("different leftovers")
    first, second = weights_identity(str(folder)), weights_identity(str(copy))
    assert first["content"] == second["content"] and first["content"].startswith("sampled-sha256-v1:")
    assert first["ref"] == str(folder)
    # A changed header (first MiB), tail or size is another checkpoint.
    for change in (lambda b: b"\1" + b[1:], lambda b: b[:-1] + b"\1", lambda b: b + b"\0"):
        (copy / "model.safetensors").write_bytes(change(big))
        assert weights_identity(str(copy))["content"] != first["content"]
    single = tmp_path / "policy.json"
    single.write_bytes((WEIGHTS / "policy-step-000100.json").read_bytes())
    assert (
        weights_identity(str(single))["content"]
        == weights_identity(str(WEIGHTS / "policy-step-000100.json"))["content"]
    )
    assert weights_identity("hub:Qwen/Qwen3-4B") == {"ref": "Qwen/Qwen3-4B", "content": None}
    assert weights_identity("s3://bucket/ckpt") == {"ref": "s3://bucket/ckpt", "content": None}


# ----------------------------------------------------------------------------- plan identity


def test_the_plan_names_what_was_served_never_the_port(tmp_path: Path, sandbox: Any) -> None:
    plan = build_plan(_config(tmp_path, sandbox))
    model = plan.semantic["model"]
    assert "base_url" not in model
    assert model["served"]["server"] == "shopsim_sandbox"
    assert model["served"]["weights"]["content"].startswith("sampled-sha256-v1:")
    # The same config with the URL a launch filled in (any port) is the same plan.
    launched = _config(tmp_path, sandbox, model={"base_url": "http://127.0.0.1:41234/v1"})
    assert build_plan(launched).fingerprint == plan.fingerprint
    other = _config(tmp_path, sandbox, serve={"weights": str(WEIGHTS / "policy-step-000300.json")})
    assert build_plan(other).fingerprint != plan.fingerprint
    # GPU pool, timeouts and templates are how it was served, not what.
    busy = _config(tmp_path, sandbox, serve={"gpus": ["3"], "start_timeout": 5, "extra_args": ["--x"]})
    assert build_plan(busy).fingerprint == plan.fingerprint


def test_an_environment_identity_stands_in_for_its_url(tmp_path: Path, sandbox: Any) -> None:
    one = _config(tmp_path, sandbox, environment={"identity": "shop-a", "base_url": "http://127.0.0.1:1111"})
    two = _config(tmp_path, sandbox, environment={"identity": "shop-a", "base_url": "http://127.0.0.1:2222"})
    assert build_plan(one).semantic["environment"] == {
        "adapter": "shopsimulator_http",
        "identity": "shop-a",
        "persona": build_plan(one).semantic["environment"]["persona"],
        "interaction_mode": "single_turn",
    }
    assert build_plan(one).fingerprint == build_plan(two).fingerprint
    plain = _config(tmp_path, sandbox, environment={"base_url": "http://127.0.0.1:1111"})
    assert build_plan(plain).semantic["environment"]["base_url"] == "http://127.0.0.1:1111"


def test_serve_section_errors_name_the_key(tmp_path: Path, sandbox: Any) -> None:
    with pytest.raises(ConfigError, match=r"serve\.server"):
        _config(tmp_path, sandbox, serve={"server": "tgi"})
    with pytest.raises(ConfigError, match=r"serve.server custom needs serve.command"):
        _config(tmp_path, sandbox, serve={"server": "custom"})
    with pytest.raises(ConfigError, match=r"serve\.gpus_per_server"):
        _config(tmp_path, sandbox, serve={"gpus_per_server": -1})


# ----------------------------------------------------------------------------- the GPU pool


def test_the_gpu_pool_hands_out_distinct_devices_and_the_kernel_frees_a_dead_holders(tmp_path: Path) -> None:
    said: list[str] = []
    one = acquire_devices(["0", "1"], 1, state_dir=tmp_path, timeout=1, say=said.append)
    two = acquire_devices(["0", "1"], 1, state_dir=tmp_path, timeout=1, say=said.append)
    assert sorted(one.devices + two.devices) == ["0", "1"]
    with pytest.raises(ShopSimRLError) as busy:
        acquire_devices(["0", "1"], 1, state_dir=tmp_path, timeout=0.6, say=said.append)
    assert busy.value.code == "gpu-pool-busy" and "waiting for 1 free device(s)" in said[0]
    one.release()
    again = acquire_devices(["0", "1"], 1, state_dir=tmp_path, timeout=1, say=said.append)
    assert again.devices == one.devices
    again.release()
    two.release()
    # Another process holding both devices, then SIGKILLed: the devices come free without any cleanup.
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from pathlib import Path
            from shopsimrl_core.serving import acquire_devices
            lease = acquire_devices(["0", "1"], 2, state_dir=Path({str(tmp_path)!r}), timeout=5, say=print)
            print("held", flush=True)
            time.sleep(60)
        """)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ShopSimRLError):
            acquire_devices(["0", "1"], 1, state_dir=tmp_path, timeout=0.6, say=said.append)
    finally:
        holder.kill()
        holder.wait()
    assert acquire_devices(["0", "1"], 2, state_dir=tmp_path, timeout=5, say=said.append).devices == ["0", "1"]
    with pytest.raises(ShopSimRLError, match="serve.gpus_per_server: 3 devices per server"):
        acquire_devices(["0", "1"], 3, state_dir=tmp_path, timeout=1, say=said.append)


# ----------------------------------------------------------------------------- launched servers


def test_a_launched_server_is_ready_logged_and_stopped_with_its_group(tmp_path: Path, sandbox: Any) -> None:
    config = _config(tmp_path, sandbox, serve={"gpus": ["0", "1"]})
    said: list[str] = []
    with launched_server(config, said.append) as server:
        models = httpx.get(f"{server.base_url}/models", timeout=10).json()["data"]
        assert [m["id"] for m in models] == ["ckpt-100"]
        assert server.devices in (["0"], ["1"])
        records = list((tmp_path / "runs" / ".servers").glob("server-*.json"))
        assert len(records) == 1
        record = ServerRecord.read(records[0])
        # Its owner is the keeper of the pool entry (a process of its own), not this run.
        [entry] = [json.loads(p.read_text()) for p in (tmp_path / "runs" / ".servers" / "pool").glob("*.json")]
        assert record is not None and record.pgid == server.pgid == entry["pgid"]
        assert record.owner_pid == entry["keeper_pid"] != os.getpid()
        assert group_alive(server.pgid)
    assert not group_alive(server.pgid)
    assert not list((tmp_path / "runs" / ".servers").glob("server-*.json"))
    assert server.log_path.parent == tmp_path / "runs" / "served" / "server-logs"
    assert "serving on http://127.0.0.1:" in server.log_path.read_text()
    assert [line.split(" ")[0] for line in said] == ["started", "inference", "stopped"]
    # The devices came back.
    assert acquire_devices(["0", "1"], 2, state_dir=tmp_path / "runs" / ".servers", timeout=1, say=print).devices


def test_a_server_that_exits_fails_the_launch_with_the_tail_of_its_log(tmp_path: Path, sandbox: Any) -> None:
    crash = [sys.executable, "-c", "import sys; print('CUDA out of memory on device 0'); sys.exit(3)"]
    config = _config(tmp_path, sandbox, serve={"server": "custom", "command": crash})
    with pytest.raises(ServerStartError) as error:
        with launched_server(config, print):
            raise AssertionError("a crashed server was ready")
    message = str(error.value)
    assert error.value.code == "server-start-failed"
    assert "exited with code 3" in message and "CUDA out of memory on device 0" in message and "\n" not in message


def test_a_server_that_never_gets_ready_is_stopped_at_the_start_timeout(tmp_path: Path, sandbox: Any) -> None:
    # Listens nowhere and ignores SIGTERM: only SIGKILL after stop_timeout ends it.
    stubborn = [
        sys.executable,
        "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('loading shards', flush=True); "
        "time.sleep(600)",
    ]
    config = _config(
        tmp_path, sandbox, serve={"server": "custom", "command": stubborn, "start_timeout": 1.5, "stop_timeout": 1}
    )
    said: list[str] = []
    with pytest.raises(ServerStartError, match=r"not ready within serve.start_timeout 2 s.*loading shards"):
        with launched_server(config, said.append):
            pass
    pgid = int(said[0].split("pgid ")[1].split(" ")[0])
    assert not group_alive(pgid)


def _owner_process(tmp_path: Path, sandbox: Any, **serve: Any) -> tuple[Path, subprocess.Popen[str], int]:
    """A process holding a launched server (gpus ["0"]) until killed: (its config file, the process, the pgid)."""
    config_file = tmp_path / "served.yaml"
    config_file.write_text(yaml.safe_dump({
        "experiment": {"name": "served", "output_dir": str(tmp_path / "runs")},
        "tasks": {"split_file": str(sandbox.split_file), "split": "val"},
        "environment": {"base_url": sandbox.env_url},
        "model": {"name": "ckpt-100", "api_key_env": None},
        "serve": {"server": "shopsim_sandbox", "weights": str(WEIGHTS / "policy-step-000100.json"), "gpus": ["0"],
                  **serve},
    }))  # fmt: skip
    owner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import time
            from shopsimrl_core.runs import load_config
            from shopsimrl_core.serving import launched_server
            with launched_server(load_config({str(config_file)!r}), print) as server:
                print("PGID", server.pgid, flush=True)
                time.sleep(600)
        """)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert owner.stdout is not None
    for line in owner.stdout:
        if line.startswith("PGID"):
            return config_file, owner, int(line.split()[1])
    raise AssertionError("the owner never served")


def _kill_owners(tmp_path: Path, owner: subprocess.Popen[str]) -> int:
    """SIGKILL the run holding the server and the process its record names as owner; that owner's pid."""
    [record] = [json.loads(p.read_text()) for p in (tmp_path / "runs" / ".servers").glob("server-*.json")]
    for pid in {owner.pid, record["owner_pid"]}:
        os.kill(pid, signal.SIGKILL)  # no finally runs: the server keeps running, orphaned
    owner.wait()
    return int(record["owner_pid"])


def test_an_orphan_of_a_sigkilled_owner_is_stopped_by_the_next_launch(tmp_path: Path, sandbox: Any) -> None:
    config_file, owner, pgid = _owner_process(tmp_path, sandbox)
    owner_pid = _kill_owners(tmp_path, owner)
    assert group_alive(pgid)
    from shopsimrl_core.runs import load_config

    said: list[str] = []
    with launched_server(load_config(config_file), said.append) as server:
        assert not group_alive(pgid)
        assert server.devices == ["0"]
    assert said[0].startswith(f"stopped orphaned inference server pgid {pgid} (its owner pid {owner_pid} is gone")


def test_a_run_waiting_for_a_device_starts_only_after_the_dead_owners_server_is_gone(
    tmp_path: Path, sandbox: Any
) -> None:
    """Defect 1: the device lock lives as long as the server, and the waiting run reaps orphans while it waits."""
    import threading

    from shopsimrl_core.runs import load_config

    config_file, owner, pgid = _owner_process(tmp_path, sandbox)
    config = load_config(config_file)
    said: list[str] = []
    orphan_alive_at_start: list[bool] = []
    waiting = threading.Event()

    def say(line: str) -> None:
        said.append(line)
        if line.startswith("waiting for"):
            waiting.set()
        if line.startswith("started inference server"):
            orphan_alive_at_start.append(group_alive(pgid))

    def second_run() -> None:
        with launched_server(config.model_copy(update={"model": config.model.model_copy(update={"name": "other"})}),
                             say):  # fmt: skip
            pass

    thread = threading.Thread(target=second_run)
    thread.start()
    assert waiting.wait(60), said  # the device is held: the second run waits
    _kill_owners(tmp_path, owner)
    thread.join(120)
    assert not thread.is_alive()
    assert orphan_alive_at_start == [False], said
    # Stopped as an orphan (its keeper died first) or as an idle pool server (its run died first): either way
    # before the second server started.
    stopped = (f"stopped orphaned inference server pgid {pgid}", f"stopped idle inference server pgid {pgid}")
    assert any(line.startswith(stopped) for line in said), said


def test_a_sigkilled_run_leaves_its_server_to_the_keeper_which_stops_it_when_unused(
    tmp_path: Path, sandbox: Any
) -> None:
    _, owner, pgid = _owner_process(tmp_path, sandbox)
    owner.kill()
    owner.wait()
    servers = tmp_path / "runs" / ".servers"

    def left() -> list[Path]:  # the keeper removes the record and the entry once the group is gone
        return [*servers.glob("server-*.json"), *(servers / "pool").glob("*.json")]

    deadline = time.monotonic() + 60  # the keeper polls every 0.2 s and waits 1 s of disuse
    while (group_alive(pgid) or left()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(pgid)
    assert not left()


def test_a_refused_run_starts_no_server_and_writes_nothing(tmp_path: Path, sandbox: Any) -> None:
    from shopsimrl_core import TestSplitGuardError
    from shopsimrl_core.runs import run_evaluation

    config = _config(tmp_path, sandbox, tasks={"split": "test"})
    with pytest.raises(TestSplitGuardError):
        run_evaluation(config)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_shopsimrl_run_launches_the_checkpoint_and_sigterm_stops_its_server(tmp_path: Path, sandbox: Any) -> None:
    def write(name: str, weights: str, **experiment: Any) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({
            "experiment": {"name": name, "output_dir": "runs", "concurrency": 4, **experiment},
            "tasks": {"split_file": str(sandbox.split_file), "split": "val", "sample_size": 20},
            "environment": {"base_url": sandbox.env_url},
            "model": {"name": name, "api_key_env": None},
            "serve": {"server": "shopsim_sandbox", "weights": weights, "gpus": ["0", "1"]},
        }))  # fmt: skip
        return path

    rewards = []
    for step in ("000100", "000300"):
        done = subprocess.run(
            [*EXE, "run", "--progress", "none", str(write(f"s{step}", f"{WEIGHTS}/policy-step-{step}.json"))],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "started inference server" in done.stderr and "stopped inference server" in done.stderr
        summary = json.loads((tmp_path / "runs" / f"s{step}" / "summary.json").read_text())
        rewards.append(summary["primary"]["reward_mean"])
    assert rewards[1] > rewards[0], rewards  # a better checkpoint, served by its own launch

    # SIGTERM while the run is under way: exit 143, the server's group is gone.
    slow = write("slow", f"{WEIGHTS}/policy-step-000100.json")
    config = yaml.safe_load(slow.read_text())
    config["serve"]["extra_args"] = ["--latency-ms", "300"]
    slow.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen([*EXE, "run", "--progress", "none", str(slow)], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    pgid = None
    for line in proc.stderr:
        if "started inference server pgid" in line:
            pgid = int(line.split("pgid ")[1].split(" ")[0])
        if "ready in" in line:
            break
    assert pgid is not None
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert not group_alive(pgid)
