"""The semantic plan of an evaluation and its fingerprint (runtime-semantics §6.2–§6.4 with the §22.1 rule).

The plan holds only what changes the meaning of the episodes: model and sampling, split identity,
jobs, environment identity, step limit and action protocol, prompt and skills identities. Execution
settings (concurrency, timeouts, retry budgets, the split file's location) live in a separate
``execution`` block that is never hashed, so changing them never blocks a resume.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ConfigError
from shopsimrl_core._versions import ENVIRONMENT_ADAPTER, INTERACTION_MODE, MODEL_PROVIDER, PIPELINE_VERSION
from shopsimrl_core.runs.config._config import EvalConfig
from shopsimrl_core.runs.planning._jobs import EpisodeJob, episode_id, plan_jobs
from shopsimrl_core.runs.planning._plan_hash import plan_fingerprint
from shopsimrl_core.runs.planning._splits import TaskSplit, load_split_file

__all__ = [
    "EvalPlan",
    "build_plan",
    "model_identity",
    "environment_identity",
    "served_identity",
    "semantic_projection",
    "plan_differences",
    "FINGERPRINT_SCHEME",
]

FINGERPRINT_SCHEME = "semantic-v2"


def model_identity(config: EvalConfig, *, with_transport: bool) -> dict[str, Any]:
    """The model identity of §6.3, keys in contract order.

    ``checkpoint_id`` appears only when set. Trace provenance keeps the ``transport`` block;
    the semantic plan drops it (§22.1). ``stream``, ``trust_env`` and ``api_key_env`` never appear.
    """
    m = config.model
    identity: dict[str, Any] = {"provider": MODEL_PROVIDER}
    if m.checkpoint_id is not None:
        identity["checkpoint_id"] = m.checkpoint_id
    identity["model"] = m.name
    if config.serve is None:
        identity["base_url"] = m.base_url.rstrip("/")
    else:
        # A launched server's URL holds the port it happened to get: the identity is what was served.
        identity["served"] = served_identity(config)
    if with_transport:
        identity["transport"] = {
            "timeout_seconds": m.timeout,
            "max_retries": m.max_retries,
            "retry_backoff_seconds": m.retry_backoff_seconds,
        }
    identity["sampling"] = {
        "temperature": m.temperature,
        "max_tokens": m.max_tokens,
        "top_p": m.top_p,
        "send_seed": m.send_seed,
        "tool_choice": m.tool_choice,
        "extra_body": dict(m.extra_body),
    }
    if m.seed_mod_2_32:
        # Enters the sampling identity only when true, so existing identities are unchanged (§1.1 rule 3).
        identity["sampling"]["seed_mod_2_32"] = True
    if m.tool_call_content != "null":
        # What the model is shown of its own tool-call turns; absent at the default for the same reason.
        identity["sampling"]["tool_call_content"] = m.tool_call_content
    return identity


def served_identity(config: EvalConfig) -> dict[str, Any]:
    """What a launched server serves (``serve`` section): server kind, weights and adapter, each with its content."""
    from shopsimrl_core.serving._weights import weights_identity

    serve = config.serve
    assert serve is not None
    label = config.source_label
    identity: dict[str, Any] = {
        "server": serve.server,
        "weights": weights_identity(serve.weights, f"{label}: serve.weights"),
    }
    if serve.adapter is not None:
        identity["adapter"] = weights_identity(serve.adapter, f"{label}: serve.adapter")
    return identity


def environment_identity(config: EvalConfig, persona: bool) -> dict[str, Any]:
    """The plan's environment identity (§6.3), without the observed versions.

    ``environment.identity``, when set, stands in place of ``base_url`` (a server whose URL changes).
    """
    env = config.environment
    where = {"base_url": env.base_url.rstrip("/")} if env.identity is None else {"identity": env.identity}
    return {"adapter": ENVIRONMENT_ADAPTER, **where, "persona": persona, "interaction_mode": INTERACTION_MODE}


def _resolve_persona(config: EvalConfig, split: TaskSplit) -> bool:
    configured, declared = config.environment.persona, split.persona
    label = config.source_label
    if configured is None and declared is None:
        raise ConfigError(
            f"{label}: environment.persona: null and split {split.name!r} declares no persona flag; set "
            "environment.persona to true or false",
            code="config-invalid",
        )
    if configured is not None and declared is not None and configured != declared:
        raise ConfigError(
            f"{label}: environment.persona: {str(configured).lower()} contradicts split {split.name!r} (persona: "
            f"{str(declared).lower()}); "
            "set environment.persona to null or to the split's value",
            code="config-invalid",
        )
    return configured if configured is not None else bool(declared)


@dataclass
class EvalPlan:
    """Everything `run` needs, computed without any network call.

    ``semantic`` is exactly what a new manifest stores as ``plan``; ``fingerprint`` is its hash.
    """

    config: EvalConfig
    semantic: dict[str, Any]
    fingerprint: str
    jobs: list[EpisodeJob]
    split: TaskSplit
    persona: bool
    prompt: Any  # _prompts.PromptSet
    skills: Any  # _skills.SkillProvider
    model_identity: dict[str, Any]
    environment_identity: dict[str, Any]
    execution: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def episode_ids(self) -> list[str]:
        """The episode id of every job, in job order, formatted once (per-job loops over a million jobs use it)."""
        return [episode_id(job.task_id, job.sample_id) for job in self.jobs]

    @property
    def guarded(self) -> bool:
        """True when the split is a test split that needs the per-invocation opt-in (§22.6)."""
        return self.split.guarded

    @property
    def run_dir(self) -> Path:
        """``output_dir/experiment.name``."""
        return self.config.run_dir

    @property
    def split_identity(self) -> dict[str, Any]:
        """Name, version, ``task_ids_sha256``, role and size of the split."""
        return self.split.identity()

    @property
    def runtime_identity(self) -> dict[str, Any]:
        """``{max_steps, action_protocol}`` as stored in plans and trace provenance."""
        return dict(self.semantic["runtime"])

    def describe(self) -> dict[str, Any]:
        """The JSON object `shopsimrl plan` prints (§5.1 keys, plus additive ones)."""
        config = self.config
        selected: list[int] = []
        seen: set[int] = set()
        for job in self.jobs:
            if job.task_id not in seen:
                seen.add(job.task_id)
                selected.append(job.task_id)
        split = {
            "name": self.split.name,
            "source_path": str(self.split.source_path),
            "split_version": self.split.split_version,
            "persona": self.persona,
            "task_count": self.split.task_count,
            "task_ids_sha256": self.split.task_ids_sha256,
            "role": self.split.role,
            "guarded": self.guarded,
        }
        return {
            "experiment": config.experiment.name,
            "output_dir": str(config.output_dir_path),
            "run_dir": str(self.run_dir),
            "split": split,
            "guarded": self.guarded,
            "selected_tasks": selected,
            "episodes": len(self.jobs),
            "persona": self.persona,
            "concurrency": config.experiment.concurrency,
            "resume": config.experiment.resume,
            "model": {"id": config.model_id, **self.model_identity},
            "runtime": self.runtime_identity,
            "prompt": self.prompt.identity,
            "skills": self.skills.identity,
            "plan_fingerprint": self.fingerprint,
            "fingerprint_scheme": FINGERPRINT_SCHEME,
            "first_jobs": [job.to_dict() for job in self.jobs[:5]],
            "jobs": [{**job.to_dict(), "episode_id": job.episode_id} for job in self.jobs],
        }


def build_plan(config: EvalConfig) -> EvalPlan:
    """Plan an evaluation: load the split, resolve persona, build jobs, load prompt and skills.

    Promises: no model or environment call and no file written; the same config and files always
    give the same plan and fingerprint; changing only execution settings (concurrency, timeouts,
    retries, file locations) leaves the fingerprint unchanged.

    Raises:
        ConfigError: unknown split (available ones listed), bad split file, persona conflict,
            ``sample_size`` larger than the split, unreadable prompt or SkillBank.
    """
    from shopsimrl_core.episode._prompts import load_prompt
    from shopsimrl_core.episode._skillbank import load_skill_provider

    split = load_split_file(config.split_file_path).get(config.tasks.split)
    if split.task_count == 0:
        raise ConfigError(
            f"{split.source_path}: splits.{split.name}: has no task ids, so the run would plan 0 episodes; "
            "add task ids or set tasks.split to another split",
            code="split-empty",
        )
    persona = _resolve_persona(config, split)
    sample_size = config.tasks.sample_size
    if sample_size is not None and sample_size > split.task_count:
        raise ConfigError(
            f"{config.source_label}: tasks.sample_size: must be <= {split.task_count}, the size of split "
            f"{split.name!r} (got {sample_size}); "
            "lower it or set it to null",
            code="config-invalid",
        )
    planned = (sample_size if sample_size is not None else split.task_count) * config.tasks.repeats
    bound = config.experiment.max_planned_episodes
    if planned > bound:
        # Checked before any job exists: a typo like repeats: 1000000000 must not eat the machine.
        raise ConfigError(
            f"{config.source_label}: tasks.repeats: the plan would hold {planned} episodes, more than "
            f"experiment.max_planned_episodes ({bound}); lower tasks.repeats / tasks.sample_size, or raise "
            "experiment.max_planned_episodes if you mean it",
            code="plan-too-large",
        )
    jobs = plan_jobs(
        split.task_ids,
        split=split.name,
        experiment_seed=config.experiment.seed,
        sample_size=sample_size,
        repeats=config.tasks.repeats,
    )
    prompt = load_prompt(
        config.prompt.system_prompt,
        config.system_prompt_file_path,
        prompt_texts_file=None if config.prompt.prompt_texts_file is None else Path(config.prompt.prompt_texts_file),
        language=config.prompt.language,
    )
    skills = load_skill_provider(config.skills_path, config.skills.max_skills)
    env_identity = environment_identity(config, persona)
    semantic: dict[str, Any] = {
        "pipeline_version": PIPELINE_VERSION,
        "experiment": config.experiment.name,
        "model_id": config.model_id,
        "model": model_identity(config, with_transport=False),
        "task_split": split.plan_identity(persona),
        "task_ids_sha256": split.task_ids_sha256,
        "jobs": [job.to_dict() for job in jobs],
        "environment": env_identity,
        "runtime": {"max_steps": config.runtime.max_steps, "action_protocol": prompt.action_protocol},
        "prompt": dict(prompt.identity),
        "skills": dict(skills.identity),
    }
    m = config.model
    execution = {
        "concurrency": config.experiment.concurrency,
        "model_transport": {
            "timeout_seconds": m.timeout,
            "max_retries": m.max_retries,
            "retry_backoff_seconds": m.retry_backoff_seconds,
        },
        "stream": m.stream,
        "trust_env": m.trust_env,
        "model_max_connections": m.max_connections,
        "environment_timeout": config.environment.timeout,
        "environment_max_connections": config.environment.max_connections,
        "http_transport": {"model": m.http_transport, "environment": config.environment.http_transport},
        "split_file": str(split.source_path),
        "retry_policy": {
            "max_attempts_per_invocation": config.experiment.attempts_per_invocation,
            "max_total_attempts": config.experiment.max_total_attempts,
        },
        "config_file": config.source_label,
    }
    return EvalPlan(
        config=config,
        semantic=semantic,
        fingerprint=plan_fingerprint(semantic, jobs),
        jobs=jobs,
        split=split,
        persona=persona,
        prompt=prompt,
        skills=skills,
        model_identity=model_identity(config, with_transport=True),
        environment_identity=env_identity,
        execution=execution,
    )


_NON_SEMANTIC_PATHS = (
    ("model", "transport"),
    ("runtime", "concurrency"),
    ("task_split", "source_path"),
    ("bare_baseline", "run_dir"),
)


def semantic_projection(plan: dict[str, Any], *, keep_task_ids_sha256: bool = True) -> dict[str, Any]:
    """Drop the non-semantic fields of a (legacy or new) plan (§22.1).

    They are ``model.transport``, ``runtime.concurrency``, ``task_split.source_path`` and
    ``bare_baseline.run_dir``.
    """
    projected = {key: (dict(value) if isinstance(value, dict) else value) for key, value in plan.items()}
    for outer, inner in _NON_SEMANTIC_PATHS:
        block = projected.get(outer)
        if isinstance(block, dict):
            block.pop(inner, None)
    if not keep_task_ids_sha256:
        projected.pop("task_ids_sha256", None)
    return projected


def _diff(old: Any, new: Any, path: str, out: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in old:
                out.append(f"{sub} (added)")
            elif key not in new:
                out.append(f"{sub} (removed)")
            else:
                _diff(old[key], new[key], sub, out)
        return
    if old != new:
        if path == "jobs" and isinstance(old, list) and isinstance(new, list):
            out.append(f"jobs ({len(old)} jobs before, {len(new)} now)")
        elif isinstance(old, (list, dict)) or isinstance(new, (list, dict)):
            out.append(path)
        else:
            out.append(f"{path} ({old!r} -> {new!r})")


def plan_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Dotted paths where two plans differ semantically.

    The projection is applied to both sides; ``task_ids_sha256`` is compared only when both have it.
    """
    both = "task_ids_sha256" in stored and "task_ids_sha256" in current
    out: list[str] = []
    _diff(
        semantic_projection(stored, keep_task_ids_sha256=both),
        semantic_projection(current, keep_task_ids_sha256=both),
        "",
        out,
    )
    return out
