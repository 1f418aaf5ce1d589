"""Training episodes and GRPO groups, played by the runtime that evaluates.

A :class:`TrainingSession` is built from the same YAML an evaluation uses (environment, ``runtime.max_steps``,
prompt, persona, split file): its episodes are ``run_episode`` itself with a :class:`TokenRecordingModel`, against
the same journaled environment client with leases, so a reward in training and a reward in evaluation mean the
same thing. What training adds stays beside the evaluation trace: the record's ``training`` block
(:class:`~shopsimrl_core.documents.TrainingBlock`), token arrays in ``samples.jsonl``, one triage document per group.

Groups: ``group_size`` samples of one task form a group with ONE curriculum assignment (``assign_group`` of the
group key; the group never mixes curriculum states or skill masks). Trainers call :meth:`TrainingSession.play`
once per sample, concurrently and in any order, often while holding a generation semaphore smaller than the
group (slime): nothing waits for the rest of the group. The call that finishes a group's last sample completes it:
the diagnostic retry (if every sample was scored and failed) and the triage document run on that call.

Files under ``out_dir``: ``traces.jsonl`` (evaluation trace records + ``training`` block; the viewer, labels and
summary read it as any run), ``samples.jsonl`` (:class:`~shopsimrl_core.documents.TokenSampleLine`),
``triage/<group_key>.json`` (:class:`~shopsimrl_core.documents.GroupTriage`), ``leases.jsonl`` (the lease journal).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from shopsimrl_core._clock import utc_now
from shopsimrl_core._errors import ConfigError
from shopsimrl_core._hashing import write_json_atomic
from shopsimrl_core.adapters._validation import ModelOutput
from shopsimrl_core.documents._training import (
    DiagnosticRetry,
    ExactTokenChecks,
    GroupMember,
    GroupTriage,
    SampleBoundary,
    TokenSampleLine,
    TrainingBlock,
)
from shopsimrl_core.training._recorder import TokenRecordingModel
from shopsimrl_core.training._samples import TokenSample, build_samples, placeholder_sample
from shopsimrl_core.training._tokens import SamplingSpec, TokenBackend, check_exact_sampling
from shopsimrl_core.training._triage import classify_group, episode_outcome, needs_retry

if TYPE_CHECKING:
    from shopsimrl_core.runs.config._config import EvalConfig
    from shopsimrl_core.runs.planning._plan import EvalPlan

__all__ = ["TrainingSession", "TrainingEpisode", "ChatModel", "SAMPLES_FILE", "TRIAGE_DIR"]

SAMPLES_FILE = "samples.jsonl"
TRIAGE_DIR = "triage"


class ChatModel(Protocol):
    """What ``run_episode`` calls on a model (the evaluation's client, a recording model, a trainer's client)."""

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
                       seed: int | None) -> ModelOutput: ...


@dataclass
class TrainingEpisode:
    """One played sample: its evaluation trace record (with the training block) and its token samples."""

    record: dict[str, Any]
    samples: list[TokenSample]
    reward: float
    """The environment's reward (0.0 when the episode aborted)."""
    success: bool
    aborted: bool
    """An environment or runtime error ended it: every sample is a zero-loss placeholder for the trainer to drop."""
    task_id: int
    sample_index: int
    group_key: str
    assignment: dict[str, Any]

    @property
    def episode_id(self) -> str:
        """The trace key of the episode."""
        return str(self.record["episode_id"])


@dataclass
class _Group:
    key: str
    task_id: int
    group_index: int
    assignment: dict[str, Any]
    members: dict[int, TrainingEpisode] = field(default_factory=dict)
    playing: set[int] = field(default_factory=set)
    triage: GroupTriage | None = None


