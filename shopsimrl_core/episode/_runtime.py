"""One episode as an async state machine (runtime-semantics §9) producing one ``shopsimrl-episode-v4`` record.

reset → skill selection → up to ``max_steps`` model turns (each: dynamic tools, model call, then a
policy failure, a protocol error with repair messages, or one environment action) → terminate if the
environment did not finish → cleanup (lease release). Episode-level failures never raise: they come
back as a ``failed`` record with ``error.stage`` naming where it happened. Cancellation releases the
lease and re-raises.

Every step carries the additive ``timing: {model_ms, env_ms, harness_ms}`` (harness = the step's
wall time minus model and environment time) and ``request_seed`` (the seed actually sent, §22.10).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Protocol

from shopsimrl_core._clock import round_ms
from shopsimrl_core.adapters._conversation import Conversation
from shopsimrl_core.adapters._environment import ShopSimulatorClient, sanitize_payload
from shopsimrl_core.adapters._json import copy_json
from shopsimrl_core.adapters._validation import ModelOutput
from shopsimrl_core.episode._prompts import PromptSet, repair_feedback_text
from shopsimrl_core.episode._skillbank import SkillProvider
from shopsimrl_core.episode._trace import error_block, new_trace, utc_now
from shopsimrl_core.runs.planning._jobs import EpisodeJob, call_seed

__all__ = ["EpisodeSettings", "run_episode", "canonical_action", "EpisodeError", "DECODED_PARTS"]

#: The keys of a record that :func:`run_episode` builds only from the answers of the adapters'
#: clients (decoded with ``loads_finite``, which refuses NaN and Infinity), strings, and its own
#: timings. With those clients they hold no non-finite float, so the trace line need not be walked
#: for one there (``dumps_line(finite=...)``): that walk was a third of the cost of storing a record.
DECODED_PARTS: tuple[str, ...] = ("reset", "conversation", "steps", "final")


class EpisodeError(RuntimeError):
    """The episode cannot go on (e.g. a page without any usable action); recorded as a failure."""


class _ChatModel(Protocol):
    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, seed: int | None
    ) -> ModelOutput: ...


@dataclass(frozen=True)
class EpisodeSettings:
    """Per-run settings of the episode runtime plus the provenance written into every trace."""

    max_steps: int
    """Model turns per episode, repair turns included (``runtime.max_steps``)."""
    persona: bool
    """Resolved persona flag (sent as ``if_persona``; also part of the environment identity)."""
    model_identity: dict[str, Any]
    """Model identity of §6.3 (trace form, with ``transport``)."""
    environment_identity: dict[str, Any]
    """Environment identity of §6.3 without observed versions; the runtime adds them."""
    prompt_identity: dict[str, Any] | None = None
    """Prompt identity (§10.5); None: taken from the PromptSet."""
    skills_identity: dict[str, Any] | None = None
    """Provider identity (§11.4); None: taken from the provider."""
    runtime: dict[str, Any] | None = None
    """``{max_steps, action_protocol}``; None: built from max_steps and the PromptSet."""
    tool_call_content: str = "null"
    """``content`` of a replayed assistant turn that carries tool calls: ``null`` (``None``), ``empty``
    (``""``) or ``omit`` (no key) — ``model.tool_call_content``; some servers reject ``null``."""


def canonical_action(name: str, arguments: dict[str, Any]) -> tuple[str | None, str | None]:
    """Check a tool call's arguments (§9.5); return ``(action, None)`` or ``(None, error message)``."""
    if name == "search":
        if set(arguments) != {"query"}:
            return None, "search tool requires exactly one query argument"
        query = arguments["query"]
        if not isinstance(query, str) or not query.strip():
            return None, "search query must be a non-empty string"
        return f"search[{query.strip()}]", None
    if name == "click":
        if set(arguments) != {"value"}:
            return None, "click tool requires exactly one value argument"
        value = arguments["value"]
        if not isinstance(value, str) or not value.strip():
            return None, "click value must be a non-empty string"
        return f"click[{value.strip()}]", None
    return None, f"unsupported action tool: {name}"


def _blank(text: str | None) -> bool:
    return text is None or not str(text).strip()


def _assistant_message(output: ModelOutput, tool_call_content: str = "null") -> dict[str, Any]:
    """The assistant turn as replayed to the model: content and calls, never the reasoning.

    A blank content is sent as *tool_call_content* says (``null``: as returned; ``empty``: ``""``;
    ``omit``: no ``content`` key); non-blank content is always sent as it is.
    """
    message: dict[str, Any] = {"role": "assistant", "content": output.content}
    if _blank(output.content) and tool_call_content != "null":
        if tool_call_content == "empty":
            message["content"] = ""
        else:
            del message["content"]
    message["tool_calls"] = [
        {
            "id": call["call_id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": call["raw_arguments"]},
        }
        for call in output.tool_calls
    ]
    return message


