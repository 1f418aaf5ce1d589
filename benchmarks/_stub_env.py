"""A cheap ShopSimulator stand-in for client benchmarks: fixed-length episodes that end in a purchase.

    python -m benchmarks._stub_env --port 0 --ready-file PATH [--episode-steps 10] [--obs-kb 2,3,4,1,3,8,3,2,3,1]

It speaks the environment's envelope (``POST /api/shop_agent``: reset, interact, terminate,
release_one; ``GET /healthz``) with the real server's response style (compact JSON, sorted keys,
``\\uXXXX`` escapes), so the client decodes what it would decode in production. Every lease plays
the same episode: the reset page offers search; each interaction answers a results page whose
observation text is ``--obs-kb`` kilobytes of UTF-8 (cycled per step, default mean 3 KB, 1–8 KB);
the page before the last offers only ``buy now``, and interaction number ``--episode-steps`` ends the
episode with ``done: true`` and reward 1.0. Responses are built once at start-up (only the lease
fields change), so the stub spends next to no CPU per request. Resets never block (no slot limit).
"""

from __future__ import annotations

import argparse
import itertools
import json
import uuid
from pathlib import Path
from typing import Any

from benchmarks._stub_http import StubProcess, response, serve_forever

OBSERVATION_VERSION = "shopping-observation-v7"
ENVIRONMENT_VERSION = "shopsimulator-paper-aligned-v8"
DEFAULT_OBS_KB = (2, 3, 4, 1, 3, 8, 3, 2, 3, 1)
_LEASE = "@@LEASE@@"
_ENV_IDX = 987654321  # placeholder number, replaced per lease


def _dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("ascii")


def _observation(step: int, kb: int, actions: list[str]) -> str:
    lines = ["页面：搜索结果", f"搜索词：保温杯 第{step}步", "结果：第 1/5 页，共 48 项", "", "商品列表："]
    row = 0
    while len("\n".join(lines).encode("utf-8")) < kb * 1024 - 200:
        row += 1
        lines.append(f"- [B0{step:02d}{row:04d}] 不锈钢保温杯 {300 + row * 10}ml 大容量 真空双层 办公室 户外 "
                     f"| 价格：￥{59 + row}.00 | 评分：4.{row % 10} | 已售 {row * 37} 件")
    lines += ["", "可点击元素：", *(f"- {a}" for a in actions)]
    return "\n".join(lines) + "\n"


def _actions(step: int, episode_steps: int) -> list[str]:
    if step == episode_steps - 1:
        return ["buy now"]
    return [f"b0{step:02d}{i:04d}" for i in range(1, 9)] + ["next >", "back to search"]


