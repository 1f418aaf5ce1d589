"""The training preflight: what must hold before a trainer allocates GPUs (``shopsimrl training preflight``).

Checked, every problem one line (``<file>: <key>: <problem>; <fix>``), all of them reported at once:

- the curriculum's chunks equal the source SkillBank's enabled skills (ids, versions, texts, estimated effects, in
  order) and every chunk's contribution is positive;
- the evaluation plays a train split of the frozen file (never a guarded one) with personas where the split has
  them, and the environment's ``/healthz`` names versions this client speaks (and persona support when used);
- the task data (``export_slime_tasks``) hold every task id of that split exactly once, nothing else, with the
  curriculum's state where a curriculum is given;
- the token backend answers a probe turn with exact tokens (prompt ids, sampled ids, one finite logprob each);
- the tokenizer (when the backend renders prompts itself) has a chat template that carries the tools.

Nothing is written.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ShopSimRLError

__all__ = ["TrainingPreflight", "training_preflight"]


@dataclass
class TrainingPreflight:
    """What the preflight found: ``problems`` (one line each) and ``checked`` (what passed)."""

    problems: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is wrong."""
        return not self.problems


def _effect(metadata: Any) -> float | None:
    value = (metadata or {}).get("estimated_effect") if isinstance(metadata, dict) else None
    if isinstance(value, dict):
        value = value.get("reward", value.get("coefficient"))
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _check_curriculum(report: TrainingPreflight, label: str, curriculum: dict[str, Any],
                      bank_path: Path | None) -> None:
    chunks = curriculum.get("chunks") or []
    for chunk in chunks:
        contribution = chunk.get("contribution")
        if not isinstance(contribution, (int, float)) or not contribution > 0:
            report.problems.append(f"{label}: curriculum: chunk {chunk.get('skill_id')!r} has contribution "
                                   f"{contribution!r}; every scheduled chunk needs a positive estimated effect — "
                                   "rebuild the curriculum from the gate's selected bank")
    if bank_path is None:
        report.problems.append(f"{label}: skillbank: not given; name the SkillBank the curriculum was built from so "
                               "its chunks can be compared")
        return
    from shopsimrl_core.episode._skillbank import load_skillbank

    try:
        bank = load_skillbank(bank_path)
    except ShopSimRLError as exc:
        report.problems.append(f"{label}: skillbank: {exc}")
        return
    enabled = [s for s in bank.skills if s.enabled is not False]
    want = [(s.skill_id, str(s.version if s.version is not None else "1"), s.content, _effect(s.metadata))
            for s in enabled]
    have = [(c.get("skill_id"), str(c.get("version")), c.get("content"), _effect(c.get("metadata")))
            for c in chunks]
    if [w[0] for w in want] != [h[0] for h in have]:
        report.problems.append(f"{label}: curriculum: chunk ids {[h[0] for h in have]} differ from the SkillBank's "
                               f"enabled skills {[w[0] for w in want]}; rebuild the curriculum from {bank_path}")
        return
    for (skill_id, version, content, effect), (_, c_version, c_content, c_effect) in zip(want, have):
        for what, mine, theirs in (("version", version, c_version), ("text", content, c_content),
                                   ("estimated effect", effect, c_effect)):
            if mine != theirs:
                report.problems.append(f"{label}: curriculum: chunk {skill_id!r}: its {what} differs from the "
                                       f"SkillBank's; rebuild the curriculum from {bank_path}")
    if not any(p.startswith(f"{label}: curriculum") for p in report.problems):
        report.checked.append(f"curriculum: {len(chunks)} chunks equal to the SkillBank, contributions positive")


