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

__all__ = [
    "PAD", "IM_START", "IM_END", "encode", "decode", "render_prompt", "render_answer", "token_logprobs",
    "parse_prompt", "SandboxTokenizer",
]

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


def _split_turns(ids: list[int]) -> list[tuple[str, str]]:
    turns: list[tuple[str, str]] = []
    current: list[int] | None = None
    for token in ids:
        if token == IM_START:
            current = []
        elif token == IM_END:
            if current is not None:
                role, _, text = decode(current).partition("\n")
                turns.append((role, text))
            current = None
        elif current is not None:
            current.append(token)
    if current is not None:  # the open generation prompt
        role, _, text = decode(current).partition("\n")
        turns.append((role, text))
    return turns


def parse_prompt(ids: list[int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The conversation and tools a prompt rendered by :func:`render_prompt` stands for (SGLang's ``/generate``).

    Calls get positional ids (``call-<n>``) and each ``tool`` turn answers the next unanswered call, as the
    Hermes format pairs them.
    """
    messages: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] | None = None
    pending: list[str] = []
    count = 0
    turns = _split_turns(ids)
    if turns and turns[-1] == ("assistant", ""):
        turns = turns[:-1]  # the generation prompt
    for role, text in turns:
        if role == "system" and "<tools>\n" in text:
            head, _, rest = text.partition("\n\n<tools>\n") if "\n\n<tools>\n" in text else ("", "", text[8:])
            tools = [json.loads(line) for line in rest.rsplit("\n</tools>", 1)[0].splitlines() if line.strip()]
            if head:
                messages.append({"role": "system", "content": head})
        elif role == "assistant":
            calls: list[dict[str, Any]] = []
            content = text
            while "<tool_call>\n" in content:
                before, _, after = content.partition("<tool_call>\n")
                body, _, content = after.partition("\n</tool_call>")
                call = json.loads(body)
                count += 1
                calls.append({"id": f"call-{count}", "type": "function",
                              "function": {"name": call["name"],
                                           "arguments": json.dumps(call["arguments"], ensure_ascii=False)}})
                content = before + content
            message: dict[str, Any] = {"role": "assistant", "content": content.strip() or None}
            if calls:
                message["tool_calls"] = calls
                pending.extend(c["id"] for c in calls)
            messages.append(message)
        elif role == "tool":
            inner = text.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")
            messages.append({"role": "tool", "tool_call_id": pending.pop(0) if pending else "", "content": inner})
        else:
            messages.append({"role": role, "content": text})
    return messages, tools


class SandboxTokenizer:
    """The sandbox's vocabulary and template behind the interface a ``transformers`` tokenizer offers.

    For clients that render prompts themselves (SGLang's ``/generate``): ``apply_chat_template`` and ``decode``.
    """

    chat_template = "shopsim-sandbox-chatml-hermes"

    def apply_chat_template(self, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                            add_generation_prompt: bool = True, tokenize: bool = True, **_: Any) -> Any:
        """The prompt ids (or, with ``tokenize=False``, its text with the special tokens spelled out)."""
        ids = render_prompt(conversation, tools)
        return ids if tokenize else _spell(ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False, **_: Any) -> str:
        """The text of *ids* (special tokens dropped when asked)."""
        return decode(ids) if skip_special_tokens else _spell(ids)


_SPECIAL = {IM_START: "<|im_start|>", IM_END: "<|im_end|>", PAD: "<|pad|>"}


def _spell(ids: list[int]) -> str:
    """The text of *ids* with special tokens spelled out (runs of bytes decoded together)."""
    parts: list[str] = []
    run: list[int] = []
    for token in ids:
        if token in _SPECIAL:
            parts.append(decode(run))
            parts.append(_SPECIAL[token])
            run = []
        else:
            run.append(token)
    parts.append(decode(run))
    return "".join(parts)
