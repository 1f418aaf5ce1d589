"""Exporters: redacted trace exports for sharing, and an SFT dataset of successful episodes.

Raw run directories hold the model's reasoning and the private goal (runtime-semantics §22.7), so they
stay private. ``export_traces`` writes a copy with a redaction profile applied; ``export_sft``
writes chat-format training records (runtime-semantics §22.8). Both write atomically (temporary file, then
rename), so a failed export leaves nothing behind.

Profiles (``removed`` paths are recorded in each exported record's ``redaction`` block):

    full             nothing (private use only)
    no_reasoning     steps[].model.reasoning and steps[].model.raw_response -> null
    no_private_goal  final.goal and steps[].environment.goal -> {}
    no_persona       reset.user_persona -> {}, the persona section of the system message,
                     user_persona inside any goal -> {}
    public           the union of the three above
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ConfigError
from shopsimrl_core._hashing import json_object, read_json_file, write_text_atomic
from shopsimrl_core._versions import SFT_SCHEMA, TRACE_SCHEMA
from shopsimrl_core.analysis._labels import iter_latest_records
from shopsimrl_core.episode._trace import is_complete

__all__ = [
    "PROFILES",
    "ExportResult",
    "redact_record",
    "export_traces",
    "sft_record",
    "export_sft",
]

PERSONA_HEADER = "用户个人文档：\n"

PROFILES: dict[str, tuple[str, ...]] = {
    "full": (),
    "no_reasoning": ("no_reasoning",),
    "no_private_goal": ("no_private_goal",),
    "no_persona": ("no_persona",),
    "public": ("no_reasoning", "no_private_goal", "no_persona"),
}


def _strip_persona_section(content: str) -> tuple[str, bool]:
    # The persona section is "\n\n" + header + one JSON line (runtime-semantics §10.1); remove exactly that.
    start = content.find("\n\n" + PERSONA_HEADER)
    if start < 0:
        if content.startswith(PERSONA_HEADER):
            start, lead = 0, 0
        else:
            return content, False
    else:
        lead = 2
    body_start = start + lead + len(PERSONA_HEADER)
    end = content.find("\n", body_start)
    end = len(content) if end < 0 else end
    return content[:start] + content[end:], True


def redact_record(record: dict[str, Any], profile: str) -> dict[str, Any]:
    """Return a redacted deep copy of one trace record with a ``redaction`` block added.

    The result keeps ``schema_version`` v4 and every key; redacted values become ``null`` or ``{}``
    as the profile table says, so readers of the trace schema still parse it.

    Raises:
        ConfigError: unknown profile (the valid ones are listed).
    """
    if profile not in PROFILES:
        raise ConfigError(f"export: --profile: unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    out = copy.deepcopy(record)
    removed: list[str] = []

    def note(path: str) -> None:
        if path not in removed:
            removed.append(path)

    parts = PROFILES[profile]
    steps = [s for s in out.get("steps") or [] if isinstance(s, dict)]
    final = out.get("final") if isinstance(out.get("final"), dict) else None
    if "no_reasoning" in parts:
        for step in steps:
            model = step.get("model")
            if isinstance(model, dict):
                for key in ("reasoning", "raw_response"):
                    if model.get(key) is not None:
                        note(f"steps[].model.{key}")
                    model[key] = None
        for message in out.get("conversation") or []:
            # a conversation never replays reasoning (§22.12), but drop it if some producer put it there
            if isinstance(message, dict) and message.pop("reasoning_content", None) is not None:
                note("conversation[].reasoning_content")
    if "no_private_goal" in parts:
        if final is not None and "goal" in final:
            if final["goal"]:
                note("final.goal")
            final["goal"] = {}
        for step in steps:
            env = step.get("environment")
            if isinstance(env, dict) and "goal" in env:
                if env["goal"]:
                    note("steps[].environment.goal")
                env["goal"] = {}
    if "no_persona" in parts:
        reset = out.get("reset")
        if isinstance(reset, dict) and "user_persona" in reset:
            if reset["user_persona"]:
                note("reset.user_persona")
            reset["user_persona"] = {}
        for message in out.get("conversation") or []:
            if (
                isinstance(message, dict)
                and message.get("role") == "system"
                and isinstance(message.get("content"), str)
            ):
                message["content"], changed = _strip_persona_section(message["content"])
                if changed:
                    note("conversation[system].persona_section")
        goals = [final.get("goal")] if final is not None else []
        goals += [s["environment"].get("goal") for s in steps if isinstance(s.get("environment"), dict)]
        for goal in goals:
            if isinstance(goal, dict) and "user_persona" in goal:
                if goal["user_persona"]:
                    note("goal.user_persona")
                goal["user_persona"] = {}
    out["redaction"] = {"profile": profile, "removed": removed}
    return out


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote."""

    path: Path
    records: int
    skipped: int


def _write_jsonl_atomic(path: Path, lines: Iterable[dict[str, Any]]) -> int:
    count = 0

    def encoded() -> Iterator[str]:
        nonlocal count
        for line in lines:
            yield json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n"
            count += 1

    write_text_atomic(path, encoded())
    return count


def _check_output(out_path: Path) -> None:
    if out_path.name == "traces.jsonl":
        raise ConfigError(
            f"{out_path}: an export must not be named traces.jsonl (it would look like a resumable run); "
            "choose another file name"
        )


