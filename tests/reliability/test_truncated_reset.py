"""A truncated reset answer (issue 24) gives a clear line and never a hang: a proxy in front of a real sandbox
cuts every reset answer in half — as a 200 whose JSON stops mid-string, or as a connection closed before the
declared length. The run ends with exit 1 at once, the console says what the environment answered and
whether the server may hold a slot for it, and no slot leaks that the answer named."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from chaoskit import Sandbox, check_traces, start_run, write_config
from testkit.loopback import threaded_server

from shopsimrl_core.runs.leases._leases import LeaseJournal


@contextmanager
def cutting_proxy(upstream: str, mode: str) -> Iterator[str]:
    """A proxy to the environment at *upstream* whose reset answers lose their second half: ``json`` sends
    a complete HTTP answer with the cut body, ``close`` declares the full length and closes early."""
    client = httpx.Client(timeout=60, trust_env=False)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: bytes, length: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            answer = client.get(upstream + self.path)
            self._send(answer.status_code, answer.content)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            answer = client.post(upstream + self.path, content=body, headers={"Content-Type": "application/json"})
            data = answer.content
            if b'"reset"' in body:
                cut = data[: len(data) // 2]
                if mode == "close":
                    self._send(200, cut, length=len(data))
                    self.close_connection = True
                    return
                data = cut
            self._send(answer.status_code, data)

        def log_message(self, *args: Any) -> None:
            pass

    try:
        with threaded_server(Handler) as port:
            yield f"http://127.0.0.1:{port}"
    finally:
        client.close()


def _run(tmp_path: Path, sandbox: Sandbox, url: str) -> tuple[int, str, Path]:
    config = write_config(tmp_path / "w" / "t.yaml", sandbox, episodes=4, concurrency=2, env_url=url,
                          experiment={"max_episode_retries": 1, "outage_budget_seconds": 5})
    run = start_run(config)
    code = run.wait(timeout=240)  # before: past 300 s, every reset waiting inside the server for a leaked slot
    return code, run.err(), tmp_path / "w" / "runs" / "chaos"


@pytest.mark.slow
def test_a_reset_answer_cut_mid_json_is_named_and_its_lease_released(tmp_path: Path) -> None:
    with Sandbox(tmp_path / "sb", slots=2) as sandbox, cutting_proxy(sandbox.env_url, "json") as url:
        code, err, run_dir = _run(tmp_path, sandbox, url)
        assert code == 1, err
        lines = [line for line in err.splitlines() if "environment reset response has no result object" in line]
        assert len(lines) == 1, err  # said once, not once per attempt
        assert "(the body is not JSON: Unterminated string" in lines[0]
        assert "the lease its cut answer names (slot" in lines[0] and "was released" in lines[0]
        assert sandbox.wait_free() == sandbox.slots  # the ids in the cut answer freed every slot
        assert check_traces(run_dir / "traces.jsonl").completed == 0


@pytest.mark.slow
def test_a_reset_answer_cut_by_a_closed_connection_ends_the_run_with_the_reason(tmp_path: Path) -> None:
    with Sandbox(tmp_path / "sb", slots=2) as sandbox, cutting_proxy(sandbox.env_url, "close") as url:
        code, err, run_dir = _run(tmp_path, sandbox, url)
        assert code == 1, err
        assert "environment reset request failed: RemoteProtocolError" in err
        assert "the server may hold a slot for this reset" in err
        gone = [line for line in err.splitlines() if "can come free" in line]
        assert len(gone) == 1 and "restart the environment server, or set environment.exclusive: true" in gone[0]
        # the cut answers were not repeated (each repeat would take another slot): 2 slots, 2 lost resets
        assert sandbox.slots - sandbox.free_slots() == 2
        journal = LeaseJournal(run_dir, "check")
        assert len(journal.unanswered()) == 2  # the next start knows why the slots are gone
        journal.close()
