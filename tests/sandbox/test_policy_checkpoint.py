"""Policy checkpoint files: the format and its one-line errors, the rates reaching the play, and
``python -m shopsim_sandbox.policy serve`` as a real subprocess (port 0, /v1/models, SIGTERM)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from shopsim_sandbox.cli import main as sandbox_main
from shopsim_sandbox.policy import (
    DEFAULT_LAPSE_RATES,
    LAPSE_FIRST_OPTION,
    LAPSE_IGNORE_BUDGET,
    LAPSE_IMPATIENT,
    LAPSE_RUNNER_UP,
    LAPSE_TERSE_QUERY,
    POLICY_CHECKPOINT_FORMAT,
    SERVED_MODEL,
    CheckpointError,
    LapseRates,
    Lapses,
    load_policy_checkpoint,
    measure_success,
    tools_for_state,
)
from shopsim_sandbox.policy.__main__ import main as policy_main
from shopsim_sandbox.testing import SandboxServer

WEIGHTS = Path(__file__).resolve().parents[2] / "configs" / "demo" / "checkpoints" / "weights"
DEMO_STEPS = ("000100", "000200", "000300")
_START_DEADLINE_S = 60.0
_STOP_DEADLINE_S = 10.0  # uvicorn's graceful shutdown gives running requests 1 s


# --- the format --------------------------------------------------------------------------------

def _ok(**fields: object) -> dict[str, object]:
    return {"format": POLICY_CHECKPOINT_FORMAT, **fields}


BAD_CHECKPOINTS = [
    pytest.param('{"format": ', "not JSON", id="not-json"),
    pytest.param("[0.5]", "(top level): must be a JSON object", id="not-an-object"),
    pytest.param(json.dumps({"lapses": {}}), "format: required field is missing", id="format-missing"),
    pytest.param(json.dumps({"format": "shopsim-policy-checkpoint-v2"}),
                 f"format: is 'shopsim-policy-checkpoint-v2'; this reader accepts '{POLICY_CHECKPOINT_FORMAT}'",
                 id="format-wrong"),
    pytest.param(json.dumps(_ok(lapses={"impatient": 1.5})), "lapses.impatient: must be a probability in [0, 1] "
                 "(got 1.5)", id="above-one"),
    pytest.param(json.dumps(_ok(lapses={"runner_up": -0.1})), "lapses.runner_up: must be a probability", id="negative"),
    pytest.param(json.dumps(_ok(lapses={"terse_query": "0.5"})), "lapses.terse_query: must be a probability",
                 id="string"),
    pytest.param(json.dumps(_ok(lapses={"first_option": True})), "lapses.first_option: must be a probability",
                 id="bool"),
    pytest.param('{"format": "shopsim-policy-checkpoint-v1", "lapses": {"ignore_budget": NaN}}',
                 "lapses.ignore_budget: must be a probability", id="nan"),
    pytest.param(json.dumps(_ok(lapses={"impatent": 0.5})), "lapses.impatent: unknown key; valid keys: "
                 "ignore_budget, first_option, impatient, terse_query, runner_up", id="unknown-lapse"),
    pytest.param(json.dumps(_ok(weights="x.bin")), "weights: unknown key; valid keys: format, step, lapses",
                 id="unknown-top-level"),
    pytest.param(json.dumps(_ok(lapses=[0.5])), "lapses: must be an object of probabilities", id="lapses-list"),
    pytest.param(json.dumps(_ok(step=-1)), "step: must be an integer >= 0", id="negative-step"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_CHECKPOINTS)
def test_a_bad_checkpoint_is_one_line_naming_the_file_and_the_field(tmp_path: Path, text: str,
                                                                   expected: str) -> None:
    path = tmp_path / "policy-step-000001.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CheckpointError) as info:
        load_policy_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and expected in message, message


def test_a_missing_checkpoint_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(CheckpointError, match=r"nope\.json: cannot read the checkpoint file"):
        load_policy_checkpoint(missing)


def test_defaults_are_the_module_constants(tmp_path: Path) -> None:
    assert LapseRates() == DEFAULT_LAPSE_RATES
    assert DEFAULT_LAPSE_RATES.model_dump() == {
        "ignore_budget": LAPSE_IGNORE_BUDGET, "first_option": LAPSE_FIRST_OPTION, "impatient": LAPSE_IMPATIENT,
        "terse_query": LAPSE_TERSE_QUERY, "runner_up": LAPSE_RUNNER_UP}
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(_ok(lapses={"impatient": 0.1})), encoding="utf-8")
    checkpoint = load_policy_checkpoint(path)
    assert checkpoint.step is None
    assert checkpoint.lapses == DEFAULT_LAPSE_RATES.model_copy(update={"impatient": 0.1})
    assert Lapses().runner_up_rate == LAPSE_RUNNER_UP
    # The demo series: step 100 is exactly today's rates, and every rate falls with the step.
    series = [load_policy_checkpoint(WEIGHTS / f"policy-step-{step}.json") for step in DEMO_STEPS]
    assert [c.step for c in series] == [100, 200, 300] and series[0].lapses == DEFAULT_LAPSE_RATES
    for earlier, later in zip(series, series[1:], strict=False):
        assert all(later.lapses.model_dump()[k] < v for k, v in earlier.lapses.model_dump().items())


def test_draw_reads_the_rates_it_is_given() -> None:
    keys = [f"episode-{n}" for n in range(200)]
    # The default rates reproduce the unconfigured draw exactly (same four uniforms, same thresholds).
    assert all(Lapses.draw(random.Random(k)) == Lapses.draw(random.Random(k), frozenset(), DEFAULT_LAPSE_RATES)
               for k in keys)
    never = LapseRates(ignore_budget=0, first_option=0, impatient=0, terse_query=0, runner_up=0)
    always = LapseRates(ignore_budget=1, first_option=1, impatient=1, terse_query=1, runner_up=1)
    assert {Lapses.draw(random.Random(k), rates=never) for k in keys} == {Lapses(runner_up_rate=0.0)}
    assert {Lapses.draw(random.Random(k), rates=always) for k in keys} == {Lapses(True, True, True, True, 1.0)}
    # SKILL_LAPSE_FACTOR still scales a hinted lapse: a certain lapse becomes a 25 % one.
    hinted = [Lapses.draw(random.Random(k), frozenset({"impatient"}), always).impatient for k in keys]
    assert 0.1 < sum(hinted) / len(hinted) < 0.4


# --- the serve command -------------------------------------------------------------------------

class _ServedPolicy:
    """``python -m shopsim_sandbox.policy serve`` in a subprocess on port 0; its URL once ready."""

    def __init__(self, workdir: Path, checkpoint: Path, name: str) -> None:
        self.workdir, self.checkpoint, self.name = workdir, checkpoint, name
        self.ready = workdir / f"{name}.ready.json"
        self.stdout = workdir / f"{name}.out"
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def __enter__(self) -> _ServedPolicy:
        with open(self.stdout, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "shopsim_sandbox.policy", "serve", "--checkpoint", str(self.checkpoint),
                 "--port", "0", "--served-model-name", self.name, "--ready-file", str(self.ready)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_ready(self) -> str:
        assert self.process is not None
        deadline = time.monotonic() + _START_DEADLINE_S
        while not self.ready.exists():
            assert self.process.poll() is None, self.stdout.read_text(errors="replace")
            assert time.monotonic() < deadline, f"{self.name} did not start within {_START_DEADLINE_S} s"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{json.loads(self.ready.read_text())['port']}/v1"
        return self.url

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def _search_request(model: str) -> dict[str, object]:
    return {"model": model, "seed": 7, "tools": tools_for_state({"search_available": True, "actions": []}),
            "messages": [{"role": "user", "content": "购物任务：\n买一副蓝牙耳机\n\n页面：搜索首页\n"}]}


def test_serve_subprocess_answers_under_its_name_and_stops_on_sigterm(tmp_path: Path) -> None:
    checkpoint = WEIGHTS / "policy-step-000300.json"
    with _ServedPolicy(tmp_path, checkpoint, "demo-step-000300") as served:
        url = served.wait_ready()
        assert served.stdout.read_text().splitlines()[0] == f"serving on {url}"
        assert not url.endswith(":0/v1")
        with httpx.Client(trust_env=False, timeout=30) as client:
            (model,) = client.get(url + "/models").json()["data"]
            assert model["id"] == "demo-step-000300" and model["root"] == str(checkpoint)
            answer = client.post(url + "/chat/completions", json=_search_request("demo-step-000300"))
            assert answer.status_code == 200
            (call,) = answer.json()["choices"][0]["message"]["tool_calls"]
            assert call["function"]["name"] == "search" and "耳机" in json.loads(call["function"]["arguments"])["query"]
            assert client.post(url + "/chat/completions", json=_search_request(SERVED_MODEL)).status_code == 404
        assert served.process is not None
        started = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        deadline = started + _STOP_DEADLINE_S
        while served.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert served.process.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM), served.process.returncode
        assert time.monotonic() - started < _STOP_DEADLINE_S


def test_serve_and_sandbox_refuse_a_bad_checkpoint_in_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_ok(lapses={"impatient": 2})), encoding="utf-8")
    assert policy_main(["serve", "--checkpoint", str(bad), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"python -m shopsim_sandbox.policy serve: {bad}: lapses.impatient: must be a probability in " \
                  "[0, 1] (got 2)"
    assert sandbox_main(["serve", "--port", "0", "--policy-port", "0", "--policy-checkpoint", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"shopsim-sandbox: {bad}: lapses.impatient: ")


def test_sandbox_serve_starts_its_policy_on_a_checkpoint(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    checkpoint = WEIGHTS / "policy-step-000200.json"
    process = subprocess.Popen([sys.executable, "-m", "shopsim_sandbox.cli", "serve", "--catalog", "example",
                                "--port", "0", "--policy-port", "0", "--policy-checkpoint", str(checkpoint),
                                "--ready-file", str(ready)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + _START_DEADLINE_S
        while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        port = json.loads(ready.read_text())["policy_port"]
        (model,) = httpx.get(f"http://127.0.0.1:{port}/v1/models", trust_env=False).json()["data"]
        assert model["id"] == SERVED_MODEL and model["root"] == str(checkpoint)
    finally:
        process.terminate()
        process.wait(timeout=15)


# --- the rates reach the play ------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo_policies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The three demo checkpoints, each served by its own subprocess (started together)."""
    workdir = tmp_path_factory.mktemp("policies")
    with ExitStack() as stack:
        served = [stack.enter_context(_ServedPolicy(workdir, WEIGHTS / f"policy-step-{s}.json", f"demo-step-{s}"))
                  for s in DEMO_STEPS]
        yield {p.name: p.wait_ready() for p in served}