class EnvStub:
    """Builds the response templates once and answers envelopes from them."""

    def __init__(self, episode_steps: int, obs_kb: list[int]) -> None:
        self.episode_steps = episode_steps
        self.leases: dict[str, list[int]] = {}
        self.ids = itertools.count(1)
        reset = {
            "env_idx": _ENV_IDX, "environment_version": ENVIRONMENT_VERSION, "idx": 0, "interaction_mode": "multi_turn",
            "lease_id": _LEASE, "message": "Task started",
            "observation": "页面：搜索首页\n\n页面能力：\n- 支持商品搜索\n",
            "observation_state": {"actions": [], "observation_version": OBSERVATION_VERSION, "page_type": "search_home",
                                  "search_available": True},
            "task_instruction": "想买一个大容量的保温杯，500ml 以上，预算 100 元以内", "task_mode": "persona",
            "user_persona": {"偏好": "喜欢500ml", "关注点": "大容量", "用户ID": "u-8144", "预算偏好": "不在乎价格"},
        }
        self.reset_body = _dumps({"result": reset})
        self.steps: list[bytes] = []
        for step in range(1, episode_steps + 1):
            done = step == episode_steps
            actions = [] if done else _actions(step, episode_steps)
            result = {
                "action_feedback": {"message": "已执行", "reason": "executed", "valid": True},
                "done": done, "env_idx": _ENV_IDX, "goal": {}, "lease_id": _LEASE,
                "message": "Episode finished" if done else "Continue interaction",
                "observation": _observation(step, obs_kb[(step - 1) % len(obs_kb)], actions),
                "observation_state": {"actions": actions, "observation_version": OBSERVATION_VERSION, "page": 1,
                                      "page_type": "done" if done else "search_results", "search_available": False,
                                      "total_pages": 5, "total_results": 48},
                "over": done, "purchase": {"asin": "B0010001"} if done else {}, "reward": 1.0 if done else 0.0,
                "reward_detail": {"r_type": 1.0} if done else {},
            }
            self.steps.append(_dumps({"result": result}))
        self.terminate = {reason: _dumps({"result": {
            "done": True, "env_idx": _ENV_IDX, "lease_id": _LEASE, "observation": "页面：结束\n",
            "observation_state": {"actions": [], "observation_version": OBSERVATION_VERSION, "page_type": "done",
                                  "search_available": False},
            "reward": 0.0, "termination_reason": reason}}) for reason in ("action_limit", "generation_length")}
        self.health = _dumps({"environment_slots": 4096, "environment_version": ENVIRONMENT_VERSION, "free_slots": 4096,
                              "observation_version": OBSERVATION_VERSION, "ready": True, "tasks": 1000})

    @staticmethod
    def _fill(template: bytes, env_idx: int, lease: str) -> bytes:
        return template.replace(b"987654321", str(env_idx).encode(), 1).replace(_LEASE.encode(), lease.encode(), 1)

    def __call__(self, method: str, path: str, raw: bytes) -> tuple[float, bytes]:
        if method == "GET" and path == "/healthz":
            return 0.0, response(200, self.health)
        if method != "POST" or path != "/api/shop_agent":
            return 0.0, response(404, b'{"error":"no route"}')
        try:
            envelope = json.loads(raw)
            action = envelope["action"]
        except (ValueError, KeyError, TypeError):
            return 0.0, response(400, b'{"result":{"error":"bad envelope"}}')
        if action == "reset":
            number = next(self.ids)
            lease, env_idx = uuid.uuid4().hex, number % 4096  # like the real server's lease ids
            self.leases[lease] = [env_idx, 0]
            return 0.0, response(200, self._fill(self.reset_body, env_idx, lease))
        lease = envelope.get("lease_id")
        state = self.leases.get(lease) if isinstance(lease, str) else None
        if state is None:
            return 0.0, response(409, b'{"result":{"error":"lease is not active"}}')
        if action == "release_one":
            del self.leases[lease]
            return 0.0, response(200, b'{"result":{"released":true}}')
        if action == "interact":
            state[1] += 1
            template = self.steps[min(state[1], self.episode_steps) - 1]
            return 0.0, response(200, self._fill(template, state[0], lease))
        if action == "terminate":
            template = self.terminate.get(envelope.get("termination_reason"), self.terminate["action_limit"])
            return 0.0, response(200, self._fill(template, state[0], lease))
        return 0.0, response(400, b'{"result":{"error":"unknown action"}}')


def main(argv: list[str] | None = None) -> int:
    """Serve the stub until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description="cheap ShopSimulator stand-in for client benchmarks")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", type=Path, default=None)
    parser.add_argument("--episode-steps", type=int, default=10)
    parser.add_argument(
        "--obs-kb", default=",".join(map(str, DEFAULT_OBS_KB)), help="comma list of KB per step, cycled"
    )
    args = parser.parse_args(argv)
    stub = EnvStub(args.episode_steps, [int(x) for x in args.obs_kb.split(",")])
    return serve_forever(stub, args.port, args.ready_file)


class StubEnvServer(StubProcess):
    """The stub environment in a subprocess; ``env_url`` after start."""

    def __init__(self, episode_steps: int = 10, obs_kb: tuple[int, ...] = DEFAULT_OBS_KB) -> None:
        super().__init__(
            "benchmarks._stub_env", ["--episode-steps", str(episode_steps), "--obs-kb", ",".join(map(str, obs_kb))]
        )
        self.env_url = ""

    def __enter__(self) -> StubEnvServer:
        super().__enter__()
        self.env_url = f"http://127.0.0.1:{self.port}"
        return self


if __name__ == "__main__":
    raise SystemExit(main())
