"""Assembly of a streamed chat completion (runtime-semantics §7.5).

The stream is turned back into the body a non-streaming call would have returned, so that the same
§7.3 validation applies to both modes. A malformed stream is a :class:`StreamFailure`, which the
model adapter retries from scratch.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from shopsimrl_core.adapters._json import loads_finite

__all__ = ["StreamFailure", "StreamAssembler", "synthesised_call_id"]


class StreamFailure(Exception):
    """The stream broke or carried an unusable event; the whole request is retried."""


def synthesised_call_id(response_id: Any, index: Any, name: Any, arguments: Any) -> str:
    """Return ``"call-stream-" + sha256(S)[:24]`` for a streamed call that came without an id.

    ``S`` is the UTF-8 JSON of ``{response_id, index, name, arguments}`` with sorted keys and the
    *default* separators ``", "`` / ``": "`` (deliberately not canonical JSON), non-ASCII literal.
    """
    text = json.dumps(
        {"response_id": response_id, "index": index, "name": name, "arguments": arguments},
        sort_keys=True,
        ensure_ascii=False,
    )
    return "call-stream-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


class StreamAssembler:
    """Feeds on SSE lines and builds the equivalent non-streaming response body."""

    def __init__(self) -> None:
        self.response_id: str | None = None
        self.usage: dict[str, Any] | None = None
        self.metadata: dict[str, Any] = {}
        self.finish_reason: Any = None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        # merged by index, in order of first appearance
        self.calls: dict[Any, dict[str, Any]] = {}
        self.events = 0
        self.done = False

    def feed_line(self, line: str) -> None:
        """Consume one line of the event stream.

        Raises:
            StreamFailure: a data payload that is not a JSON object, or carries an ``error`` object.
        """
        if self.done:
            return
        line = line.rstrip("\r\n")
        if not line.strip() or line.startswith(":") or not line.startswith("data:"):
            return
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return
        try:
            payload = loads_finite(data)  # NaN/Infinity refused: a trace line cannot hold them
        except json.JSONDecodeError as exc:
            raise StreamFailure(f"stream event is not JSON: {exc}") from exc
        if not isinstance(payload, dict):
            raise StreamFailure("stream event must be a JSON object")
        if isinstance(payload.get("error"), dict):
            error = payload["error"]
            raise StreamFailure(f"stream reported an error: {str(error.get('message', error))[:500]}")
        self.feed_event(payload)

    def feed_event(self, payload: dict[str, Any]) -> None:
        """Merge one decoded event into the response being assembled."""
        self.events += 1
        if self.response_id is None and isinstance(payload.get("id"), str):
            self.response_id = payload["id"]
        if isinstance(payload.get("usage"), dict):
            self.usage = payload["usage"]
        for key in ("created", "system_fingerprint", "service_tier"):
            if key in payload:
                self.metadata[key] = payload[key]
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
        reasoning = delta.get("reasoning_content")
        if reasoning is None:
            reasoning = delta.get("reasoning")
        if isinstance(reasoning, str):
            self.reasoning.append(reasoning)
        fragments = delta.get("tool_calls")
        if isinstance(fragments, list):
            for position, fragment in enumerate(fragments):
                if not isinstance(fragment, dict):
                    continue
                index = fragment.get("index", position)
                call = self.calls.setdefault(index, {"function": {"name": "", "arguments": ""}})
                if fragment.get("id") is not None:
                    call["id"] = fragment["id"]
                if fragment.get("type") is not None:
                    call["type"] = fragment["type"]
                function = fragment.get("function")
                if isinstance(function, dict):
                    if isinstance(function.get("name"), str):
                        call["function"]["name"] += function["name"]
                    if isinstance(function.get("arguments"), str):
                        call["function"]["arguments"] += function["arguments"]

    def body(self) -> dict[str, Any]:
        """Return the assembled response body.

        Raises:
            StreamFailure: the stream had no data event or ended before ``data: [DONE]``.
        """
        if self.events == 0:
            raise StreamFailure("stream carried no data")
        if not self.done:
            raise StreamFailure("stream ended before [DONE]")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            calls = []
            for index, call in self.calls.items():
                call_id = call.get("id")
                if not isinstance(call_id, str) or not call_id.strip():
                    call["id"] = synthesised_call_id(
                        self.response_id, index, call["function"]["name"], call["function"]["arguments"]
                    )
                calls.append(call)
            message["tool_calls"] = calls
        body: dict[str, Any] = {"id": self.response_id, "object": "chat.completion"}
        body.update(self.metadata)
        body["choices"] = [{"index": 0, "message": message, "finish_reason": self.finish_reason}]
        if self.usage is not None:
            body["usage"] = self.usage
        return body