def test_lower_lapse_rates_give_higher_success_over_http(sandbox: SandboxServer, demo_policies: dict[str, str],
                                                         tmp_path: Path, capsys) -> None:
    assert sandbox.split_file is not None and sandbox.policy_url is not None and sandbox.served_model is not None
    unconfigured_url, unconfigured_name = sandbox.policy_url, sandbox.served_model
    task_ids = json.loads(sandbox.split_file.read_text(encoding="utf-8"))["splits"]["val"]["task_ids"][:20]

    async def measure_all() -> list[dict[str, Any]]:
        runs = [measure_success(sandbox.env_url, url, task_ids, model_name=name) for name, url in demo_policies.items()]
        runs.append(measure_success(sandbox.env_url, unconfigured_url, task_ids, model_name=unconfigured_name))
        return list(await asyncio.gather(*runs))

    *stats, unconfigured = asyncio.run(measure_all())
    rates = [s["success_rate"] for s in stats]
    assert rates[0] < rates[1] < rates[2], stats
    # Step 100 holds today's rates: it plays exactly like the unconfigured in-process policy.
    assert stats[0] == unconfigured
    # `measure` (the subcommand) reaches a policy served under another name with --model.
    split = tmp_path / "three.json"
    split.write_text(json.dumps({"splits": {"val": {"task_ids": task_ids[:3]}}}), encoding="utf-8")
    assert policy_main(["measure", "--env-url", sandbox.env_url, "--policy-url", demo_policies["demo-step-000300"],
                        "--split-file", str(split), "--model", "demo-step-000300"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 3
