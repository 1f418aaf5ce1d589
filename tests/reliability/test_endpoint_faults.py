"""Endpoint faults are faults (issue 24): a model endpoint that answers HTTP 200 with an HTML page after
preflight never produces a "completed" episode with reward 0.

A real sandbox subprocess serves the environment and the baseline policy; a loopback proxy in front of
the policy passes `GET /models` and the first chat completion (the preflight probe) through and then
replaces chat answers with a 200 HTML error page — always, or on every other call.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from chaoskit import Sandbox, check_traces, outstanding_leases, start_run, write_config
from testkit.loopback import threaded_server

PAGE = b"<!doctype html>\n<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"


@contextmanager
def html_after_preflight(upstream: str, every: int) -> Iterator[tuple[str, dict[str, int]]]:
    """A proxy to *upstream* (an OpenAI base URL) whose chat answers after the first are an HTML page
    on every *every*-th call (1: always). Yields its base URL and its counters."""
    counts = {"chat": 0, "html": 0}
    lock = threading.Lock()
    numbers = itertools.count()
    client = httpx.Client(timeout=60, trust_env=False)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            answer = client.get(upstream + self.path.removeprefix("/v1"))
            self._send(answer.status_code, answer.content, answer.headers.get("content-type", "application/json"))

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                number = next(numbers)
                counts["chat"] += 1
                html = number > 0 and number % every == 0
                counts["html"] += html
            if html:
                self._send(200, PAGE, "text/html; charset=utf-8")
                return
            answer = client.post(
                upstream + self.path.removeprefix("/v1"), content=body, headers={"Content-Type": "application/json"}
            )
            self._send(answer.status_code, answer.content, answer.headers.get("content-type", "application/json"))

        def log_message(self, *args: Any) -> None:
            pass

    try:
        with threaded_server(Handler) as port:
            yield f"http://127.0.0.1:{port}/v1", counts
    finally:
        client.close()


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "traces.jsonl").read_bytes().splitlines()]


@pytest.mark.slow
def test_an_html_endpoint_fails_the_run_and_completes_nothing(tmp_path: Path) -> None:
    """Every chat answer after preflight is an HTML page: the attempts fail (never "completed", never
    protocol errors), the console names the endpoint and the page's first bytes, and the run exits non-zero."""
    with Sandbox(tmp_path / "sb", slots=4) as sandbox, html_after_preflight(sandbox.policy_url, 1) as (url, counts):
        config = write_config(
            tmp_path / "w" / "html.yaml",
            sandbox,
            episodes=4,
            concurrency=2,
            experiment={"outage_budget_seconds": 3, "max_episode_retries": 1},
            model={"base_url": url, "max_retries": 2},
        )
        run = start_run(config)
        code = run.wait(timeout=300)
        run_dir = tmp_path / "w" / "runs" / "chaos"
        err = run.err()
        assert code != 0, err
        assert code == 9 and "error[outage-budget-exhausted]" in err, err  # the completion probe keeps failing
        notices = [line for line in err.splitlines() if "endpoint fault" in line and "text/html" in line]
        assert notices, err
        assert url + "/chat/completions" in notices[0] and "'<!doctype html>\\n<html><head><title>502" in notices[0]
        records = _records(run_dir)
        assert records and all(r["status"] == "failed" for r in records)
        assert all(r["error"]["type"] == "ModelEndpointFault" for r in records)
        assert not any(step.get("protocol_error") for r in records for step in r.get("steps") or [])
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["counts"]["completed"] == 0 and counts["html"] > 0
        # the summary counts them apart: every failed attempt is an endpoint fault, none a protocol error
        assert summary["counts"]["endpoint_faults"] == len(records) > 0
        assert summary["behavior"]["protocol_errors"] == 0
        assert outstanding_leases(run_dir) == 0 and sandbox.wait_free() == sandbox.slots


@pytest.mark.slow
def test_intermittent_html_answers_are_retried_without_cost(tmp_path: Path) -> None:
    """Every third chat answer is an HTML page: each is retried within model.max_retries, so every episode
    completes, exit 0, and no step of any trace is a protocol error caused by a page."""
    with Sandbox(tmp_path / "sb", slots=4) as sandbox, html_after_preflight(sandbox.policy_url, 3) as (url, counts):
        config = write_config(tmp_path / "w" / "flaky.yaml", sandbox, episodes=8, concurrency=4,
                              model={"base_url": url, "max_retries": 3})
        run = start_run(config)
        assert run.wait(timeout=300) == 0, run.err()
        run_dir = tmp_path / "w" / "runs" / "chaos"
        assert check_traces(run_dir / "traces.jsonl").completed == 8
        records = _records(run_dir)
        invalid_json = [s for r in records for s in r.get("steps") or []
                        if (s.get("protocol_error") or {}).get("code") == "invalid_json_response"]
        assert invalid_json == [] and counts["html"] >= 5, counts
        # A page is retried within the attempt; with 4 in flight one request can still draw a page on every
        # try: that attempt fails as an endpoint fault, is rerun, and is counted apart, never as a result.
        faults = [r for r in records if r["status"] == "failed" and r["error"]["type"] == "ModelEndpointFault"]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["counts"]["endpoint_faults"] == len(faults)
        assert summary["counts"]["completed"] == 8 and summary["errors"] == {}
