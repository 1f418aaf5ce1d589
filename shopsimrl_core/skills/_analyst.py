"""The analyst-model candidate provider: an OpenAI-compatible model proposes skill chunks.

One structured call per failure group. The model sees the failure label, compact and
identifier-redacted step excerpts of failing episodes and of contrasting successes, and must call
``submit_skill_chunk`` exactly once. Outputs are validated (chunk fields, firewall) and repaired as
runtime-semantics §18.2 step 7 prescribes: up to ``max_attempts`` calls, each retry resending the original
messages plus ONE user message holding compact JSON
``{"structured_output_repair": {contract_error, previous_invalid_arguments, previous_tool_calls,
instruction}}``.

The prompt texts are this project's wording; their version and hash are part of the provider
identity, so candidates always say which prompt produced them. Calls go through the evaluator's
``ChatModelClient`` (one client, one retry policy); the API key comes only from the environment
variable named by ``api_key_env``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from shopsimrl_core._errors import InferenceError, SkillError
from shopsimrl_core._hashing import fingerprint, json_object
from shopsimrl_core.adapters._auth import EndpointAuth
from shopsimrl_core.skills._candidates import FailureGroup, render_chunk, validate_chunk
from shopsimrl_core.skills._firewall import FirewallContext, check_text, context_from_traces, redact_identifiers

__all__ = ["AnalystCandidateProvider", "ANALYST_PROMPT_VERSION", "ANALYST_SYSTEM_PROMPT", "SUBMIT_TOOL",
           "REPAIR_INSTRUCTION", "compact_steps"]

ANALYST_PROMPT_VERSION = "shopsimrl-skill-analyst-v1"

ANALYST_SYSTEM_PROMPT = (
    "You analyse episodes of an LLM shopping agent in a simulated Chinese online shop. You receive one "
    "failure label, excerpts of failing episodes carrying it and excerpts of successful episodes in a similar "
    "situation. Write ONE short, general procedural skill that would have prevented the failure in future "
    "tasks. The skill is shown to the agent in its system prompt, so write it in Chinese, address the agent, "
    "and describe observable triggers and checks. Never copy product ids, product titles, brand names, option "
    "values, prices or task numbers from the excerpts: the skill must hold for every other task. Reply only "
    "by calling submit_skill_chunk once."
)

SUBMIT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "submit_skill_chunk",
        "description": "Submit one procedural skill chunk for the failure label.",
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1},
                "workflow_stage": {"type": "string", "minLength": 1},
                "applicable_when": {"type": "string", "minLength": 1},
                "procedure": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1,
                              "maxItems": 8},
                "verification": {"type": "string", "minLength": 1},
                "common_failure": {"type": "string", "minLength": 1},
            },
            "required": ["title", "workflow_stage", "applicable_when", "procedure", "verification", "common_failure"],
            "additionalProperties": False,
        },
    },
}

REPAIR_INSTRUCTION = (
    "Correct the previous output, then call submit_skill_chunk exactly once with schema-valid arguments and "
    "no prose. Preserve valid content, but resolve the stated contract violation exactly."
)

_FIELDS = ("title", "workflow_stage", "applicable_when", "procedure", "verification", "common_failure")


def compact_steps(
    record: dict[str, Any], steps: list[int] | None, *, window: int = 1, limit: int = 8
) -> list[dict[str, Any]]:
    """Compact, redacted excerpts of a trace around the given step indexes (all steps when None)."""
    by_index = {s.get("step_index"): s for s in record.get("steps") or [] if isinstance(s, dict)}
    wanted: list[int] = []
    for i in steps or sorted(k for k in by_index if isinstance(k, int)):
        if i is None:
            continue
        for j in range(i - window, i + window + 1):
            if j in by_index and j not in wanted:
                wanted.append(j)
    out = []
    for j in sorted(wanted)[:limit]:
        step = by_index[j]
        env = json_object(step.get("environment"))
        feedback = json_object(env.get("action_feedback"))
        state = json_object(env.get("observation_state"))
        excerpt = {
            "step_index": j,
            "action": redact_identifiers(str(step.get("action"))) if step.get("action") else None,
            "valid": feedback.get("valid"),
            "feedback_reason": feedback.get("reason"),
            "page_after": state.get("page_type"),
            "missing_option_axes": state.get("missing_option_axes"),
            "protocol_error": (step.get("protocol_error") or {}).get("code")
            if isinstance(step.get("protocol_error"), dict)
            else None,
        }
        out.append({k: v for k, v in excerpt.items() if v is not None})
    return out


class AnalystCandidateProvider:
    """``CandidateProvider`` backed by an OpenAI-compatible chat-completions endpoint."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        auth: EndpointAuth | None = None,
        timeout: float = 300.0,
        max_attempts: int = 3,
        max_retries: int = 3,
        retry_backoff_seconds: float = 1.0,
        temperature: float = 0.0,
        max_tokens: int = 4096,
        tool_choice: str = "required",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.auth = auth if auth is not None else EndpointAuth(api_key_env)
        self.api_key_env = self.auth.api_key_env
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.max_retries = max_retries
        self.retry_backoff_seconds = retry_backoff_seconds
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.tool_choice = tool_choice
        self._transport = transport
        self._traces: dict[str, dict[str, Any]] = {}
        self._firewall: FirewallContext | None = None
        self.calls = 0
        self.identity: dict[str, Any] = {
            "provider": "analyst_model",
            "model": model,
            "base_url": self.base_url,
            "prompt_version": ANALYST_PROMPT_VERSION,
            "prompt_sha256": fingerprint(
                {"system": ANALYST_SYSTEM_PROMPT, "tool": SUBMIT_TOOL, "repair": REPAIR_INSTRUCTION}
            ),
            "sampling": {"temperature": temperature, "max_tokens": max_tokens, "tool_choice": tool_choice},
            "max_attempts": max_attempts,
        }

    def attach_traces(self, traces: dict[str, dict[str, Any]]) -> None:
        """Give the provider the source traces (for excerpts) and build its firewall context."""
        self._traces = traces
        self._firewall = context_from_traces(traces.values())

    # ------------------------------------------------------------------ prompt
    def messages_for(self, group: FailureGroup) -> list[dict[str, Any]]:
        """The original messages of one group's call (system + one user message of compact JSON)."""

        def excerpt(items: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
            out = []
            for n, item in enumerate(items, start=1):
                record = self._traces.get(item["episode_id"])
                out.append(
                    {"example": f"{role}-{n}", "steps": compact_steps(record, item.get("steps")) if record else []}
                )
            return out

        payload = {
            "failure_label": group.label,
            "episodes_with_label": group.support,
            "failing_examples": excerpt(group.failures, "failure"),
            "contrasting_successes": excerpt(group.contrasts, "success"),
        }
        return [
            {"role": "system", "content": ANALYST_SYSTEM_PROMPT},
            {"role": "user", "content": json.dumps(payload, ensure_ascii=False, separators=(",", ":"))},
        ]

    # ------------------------------------------------------------------ calls
    def _client(self) -> Any:
        from shopsimrl_core.adapters import ChatModelClient

        # The evaluator's client and retry policy (runtime-semantics §7.2): retryable statuses and
        # transport errors back off and retry up to max_retries attempts; the key is read by it.
        return ChatModelClient(
            base_url=self.base_url,
            model=self.model,
            auth=self.auth,
            timeout=self.timeout,
            max_retries=self.max_retries,
            retry_backoff_seconds=self.retry_backoff_seconds,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            send_seed=False,
            tool_choice=self.tool_choice,
            trust_env=False,
            max_connections=1,
            transport=self._transport,
            http_transport="httpx",
        )

    def _post(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        async def call() -> Any:
            async with self._client() as client:
                return await client.complete(messages, [SUBMIT_TOOL], seed=None)

        output = _run_sync(call)
        if not isinstance(output.body, dict):
            raise InferenceError(f"analyst: response from {self.base_url} is not a JSON object")
        return output.body

    def _contract_error(self, message: dict[str, Any]) -> tuple[str | None, Any, list[Any], dict[str, Any] | None]:
        calls = message.get("tool_calls") or []
        if not isinstance(calls, list) or len(calls) != 1:
            return (
                f"expected exactly one submit_skill_chunk call, got {len(calls) if isinstance(calls, list) else 0}",
                None,
                calls,
                None,
            )
        function = (calls[0] or {}).get("function") or {}
        if function.get("name") != "submit_skill_chunk":
            return (
                f"called {function.get('name')!r} instead of submit_skill_chunk",
                function.get("arguments"),
                calls,
                None,
            )
        raw = function.get("arguments")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError as exc:
            return f"arguments are not valid JSON: {exc}", raw, calls, None
        if not isinstance(args, dict):
            return "arguments must be a JSON object", raw, calls, None
        unknown = sorted(set(args) - set(_FIELDS))
        if unknown:
            return f"unknown argument keys {unknown}", args, calls, None
        problem = validate_chunk(args)
        if problem:
            return problem, args, calls, None
        findings = check_text(render_chunk(args), self._firewall)
        if findings:
            return (
                (
                    "leakage firewall: "
                    + ", ".join(f"{f.code} ({f.match})" for f in findings)
                    + "; remove instance data"
                ),
                args,
                calls,
                None,
            )
        return None, args, calls, args

    def propose(self, group: FailureGroup) -> list[dict[str, Any]]:
        """One chunk for *group* after at most ``max_attempts`` validated calls.

        Raises:
            SkillError (``analyst-invalid-output``): still invalid after the last attempt (the
                caller keeps it as a rejected candidate with this reason).
            InferenceError: the endpoint failed after its HTTP retries.
        """
        original = self.messages_for(group)
        messages = list(original)
        error = "no attempt"
        calls: list[Any]
        for _ in range(self.max_attempts):
            self.calls += 1
            response = self._post(messages)
            choices = response.get("choices")
            message = (choices[0] or {}).get("message") if isinstance(choices, list) and choices else None
            if not isinstance(message, dict):
                error, args, calls = "response has no message", None, []
                chunk = None
            else:
                problem, args, calls, chunk = self._contract_error(message)
                if chunk is not None:
                    return [{k: chunk[k] for k in _FIELDS}]
                error = problem or "invalid output"
            repair = {
                "structured_output_repair": {
                    "contract_error": error,
                    "previous_invalid_arguments": args,
                    "previous_tool_calls": calls,
                    "instruction": REPAIR_INSTRUCTION,
                }
            }
            messages = list(original) + [
                {"role": "user", "content": json.dumps(repair, ensure_ascii=False, separators=(",", ":"))}
            ]
        raise SkillError(
            f"analyst output for {group.label} still invalid after {self.max_attempts} attempts: {error}",
            code="analyst-invalid-output",
        )


_T = TypeVar("_T")


def _run_sync(make: Callable[[], Awaitable[_T]]) -> _T:
    # The provider is synchronous (candidate mining is); the client is async. Inside a running loop
    # (a notebook, an async caller) asyncio.run is refused, so the call runs on a worker thread.
    async def main() -> _T:
        return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, main()).result()
