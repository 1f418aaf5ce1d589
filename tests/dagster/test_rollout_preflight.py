"""The rollout asset checks no server itself: the core's preflight does, and the asset shows its report.

Two counting proxies (real loopback HTTP servers in front of the session sandbox's environment and
policy) count the GETs a run sends: ``GET /healthz`` and ``GET /v1/models``. The asset used to send
one of each before the core's preflight sent them again; now a Dagster run sends exactly what the
core sends for the same config (the model endpoint is asked for its models once; the environment's
``/healthz`` twice, by the preflight and by the lease reconciliation at the run's start).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import dagster as dg
import httpx
import pytest
import yaml
from dagster_helpers import materialized, run_job

import shopsimrl_core as core
from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.settings import PipelineSettings, load_pipeline_settings

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


class CountingProxy:
    """A reverse proxy on a free loopback port: forwards every request to *upstream* and counts ``(method, path)``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.seen: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        client = httpx.Client(timeout=60.0, trust_env=False)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                with proxy._lock:
                    proxy.seen[(self.command, self.path.split("?")[0])] += 1
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP | {"host"}}
                headers["accept-encoding"] = "identity"
                reply = client.request(self.command, proxy.upstream + self.path, content=body, headers=headers)
                self.send_response(reply.status_code)
                for key, value in reply.headers.items():
                    if key.lower() not in _HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("content-length", str(len(reply.content)))
                self.end_headers()
                self.wfile.write(reply.content)

            do_GET = do_POST = _forward

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self._client = client

    def gets(self, path: str) -> int:
        with self._lock:
            return self.seen[("GET", path)]

    def reset(self) -> None:
        with self._lock:
            self.seen.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()


@pytest.fixture
def proxies(sandbox: Any) -> Iterator[tuple[CountingProxy, CountingProxy]]:
    env, model = CountingProxy(sandbox.env_url), CountingProxy(sandbox.policy_url.removesuffix("/v1"))
    try:
        yield env, model
    finally:
        env.close()
        model.close()


@pytest.fixture
def proxied_settings(
    tmp_path: Any, sandbox: Any, proxies: tuple[CountingProxy, CountingProxy], settings_writer: Any
) -> PipelineSettings:
    env, model = proxies
    return load_pipeline_settings(
        settings_writer(
            tmp_path, env_url=env.url, policy_url=model.url + "/v1", served_model=sandbox.served_model,
            split_file=sandbox.split_file, val_sample=4,
        )  # fmt: skip
    )


def _gets(env: CountingProxy, model: CountingProxy) -> tuple[int, int]:
    return env.gets("/healthz"), model.gets("/v1/models")


def test_a_rollout_adds_no_health_check_to_the_cores_and_shows_the_preflight_report(
    proxied_settings: PipelineSettings, proxies: tuple[CountingProxy, CountingProxy], register, sandbox: Any
) -> None:
    env, model = proxies
    register(proxied_settings, "ckpt-a", 100)
    location = build_definitions(proxied_settings)
    dagster_gets, core_gets = {}, {}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-a"])
        run_job(location, "prepare_plans", instance)
        for attempt in ("fresh", "resumed"):
            env.reset()
            model.reset()
            result = run_job(location, "evaluate_val", instance, "ckpt-a")
            dagster_gets[attempt] = _gets(env, model)
            rollout = materialized(result, "val/rollout_traces")
            # The preflight's report, as the core saw it before the first episode.
            assert rollout["endpoint_models"] == [sandbox.served_model]
            health = rollout["environment_health"]
            assert health["tasks"] > 0 and health["environment_slots"] > 0 and health["environment_version"]
            assert rollout["episodes_completed"] == 4

    # The same config run by the core alone (its own run directory), fresh and resumed.
    config_path = proxied_settings.runs_root / "_configs" / "val" / "ckpt-a.yaml"
    raw = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    raw["experiment"]["name"] = "core-alone"
    alone = config_path.with_name("core-alone.yaml")
    alone.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    for attempt in ("fresh", "resumed"):
        env.reset()
        model.reset()
        done = core.run_evaluation(core.load_config(alone))
        core_gets[attempt] = _gets(env, model)
        assert done.preflight is not None and done.preflight.served_models == [sandbox.served_model]
        assert done.counts.completed == 4
    # The Dagster layer adds no GET of its own (it used to check both servers before the core's preflight did),
    # and the model endpoint is asked for its models once per run.
    assert dagster_gets == core_gets, (dagster_gets, core_gets)
    assert {models for _, models in dagster_gets.values()} == {1}
