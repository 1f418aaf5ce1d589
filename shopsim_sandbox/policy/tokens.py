r"""Exact tokens for the baseline policy: answers shaped like vLLM's with ``return_token_ids`` and ``logprobs``.

A training client asks vLLM's chat endpoint for ``return_token_ids: true`` and ``logprobs: true`` and gets back
``prompt_token_ids`` (the chat template applied by the server), ``choices[0].token_ids`` (the sampled ids) and
``choices[0].logprobs.content[i].logprob``. The sandbox answers the same way so the training path runs end to end
without a GPU:

- the vocabulary is UTF-8 bytes (id = byte + 3) plus three special tokens: 0 ``<|pad|>``, 1 ``<|im_start|>``,
  2 ``<|im_end|>``;
- the template is ChatML with Hermes tool calls: tools listed in the system turn inside ``<tools>…</tools>``, an
  assistant turn's calls as ``<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`` with the arguments text
  exactly as the message carries it, tool results as ``<tool_response>…</tool_response>`` in a ``tool`` turn;
- the sampled text is what the template would render for the answer (reasoning in ``<think>…</think>`` first when
  thinking is on), followed by ``<|im_end|>``: a client that replays the answer as the runtime does (content and
  calls, never the reasoning) therefore gets a next prompt that extends this one — unless reasoning was sampled,
  which the template drops from earlier turns (like Qwen3's), so the prompt does not extend it;
- each sampled token's logprob is a deterministic function of the request seed, its position and its id.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["PAD", "IM_START", "IM_END", "encode", "decode", "render_prompt", "render_answer", "token_logprobs"]

PAD, IM_START, IM_END = 0, 1, 2
_OFFSET = 3


def encode(text: str) -> list[int]:
    """Token ids of *text* (no special tokens)."""
    return [b + _OFFSET for b in text.encode("utf-8")]


def decode(ids: list[int]) -> str:
    """The text of *ids*, special tokens left out."""
    return bytes(i - _OFFSET for i in ids if i >= _OFFSET).decode("utf-8", errors="replace")


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _calls_text(calls: Any) -> str:
    parts = []
    for call in calls or []:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        parts.append('<tool_call>\n{"name": ' + json.dumps(function.get("name"), ensure_ascii=False)
                     + ', "arguments": ' + arguments + "}\n</tool_call>")
    return "\n".join(parts)


def _turn(role: str, text: str) -> list[int]:
    return [IM_START] + encode(f"{role}\n{text}") + [IM_END] + encode("\n")


def render_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
    """The prompt ids of a conversation (generation prompt added); earlier turns' reasoning is dropped."""
    ids: list[int] = []
    tool_text = ""
    if tools:
        tool_text = "\n\n<tools>\n" + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools) + "\n</tools>"
    first = 0
    if messages and messages[0].get("role") == "system":
        ids += _turn("system", _text(messages[0].get("content")) + tool_text)
        first = 1
    elif tool_text:
        ids += _turn("system", tool_text.strip())
    for message in messages[first:]:
        role = message.get("role")
        if role == "assistant":
            text = _text(message.get("content"))
            calls = _calls_text(message.get("tool_calls"))
            ids += _turn("assistant", text + ("\n" if text and calls else "") + calls)
        elif role == "tool":
            ids += _turn("tool", "<tool_response>\n" + _text(message.get("content")) + "\n</tool_response>")
        else:
            ids += _turn(str(role), _text(message.get("content")))
    return ids + [IM_START] + encode("assistant\n")


def render_answer(content: str | None, reasoning: str | None, tool_calls: list[dict[str, Any]], *,
                  finished: bool) -> list[int]:
    """The sampled ids of an answer: ``<think>`` reasoning, content, calls, then ``<|im_end|>`` when it finished."""
    text = f"<think>{reasoning}</think>\n" if reasoning else ""
    body = content or ""
    calls = _calls_text(tool_calls)
    text += body + ("\n" if body and calls else "") + calls
    return encode(text) + ([IM_END] if finished else [])


def token_logprobs(seed: int, ids: list[int]) -> list[float]:
    """A deterministic, finite, negative logprob per sampled token."""
    values = []
    for position, token in enumerate(ids):
        digest = hashlib.sha256(f"{seed}:{position}:{token}".encode()).digest()
        values.append(-round((int.from_bytes(digest[:2], "big") / 65535.0) * 2.0 + 1e-4, 6))
    return values
