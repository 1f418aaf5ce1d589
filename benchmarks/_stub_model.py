"""A deliberately cheap OpenAI-compatible chat-completions server for throughput benchmarks.

    python -m benchmarks._stub_model --port 0 --ready-file PATH [--latency-ms 200]

It speaks real HTTP/1.1 (keep-alive, Content-Length bodies) over loopback (`_stub_http`: an asyncio
protocol on uvloop), so that on a small machine the server spends as little CPU as possible and the benchmark measures
the client. Each completion is one valid tool call chosen from the offered tools:

* ``search`` offered → search for the task instruction (the last line before the first blank line
  of the first user message);
* otherwise ``click`` one of the enum values, drawn from ``Random(seed)`` of the request (so runs
  are deterministic): ``buy now`` with probability 0.3 when offered, else a random value, avoiding
  ``back to search`` when something else exists.

``--latency-ms`` delays each completion's answer (a stand-in for GPU decode time).
:class:`StubModelServer` starts it as a subprocess on a free port (context manager).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from benchmarks._stub_http import StubProcess, response, serve_forever

MODEL_NAME = "bench-stub"
_BUY = "buy now"


def model_section(model: str, model_url: str, **extra: Any) -> dict[str, Any]:
    """The evaluation config's ``model`` section for the stub at *model_url* (the benchmarks share it)."""
    return {
        "name": model,
        "base_url": model_url,
        "api_key_env": None,
        "checkpoint_id": "bench",
        "max_retries": 1,
        "timeout": 120,
        "trust_env": False,
        **extra,
    }


def _instruction(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            head = message["content"].split("\n\n", 1)[0].splitlines()
            return head[-1].strip() if head else "item"
    return "item"


def choose_call(body: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The (tool name, arguments) the stub answers for one request body."""
    tools = {t["function"]["name"]: t["function"] for t in body.get("tools") or []}
    if "search" in tools:
        return "search", {"query": _instruction(body.get("messages") or []) or "item"}
    values = list(tools["click"]["parameters"]["properties"]["value"]["enum"]) if "click" in tools else []
    if not values:
        return "search", {"query": "item"}
    rng = random.Random(body.get("seed", 0))
    buy = [v for v in values if v.lower() == _BUY]
    if buy and rng.random() < 0.3:
        return "click", {"value": buy[0]}
    others = [v for v in values if v.lower() != "back to search"] or values
    return "click", {"value": others[rng.randrange(len(others))]}


def completion_body(request: dict[str, Any], counter: int) -> dict[str, Any]:
    """A chat.completion object carrying exactly one tool call."""
    name, arguments = choose_call(request)
    return {
        "id": f"chatcmpl-stub-{counter}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{counter}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


def add_exact_tokens(body: dict[str, Any], request: dict[str, Any], request_bytes: int) -> None:
    """vLLM's exact-token fields (``return_token_ids`` / ``logprobs``), sized like a real tokenizer's output.

    The prompt gets about one id per 3.5 request bytes (a BPE vocabulary on mixed Chinese and JSON text), the
    answer one per 3.5 bytes of its arguments plus the tool-call markup; ids are cheap stand-ins, not a tokenizer's.
    """
    choice = body["choices"][0]
    call = choice["message"]["tool_calls"][0]["function"]
    sampled = 12 + int(len(call["arguments"].encode("utf-8")) / 3.5)
    if request.get("return_token_ids") is True:
        body["prompt_token_ids"] = [3 + (i * 7919) % 151000 for i in range(int(request_bytes / 3.5))]
        choice["token_ids"] = [3 + (i * 104729) % 151000 for i in range(sampled)]
    if request.get("logprobs") is True:
        choice["logprobs"] = {"content": [{"token": f"token_id:{i}", "logprob": -0.25, "bytes": None,
                                           "top_logprobs": []} for i in range(sampled)]}


def _response(status: int, payload: Any) -> bytes:
    return response(status, json.dumps(payload, ensure_ascii=False).encode("utf-8"))


try:  # the stub parses every growing conversation: the fastest parser keeps its CPU small
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a dependency of the project
    _loads = json.loads


class _StubState:
    def __init__(self, latency_ms: float) -> None:
        self.delay = latency_ms / 1000.0
        self.counter = 0

    def __call__(self, method: str, path: str, raw: bytes) -> tuple[float, bytes]:
        if method == "GET" and path.endswith("/models"):
            return 0.0, _response(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
        if method != "POST" or not path.endswith("/chat/completions"):
            return 0.0, _response(404, {"error": {"message": f"no route {method} {path}"}})
        try:
            request = _loads(raw)
        except ValueError as exc:
            return 0.0, _response(400, {"error": {"message": f"bad JSON: {exc}"}})
        self.counter += 1
        body = completion_body(request, self.counter)
        if request.get("return_token_ids") is True or request.get("logprobs") is True:
            add_exact_tokens(body, request, len(raw))
        return self.delay, _response(200, body)


def main(argv: list[str] | None = None) -> int:
    """Serve the stub until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description="cheap OpenAI-compatible stub model for benchmarks")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--ready-file", type=Path, default=None)
    args = parser.parse_args(argv)
    return serve_forever(_StubState(args.latency_ms), args.port, args.ready_file)


class StubModelServer(StubProcess):
    """The stub model in a subprocess on a free loopback port.

    Attributes after start: ``base_url`` (OpenAI base URL ending in ``/v1``), ``model``, ``pid``.
    """

    def __init__(self, latency_ms: float = 0.0) -> None:
        super().__init__("benchmarks._stub_model", ["--latency-ms", str(latency_ms)])
        self.latency_ms = latency_ms
        self.base_url = ""
        self.model = MODEL_NAME

    def __enter__(self) -> StubModelServer:
        super().__enter__()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        return self


if __name__ == "__main__":
    raise SystemExit(main())
