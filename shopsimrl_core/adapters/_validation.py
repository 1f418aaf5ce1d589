"""What a chat-completions answer must look like, and what the adapter records of it (runtime-semantics §7.3, §7.4).

Promise: ``validate_completion`` checks a decoded response body against §7.3 in contract order
(first failure wins) and never raises for a bad body: the failure is a protocol error (one of
``PROTOCOL_ERROR_CODES``) or the policy failure ``generation_length`` on the returned
``ModelOutput``, with the body kept as ``raw_response``. ``ModelOutput.to_dict`` is the §7.4 record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from shopsimrl_core.adapters._json import loads_finite

__all__ = ["ModelOutput", "validate_completion", "PROTOCOL_ERROR_CODES", "GENERATION_LENGTH_MESSAGE"]

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


def _text(value: Any) -> str | None:
    """Content / reasoning normalisation of §7.4: strings kept, part lists joined, others ``str``-ed."""
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
            # the stdlib's message when it is not JSON; NaN/Infinity refused (a trace line cannot hold them)
            arguments = loads_finite(raw_arguments)
        except json.JSONDecodeError as exc:
            return fail("invalid_arguments_json", f"tool call arguments are not valid JSON: {exc}")
        if not isinstance(arguments, dict):
            return fail("invalid_arguments_object", "tool call arguments must decode to an object")
        out.tool_calls.append(
            {"call_id": call_id, "name": name, "arguments": arguments, "raw_arguments": raw_arguments}
        )
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
