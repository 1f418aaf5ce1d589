"""The sandbox on free ports, and pipeline settings that point at it (what ``make demo`` and ``make ui`` use).

:class:`LocalSandbox` starts ``shopsim-sandbox serve`` (environment, baseline policy, deterministic
analyst) on ports the system picks, checks that it serves the catalog the settings' split file was
built from, and writes ``<folder>/pipeline.local.yaml``: the settings file in use with every path made
absolute and the environment, policy, analyst and viewer URLs replaced by the ones it got. Nothing
binds a fixed port, so two demos, or a demo beside ``make ui``, never collide.

The environment gets a stable ``identity`` (the catalog's hash) so run plans do not change with the
port: a run started under one sandbox resumes under the next.

    python -m shopsimrl_dagster.local_sandbox --folder .dagster_home   # for scripts/dagster-dev.sh
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from shopsim_sandbox.identity import read_sandbox_identity
from shopsimrl_core import ShopSimRLError, write_text_atomic
from shopsimrl_core.serving import stop_group

from .settings import PipelineSettings, load_pipeline_settings, read_settings_mapping

__all__ = ["LOCAL_SETTINGS_NAME", "SandboxError", "LocalSandbox", "sandbox_identity", "analyst_identity", "main"]

LOCAL_SETTINGS_NAME = "pipeline.local.yaml"


class SandboxError(Exception):
    """The local sandbox could not be started or is not what the settings expect; the message says why."""


def _expected_catalog_sha256(split_file: Path) -> str | None:
    # The sandbox's split files record the SHA-256 of the catalog they were built from.
    try:
        source = json.loads(Path(split_file).read_text(encoding="utf-8")).get("source") or {}
    except (OSError, ValueError, AttributeError):
        return None
    value = source.get("cleaned_archive_sha256") if isinstance(source, dict) else None
    return value if isinstance(value, str) else None


def sandbox_identity(catalog_sha256: str) -> str:
    """The environment identity of a sandbox serving the catalog with this hash (stable across ports)."""
    return f"shopsim-sandbox:{catalog_sha256[:16]}"


def analyst_identity(catalog_sha256: str) -> str:
    """The analyst identity of a sandbox serving the catalog with this hash (stable across ports)."""
    return f"shopsim-sandbox-analyst:{catalog_sha256[:16]}"


class LocalSandbox:
    """``shopsim-sandbox serve`` on free loopback ports, with settings pointing at it, for a ``with`` block.

    ``settings_path`` is the written settings file and ``settings`` its parsed form; ``env_url``,
    ``policy_url`` and ``analyst_url`` are the servers. The sandbox runs in its own process group and
    is stopped on exit.
    """

    def __init__(
        self,
        folder: Path,
        *,
        source: Path | None = None,
        slots: int = 16,
        startup_timeout_s: float = 120.0,
        viewer_url: str | None = None,
        own_runs_root: bool = False,
    ) -> None:
        self.folder = Path(folder)
        self.source = source
        self.slots = slots
        self.startup_timeout_s = startup_timeout_s
        self.viewer_url = viewer_url
        self.own_runs_root = own_runs_root
        self.settings_path = self.folder / LOCAL_SETTINGS_NAME
        self.env_url = self.policy_url = self.analyst_url = ""
        self._process: subprocess.Popen[bytes] | None = None
        self.settings: PipelineSettings | None = None

    def __enter__(self) -> LocalSandbox:
        source, raw = read_settings_mapping(self.source)
        base = load_pipeline_settings(source)
        self.folder.mkdir(parents=True, exist_ok=True)
        ready = self.folder / f".sandbox-ready-{os.getpid()}.json"
        ready.unlink(missing_ok=True)
        log_path = self.folder / "sandbox.log"
        argv = [
            sys.executable, "-m", "shopsim_sandbox.cli", "serve", "--host", "127.0.0.1",
            "--port", "0", "--policy-port", "0", "--analyst-port", "0",
            "--slots", str(self.slots), "--ready-file", str(ready),
        ]  # fmt: skip
        with log_path.open("wb") as log:
            self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while not ready.exists():
            if self._process.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace").strip().splitlines()
                self.stop()
                raise SandboxError(
                    f"the sandbox did not start ({tail[-1] if tail else 'no output'}; log {log_path})"
                )
            time.sleep(0.05)
        ports = json.loads(ready.read_text(encoding="utf-8"))
        ready.unlink(missing_ok=True)
        self.env_url = f"http://127.0.0.1:{ports['env_port']}"
        self.policy_url = f"http://127.0.0.1:{ports['policy_port']}/v1"
        self.analyst_url = f"http://127.0.0.1:{ports['analyst_port']}/v1"
        status, identity = read_sandbox_identity(self.env_url)
        expected = _expected_catalog_sha256(base.split_file)
        if status != 200 or not isinstance(identity, dict) or identity.get("catalog_sha256") != expected:
            self.stop()
            raise SandboxError(
                f"the sandbox serves catalog {str((identity or {}).get('catalog_sha256'))[:12]}…, but split_file "
                f"{base.split_file} was built from catalog {str(expected)[:12]}…; point split_file at "
                "configs/sandbox/persona_splits.sandbox.json (the catalog `shopsim-sandbox serve` serves by default)"
            )
        raw.setdefault("environment", {}).update(base_url=self.env_url, identity=sandbox_identity(str(expected)))
        raw.setdefault("inference", {})["base_url"] = self.policy_url
        raw["inference"].pop("served_model", None)
        raw["inference"]["name"] = "shopsim-baseline-policy"
        # The analyst's answers are cached by its identity: the port it got this time is not part of it.
        raw.setdefault("analyst", {}).update(base_url=self.analyst_url, identity=analyst_identity(str(expected)))
        if self.viewer_url is not None:
            raw.setdefault("viewer", {})["base_url"] = self.viewer_url
        if self.own_runs_root:
            # An instance folder of its own is a world of its own: its runs and registry live inside it,
            # so two instances (two demos at once) never share a run directory.
            raw["runs_root"] = str((self.folder / "runs").resolve())
            raw["checkpoint_registry"] = str((self.folder / "runs" / "checkpoints").resolve())
        header = f"# Written by shopsimrl_dagster.local_sandbox from {source}: the sandbox's ports; do not edit.\n"
        write_text_atomic(self.settings_path, header + yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
        try:
            self.settings = load_pipeline_settings(self.settings_path)
        except ShopSimRLError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the sandbox's process group (idempotent)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            stop_group(process.pid, None, timeout=10, process=process)

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Start the sandbox, print the settings file's path once it is written, serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m shopsimrl_dagster.local_sandbox", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--folder", required=True, help="where pipeline.local.yaml and sandbox.log are written")
    parser.add_argument("--viewer-url", default=None, help="the trace viewer's URL to put in the settings")
    parser.add_argument(
        "--own-runs-root", action="store_true", help="runs and registry inside --folder (an instance of its own)"
    )
    args = parser.parse_args(argv)
    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        with LocalSandbox(Path(args.folder), viewer_url=args.viewer_url, own_runs_root=args.own_runs_root) as sandbox:
            print(sandbox.settings_path, flush=True)
            print(
                f"local-sandbox: environment {sandbox.env_url}, policy {sandbox.policy_url}, "
                f"analyst {sandbox.analyst_url}",
                file=sys.stderr,
                flush=True,
            )
            while not stop["now"] and sandbox._process is not None and sandbox._process.poll() is None:
                time.sleep(0.2)
    except (ShopSimRLError, SandboxError) as exc:
        print(f"local-sandbox: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
