"""Structured model calls: one tool call per answer, checked, with a bounded repair loop.

runtime-semantics §18.2 step 7: a structured call gets ``max_attempts`` attempts (3; 5 for the
compiler). Each retry resends the ORIGINAL messages plus exactly one user message holding compact
JSON ``{"structured_output_repair": {contract_error, previous_invalid_arguments,
previous_tool_calls, instruction}}`` — only the latest invalid draft is kept, so a long repair
chain never grows the prompt.

``AnalystModel`` is the one place the analysts, the compiler and the offline judge talk to a
model: it wraps the evaluator's ``ChatModelClient`` (same retry policy, key only from the
environment variable named by ``api_key_env``) and returns the raw assistant message, because the
checks here need the arguments exactly as the model wrote them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shopsimrl_core._errors import InferenceError, SkillError
from shopsimrl_core._hashing import fingerprint
from shopsimrl_core.adapters._auth import EndpointAuth

__all__ = ["AnalystModel", "StructuredResult", "StructuredOutputError", "structured_call", "repair_instruction",
           "compact"]


def compact(value: Any) -> str:
    """Compact JSON as sent in prompts (non-ASCII literal, insertion order kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def repair_instruction(tool_names: Sequence[str]) -> str:
    """The repair instruction of §18.2 step 7 for the tool(s) offered in the call."""
    names = list(tool_names)
    target = names[0] if len(names) == 1 else "exactly one of " + ", ".join(names) + ","
    verb = f"call {target} exactly once" if len(names) == 1 else f"call {target} once"
    return (f"Correct the previous output, then {verb} with schema-valid arguments and no prose. "
            "Preserve valid content, but resolve the stated contract violation exactly.")


class StructuredOutputError(SkillError):
    """A structured call stayed invalid after its last attempt (code ``structured-output-invalid``)."""

    def __init__(self, message: str, *, invalid_attempts: list[dict[str, Any]]) -> None:
        super().__init__(message, code="structured-output-invalid")
        self.invalid_attempts = invalid_attempts


@dataclass
class StructuredResult:
    """A valid structured answer: the tool called, its parsed arguments, and what it took."""

    name: str
    arguments: dict[str, Any]
    attempts: int
    invalid_attempts: list[dict[str, Any]] = field(default_factory=list)
    call_id: str | None = None
    raw_arguments: Any = None
    """The arguments exactly as the model sent them (a JSON string from OpenAI-compatible servers)."""


@dataclass
class AnalystModel:
    """An OpenAI-compatible analyst endpoint (the ``analyst_model`` block of §18.1).

    Defaults follow the spec: ``max_tokens`` 4096, ``timeout`` 300, ``tool_choice: "required"``.
    ``calls`` counts HTTP-level completions made (tests and resume checks read it).
    """

    base_url: str
    model: str
    api_key_env: str | None = None
    auth: EndpointAuth | None = None
    """Wins over ``api_key_env`` when set (``_Model.auth()`` of the config block)."""
    timeout: float = 300.0
    max_tokens: int = 4096
    temperature: float = 0.0
    tool_choice: str = "required"
    max_retries: int = 3
    retry_backoff_seconds: float = 1.0
    transport: Any = None
    identity_name: str | None = None
    """A stable name for this analyst in :attr:`identity` (and so in every cache key), in place of
    ``base_url``: for an endpoint whose URL changes between runs while the model it serves does not
    (the demo's sandbox analyst on a free port). None keeps ``base_url`` in the identity."""
    calls: int = field(default=0, init=False)
    _client: Any = field(default=None, init=False, repr=False)

    @property
    def identity(self) -> dict[str, Any]:
        """What a reader needs to know which model produced an output (no secrets).

        The analysis caches key on it: with ``identity_name`` set, the endpoint's URL is not part of it,
        so a rerun against the same model on another port reuses every answer.
        """
        where = {"identity": self.identity_name} if self.identity_name else {"base_url": self.base_url.rstrip("/")}
        return {"provider": "openai_compatible_http", **where, "model": self.model,
                "sampling": {"temperature": self.temperature, "max_tokens": self.max_tokens,
                             "tool_choice": self.tool_choice}}

    async def __aenter__(self) -> AnalystModel:
        from shopsimrl_core.adapters import ChatModelClient

        self._client = ChatModelClient(
            base_url=self.base_url, model=self.model, api_key_env=self.api_key_env, auth=self.auth,
            timeout=self.timeout,
            max_retries=self.max_retries, retry_backoff_seconds=self.retry_backoff_seconds,
            temperature=self.temperature, max_tokens=self.max_tokens, send_seed=False, tool_choice=self.tool_choice,
            trust_env=False, max_connections=8, transport=self.transport, http_transport="httpx")
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._client is not None:
            await self._client.__aexit__(*exc)
            self._client = None

    async def message(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        """One completion; the assistant message as received (None when the body has none).

        Raises:
            InferenceError: the endpoint failed after its HTTP retries, or no client is open.
        """
        if self._client is None:
            raise InferenceError("analyst model used outside 'async with'")
        self.calls += 1
        output = await self._client.complete(messages, tools, seed=None)
        body = output.body
        if not isinstance(body, dict):
            return None
        choices = body.get("choices")
        message = (choices[0] or {}).get("message") if isinstance(choices, list) and choices else None
        return message if isinstance(message, dict) else None


Validator = Callable[[str, dict[str, Any]], "str | None"]


def _parse(message: dict[str, Any] | None, offered: Sequence[str]) -> tuple[str | None, Any, list[Any], Any]:
    """``(error, raw_arguments, tool_calls, (name, args, call_id, raw_arguments))`` of one assistant message."""
    if message is None:
        return "response has no assistant message", None, [], None
    calls = message.get("tool_calls")
    calls = calls if isinstance(calls, list) else []
    if len(calls) != 1:
        return f"expected exactly one tool call ({', '.join(offered)}), got {len(calls)}", None, calls, None
    content = message.get("content")
    if isinstance(content, str) and content.strip():
        return "the answer mixes prose with the tool call; send the call only", None, calls, None
    call = calls[0] if isinstance(calls[0], dict) else {}
    function: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
    name, raw = function.get("name"), function.get("arguments")
    if name not in offered:
        return f"called {name!r}; offered tools are {list(offered)}", raw, calls, None
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        return f"arguments are not valid JSON: {exc}", raw, calls, None
    if not isinstance(args, dict):
        return "arguments must be a JSON object", raw, calls, None
    return None, args, calls, (name, args, call.get("id"), raw)


async def structured_call(
    model: AnalystModel,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    validate: Validator,
    max_attempts: int = 3,
    what: str = "structured call",
) -> StructuredResult:
    """Call *model* until one answer is a single valid call of an offered tool; at most *max_attempts*.

    *validate* gets ``(tool_name, arguments)`` and returns the contract violation in one line, or
    None. Invalid answers are kept in ``invalid_attempts`` (``{attempt, contract_error, arguments}``).

    Raises:
        StructuredOutputError: still invalid after the last attempt; carries the invalid attempts.
        InferenceError: the endpoint failed after its HTTP retries.
    """
    offered = [t["function"]["name"] for t in tools]
    original = list(messages)
    current = list(original)
    invalid: list[dict[str, Any]] = []
    error: str | None = "no attempt"
    for attempt in range(1, max_attempts + 1):
        message = await model.message(current, tools)
        error, raw, calls, parsed = _parse(message, offered)
        if parsed is not None:
            name, args, call_id, sent = parsed
            error = validate(name, args)
            if error is None:
                return StructuredResult(name, args, attempt, invalid, call_id, sent)
            raw = args
        invalid.append({"attempt": attempt, "contract_error": error, "arguments": raw,
                        "arguments_sha256": fingerprint(raw) if raw is not None else None})
        repair = {"structured_output_repair": {"contract_error": error, "previous_invalid_arguments": raw,
                                               "previous_tool_calls": calls,
                                               "instruction": repair_instruction(offered)}}
        current = original + [{"role": "user", "content": compact(repair)}]
    raise StructuredOutputError(f"{what}: still invalid after {max_attempts} attempts: {error}",
                                invalid_attempts=invalid)