class TrainingSession:
    """Plays training episodes and GRPO groups with the evaluation runtime; an async context manager.

    Build it with :meth:`from_config`. One session per trainer process (it locks ``out_dir``).
    """

    def __init__(self, plan: EvalPlan, *, backend: TokenBackend | None, out_dir: str | os.PathLike[str],
                 sampling: SamplingSpec, group_size: int, curriculum: dict[str, Any] | None,
                 diagnostic_retry: bool, adapter: str | None, notice: Callable[[str], Any] | None = None) -> None:
        self.plan = plan
        self.backend = backend
        self.out_dir = Path(out_dir)
        self.sampling = sampling
        self.group_size = group_size
        self.curriculum = curriculum
        self.diagnostic_retry = diagnostic_retry
        self.adapter = adapter
        self.round_id: str | None = str(curriculum["round_id"]) if curriculum and "round_id" in curriculum else None
        self._notice = notice
        self._groups: dict[str, _Group] = {}
        self._next_group: dict[int, int] = {}
        self._lock = asyncio.Lock()
        self._env: Any = None
        self._raw_env: Any = None
        self._journal: Any = None
        self._store: Any = None
        self._sidecar: Any = None
        self._invocation_id = utc_now().replace(":", "").replace("-", "") + "-" + uuid.uuid4().hex[:8]
        self._split_tasks = frozenset(plan.split.task_ids)
        self._guarded_tasks = self._tasks_of_guarded_splits(plan)

    # -- construction --

    @classmethod
    def from_config(cls, config: str | os.PathLike[str] | EvalConfig, *, backend: TokenBackend | None,
                    out_dir: str | os.PathLike[str], sampling: SamplingSpec | None = None, group_size: int = 1,
                    curriculum: dict[str, Any] | str | os.PathLike[str] | None = None,
                    diagnostic_retry: bool = True, adapter: str | None = None,
                    notice: Callable[[str], Any] | None = None) -> TrainingSession:
        """A session over the evaluation config *config* (a YAML path or a loaded :class:`EvalConfig`).

        Raises:
            ConfigError: a bad config, a guarded split (``training-guarded-split``), sampling the trainer could
                not replay (``exact-tokens-sampling``), a group size below 1 (``group-size-invalid``), or a
                curriculum file that is not one.
        """
        from shopsimrl_core.runs.config._config import EvalConfig, load_config
        from shopsimrl_core.runs.planning._plan import build_plan

        loaded = config if isinstance(config, EvalConfig) else load_config(Path(config))
        plan = build_plan(loaded)
        if plan.split.guarded:
            raise ConfigError(f"{plan.split.source_path}: split {plan.split.name!r} is guarded (role "
                              f"{plan.split.role!r}); training plays train splits only — set tasks.split to a "
                              "train split", code="training-guarded-split")
        spec = sampling or SamplingSpec()
        if backend is not None:
            check_exact_sampling(spec)
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ConfigError(f"group_size: must be an int >= 1 (got {group_size!r})", code="group-size-invalid")
        state = _load_curriculum(curriculum)
        return cls(plan, backend=backend, out_dir=out_dir, sampling=spec, group_size=group_size, curriculum=state,
                   diagnostic_retry=diagnostic_retry, adapter=adapter, notice=notice)

    @staticmethod
    def _tasks_of_guarded_splits(plan: EvalPlan) -> frozenset[int]:
        from shopsimrl_core.runs.planning._splits import load_split_file

        splits = load_split_file(plan.split.source_path).splits.values()
        return frozenset(t for split in splits if split.guarded for t in split.task_ids)

    # -- lifecycle --

    async def __aenter__(self) -> TrainingSession:
        from shopsimrl_core.runs.leases._env_pool import environment_client, per_server
        from shopsimrl_core.runs.leases._journaled_env import JournaledEnvironment
        from shopsimrl_core.runs.leases._leases import LeaseJournal
        from shopsimrl_core.runs.storage._store import RunStore

        config = self.plan.config
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._store = RunStore(self.out_dir)
        self._store.acquire_lock(self._invocation_id)
        try:
            self._journal = LeaseJournal(self.out_dir, self._invocation_id)
            self._raw_env = environment_client(config.environment, persona=self.plan.persona)
            self._env = per_server(self._raw_env, lambda client: JournaledEnvironment(
                client, self._journal, reset_wait_seconds=config.environment.reset_wait_seconds,
                release_retry_seconds=config.environment.release_retry_seconds, notice=self._say,
                exclusive=False, wanted_slots=config.experiment.concurrency,
                shared_runs_root=config.environment.shared_runs_root))
            await self._raw_env.__aenter__()
            released, kept = await self._env.recover()
            if released or kept:
                self._say(f"released {released} lease(s) an earlier training session left in leases.jsonl"
                          + (f"; {kept} could not be released" if kept else ""))
            fd = os.open(self.out_dir / SAMPLES_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
            self._sidecar = os.fdopen(fd, "ab")
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def _close(self) -> None:
        from shopsimrl_core.runs.execution._run_clients import _close_env

        try:
            if self._env is not None:
                await self._env.drain(timeout=1.5)
            if self._raw_env is not None:
                await _close_env(self._raw_env, 1.5)
            if self._journal is not None:
                try:
                    self._journal.compact(keep_unanswered=lambda e: e.get("invocation_id") != self._invocation_id)
                except OSError:
                    self._journal.close()
            if self.backend is not None:
                await self.backend.aclose()
        finally:
            if self._sidecar is not None:
                self._sidecar.close()
                self._sidecar = None
            if self._store is not None:
                self._store.close_traces()
                self._store.release_lock()
                self._store = None

    def _say(self, text: str) -> None:
        if self._notice is not None:
            self._notice(text)

    # -- groups --

    def assignment_of(self, group_key: str) -> dict[str, Any]:
        """The curriculum assignment of a group (``{state_id, mode, included_chunk_ids}``; ``mode: none`` without)."""
        if self.curriculum is None:
            return {"state_id": None, "mode": "none", "included_chunk_ids": []}
        from shopsimrl_core.skills._curriculum import assign_group

        return {"state_id": self.curriculum["state_id"], **assign_group(self.curriculum, group_key)}

    def group_key(self, task_id: int, group_index: int) -> str:
        """The key of the *group_index*-th group of *task_id* in this session (the curriculum's group key)."""
        return f"{task_id}" if group_index == 0 else f"{task_id}#{group_index}"

    def _open_group(self, task_id: int, sample_index: int, group_index: int | None) -> _Group:
        if group_index is None:
            # the oldest group of the task still missing this sample; else a new one
            group_index = 0
            while True:
                key = self.group_key(task_id, group_index)
                group = self._groups.get(key)
                if group is None or (sample_index not in group.members and sample_index not in group.playing):
                    break
                group_index += 1
        key = self.group_key(task_id, group_index)
        group = self._groups.get(key)
        if group is None:
            group = _Group(key=key, task_id=task_id, group_index=group_index, assignment=self.assignment_of(key))
            self._groups[key] = group
        if sample_index in group.members or sample_index in group.playing:
            raise ConfigError(f"group {key}: sample {sample_index} was already played; a duplicate completion is "
                              "refused (each sample of a group is played once)", code="group-duplicate")
        return group

    def _check_task(self, task_id: int, sample_index: int) -> None:
        if task_id in self._guarded_tasks:
            raise ConfigError(f"task {task_id}: it belongs to a guarded (test) split of "
                              f"{self.plan.split.source_path}; training never plays it", code="training-guarded-split")
        if task_id not in self._split_tasks:
            raise ConfigError(f"task {task_id}: not in split {self.plan.split.name!r} of "
                              f"{self.plan.split.source_path}; train on that split's tasks (export_slime_tasks)",
                              code="training-task-unknown")
        if isinstance(sample_index, bool) or not 0 <= sample_index < self.group_size:
            raise ConfigError(f"sample_index: must be in [0, {self.group_size - 1}] for groups of {self.group_size} "
                              f"(got {sample_index}); the trainer's group size must equal the session's",
                              code="group-size-mismatch")

    async def play(self, task_id: int, sample_index: int, *, group_index: int | None = None,
                   model: ChatModel | None = None, retry_model: ChatModel | None = None) -> TrainingEpisode:
        """Play one sample of a group of *task_id*; complete the group when it is the last.

        *model* None plays with the token backend (exact tokens recorded); a chat model plays without tokens
        (e.g. a trainer's own client). Never waits for the group's other samples. The group's diagnostic retry
        (if this sample completes the group) plays with *retry_model*, else with the token backend when the session
        has one, else with *model* — a trainer whose *model* records what it is asked (verifiers' per-rollout
        endpoint) passes another one so the retry is never taken for part of this sample.

        Raises:
            ConfigError: a task outside the session's train split or of a guarded split, a sample index outside
                the group size (``group-size-mismatch``), a sample played twice (``group-duplicate``), no backend
                and no model.
        """
        self._check_task(task_id, sample_index)
        if self._env is None:
            raise ConfigError("TrainingSession: use it as `async with session:` before playing episodes")
        async with self._lock:
            group = self._open_group(task_id, sample_index, group_index)
            group.playing.add(sample_index)
        try:
            episode = await self._play_one(group, sample_index, group.assignment, model=model, diagnostic=False)
        finally:
            group.playing.discard(sample_index)
        group.members[sample_index] = episode
        if len(group.members) == self.group_size and group.triage is None:
            chosen = retry_model if retry_model is not None else (None if self.backend is not None else model)
            group.triage = await self._complete_group(group, chosen)
        return episode

    async def play_group(self, task_id: int, *, group_index: int | None = None,
                         model: ChatModel | None = None) -> list[TrainingEpisode]:
        """All samples of one new group of *task_id*, played concurrently, in sample order."""
        if group_index is None:
            group_index = self._next_group.get(task_id, 0)
            while self.group_key(task_id, group_index) in self._groups:
                group_index += 1
        self._next_group[task_id] = group_index + 1
        return list(await asyncio.gather(*(self.play(task_id, i, group_index=group_index, model=model)
                                            for i in range(self.group_size))))

    def triage(self) -> list[GroupTriage]:
        """The triage documents of the groups finished so far, in completion order."""
        return [g.triage for g in self._groups.values() if g.triage is not None]

    # -- one episode --

    def _job(self, group: _Group, sample_index: int, diagnostic: bool) -> Any:
        from shopsimrl_core.runs.planning._jobs import EpisodeJob, episode_seed

        # unique per session: members 0..n-1 and the retry n of each group instance
        sample_id = group.group_index * (self.group_size + 1) + (self.group_size if diagnostic else sample_index)
        seed = episode_seed(self.plan.config.experiment.seed, group.task_id, sample_id)
        return EpisodeJob(group.task_id, sample_id, seed, self.plan.split.name)

    async def _play_one(self, group: _Group, sample_index: int, assignment: dict[str, Any], *,
                        model: ChatModel | None, diagnostic: bool) -> TrainingEpisode:
        from shopsimrl_core.episode._runtime import DECODED_PARTS, run_episode
        from shopsimrl_core.runs.execution._run_clients import _make_settings
        from shopsimrl_core.skills._curriculum import CurriculumSkills

        job = self._job(group, sample_index, diagnostic)
        recorder: TokenRecordingModel | None = None
        if model is None:
            if self.backend is None:
                raise ConfigError("TrainingSession: no token backend and no chat model to play with")
            recorder = TokenRecordingModel(self.backend, self.sampling, label=job.episode_id)
            model = recorder
        skills = CurriculumSkills(self.curriculum, list(assignment.get("included_chunk_ids") or []),
                                  mode=str(assignment.get("mode")))
        settings = dataclasses.replace(_make_settings(self.plan), skills_identity=None)  # the group's own skills
        record = await run_episode(job, model=model, env=self._env, prompt=self.plan.prompt, skills=skills,
                                   settings=settings)
        scored, reward, success = episode_outcome(record)
        aborted = not scored
        turns = recorder.turns if recorder is not None else []
        samples = [placeholder_sample(turns)] if aborted else build_samples(turns)
        record["training"] = self._block(group, sample_index, assignment, samples, turns, aborted, diagnostic,
                                         tokens=recorder is not None)
        record["attempt"] = {"number": 1, "invocation_id": self._invocation_id}
        self._store.append(record, finite=DECODED_PARTS)
        if recorder is not None and not diagnostic:
            self._write_samples(record, group, sample_index, samples, reward or 0.0, aborted)
        return TrainingEpisode(record=record, samples=samples, reward=reward or 0.0, success=bool(success),
                               aborted=aborted, task_id=group.task_id, sample_index=sample_index,
                               group_key=group.key, assignment=dict(assignment))

    def _block(self, group: _Group, sample_index: int, assignment: dict[str, Any], samples: list[TokenSample],
               turns: list[Any], aborted: bool, diagnostic: bool, *, tokens: bool) -> dict[str, Any]:
        sampled = sum(s.sampled_count for s in samples)
        prompt = sum(len(s.prompt_ids) for s in samples)
        total = sum(len(s.tokens) for s in samples)
        block = TrainingBlock(
            schema_version=TrainingBlock.SCHEMA,
            backend=dict(self.backend.identity) if (tokens and self.backend is not None) else {"kind": "chat-model"},
            adapter=self.adapter,
            sampling=self.sampling.to_dict(),
            group_key=group.key,
            sample_in_group=-1 if diagnostic else sample_index,
            assignment=dict(assignment),
            diagnostic_retry=diagnostic,
            aborted=aborted,
            token_counts={"prompt": prompt, "sampled": sampled, "observation": total - prompt - sampled,
                          "total": total},
            samples=[SampleBoundary(sample_index=i, turns=list(s.turn_indices), prompt_tokens=len(s.prompt_ids),
                                    response_tokens=len(s.response_ids), sampled_tokens=s.sampled_count,
                                    reason=s.reason) for i, s in enumerate(samples)],
            checks=ExactTokenChecks(logprobs_finite=True, lengths_match=True,
                                    drift_forks=sum(1 for s in samples if s.reason == "template_drift")),
            sidecar=SAMPLES_FILE,
        )
        return block.to_json()

    def _write_samples(self, record: dict[str, Any], group: _Group, sample_index: int,
                       samples: list[TokenSample], reward: float, aborted: bool) -> None:
        import orjson

        # The keys of TokenSampleLine, in its order (readers parse the line with the model): built as plain data
        # because validating thousands of ids per line through the model cost more than the rest of a step.
        lines = []
        for i, sample in enumerate(samples):
            lines.append(orjson.dumps({
                "schema_version": TokenSampleLine.SCHEMA, "episode_id": record["episode_id"],
                "attempt_key": f"{record['episode_id']}#{i}", "sample_index": i, "group_key": group.key,
                "reward": reward, "aborted": aborted, "prompt_ids": sample.prompt_ids,
                "response_ids": sample.response_ids, "loss_mask": sample.loss_mask,
                "rollout_logprobs": sample.rollout_logprobs}) + b"\n")
        self._sidecar.write(b"".join(lines))
        self._sidecar.flush()

    # -- group completion --

    async def _complete_group(self, group: _Group, model: ChatModel | None) -> GroupTriage:
        members = []
        for index in sorted(group.members):
            episode = group.members[index]
            scored, reward, success = episode_outcome(episode.record)
            members.append(GroupMember(episode_id=episode.episode_id, sample_in_group=index, reward=reward,
                                       success=success, scored=scored))
        chunks = [c["skill_id"] for c in (self.curriculum or {}).get("chunks", [])]
        retry_enabled = self.diagnostic_retry and bool(chunks)
        retry: DiagnosticRetry | None = None
        if retry_enabled and needs_retry(members):
            full = {"state_id": (self.curriculum or {}).get("state_id"), "mode": "diagnostic_full",
                    "included_chunk_ids": chunks}
            episode = await self._play_one(group, -1, full, model=model, diagnostic=True)
            scored, reward, success = episode_outcome(episode.record)
            retry = DiagnosticRetry(episode_id=episode.episode_id, included_chunk_ids=chunks, reward=reward,
                                    success=success, scored=scored)
        classification = classify_group(members, retry, retry_enabled=retry_enabled)
        pending = [m.episode_id for m in members] if classification == "full_skill_failure_pending_analysis" else []
        triage = GroupTriage(schema_version=GroupTriage.SCHEMA, group_key=group.key, task_id=group.task_id,
                             round_id=self.round_id,
                             assignment=dict(group.assignment), members=members,
                             rewards=[m.reward for m in members], classification=classification,
                             diagnostic_retry=retry, pending_analysis_episode_ids=pending, finished_at=utc_now())
        path = self.out_dir / TRIAGE_DIR / f"{_file_key(group.key)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, triage.to_json())
        return triage


def _file_key(key: str) -> str:
    return key.replace("#", "-g")


def _load_curriculum(curriculum: dict[str, Any] | str | os.PathLike[str] | None) -> dict[str, Any] | None:
    if curriculum is None or isinstance(curriculum, dict):
        return curriculum
    from shopsimrl_core._hashing import read_json_file
    from shopsimrl_core.skills._curriculum import CURRICULUM_SCHEMA

    data = read_json_file(Path(curriculum), "skill curriculum", fix="pass the round's curriculum.json")
    if not isinstance(data, dict) or data.get("schema_version") != CURRICULUM_SCHEMA:
        raise ConfigError(f"{curriculum}: not a skill curriculum (schema_version must be {CURRICULUM_SCHEMA!r}); "
                          "pass the round's curriculum.json", code="curriculum-invalid")
    return data
