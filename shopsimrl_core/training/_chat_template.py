"""A tokenizer's chat template as the token backends without a server-side template use it.

SGLang's ``/generate`` and in-process generation take token ids, so the prompt is rendered here with the policy's
own tokenizer (``apply_chat_template``, tools included, generation prompt added) and the sampled text is turned
back into an assistant message. The tool-call text format is Hermes's — ``<tool_call>{"name": …, "arguments":
{…}}</tool_call>``, reasoning in ``<think>…</think>`` — the format of the Qwen family and of the ``hermes`` tool
parser vLLM and SGLang ship. No maintained library parses it outside those servers (each keeps its parser inside
its own serving stack), so the few lines it takes live here; an answer they do not parse stays text, and the
evaluation's ``validate_completion`` then judges it exactly as it would judge a server's answer.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from shopsimrl_core._errors import ConfigError

__all__ = ["ChatTemplate", "TokenizerLike", "completion_body", "parse_assistant_text"]

_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class TokenizerLike(Protocol):
    """The part of a ``transformers`` tokenizer a chat template needs."""

    chat_template: Any

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def decode(self, token_ids: Any, **kwargs: Any) -> str: ...


def parse_assistant_text(text: str, call_prefix: str) -> dict[str, Any]:
    """The assistant message a sampled text stands for: ``{role, content, reasoning_content, tool_calls}``.

    Every ``<tool_call>`` block whose body is a JSON object with a string ``name`` becomes a tool call (its
    ``arguments`` re-encoded as JSON text); a block that does not parse stays in the content, so the
    evaluation's checks see a mixed or malformed answer as such. Call ids are ``<call_prefix>-<n>``.
    """
    reasoning: str | None = None
    match = _THINK.match(text)
    if match:
        reasoning, text = match.group(1).strip(), text[match.end():]
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    cursor = 0
    for block in _CALL.finditer(text):
        try:
            body = json.loads(block.group(1))
        except ValueError:
            body = None
        if not (isinstance(body, dict) and isinstance(body.get("name"), str)):
            continue  # left in the text
        arguments = body.get("arguments", {})
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        kept.append(text[cursor:block.start()])
        cursor = block.end()
        calls.append({"id": f"{call_prefix}-{len(calls)}", "type": "function",
                      "function": {"name": body["name"], "arguments": raw}})
    kept.append(text[cursor:])
    content = "".join(kept).strip()
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return message


class ChatTemplate:
    """Render conversations to prompt ids and sampled ids back to assistant messages, with one tokenizer.

    Raises (at construction):
        ConfigError (``tokenizer-no-chat-template``): the tokenizer has no chat template.
        ConfigError (``chat-template-no-tools``): the template drops the tools it is given.
    """

    def __init__(self, tokenizer: TokenizerLike, *, source: str = "tokenizer", check_tools: bool = True) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError(f"{source}: the tokenizer has no chat template; exact-token training renders the "
                              "prompt with it — load a chat (instruct) tokenizer or set tokenizer.chat_template",
                              code="tokenizer-no-chat-template")
        self.tokenizer = tokenizer
        self.source = source
        if check_tools:
            probe_tool = {"type": "function", "function": {
                "name": "shopsimrl_probe_tool", "description": "probe",
                "parameters": {"type": "object", "properties": {}, "required": []}}}
            rendered = self.render_text([{"role": "user", "content": "hi"}], [probe_tool])
            if "shopsimrl_probe_tool" not in rendered:
                raise ConfigError(f"{source}: the chat template ignores the tools it is given, so the policy "
                                  "would never see the search/click tools; use a template with tool support "
                                  "(e.g. a Hermes/Qwen-style template)", code="chat-template-no-tools")

    def render_text(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        """The rendered prompt as text (generation prompt added)."""
        text = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        return str(text)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """The prompt token ids the engine generates from (generation prompt added)."""
        ids = self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys") and "input_ids" in ids:  # newer tokenizers may answer with an encoding
            ids = ids["input_ids"]
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        return [int(t) for t in ids]

    def decode(self, ids: list[int]) -> str:
        """The sampled text without special tokens (what the parser reads)."""
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def parse(self, ids: list[int], call_prefix: str) -> dict[str, Any]:
        """The assistant message the sampled ids stand for (see :func:`parse_assistant_text`)."""
        return parse_assistant_text(self.decode(ids), call_prefix)


def completion_body(message: dict[str, Any], finish_reason: str | None, *, response_id: str, prompt_tokens: int,
                    completion_tokens: int) -> dict[str, Any]:
    """An OpenAI chat-completion body around *message*, as a server with a Hermes tool parser would answer."""
    finish = finish_reason
    if message.get("tool_calls") and finish == "stop":
        finish = "tool_calls"
    return {
        "id": response_id,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