def _ms(seconds: float) -> float:
    return round_ms(seconds * 1000.0)


def _valid_actions(state: Any) -> list[str]:
    if not isinstance(state, dict):
        raise EpisodeError("observation_state must be an object")
    actions = state.get("actions")
    if not isinstance(actions, list) or not all(isinstance(a, str) and a for a in actions):
        raise EpisodeError("observation_state.actions must be a list of non-empty strings")
    return actions


async def run_episode(
    job: EpisodeJob,
    *,
    model: _ChatModel,
    env: ShopSimulatorClient,
    prompt: PromptSet,
    skills: SkillProvider,
    settings: EpisodeSettings,
) -> dict[str, Any]:
    """Run one attempt of *job* and return its complete trace record (completed or failed).

    Never raises for episode-level failures (model, environment, protocol or cleanup problems):
    they are recorded in ``error``. The environment lease is always released. On cancellation the
    lease is released and ``asyncio.CancelledError`` propagates.
    """
    started = time.perf_counter()
    environment_provenance = dict(settings.environment_identity)
    environment_provenance["environment_version"] = None
    environment_provenance["observation_version"] = None
    provenance = {
        "model": settings.model_identity,
        "environment": environment_provenance,
        "prompt": settings.prompt_identity if settings.prompt_identity is not None else dict(prompt.identity),
        "skills": settings.skills_identity if settings.skills_identity is not None else skills.identity,
        "runtime": settings.runtime
        if settings.runtime is not None
        else {"max_steps": settings.max_steps, "action_protocol": prompt.action_protocol},
    }
    record = new_trace(job.to_dict(), job.episode_id, provenance, utc_now())
    totals = {"reset_ms": 0.0, "model_ms": 0.0, "env_ms": 0.0, "harness_ms": 0.0, "cleanup_ms": 0.0}
    session = env.session()
    stage = "reset"
    sent_seed = getattr(model, "sent_seed", None)
    try:
        try:
            t = time.perf_counter()
            reset_raw = await session.reset(job.task_id)
            totals["reset_ms"] = _ms(time.perf_counter() - t)
            environment_provenance["environment_version"] = session.environment_version
            environment_provenance["observation_version"] = session.observation_version
            reset = sanitize_payload(reset_raw, reset=True)
            record["reset"] = reset

            stage = "skill_selection"
            context = copy_json(  # skills are user code: they get their own copy of the reset's parts
                {
                    "task_id": job.task_id,
                    "sample_id": job.sample_id,
                    "split": job.split,
                    "task_instruction": reset.get("task_instruction"),
                    "user_persona": reset.get("user_persona"),
                    "observation_state": reset.get("observation_state"),
                    "task_mode": reset.get("task_mode"),
                }
            )
            selected = list(skills.select(context))
            record["selected_skills"] = selected

            # append-only: the model client keeps each message's encoded bytes across requests
            messages: list[dict[str, Any]] = Conversation(
                [
                    {"role": "system", "content": prompt.system_message(reset.get("user_persona"), selected)},
                    {
                        "role": "user",
                        "content": prompt.first_user_message(reset["task_instruction"], reset["observation"]),
                    },
                ]
            )
            record["conversation"] = messages
            observation: str = messages[1]["content"]
            state: Any = reset.get("observation_state")
            final: dict[str, Any] | None = None

            for step_index in range(1, settings.max_steps + 1):
                step_started = time.perf_counter()
                actions = _valid_actions(state)
                tools = prompt.tool_schemas(state.get("search_available") is True, actions)
                if not tools:
                    raise EpisodeError(
                        f"no tool can be offered on page {state.get('page_type')!r}: search unavailable and no actions"
                    )
                tool_names = [tool["function"]["name"] for tool in tools]
                stage = f"model_step_{step_index}"
                seed = call_seed(job.seed, step_index)
                t = time.perf_counter()
                output = await model.complete(messages, tools, seed=seed)
                model_ms = _ms(time.perf_counter() - t)
                env_ms = 0.0
                request_seed = sent_seed(seed) if callable(sent_seed) else seed

                if output.policy_failure is not None:
                    if output.policy_failure.get("code") != "generation_length":
                        raise EpisodeError(f"unknown policy failure code {output.policy_failure.get('code')!r}")
                    step: dict[str, Any] = {
                        "step_index": step_index,
                        "observation": observation,
                        "tools": tools,
                        "model": output.to_dict(),
                        "policy_failure": dict(output.policy_failure),
                        "action": None,
                        "environment": None,
                    }
                    stage = f"policy_termination_step_{step_index}"
                    t = time.perf_counter()
                    result = await session.terminate("generation_length")
                    env_ms = _ms(time.perf_counter() - t)
                    final = sanitize_payload(result)
                    _finish_step(step, request_seed, model_ms, env_ms, step_started, totals)
                    record["steps"].append(step)
                    break

                action: str | None = None
                if output.protocol_error is None:
                    count = len(output.tool_calls)
                    if count != 1:
                        output.reject("tool_call_count", f"model must return exactly one tool call, got {count}")
                    elif not _blank(output.content):
                        output.reject(
                            "mixed_content", "model must not mix natural-language content with an action tool call"
                        )
                    else:
                        call = output.tool_calls[0]
                        action, problem = canonical_action(call["name"], call["arguments"])
                        if problem is not None:
                            output.reject("invalid_tool_arguments", problem)

                if output.protocol_error is not None:
                    error = dict(output.protocol_error)
                    feedback = prompt.repair_feedback(error["code"], error["message"], tool_names)
                    text = repair_feedback_text(feedback)
                    if output.tool_calls:
                        messages.append(_assistant_message(output, settings.tool_call_content))
                        for call in output.tool_calls:
                            messages.append({"role": "tool", "tool_call_id": call["call_id"], "content": text})
                    else:
                        if not _blank(output.content):
                            messages.append({"role": "assistant", "content": output.content})
                        messages.append({"role": "user", "content": text})
                    step = {
                        "step_index": step_index,
                        "observation": observation,
                        "tools": tools,
                        "model": output.to_dict(),
                        "protocol_error": error,
                        "protocol_feedback": feedback,
                        "action": None,
                        "environment": None,
                    }
                    _finish_step(step, request_seed, model_ms, env_ms, step_started, totals)
                    record["steps"].append(step)
                    continue

                assert action is not None
                call = output.tool_calls[0]
                messages.append(_assistant_message(output, settings.tool_call_content))
                stage = f"environment_step_{step_index}"
                t = time.perf_counter()
                result = await session.interact(action)
                env_ms = _ms(time.perf_counter() - t)
                messages.append({"role": "tool", "tool_call_id": call["call_id"], "content": result["observation"]})
                environment = sanitize_payload(result)
                step = {
                    "step_index": step_index,
                    "observation": observation,
                    "tools": tools,
                    "model": output.to_dict(),
                    "action": action,
                    "environment": environment,
                }
                _finish_step(step, request_seed, model_ms, env_ms, step_started, totals)
                record["steps"].append(step)
                if result.get("done") is True:
                    final = copy_json(environment)
                    break
                observation = result["observation"]
                state = result["observation_state"]

            if final is None:
                stage = "action_limit_termination"
                t = time.perf_counter()
                result = await session.terminate("action_limit")
                totals["env_ms"] += _ms(time.perf_counter() - t)
                final = sanitize_payload(result)
            record["final"] = final
            if final.get("done") is not True:
                raise EpisodeError("episode did not reach a terminal environment state")
            record["status"] = "completed"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every episode-level failure becomes a failed record
            record["status"] = "failed"
            record["error"] = error_block(stage, exc)
    finally:
        t = time.perf_counter()
        cleanup_errors: list[str] = []
        try:
            await session.close()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            cleanup_errors.append(f"environment.close: {type(exc).__name__}: {exc}")
        # the model client is shared by the whole run (one pool per endpoint): nothing to close here
        totals["cleanup_ms"] = _ms(time.perf_counter() - t)
        if cleanup_errors:
            if record["error"] is None:
                record["error"] = {"stage": "cleanup", "type": "CleanupError", "message": "; ".join(cleanup_errors)}
            else:
                record["error"]["cleanup_errors"] = cleanup_errors
        if isinstance(record.get("conversation"), Conversation):
            record["conversation"] = list(record["conversation"])  # the record holds plain JSON data only
        record["ended_at"] = utc_now()
        record["duration_ms"] = _ms(time.perf_counter() - started)
        record["timing"] = totals
    return record


def _finish_step(
    step: dict[str, Any],
    request_seed: int | None,
    model_ms: float,
    env_ms: float,
    step_started: float,
    totals: dict[str, float],
) -> None:
    """Add the additive per-step keys and accumulate the episode totals."""
    wall = _ms(time.perf_counter() - step_started)
    harness_ms = round_ms(max(wall - model_ms - env_ms, 0.0))
    step["request_seed"] = request_seed
    step["timing"] = {"model_ms": model_ms, "env_ms": env_ms, "harness_ms": harness_ms}
    totals["model_ms"] = round_ms(totals["model_ms"] + model_ms)
    totals["env_ms"] = round_ms(totals["env_ms"] + env_ms)
    totals["harness_ms"] = round_ms(totals["harness_ms"] + harness_ms)