def _check_task_data(report: TrainingPreflight, label: str, path: Path, split: Any, split_name: str,
                     curriculum: dict[str, Any] | None) -> None:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        report.problems.append(f"{label}: task_data: cannot read {path} ({exc}); write it with export_slime_tasks")
        return
    seen: dict[int, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            metadata = item["metadata"]
            task_id = int(metadata["task_id"])
        except (ValueError, KeyError, TypeError):
            report.problems.append(f"{label}: task_data: {path}:{number}: not a task line of export_slime_tasks")
            return
        if metadata.get("split") != split_name:
            report.problems.append(f"{label}: task_data: {path}:{number}: task {task_id} is from split "
                                   f"{metadata.get('split')!r}, not {split_name!r}")
        state = (metadata.get("skill_curriculum") or {}).get("state_id")
        if curriculum is not None and state != curriculum.get("state_id"):
            report.problems.append(f"{label}: task_data: {path}:{number}: curriculum state {state!r} is not the "
                                   f"round's {curriculum.get('state_id')!r}; export the task data again with it")
            curriculum = None  # once is enough
        seen[task_id] = seen.get(task_id, 0) + 1
    ids = set(split.task_ids)
    missing = [t for t in split.task_ids if t not in seen]
    twice = sorted(t for t, n in seen.items() if n > 1)
    extra = sorted(t for t in seen if t not in ids)
    if missing:
        report.problems.append(f"{label}: task_data: {len(missing)} task(s) of split {split_name!r} missing (first "
                               f"{missing[:5]}); export the task data again")
    if twice:
        report.problems.append(f"{label}: task_data: task(s) {twice[:5]} appear more than once; every frozen train "
                               "id must appear exactly once")
    if extra:
        report.problems.append(f"{label}: task_data: task(s) {extra[:5]} are not in split {split_name!r}; export "
                               "the task data from the frozen split")
    if not (missing or twice or extra):
        report.checked.append(f"task data: all {len(ids)} {split_name} task ids exactly once")


async def _probe_backend(report: TrainingPreflight, label: str, backend: Any, sampling: Any) -> None:
    import logging

    from shopsimrl_core.training._backends import VLLMChatBackend
    from shopsimrl_core.training._tokens import SamplingSpec, check_turn_tokens

    if isinstance(backend, VLLMChatBackend):  # one attempt: the preflight reports a failure itself, in one line
        backend = VLLMChatBackend(backend.model_config, client_overrides={"max_retries": 1})
    spec = SamplingSpec(temperature=sampling.temperature, max_tokens=min(8, sampling.max_tokens))
    model_log = logging.getLogger("shopsimrl_core.model")
    level = model_log.level
    model_log.setLevel(logging.ERROR)
    try:
        _, tokens = await backend.generate([{"role": "user", "content": "ping"}], None, seed=0, sampling=spec)
        check_turn_tokens(tokens, f"{label}: backend probe")
        if not tokens.output_ids or not all(math.isfinite(v) for v in tokens.output_logprobs):
            raise ValueError("the probe turn sampled no token")
        report.checked.append(f"backend {backend.identity.get('kind')}: exact tokens with logprobs")
    except ShopSimRLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else exc.code
        report.problems.append(f"{label}: backend: {first}" if not first.startswith(label) else first)
    except Exception as exc:  # transport trouble, an HTTP status, a malformed answer: one line
        report.problems.append(f"{label}: backend: the token backend did not answer a probe turn with exact tokens "
                               f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); check "
                               "backend.base_url and that the server returns token ids and logprobs")
    finally:
        model_log.setLevel(level)
        await backend.aclose()


def training_preflight(path: str | Path) -> TrainingPreflight:
    """Run every check of the module docstring on the training YAML at *path*.

    Raises:
        ConfigError: the training or evaluation config itself does not load (one line each); every other
            problem is collected in the report.
    """
    import asyncio

    from shopsimrl_core.runs.config._config import load_config
    from shopsimrl_core.runs.endpoints._health import check_environment
    from shopsimrl_core.runs.planning._plan import build_plan
    from shopsimrl_core.training._config import load_training_config
    from shopsimrl_core.training._factory import build_backend
    from shopsimrl_core.training._tokens import check_exact_sampling

    config = load_training_config(path)
    label = config.source
    report = TrainingPreflight()
    evaluation_path = config.path(config.evaluation)
    assert evaluation_path is not None
    evaluation = load_config(evaluation_path)
    plan = build_plan(evaluation)
    try:
        check_exact_sampling(config.sampling.spec(), f"{label}: sampling")
    except ShopSimRLError as exc:
        report.problems.append(str(exc))
    split = plan.split
    if split.guarded:
        report.problems.append(f"{label}: evaluation: split {split.name!r} is guarded (role {split.role!r}); training "
                               "plays train splits only")
    elif split.role not in (None, "train"):
        report.problems.append(f"{label}: evaluation: split {split.name!r} has role {split.role!r}; train on the "
                               "frozen train split")
    else:
        report.checked.append(f"split {split.name!r}: {split.task_count} tasks, persona={plan.persona}")
    if split.persona is True and not plan.persona:
        report.problems.append(f"{label}: evaluation: split {split.name!r} is a persona split but the evaluation "
                               "plays without personas; set environment.persona: true")
    curriculum: dict[str, Any] | None = None
    curriculum_path = config.path(config.curriculum)
    if curriculum_path is not None:
        try:
            curriculum = json.loads(curriculum_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            report.problems.append(f"{label}: curriculum: cannot read {curriculum_path} ({exc})")
        if curriculum is not None:
            _check_curriculum(report, label, curriculum, config.path(config.skillbank))
    task_data = config.path(config.task_data)
    if task_data is not None:
        _check_task_data(report, label, task_data, split, split.name, curriculum)
    else:
        report.problems.append(f"{label}: task_data: not given; name the export_slime_tasks file the trainer reads")
    try:
        health = check_environment(evaluation.environment.base_url, timeout=min(evaluation.environment.timeout, 10.0))
        report.checked.append(f"environment {evaluation.environment.base_url}: "
                              f"{health.get('environment_version')} / {health.get('observation_version')}")
    except ShopSimRLError as exc:
        report.problems.append(f"{label}: environment: {str(exc).splitlines()[0]}")
    try:
        backend = build_backend(config, evaluation)
    except ShopSimRLError as exc:
        report.problems.extend(line for line in str(exc).splitlines() if line.strip())
    else:
        if config.backend.kind != "vllm-chat":
            report.checked.append("tokenizer: chat template with tools")
        asyncio.run(_probe_backend(report, label, backend, config.sampling))
    return report
