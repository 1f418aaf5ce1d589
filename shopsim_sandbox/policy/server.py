"""The baseline policy as an OpenAI-compatible chat-completions endpoint (vLLM/SGLang wire format).

``POST /v1/chat/completions`` (JSON, or SSE chunks with ``stream: true``), ``GET /v1/models``,
OpenAI error bodies, ``reasoning_content`` unless thinking is switched off, ``usage`` (in streams
only with ``stream_options.include_usage``); faults from ``shopsim_sandbox.faults``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from shopsim_sandbox.faults import FaultConfig, FaultDecision, FaultInjector
from shopsim_sandbox.policy import tokens
from shopsim_sandbox.policy.decide import (
    _MAX_MODEL_LEN,
    DEFAULT_LAPSE_RATES,
    SERVED_MODEL,
    LapseRates,
    Lapses,
    _text_of,
    decide_action,
    hinted_lapses,
    read_transcript,
)

__all__ = ["build_policy_app"]


def _approx_tokens(text: str) -> int:
    # Roughly one token per CJK character and per Latin word or symbol, like a BPE vocabulary.
    return len(re.findall(r"[\u3400-\u9fff]|[A-Za-z0-9]+|[^\sA-Za-z0-9\u3400-\u9fff]", text))


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"object": "error", "message": message, "type": kind, "param": None, "code": status},
                        status_code=status)


_FAULT_TYPES = {429: "TooManyRequestsError", 500: "InternalServerError", 503: "ServiceUnavailableError"}


def _thinking_enabled(body: dict[str, Any]) -> bool:
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False:
        return False
    return body.get("enable_thinking") is not False


@dataclass
class _Completion:
    content: str | None
    reasoning: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cut: tuple[str | None, list[dict[str, Any]]] | None = None
    """What a ``length`` stop cut off (content, calls): exact-token answers sample its first max_tokens tokens."""


class _PolicyServer:
    def __init__(self, *, seed: int, latency_ms: float, faults: FaultConfig | None, model_name: str,
                 lapses: bool, lapse_rates: LapseRates, model_root: str, max_lora_rank: int | None = None) -> None:
        self.max_lora_rank = max_lora_rank
        self.adapters: dict[str, tuple[str, LapseRates]] = {}  # LoRA name -> (path, the adapter's lapse rates)
        self.seed = seed
        self.lapses = lapses
        self.lapse_rates = lapse_rates
        self.model_root = model_root
        self.latency_ms = float(latency_ms)
        self.faults = FaultInjector(faults)
        self.model_name = model_name
        self.created = int(time.time())

    # -- decision and shaping --

    def _complete(self, body: dict[str, Any], digest: str, fault: FaultDecision) -> _Completion:
        messages = body["messages"]
        tools = body.get("tools") if isinstance(body.get("tools"), list) and body.get("tools") else None
        has_seed = isinstance(body.get("seed"), int) and not isinstance(body.get("seed"), bool)
        request_seed = body["seed"] if has_seed else 0
        transcript = read_transcript(messages, tools)
        # A sampling temperature above 0 is part of what is sampled, as with a real model: the same seed at
        # 0.2 and at 0.7 draws two different episodes (issue 33: 128 of 128 rewards were identical). Greedy
        # (0, or none sent) keeps the draws of earlier versions. The lapse *rates* do not depend on it.
        temperature = body.get("temperature")
        salt = ""
        if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature > 0:
            salt = f"|T={float(temperature)!r}"
        rng = random.Random(f"{self.seed}|{request_seed}|{transcript.instruction}|{transcript.observation}{salt}")
        # The runtime sends seed = episode seed + step - 1, so this recovers one value per episode;
        # without seeds the lapses depend on the task alone.
        episode_seed = request_seed - transcript.turns if has_seed else None
        adapter = self.adapters.get(str(body.get("model")))
        rates = adapter[1] if adapter is not None else self.lapse_rates
        if self.lapses:
            draw = random.Random(
                f"{self.seed}|{episode_seed}|{transcript.instruction}|{transcript.persona_text}{salt}"
            )
            lapses = Lapses.draw(draw, hinted_lapses(transcript.skill_hints), rates)
        else:
            lapses = Lapses(runner_up_rate=rates.runner_up)
        action = decide_action(transcript, rng, lapses)
        use_tools = tools is not None and body.get("tool_choice") != "none"
        reasoning = action.rationale if _thinking_enabled(body) else None
        prompt_tokens = sum(_approx_tokens(_text_of(m.get("content"))) + 4 for m in messages if isinstance(m, dict))
        prompt_tokens += _approx_tokens(json.dumps(tools, ensure_ascii=False)) if tools else 0

        def call(name: str, arguments: str, n: int) -> dict[str, Any]:
            call_id = "chatcmpl-tool-" + hashlib.sha256(f"{digest}|{n}".encode()).hexdigest()[:32]
            return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}

        arguments = json.dumps(action.arguments, ensure_ascii=False)
        content: str | None = None
        calls: list[dict[str, Any]] = []
        finish = "tool_calls"
        if fault.length:
            # Cut off while still thinking: no tool call made it out.
            reasoning = (reasoning or action.rationale)[: max(1, len(action.rationale) // 2)]
            finish = "length"
        elif fault.malformed == "text" or not use_tools:
            content = f"Action: {action.text}"
            finish = "stop"
        elif fault.malformed == "two_calls":
            calls = [call(action.name, arguments, 0), call(action.name, arguments, 1)]
        elif fault.malformed == "bad_json":
            calls = [call(action.name, arguments[:-1], 0)]
        else:
            calls = [call(action.name, arguments, 0)]
        completion_text = (reasoning or "") + (content or "") + "".join(
            c["function"]["name"] + c["function"]["arguments"] for c in calls)
        completion_tokens = _approx_tokens(completion_text) + 3
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        if isinstance(max_tokens, int) and max_tokens > 0 and completion_tokens > max_tokens and finish != "length":
            # The output does not fit: a real server stops mid-generation before any tool call completes.
            cut = (content, calls)
            content, calls, finish = None, [], "length"
            completion_tokens = max_tokens
            return _Completion(content, reasoning, calls, finish, prompt_tokens, completion_tokens, cut)
        return _Completion(content, reasoning, calls, finish, prompt_tokens, completion_tokens)

    def _usage(self, c: _Completion) -> dict[str, Any]:
        return {"prompt_tokens": c.prompt_tokens, "total_tokens": c.prompt_tokens + c.completion_tokens,
                "completion_tokens": c.completion_tokens, "prompt_tokens_details": None}

    # -- routes --

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": self.model_name, "object": "model", "created": self.created, "owned_by": "shopsim-sandbox",
            "root": self.model_root, "parent": None, "max_model_len": _MAX_MODEL_LEN, "permission": []}] + [{
            "id": name, "object": "model", "created": self.created, "owned_by": "shopsim-sandbox",
            "root": path, "parent": self.model_name, "max_model_len": _MAX_MODEL_LEN, "permission": []}
            for name, (path, _) in self.adapters.items()]})

    # -- runtime LoRA (vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter, same bodies and errors) --

    async def load_lora_adapter(self, request: Request) -> Response:
        from shopsim_sandbox.policy.adapter import AdapterError, load_adapter

        try:
            body = json.loads(await request.body())
            name, path = body["lora_name"], body["lora_path"]
            assert isinstance(name, str) and isinstance(path, str) and name and path
        except (ValueError, KeyError, TypeError, AssertionError):
            return _error(400, "body must be a JSON object with lora_name and lora_path", "BadRequestError")
        if name in self.adapters or name == self.model_name:
            return _error(400, f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput")
        try:
            rank, rates = load_adapter(path)
        except AdapterError as exc:
            return _error(400, str(exc), "BadRequestError")
        assert self.max_lora_rank is not None
        if rank > self.max_lora_rank:
            return _error(400, f"LoRA rank {rank} is greater than max_lora_rank {self.max_lora_rank}.",
                          "BadRequestError")
        self.adapters[name] = (path, rates)
        return Response(f"Success: LoRA adapter '{name}' added successfully.", media_type="text/plain")

    async def unload_lora_adapter(self, request: Request) -> Response:
        try:
            name = json.loads(await request.body())["lora_name"]
        except (ValueError, KeyError, TypeError):
            return _error(400, "body must be a JSON object with lora_name", "BadRequestError")
        if self.adapters.pop(str(name), None) is None:
            return _error(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
        return Response(f"Success: LoRA adapter '{name}' removed successfully.", media_type="text/plain")

    async def chat_completions(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(400, f"request body is not valid JSON: {exc}", "BadRequestError")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object", "BadRequestError")
        if body.get("model") != self.model_name and body.get("model") not in self.adapters:
            return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list", "BadRequestError")
        digest = hashlib.sha256(raw).hexdigest()
        fault, refused = await self._inject("chat:" + digest)
        if refused is not None:
            return refused
        completion = self._complete(body, digest, fault)
        response_id = "chatcmpl-" + digest[:32]
        if body.get("stream") is True:
            options = body.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            return StreamingResponse(self._chunks(response_id, completion, include_usage),
                                     media_type="text/event-stream")
        message: dict[str, Any] = {"role": "assistant", "content": completion.content,
                                   "tool_calls": completion.tool_calls}
        if completion.reasoning is not None:
            message["reasoning_content"] = completion.reasoning
        choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None,
                                  "finish_reason": completion.finish_reason, "stop_reason": None}
        answer: dict[str, Any] = {
            "id": response_id, "object": "chat.completion", "created": int(time.time()), "model": self.model_name,
            "choices": [choice], "usage": self._usage(completion), "prompt_logprobs": None,
        }
        if body.get("return_token_ids") is True or body.get("logprobs") is True:
            # vLLM's exact-token answer (shopsim_sandbox.policy.tokens): the training path's backend reads it
            tools = body.get("tools") if isinstance(body.get("tools"), list) else None
            content, calls = completion.cut or (completion.content, completion.tool_calls)
            output_ids = tokens.render_answer(content, completion.reasoning, calls,
                                              finished=completion.finish_reason != "length")
            if completion.cut is not None:  # stopped at max_tokens: the first max_tokens sampled tokens
                output_ids = output_ids[: completion.completion_tokens]
            if body.get("return_token_ids") is True:
                answer["prompt_token_ids"] = tokens.render_prompt(messages, tools)
                choice["token_ids"] = output_ids
            if body.get("logprobs") is True:
                seed = body["seed"] if isinstance(body.get("seed"), int) else 0
                choice["logprobs"] = {"content": [
                    {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                    for t, lp in zip(output_ids, tokens.token_logprobs(seed, output_ids))]}
        return JSONResponse(answer)

    async def _inject(self, key: str) -> tuple[FaultDecision, Response | None]:
        """The request's fault decision after its latency; the error answer when the fault is a status."""
        fault = self.faults.decide(key)
        delay = self.latency_ms + fault.delay_ms
        if delay > 0:
            await asyncio.sleep(delay / 1000.0)
        if fault.status is not None:
            return fault, _error(fault.status, f"injected fault: HTTP {fault.status}", _FAULT_TYPES[fault.status])
        return fault, None

    async def generate(self, request: Request) -> Response:
        """SGLang's native ``/generate`` over the sandbox vocabulary: ``input_ids`` in, sampled ids and logprobs out.

        The prompt is read back into messages and tools (``tokens.parse_prompt``) and answered by the same
        decision as a chat request; ``meta_info.output_token_logprobs`` holds ``[logprob, id, null]`` per token.
        """
        raw = await request.body()
        try:
            body = json.loads(raw)
            ids = body["input_ids"]
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise ValueError("input_ids must be a list of ints")
            messages, tools = tokens.parse_prompt(ids)
        except (ValueError, KeyError, TypeError) as exc:
            return _error(400, f"bad /generate request: {exc}", "BadRequestError")
        params = body.get("sampling_params") if isinstance(body.get("sampling_params"), dict) else {}
        chat: dict[str, Any] = {"model": self.model_name, "messages": messages, "tools": tools}
        if isinstance(params.get("sampling_seed"), int):
            chat["seed"] = params["sampling_seed"]
        if isinstance(params.get("max_new_tokens"), int):
            chat["max_tokens"] = params["max_new_tokens"]
        if isinstance(params.get("temperature"), (int, float)):
            chat["temperature"] = params["temperature"]
        digest = hashlib.sha256(raw).hexdigest()
        fault, refused = await self._inject("generate:" + digest)
        if refused is not None:
            return refused
        completion = self._complete(chat, digest, fault)
        content, calls = completion.cut or (completion.content, completion.tool_calls)
        output_ids = tokens.render_answer(content, completion.reasoning, calls,
                                          finished=completion.finish_reason != "length")
        if completion.cut is not None:
            output_ids = output_ids[: completion.completion_tokens]
        logprobs = tokens.token_logprobs(chat.get("seed", 0), output_ids)
        finish: dict[str, Any] = {"type": "length", "length": len(output_ids)}
        if completion.finish_reason != "length":
            finish = {"type": "stop", "matched": tokens.IM_END}
        return JSONResponse({
            "text": tokens.decode(output_ids), "output_ids": output_ids,
            "meta_info": {"id": digest[:32], "finish_reason": finish, "prompt_tokens": len(ids),
                          "completion_tokens": len(output_ids),
                          "output_token_logprobs": [[lp, t, None] for t, lp in zip(output_ids, logprobs)]},
        })

    async def _chunks(self, response_id: str, c: _Completion, include_usage: bool) -> AsyncIterator[bytes]:
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            payload = {"id": response_id, "object": "chat.completion.chunk", "created": created,
                       "model": self.model_name,
                       "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                                    **({"stop_reason": None} if finish else {})}]}
            return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"

        yield chunk({"role": "assistant", "content": ""})
        for piece in _pieces(c.reasoning or "", 8):
            yield chunk({"reasoning_content": piece})
        for piece in _pieces(c.content or "", 8):
            yield chunk({"content": piece})
        for index, call in enumerate(c.tool_calls):
            yield chunk({"tool_calls": [{"id": call["id"], "type": "function", "index": index,
                                         "function": {"name": call["function"]["name"], "arguments": ""}}]})
            for piece in _pieces(call["function"]["arguments"], 6):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({"content": ""}, c.finish_reason)
        if include_usage:
            payload = {"id": response_id, "object": "chat.completion.chunk", "created": created,
                       "model": self.model_name, "choices": [], "usage": self._usage(c)}
            yield b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def build_policy_app(*, seed: int = 0, latency_ms: float = 0, faults: FaultConfig | None = None,
                     model_name: str = SERVED_MODEL, lapses: bool = True,
                     lapse_rates: LapseRates = DEFAULT_LAPSE_RATES, model_root: str | None = None,
                     max_lora_rank: int | None = None, runtime_lora: bool = False) -> Starlette:
    """Build the baseline policy's ASGI app: ``POST /v1/chat/completions`` and ``GET /v1/models``.

    Responses are deterministic for a given ``seed``, request body and fault sequence. ``latency_ms``
    is added to every completion call (on top of ``faults.latency_ms``). Requests naming another
    model than ``model_name`` get vLLM's 404. ``lapse_rates`` (e.g. a checkpoint file's, see
    ``shopsim_sandbox.policy.checkpoint``) set the policy's competence; the default is the
    ``LAPSE_*`` constants. ``lapses=False`` switches the seeded per-episode imperfection off (the
    policy's best play; for tests); the runner-up slip keeps ``lapse_rates.runner_up``.
    ``model_root`` is what ``GET /v1/models`` reports as ``root`` (vLLM: the weights path; default
    ``model_name``). With ``max_lora_rank`` (vLLM's ``--enable-lora``) and ``runtime_lora`` (vLLM's
    ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``) the app has vLLM's runtime LoRA endpoints: an adapter folder
    (``shopsim_sandbox.policy.adapter``) is served under its ``lora_name`` with its own lapse rates.
    """
    server = _PolicyServer(seed=seed, latency_ms=latency_ms, faults=faults, model_name=model_name, lapses=lapses,
                           lapse_rates=lapse_rates, model_root=model_root if model_root is not None else model_name,
                           max_lora_rank=max_lora_rank)
    routes = [
        Route("/v1/chat/completions", server.chat_completions, methods=["POST"]),
        Route("/v1/models", server.models, methods=["GET"]),
        Route("/generate", server.generate, methods=["POST"]),  # SGLang's native API (exact-token training)
    ]
    if max_lora_rank is not None and runtime_lora:
        routes += [Route("/v1/load_lora_adapter", server.load_lora_adapter, methods=["POST"]),
                   Route("/v1/unload_lora_adapter", server.unload_lora_adapter, methods=["POST"])]
    app = Starlette(routes=routes)
    app.state.policy = server
    return app
