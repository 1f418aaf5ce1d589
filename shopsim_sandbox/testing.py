"""`SandboxServer`: start the real sandbox server(s) in a subprocess on free loopback ports (for tests).

    with SandboxServer(catalog_size=300, slots=8) as sandbox:
        httpx.get(sandbox.env_url + "/healthz")
        sandbox.policy_url   # OpenAI base URL ending in /v1 (None when policy=False)
        sandbox.split_file   # persona split file of the served catalog (None for a given catalog file)
    sandbox.catalog_file # the served catalog JSON (valid while the server runs)

The catalog is generated once in this process, written with its split file into a temporary
directory and served from there, so `split_file` always describes exactly what is served.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from shopsim_sandbox.catalog import EXAMPLE_CATALOG_PATH
from shopsim_sandbox.faults import FaultConfig, fault_config_to_argv
from shopsim_sandbox.synthetic import DEFAULT_CATALOG_SIZE

_STARTUP_TIMEOUT_S = 120.0


class SandboxError(RuntimeError):
    """The sandbox subprocess failed to start."""


class SandboxServer:
    """Context manager owning one `shopsim-sandbox serve` subprocess bound to free loopback ports."""

    def __init__(self, catalog_size: int = DEFAULT_CATALOG_SIZE, seed: int = 0, slots: int = 16, policy: bool = True,
                 env_faults: FaultConfig | None = None, policy_faults: FaultConfig | None = None,
                 latency_ms: float = 0, *, catalog_path: Path | str | None = None, server_timing: bool = False,
                 loop: str = "auto"):
        self.server_timing = server_timing
        self.loop = loop
        self.catalog_size = catalog_size
        self.seed = seed
        self.slots = slots
        self.policy = policy
        self.env_faults = env_faults
        self.policy_faults = policy_faults
        self.latency_ms = latency_ms
        self.catalog_path = Path(catalog_path) if catalog_path is not None and str(catalog_path) != "example" else None
        self._example = str(catalog_path) == "example"
        self.env_url: str = ""
        self.policy_url: str | None = None
        self.split_file: Path | None = None
        self.catalog_file: Path | None = None
        self.served_model: str | None = None
        self._process: subprocess.Popen | None = None
        self._workdir: Path | None = None

    def _command(self, ready_file: Path, catalog_file: Path | None) -> list[str]:
        argv = [sys.executable, "-m", "shopsim_sandbox.cli", "serve", "--host", "127.0.0.1", "--port", "0",
                "--policy-port", "0", "--slots", str(self.slots), "--seed", str(self.seed),
                "--ready-file", str(ready_file)]
        if self._example:
            argv += ["--catalog", "example"]
        elif catalog_file is not None:
            argv += ["--catalog", str(catalog_file)]
        if not self.policy:
            argv.append("--no-policy")
        if self.server_timing:
            argv.append("--server-timing")
        if self.loop != "auto":
            argv += ["--loop", self.loop]
        env_faults = self.env_faults
        if self.latency_ms:
            base = env_faults.to_dict() if env_faults else {}
            base["latency_ms"] = float(base.get("latency_ms", 0.0)) + float(self.latency_ms)
            env_faults = FaultConfig.from_dict(base)
        argv += fault_config_to_argv(env_faults, "env")
        policy_argv = fault_config_to_argv(self.policy_faults, "policy")
        if "--fault-seed" in argv and "--fault-seed" in policy_argv:
            cut = policy_argv.index("--fault-seed")
            policy_argv = policy_argv[:cut] + policy_argv[cut + 2:]
        return argv + policy_argv

    def start(self) -> SandboxServer:
        """Start the subprocess and wait until `/healthz` (and the policy's `/v1/models`) answer."""
        from shopsim_sandbox.cli import write_catalog

        self._workdir = Path(tempfile.mkdtemp(prefix="shopsim-sandbox-"))
        catalog_file: Path | None = None
        if self.catalog_path is None and not self._example:
            catalog_file, self.split_file = write_catalog(self._workdir, self.catalog_size, self.seed)
        elif self.catalog_path is not None:
            catalog_file = self.catalog_path
        self.catalog_file = EXAMPLE_CATALOG_PATH if self._example else catalog_file
        ready = self._workdir / "ready.json"
        log = open(self._workdir / "server.log", "wb")
        env = dict(os.environ)
        env.pop("SHOPSIM_PORT", None)
        self._process = subprocess.Popen(self._command(ready, catalog_file), stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while not ready.exists():
            if self._process.poll() is not None:
                text = (self._workdir / "server.log").read_text(errors="replace")
                self.stop()
                raise SandboxError(f"sandbox exited with code {self._process.returncode}: {text[-2000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise SandboxError(f"sandbox did not start within {_STARTUP_TIMEOUT_S} s")
            time.sleep(0.02)
        ports = json.loads(ready.read_text())
        self.env_url = f"http://127.0.0.1:{ports['env_port']}"
        with httpx.Client(timeout=10.0, trust_env=False) as client:
            client.get(self.env_url + "/healthz").raise_for_status()
            if "policy_port" in ports:
                self.policy_url = f"http://127.0.0.1:{ports['policy_port']}/v1"
                models = client.get(self.policy_url + "/models").json()
                self.served_model = models["data"][0]["id"]
        return self

    @property
    def pid(self) -> int | None:
        """Process id of the running server subprocess (None before start), e.g. to read its CPU time."""
        return self._process.pid if self._process is not None else None

    def stop(self) -> None:
        """Stop the subprocess (SIGTERM, then SIGKILL after 10 s) and delete its temporary directory."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def log_text(self) -> str:
        """The subprocess's combined stdout/stderr so far (for test failure messages)."""
        if self._workdir is None:
            return ""
        path = self._workdir / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