def export_traces(
    run_dir: str | Path, out_path: str | Path, *, profile: str = "public", all_attempts: bool = False
) -> ExportResult:
    """Write the run's latest records (or every attempt) with *profile* applied to *out_path*.

    Raises:
        ConfigError: unknown profile, or an output named ``traces.jsonl``.
        TraceFormatError: the run has no traces file.
    """
    out = Path(out_path)
    _check_output(out)
    if profile not in PROFILES:
        redact_record({}, profile)  # raises the one-line error listing the profiles
    traces = Path(run_dir) / "traces.jsonl"
    if all_attempts:
        from shopsimrl_core.runs.storage._store import RunStore

        records: Iterable[dict[str, Any]] = RunStore(run_dir).iter_records()
    else:
        records = iter_latest_records(traces)
    count = _write_jsonl_atomic(out, (redact_record(r, profile) for r in records))
    return ExportResult(path=out, records=count, skipped=0)


def _guarded(record: dict[str, Any], manifest: dict[str, Any] | None) -> bool:
    split = (record.get("job") or {}).get("split")
    role = (((manifest or {}).get("plan") or {}).get("task_split") or {}).get("role")
    # New plans carry no split role; every guarded run's manifest records its test-access opt-in (§22.6).
    return split == "test" or role == "test" or bool((manifest or {}).get("test_access"))


def _read_manifest(path: Path) -> dict[str, Any]:
    # The read boundary of a run's manifest: a one-line error naming the file and field.
    from shopsimrl_core.documents._runs import RunManifest

    value = read_json_file(path, "run manifest", fix="export a complete run directory")
    return RunManifest.parse(value, str(path)).to_json()


def _assistant_steps(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    # Which steps appended an assistant message (runtime-semantics §9.1, §9.4): valid calls always; protocol
    # errors when they parsed a call or carried content; policy failures never.
    out = []
    for step in steps:
        model = json_object(step.get("model"))
        if isinstance(step.get("policy_failure"), dict):
            continue
        if isinstance(step.get("environment"), dict):
            out.append(step)
        elif isinstance(step.get("protocol_error"), dict):
            content = model.get("content")
            if model.get("tool_calls") or (isinstance(content, str) and content.strip()):
                out.append(step)
    return out


def sft_record(record: dict[str, Any], *, plan_fingerprint: str | None, with_reasoning: bool = False) -> dict[str, Any]:
    """Build one ``shopsimrl-sft-v1`` record from a trace: messages as sent, tools per assistant turn.

    The private goal is never included: messages are the conversation the model saw, and metadata
    holds only reward numbers and identities.
    """
    messages = copy.deepcopy(record.get("conversation") or [])
    steps = [s for s in record.get("steps") or [] if isinstance(s, dict)]
    turns = _assistant_steps(steps)
    assistants = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    tools_per_turn = [step.get("tools") or [] for step in turns]
    if with_reasoning:
        for message, step in zip(assistants, turns):
            reasoning = (step.get("model") or {}).get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                message["reasoning_content"] = reasoning
    for message in messages:
        if not with_reasoning and isinstance(message, dict):
            message.pop("reasoning_content", None)
    final = record.get("final") or {}
    detail = final.get("reward_detail") or {}
    provenance = record.get("provenance") or {}
    return {
        "schema_version": SFT_SCHEMA,
        "episode_id": record.get("episode_id"),
        "job": record.get("job"),
        "plan_fingerprint": plan_fingerprint,
        "messages": messages,
        "tools_per_turn": tools_per_turn,
        "metadata": {
            "reward": final.get("reward"),
            "r_success": detail.get("r_success"),
            "model": provenance.get("model"),
            "prompt": provenance.get("prompt"),
            "skills": provenance.get("skills"),
            "with_reasoning": with_reasoning,
        },
    }


def export_sft(
    run_dirs: Sequence[str | Path],
    out_path: str | Path,
    *,
    with_reasoning: bool = False,
    allow_protocol_errors: bool = False,
    min_r_success: int = 1,
) -> ExportResult:
    """Write SFT records for the completed, successful episodes of one or more runs.

    Default filter (runtime-semantics §22.8): latest records that are complete, ``r_success == 1``, on
    non-guarded splits, with no protocol-error or policy-failure steps. ``allow_protocol_errors``
    keeps episodes with repaired protocol errors; ``min_r_success=0`` keeps every completed one.

    Raises:
        ConfigError: an output named ``traces.jsonl``.
        TraceFormatError: a run without a traces file.
    """
    out = Path(out_path)
    _check_output(out)
    skipped = 0

    def rows() -> Iterable[dict[str, Any]]:
        nonlocal skipped
        for run_dir in run_dirs:
            manifest_path = Path(run_dir) / "manifest.json"
            manifest = _read_manifest(manifest_path) if manifest_path.is_file() else None
            fp = (manifest or {}).get("plan_fingerprint")
            for record in iter_latest_records(Path(run_dir) / "traces.jsonl"):
                detail = (record.get("final") or {}).get("reward_detail") or {}
                steps = [s for s in record.get("steps") or [] if isinstance(s, dict)]
                bad_turns = any(isinstance(s.get("policy_failure"), dict) for s in steps) or (
                    not allow_protocol_errors and any(isinstance(s.get("protocol_error"), dict) for s in steps)
                )
                r_success = detail.get("r_success")
                if (
                    record.get("schema_version") != TRACE_SCHEMA
                    or not is_complete(record)
                    or _guarded(record, manifest)
                    or bad_turns
                    or not isinstance(r_success, (int, float))
                    or r_success < min_r_success
                ):
                    skipped += 1
                    continue
                yield sft_record(record, plan_fingerprint=fp, with_reasoning=with_reasoning)

    count = _write_jsonl_atomic(out, rows())
    return ExportResult(path=out, records=count, skipped=skipped)
