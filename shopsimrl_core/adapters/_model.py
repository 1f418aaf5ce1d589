"""The model adapter: an async OpenAI-compatible chat-completions client (runtime spec §7).

One :class:`ChatModelClient` holds ONE pooled ``httpx.AsyncClient`` for its endpoint for the whole
run; every episode in flight shares it. ``complete()`` sends the §7.1 body, retries exactly the
§7.2 failures with capped exponential backoff, assembles SSE streams (§7.5) and validates the
answer (§7.3) into a :class:`ModelOutput`.

A 2xx answer with an unusable body is never retried: it becomes a protocol error, or the single
policy failure ``generation_length``, on the returned output. Only transport trouble and the
retryable statuses consume HTTP attempts; running out of them raises :class:`ModelRequestError`.

The API key is read from the environment variable named by ``api_key_env`` at request time and
is never logged, stored, or put into an exception message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from shopsimrl_core._errors import InferenceError
from shopsimrl_core.adapters._sse import StreamAssembler, StreamFailure
from shopsimrl_core.adapters._transport import select_transport
from shopsimrl_core._versions import MODEL_PROVIDER

__all__ = [
    "ChatModelClient",
    "ModelOutput",
    "ModelRequestError",
    "RETRYABLE_STATUSES",
    "backoff_delay",
    "validate_completion",
    "model_identity",
    "PROTOCOL_ERROR_CODES",
]

logger = logging.getLogger("shopsimrl_core.model")

RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})

#: every protocol-error code: the 17 adapter codes of §7.3 plus the runtime's own (§9.5)
PROTOCOL_ERROR_CODES = (
    "invalid_json_response",
    "invalid_response_body",
    "missing_choices",
    "invalid_choice",
    "invalid_message",
    "invalid_tool_calls",
    "invalid_tool_call",
    "missing_function",
    "missing_tool_call_id",
    "missing_tool_name",
    "invalid_arguments_type",
    "invalid_arguments_json",
    "invalid_arguments_object",
    "unavailable_tool",
    "tool_call_count",
    "mixed_content",
    "empty_response",
    "invalid_tool_arguments",
)

GENERATION_LENGTH_MESSAGE = "model generation reached max_tokens before returning exactly one valid tool call"


class ModelRequestError(InferenceError):
    """The model endpoint could not be used: a non-retryable status, exhausted retries, or no API key.

    It fails the episode (stage ``model_step_<N>``); the evaluator may rerun the episode.
    """

    code = "model-request-failed"


@dataclass
class ModelOutput:
    """One parsed model answer, stored as ``steps[].model`` (§7.4)."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """``[{call_id, name, arguments (parsed object), raw_arguments (string as received)}]``"""
    finish_reason: Any = None
    usage: dict[str, Any] = field(default_factory=dict)
    response_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    latency_ms: float = 0.0
    """Wall time from the start of the first HTTP attempt to the return, backoff included (ms)."""
    protocol_error: dict[str, str] | None = None
    policy_failure: dict[str, str] | None = None
    raw_response: Any = None
    """The full body, only for rejected outputs (else None)."""
    body: Any = field(default=None, repr=False, compare=False)
    """The received body (assembled for streams). Not serialised; kept so a later rejection can store it."""
    attempts: int = field(default=1, compare=False)
    """HTTP attempts used (not serialised; see the step's timing block)."""

    def reject(self, code: str, message: str) -> None:
        """Mark this output as a protocol error (runtime checks of §9.1 step 4.4)."""
        self.protocol_error = {"code": code, "message": message}
        if self.raw_response is None:
            self.raw_response = self.body

    def to_dict(self) -> dict[str, Any]:
        """The §7.4 record, keys in contract order."""
        return {
            "content": self.content,
            "reasoning": self.reasoning,
            "tool_calls": [dict(call) for call in self.tool_calls],
            "finish_reason": self.finish_reason,
            "usage": self.usage,
            "response_id": self.response_id,
            "metadata": self.metadata,
            "latency_ms": self.latency_ms,
            "protocol_error": self.protocol_error,
            "policy_failure": self.policy_failure,
            "raw_response": self.raw_response,
        }


def backoff_delay(attempt: int, base: float, jitter: float) -> float:
    """Sleep after failed attempt *attempt* (0-based): ``min(b·2^a, 30) + U·min(b·2^a, 1)``, U in [0, 1)."""
    raw = base * (2**attempt)
    return min(raw, 30.0) + jitter * min(raw, 1.0)


def _text(value: Any) -> str | None:
    """content / reasoning normalisation of §7.4: strings kept, part lists joined, others ``str``-ed."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(value)


def _blank(text: str | None) -> bool:
    return text is None or not text.strip()


def validate_completion(body: Any, offered: list[str]) -> ModelOutput:
    """Validate a decoded response body against §7.3 (checks 2–18, first failure wins).

    *offered* holds the names of the tools in the request (empty: no tools offered). Never raises
    for a bad body: the failure is recorded on the returned output.
    """
    out = ModelOutput(body=body)

    def fail(code: str, message: str) -> ModelOutput:
        out.protocol_error = {"code": code, "message": message}
        out.raw_response = body
        return out

    if not isinstance(body, dict):
        return fail("invalid_response_body", "model response body must be a JSON object")
    out.usage = body["usage"] if isinstance(body.get("usage"), dict) else {}
    out.response_id = body["id"] if isinstance(body.get("id"), str) else None
    out.metadata = {key: body[key] for key in ("created", "system_fingerprint", "service_tier") if key in body}
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return fail("missing_choices", "model response has no choices")
    choice = choices[0]
    if not isinstance(choice, dict):
        return fail("invalid_choice", "model response choice must be an object")
    out.finish_reason = choice.get("finish_reason")
    message = choice.get("message")
    if not isinstance(message, dict):
        return fail("invalid_message", "model response choice has no message object")
    out.content = _text(message.get("content"))
    reasoning = message.get("reasoning_content")
    if reasoning is None:
        reasoning = message.get("reasoning")
    out.reasoning = _text(reasoning)
    raw_calls = message.get("tool_calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        return fail("invalid_tool_calls", "model tool_calls must be a list")
    for raw in raw_calls or []:
        if not isinstance(raw, dict) or raw.get("type") != "function":
            return fail("invalid_tool_call", "model returned an invalid function tool call")
        function = raw.get("function")
        if not isinstance(function, dict):
            return fail("missing_function", "tool call has no function object")
        call_id = raw.get("id")
        if not isinstance(call_id, str) or not call_id:
            return fail("missing_tool_call_id", "tool call has no id")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            return fail("missing_tool_name", "tool call has no function name")
        raw_arguments = function.get("arguments")
        if not isinstance(raw_arguments, str):
            return fail("invalid_arguments_type", "tool call arguments must be a JSON string")
        try:
            arguments = json.loads(raw_arguments)
        except json.JSONDecodeError as exc:
            return fail("invalid_arguments_json", f"tool call arguments are not valid JSON: {exc}")
        if not isinstance(arguments, dict):
            return fail("invalid_arguments_object", "tool call arguments must decode to an object")
        out.tool_calls.append({"call_id": call_id, "name": name, "arguments": arguments, "raw_arguments": raw_arguments})
        if offered and name not in offered:
            return fail("unavailable_tool", f"model called unavailable tool: {name}")
    count = len(out.tool_calls)
    if offered and out.finish_reason == "length" and count != 1:
        out.policy_failure = {"code": "generation_length", "message": GENERATION_LENGTH_MESSAGE}
        out.raw_response = body
        return out
    if offered and count != 1:
        return fail("tool_call_count", f"model must return exactly one tool call, got {count}")
    if offered and not _blank(out.content):
        return fail("mixed_content", "model must not mix natural-language content with an action tool call")
    if count == 0 and _blank(out.content):
        return fail(
            "empty_response",
            f"model returned neither content nor tool calls (finish_reason={out.finish_reason!r}, "
            f"reasoning_chars={len(out.reasoning or '')})",
        )
    return out


def model_identity(
    *,
    base_url: str,
    model: str,
    timeout: float,
    max_retries: int,
    retry_backoff_seconds: float,
    temperature: float,
    max_tokens: int,
    top_p: float | None,
    send_seed: bool,
    tool_choice: str,
    extra_body: dict[str, Any],
    checkpoint_id: str | None = None,
    seed_mod_2_32: bool = False,
) -> dict[str, Any]:
    """The model identity of §6.3 (trace provenance form, with ``transport``).

    ``checkpoint_id`` appears only when set; ``stream``, ``trust_env`` and ``api_key_env`` never.
    """
    identity: dict[str, Any] = {"provider": MODEL_PROVIDER}
    if checkpoint_id is not None:
        identity["checkpoint_id"] = checkpoint_id
    identity["model"] = model
    identity["base_url"] = base_url.rstrip("/")
    identity["transport"] = {
        "timeout_seconds": timeout,
        "max_retries": max_retries,
        "retry_backoff_seconds": retry_backoff_seconds,
    }
    identity["sampling"] = {
        "temperature": temperature,
        "max_tokens": max_tokens,
        "top_p": top_p,
        "send_seed": send_seed,
        "tool_choice": tool_choice,
        "extra_body": extra_body,
    }
    if seed_mod_2_32:
        identity["sampling"]["seed_mod_2_32"] = True  # only when true (§22.10, §1.1 rule 3)
    return identity


class _Retryable(Exception):
    """One failed HTTP attempt that §7.2 retries."""


class ChatModelClient:
    """Async client for ``POST {base_url}/chat/completions`` with the §7.2 retry policy.

    Use as ``async with ChatModelClient(...) as model:``; the pooled connection pool lives until
    the block exits. Calling a closed client raises ``RuntimeError``.

    **Parameters:** ``base_url`` (OpenAI base URL, e.g. ``http://127.0.0.1:30000/v1``), ``model``
    (served model name), ``api_key_env`` (variable holding the key, or None for no auth header),
    ``timeout`` (seconds per HTTP attempt, applied to connect/read/write), ``max_retries`` (total
    HTTP attempts), ``retry_backoff_seconds`` (backoff base), sampling settings, ``stream`` (SSE),
    ``trust_env`` (honour proxy variables), ``max_connections`` (pool size), ``transport`` (the
    httpx seam; tests pass a ``MockTransport``; it wins over ``http_transport``), ``http_transport``
    (``auto`` | ``httpx`` | ``streams``: which transport serves the pool, see ``_transport.py``).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout: float = 180.0,
        max_retries: int = 5,
        retry_backoff_seconds: float = 1.0,
        temperature: float = 0.0,
        top_p: float | None = None,
        max_tokens: int = 512,
        send_seed: bool = True,
        tool_choice: str = "auto",
        extra_body: dict[str, Any] | None = None,
        stream: bool = False,
        trust_env: bool = True,
        max_connections: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
        checkpoint_id: str | None = None,
        http_transport: str = "auto",
        seed_mod_2_32: bool = False,
    ) -> None:
        if max_retries < 1:
            raise ValueError("max_retries counts total HTTP attempts and must be >= 1")
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_retries = max_retries
        self.retry_backoff_seconds = retry_backoff_seconds
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.send_seed = send_seed
        self.seed_mod_2_32 = seed_mod_2_32
        self.tool_choice = tool_choice
        self.extra_body = dict(extra_body or {})
        self.stream = stream
        self.trust_env = trust_env
        self.max_connections = max_connections
        self.checkpoint_id = checkpoint_id
        self.http_transport = http_transport
        # an explicit transport wins; otherwise the selection (fails early on a bad mode)
        self._transport = transport if transport is not None else select_transport(
            self.url, mode=http_transport, trust_env=trust_env, max_connections=max_connections
        )
        self._client: httpx.AsyncClient | None = None
        self._closed = False
        # seams for tests: the sleep used for backoff and the jitter source
        self.sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
        self.rng = random.Random()

    # -- lifecycle ------------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._closed:
            raise RuntimeError("Cannot send a request, as the model client has been closed.")
        if self._client is None:
            # pool=None: waiting for a pooled connection is not an HTTP attempt timing out
            timeout = httpx.Timeout(self.timeout, pool=None)
            limits = httpx.Limits(max_connections=self.max_connections, max_keepalive_connections=self.max_connections)
            self._client = httpx.AsyncClient(
                timeout=timeout, limits=limits, trust_env=self.trust_env, transport=self._transport
            )
        return self._client

    @classmethod
    def from_config(
        cls, model: Any, *, transport: httpx.AsyncBaseTransport | None = None, **overrides: Any
    ) -> "ChatModelClient":
        """Build the client for a config's ``model`` section (``_config.ModelConfig``).

        Every setting comes from the section; ``overrides`` replace individual keyword arguments
        (the seed probe, for instance, always sends seeds over one connection).
        """
        settings: dict[str, Any] = dict(
            base_url=model.base_url,
            model=model.name,
            api_key_env=model.api_key_env,
            timeout=model.timeout,
            max_retries=model.max_retries,
            retry_backoff_seconds=model.retry_backoff_seconds,
            temperature=model.temperature,
            top_p=model.top_p,
            max_tokens=model.max_tokens,
            send_seed=model.send_seed,
            tool_choice=model.tool_choice,
            extra_body=dict(model.extra_body),
            stream=model.stream,
            trust_env=model.trust_env,
            max_connections=model.max_connections,
            checkpoint_id=model.checkpoint_id,
            http_transport=model.http_transport,
            seed_mod_2_32=model.seed_mod_2_32,
        )
        settings.update(overrides)
        return cls(transport=transport, **settings)

    async def __aenter__(self) -> "ChatModelClient":
        self._http()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent."""
        self._closed = True
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    @property
    def identity(self) -> dict[str, Any]:
        """The model identity (§6.3) of this client's settings."""
        return model_identity(
            base_url=self.base_url,
            model=self.model,
            timeout=self.timeout,
            max_retries=self.max_retries,
            retry_backoff_seconds=self.retry_backoff_seconds,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            top_p=self.top_p,
            send_seed=self.send_seed,
            tool_choice=self.tool_choice,
            extra_body=self.extra_body,
            checkpoint_id=self.checkpoint_id,
            seed_mod_2_32=self.seed_mod_2_32,
        )

    # -- request --------------------------------------------------------------------------------

    def build_body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, seed: int | None) -> dict[str, Any]:
        """The request body of §7.1, keys in contract order (later keys overwrite ``extra_body``)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": self.stream,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        body.update(self.extra_body)
        if self.top_p is not None:
            body["top_p"] = self.top_p
        if self.send_seed and seed is not None:
            body["seed"] = self.sent_seed(seed)
        if tools:
            body["tools"] = tools
            body["tool_choice"] = self.tool_choice
        return body

    def sent_seed(self, seed: int | None) -> int | None:
        """The seed that goes on the wire for *seed* (None when seeds are not sent)."""
        if not self.send_seed or seed is None:
            return None
        return seed % 2**32 if self.seed_mod_2_32 else seed

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key_env is not None:
            key = os.environ.get(self.api_key_env, "")
            if not key:
                raise ModelRequestError(
                    f"environment variable {self.api_key_env} is unset or empty; export the API key "
                    f"or set model.api_key_env: null for an endpoint without auth"
                )
            headers["Authorization"] = f"Bearer {key}"
        return headers

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, seed: int | None
    ) -> ModelOutput:
        """Send one chat-completion request and return the validated output.

        Retries HTTP 408/409/429/500/502/503/504, transport errors and broken streams, with
        backoff, up to ``max_retries`` attempts in total. A 2xx body that is unusable is returned
        as an output carrying ``protocol_error`` (or ``policy_failure``), never retried.

        Raises:
            ModelRequestError: any other non-2xx status (at once), exhausted attempts, missing key.
        """
        headers = self._headers()
        client = self._http()
        body = self.build_body(messages, tools, seed)
        content = json.dumps(body, ensure_ascii=False).encode("utf-8")
        offered = [t["function"]["name"] for t in tools or [] if isinstance(t, dict) and isinstance(t.get("function"), dict)]
        started = time.perf_counter()
        last_error = ""
        for attempt in range(self.max_retries):
            try:
                if self.stream:
                    output = await self._attempt_stream(client, content, headers, offered)
                else:
                    output = await self._attempt_plain(client, content, headers, offered)
                output.latency_ms = round((time.perf_counter() - started) * 1000.0, 3)
                output.attempts = attempt + 1
                return output
            except _Retryable as exc:
                last_error = str(exc)
            except httpx.RequestError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            except StreamFailure as exc:
                last_error = f"broken stream: {exc}"
            logger.warning("model attempt %d/%d failed: %s", attempt + 1, self.max_retries, last_error[:300])
            if attempt + 1 < self.max_retries:
                await self.sleep(backoff_delay(attempt, self.retry_backoff_seconds, self.rng.random()))
        raise ModelRequestError(f"model request failed after {self.max_retries} attempts: {last_error}")

    @staticmethod
    def _check_status(status: int, text: str) -> None:
        if 200 <= status < 300:
            return
        if status in RETRYABLE_STATUSES:
            raise _Retryable(f"retryable model HTTP {status}: {text[:500]}")
        raise ModelRequestError(f"non-retryable model HTTP {status}: {text[:500]}")

    async def _attempt_plain(
        self, client: httpx.AsyncClient, content: bytes, headers: dict[str, str], offered: list[str]
    ) -> ModelOutput:
        response = await client.post(self.url, content=content, headers=headers)
        text = response.text
        self._check_status(response.status_code, text)
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            out = ModelOutput(body=None)
            out.protocol_error = {"code": "invalid_json_response", "message": f"model response is not valid JSON: {exc}"}
            out.raw_response = {"text": text[:4000]}
            return out
        return validate_completion(body, offered)

    async def _attempt_stream(
        self, client: httpx.AsyncClient, content: bytes, headers: dict[str, str], offered: list[str]
    ) -> ModelOutput:
        async with client.stream("POST", self.url, content=content, headers=headers) as response:
            if not 200 <= response.status_code < 300:
                text = (await response.aread()).decode("utf-8", errors="replace")
                self._check_status(response.status_code, text)
            assembler = StreamAssembler()
            # read to the end even after [DONE] so the connection goes back to the pool
            async for line in response.aiter_lines():
                assembler.feed_line(line)
        return validate_completion(assembler.body(), offered)
