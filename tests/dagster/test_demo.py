"""`python -m shopsimrl_dagster.demo` end to end: it starts its own sandbox, materializes the lineage
into the given Dagster instance, prints the headline numbers and leaves them for the UI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _demo(settings: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHOPSIMRL_PIPELINE_CONFIG": str(settings)}
    return subprocess.run(
        [sys.executable, "-m", "shopsimrl_dagster.demo", "--dagster-home", str(home)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_demo_materializes_the_lineage_into_the_instance_and_resumes(tmp_path: Path, settings_writer) -> None:
    env_port, policy_port = _free_port(), _free_port()
    settings = settings_writer(
        tmp_path,
        env_url=f"http://127.0.0.1:{env_port}",
        policy_url=f"http://127.0.0.1:{policy_port}/v1",
        val_sample=None,
    )
    home = tmp_path / "dagster_home"

    first = _demo(settings, home)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "demo: sandbox started" in first.stdout
    for suite in ("train", "val"):
        assert f"checkpoint demo-step-000100 (step 100), suite {suite}" in first.stdout
    assert "episodes     60/60 completed (coverage 1.00, 0 reused from earlier runs)" in first.stdout
    assert "make ui" in first.stdout
    assert (home / "dagster.yaml").read_text() == (REPO_ROOT / "configs" / "pipeline" / "dagster.yaml").read_text()
    val_summary = json.loads((tmp_path / "runs" / "val" / "demo-step-000100" / "summary.json").read_text())
    # The printed val numbers are the core summary's, rounded.
    assert f"success      {val_summary['primary']['success_rate']:.3f} [" in first.stdout

    instance = dg.DagsterInstance.from_config(str(home))
    try:
        # Each suite has its own asset: val's partition shows val numbers, train's shows train numbers.
        for suite in ("val", "train"):
            records = instance.fetch_materializations(dg.AssetKey([suite, "eval_summary"]), limit=5).records
            assert [r.partition_key for r in records] == ["demo-step-000100"]
            meta = records[0].asset_materialization.metadata
            assert meta["suite"].value == suite
            on_disk = json.loads((tmp_path / "runs" / suite / "demo-step-000100" / "summary.json").read_text())
            assert meta["reward"].value == on_disk["primary"]["reward_mean"]
        assert instance.get_dynamic_partitions("checkpoints") == ["demo-step-000100"]
        assert instance.fetch_materializations(dg.AssetKey(["val", "progress"]), limit=1).records
        # One checkpoint: nothing to compare with, so no comparison materialization exists.
        assert not instance.fetch_materializations(dg.AssetKey(["val", "checkpoint_comparison"]), limit=1).records
    finally:
        instance.dispose()

    second = _demo(settings, home)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "episodes     60/60 completed (coverage 1.00, 60 reused from earlier runs)" in second.stdout


def test_demo_reports_bad_settings_in_one_line(tmp_path: Path) -> None:
    settings = tmp_path / "pipeline.yaml"
    settings.write_text("runs_root: runs\nsuites: {}\nbogus: 1\n", encoding="utf-8")
    result = _demo(settings, tmp_path / "home")
    assert result.returncode == 2
    assert "bogus: unknown key" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_demo_reuses_only_a_verified_sandbox(tmp_path: Path, settings_writer, sandbox) -> None:
    """Servers already on the demo's ports are used only if they are the sandbox serving the split
    file's catalog; an old sandbox with another catalog, or a foreign server, stops the demo."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from shopsimrl_dagster.demo import DemoError, LocalSandbox
    from shopsimrl_dagster.settings import load_pipeline_settings

    def settings(folder: str, **kw):
        (tmp_path / folder).mkdir()
        return load_pipeline_settings(settings_writer(tmp_path / folder, **kw))

    ours = settings("ours", env_url=sandbox.env_url, policy_url=sandbox.policy_url, split_file=sandbox.split_file)
    with LocalSandbox(ours) as reused:
        assert reused.started is False

    # A split file built from another catalog (as an old sandbox with another --catalog-size would serve).
    other = json.loads(Path(sandbox.split_file).read_text(encoding="utf-8"))
    served = other["source"]["cleaned_archive_sha256"]
    other["source"]["cleaned_archive_sha256"] = "0" * 64
    (tmp_path / "other_splits.json").write_text(json.dumps(other), encoding="utf-8")
    stale = settings(
        "stale", env_url=sandbox.env_url, policy_url=sandbox.policy_url, split_file=tmp_path / "other_splits.json"
    )
    try:
        with LocalSandbox(stale):
            raise AssertionError("a sandbox with another catalog was reused")
    except DemoError as exc:
        assert f"serves catalog {served[:12]}" in str(exc) and "stop that server" in str(exc) and "\n" not in str(exc)

    class Foreign(BaseHTTPRequestHandler):  # answers 200 {} everywhere, like a permissive real server
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Foreign)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        foreign = settings(
            "foreign", env_url=f"http://127.0.0.1:{port}", policy_url=f"http://127.0.0.1:{_free_port()}/v1"
        )
        box = LocalSandbox(foreign)
        try:
            with box:
                raise AssertionError("a foreign server was used")
        except DemoError as exc:
            assert f"127.0.0.1:{port} is not the shopsim sandbox" in str(exc) and "stop that server" in str(exc)
        assert box.started is False and box._process is None
    finally:
        server.shutdown()
        server.server_close()
